"""docs/bundle-format.md and docs/log-format.md are enough to write a verifier: the one below uses only
the standard library and ``cryptography`` (no Sealbox code) and follows those pages literally; it verifies
a bundle ``sealbox export`` wrote, byte for byte (container, checkpoint signature and export digest,
inclusion proofs, chains, blob commitments, snapshot fingerprints, manifest), and refuses a changed one.

Written auditing the docs: bundle-format.md said a spliced value's bytes run "between the first key's
colon and the last key's comma", which for ``{"event":E,"leaf_index":N,"proof":[…]}`` (three keys)
takes ``,"leaf_index":N`` into the event; the value ends at the comma before the *second* key."""

from __future__ import annotations

import base64
import hashlib
import json
import struct
import zlib

import pytest
from bundle_helpers import cli, members, record_runs, rezip
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

ORDER = ["format", "manifest.json", "checkpoint", "log.vkey", "events.jsonl", "blobs.jsonl", "snapshots.jsonl"]


def _zip(m: dict[str, bytes]) -> bytes:  # "Container": stored, fixed header fields, nothing else
    out, central = bytearray(), bytearray()
    for name, data in m.items():
        crc, off, raw = zlib.crc32(data), len(out), name.encode("ascii")
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 0, 0, 0x21, crc, len(data), len(data), len(raw), 0)
        out += raw + data
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 0, 0, 0x21, crc, len(data), len(data),
                               len(raw), 0, 0, 0, 0, 0, off) + raw
    return bytes(out + central + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(m), len(m), len(central), len(out), 0))


def _splice(line: str, second_key: str) -> tuple[bytes, dict]:
    """``{"<first>":RAW,"<second>":…}``: RAW up to the comma before the second key (searched from the end:
    RAW may hold such a key itself), the rest parsed."""
    cut = line.rindex(f',"{second_key}":')
    return line[line.index(":") + 1: cut].encode(), json.loads("{" + line[cut + 1:])


def _node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _included(leaf: bytes, index: int, size: int, proof: list[bytes], root: bytes) -> bool:  # RFC 9162 2.1.3.2
    if index >= size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = _node(p, r)
            if not fn & 1:
                while not (fn & 1 or fn == 0):
                    fn, sn = fn >> 1, sn >> 1
        else:
            r = _node(r, p)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and r == root


def independent_verify(data: bytes, vkey: str) -> str:
    """'ok', or what is wrong."""
    import io
    import zipfile

    z = zipfile.ZipFile(io.BytesIO(data))
    m = {i.filename: z.read(i) for i in z.infolist()}
    if list(m) != ORDER or _zip(m) != data:
        return "container"
    if m["format"] != b"sealbox-bundle/2\n" or m["log.vkey"] != (vkey + "\n").encode():
        return "format or key"
    name, key_id, key = vkey.split("+", 2)  # "Keys": name+hex8(keyID)+base64(type || public key)
    raw_key = base64.b64decode(key, validate=True)
    assert raw_key[0] == 1 and hashlib.sha256(name.encode() + b"\n" + raw_key).digest()[:4].hex() == key_id
    text, _, sigs = m["checkpoint"].decode("utf-8").rpartition("\n\n")  # "Signed notes"
    [sig_line] = sigs.split("\n")[:-1]
    signer, sig = sig_line.removeprefix("\u2014 ").split(" ")
    sig = base64.b64decode(sig, validate=True)
    if signer != name or sig[:4].hex() != key_id:
        return "signer"
    try:
        Ed25519PublicKey.from_public_bytes(raw_key[1:]).verify(sig[4:], (text + "\n").encode())
    except Exception:  # noqa: BLE001 - cryptography's InvalidSignature
        return "signature"
    origin, size, root, *ext = text.split("\n")
    size, root = int(size), base64.b64decode(root, validate=True)
    digest = hashlib.sha256("".join(f"{hashlib.sha256(m[n]).hexdigest()}  {n}\n" for n in
                                    ("format", "log.vkey", "events.jsonl", "blobs.jsonl", "snapshots.jsonl")).encode())
    if origin != name or [e for e in ext if e.startswith("sealbox-export/v1 ")] != [
            f"sealbox-export/v1 sha256:{digest.hexdigest()}"]:
        return "export digest"
    runs: dict[str, list] = {}
    events, last = [], -1
    for line in m["events.jsonl"].decode().splitlines():
        raw, rest = _splice(line, "leaf_index")
        leaf = hashlib.sha256(b"\x00" + raw).digest()
        if rest["leaf_index"] <= last or not _included(leaf, rest["leaf_index"], size,
                                                       [base64.b64decode(p) for p in rest["proof"]], root):
            return f"event at leaf {rest['leaf_index']}"
        last, event = rest["leaf_index"], json.loads(raw)
        events.append(event)
        if event["run_id"] != "system":
            runs.setdefault(event["run_id"], []).append((last, leaf, event))
    for evs in runs.values():
        prev = None
        for seq, (_, leaf, event) in enumerate(evs, 1):
            if event["run_seq"] != seq or event["prev"] != prev:
                return "chain"
            prev = "sha256:" + leaf.hex()
    blobs = [_splice(line, "ref") for line in m["blobs.jsonl"].decode().splitlines()]
    for content, rest in blobs:  # "Hashing": ref = sha256(salt || content), the salt's 32 bytes
        if rest["salt"] is not None and rest["ref"] != "sha256:" + hashlib.sha256(
                bytes.fromhex(rest["salt"]) + content).hexdigest():
            return "blob"
    snapshots = [_splice(line, "fingerprint") for line in m["snapshots.jsonl"].decode().splitlines()]
    if any(rest["fingerprint"] != "sha256:" + hashlib.sha256(s).hexdigest() for s, rest in snapshots):
        return "snapshot"
    manifest = {  # "Manifest"
        "format": "sealbox-bundle/2", "origin": origin, "export_digest": "sha256:" + digest.hexdigest(),
        "checkpoint": {"size": size, "root": "sha256:" + root.hex()},
        "runs": [{"run_id": r, "agent": evs[0][2]["payload"]["agent"], "events": len(evs), "first_leaf": evs[0][0],
                  "last_leaf": evs[-1][0], "last_kind": evs[-1][2]["kind"]}
                 for r, evs in sorted(runs.items(), key=lambda kv: kv[1][0][0])],
        "system_events": sum(e["run_id"] == "system" for e in events), "blobs": len(blobs),
        "erased_blobs": sum(rest["salt"] is None for _, rest in blobs), "snapshots": len(snapshots),
        "members": [{"name": n, "size": len(m[n]), "sha256": "sha256:" + hashlib.sha256(m[n]).hexdigest()}
                    for n in ORDER[2:]]}
    if (json.dumps(manifest, sort_keys=True, separators=(",", ":")) + "\n").encode() != m["manifest.json"]:
        return "manifest"
    return "ok"


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    folder = tmp_path_factory.mktemp("independent")
    store_path, runs, _ = record_runs(folder)
    path = folder / "case.sbx"
    assert cli("export", "-s", store_path, *runs, "-o", path, cwd=folder)[0] == 0
    return path, (store_path / "log.vkey").read_text().strip()


def test_a_verifier_written_from_the_docs_verifies_a_real_bundle(case):
    path, vkey = case
    assert b'"leaf_index":' in members(path)["events.jsonl"]  # three-key lines: the splice rule matters
    assert independent_verify(path.read_bytes(), vkey) == "ok"


def test_it_refuses_a_changed_event(case, tmp_path):
    path, vkey = case
    m = members(path)
    m["events.jsonl"] = m["events.jsonl"].replace(b'"UPDATE t SET a = 1"', b'"UPDATE t SET a = 2"', 1)
    rezip(tmp_path / "x.sbx", m)
    assert independent_verify((tmp_path / "x.sbx").read_bytes(), vkey) == "export digest"
