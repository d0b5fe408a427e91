"""Export bundles: whole runs in one file that anyone can verify offline.

A bundle (``case.sbx``) is a **strict ZIP archive**: a fixed list of members in a
fixed order (the last, :data:`PROOFS`, only when asked for), each stored (no
compression), with fixed metadata (DOS time 0, date 1980-01-01, no extra fields,
no comments, no data descriptors, no ZIP64).
The container is a pure function of the members' bytes (:func:`zip_bytes`), so
the verifier rebuilds it and requires the file to equal it byte for byte; every
member is itself either fixed text, authenticated content (signature, inclusion
proof, commitment, fingerprint) or derived from them (the manifest). So no byte
of the file is left unchecked. The format is specified in ``docs/bundle-format.md``;
:mod:`sealbox.interop.bundle_verify` checks it.

Inclusion proofs show that each event is in the log, not that the bundle holds
every event it was exported with: removing a run's last events (or a whole run)
together with their proofs and manifest entries would still verify. So every
export signs a fresh checkpoint of the current log whose note carries a C2SP
tlog-checkpoint extension line ``sealbox-export/v1 sha256:<hex>``: the
:func:`export_digest` of the content members (:data:`DIGESTED`, every member
but the checkpoint and the manifest derived from it). The log key thus signs
only checkpoints (same tree, same root as its plain ones), and the verifier
recomputes the digest. Exporting needs the store opened for writing.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import stat
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable, Sequence

from sealbox import blobs as _blobs
from sealbox.canonical import canonical_bytes
from sealbox.errors import SealboxError
from sealbox.events import SYSTEM_RUN_ID, content_fields
from sealbox.ledger import merkle

__all__ = [
    "FORMAT",
    "FORMAT_TEXT",
    "FORMATS",
    "MEMBERS",
    "PROOFS",
    "proof_line",
    "SYSTEM_KINDS",
    "AUTHORIZATION_KINDS",
    "authorization_events",
    "DIGESTED",
    "EXPORT_EXTENSION",
    "BundleError",
    "BundleFormatError",
    "CheckpointNeeded",
    "ExportSummary",
    "event_line",
    "blob_line",
    "snapshot_line",
    "export_digest",
    "export_extension",
    "manifest_bytes",
    "zip_bytes",
    "zip_local_header",
    "zip_directory",
    "zip_regions",
    "read_members",
    "archive_extent",
    "unreadable_reason",
    "select_runs",
    "with_sub_runs",
    "export_bundle",
    "check_target",
    "is_bundle",
    "open_target",
    "AtomicTarget",
    "write_atomically",
]

#: Format identifier (also the first member's text, without its newline). ``sealbox-bundle/2``
#: bundles carry the authorization evidence of their calls (:data:`AUTHORIZATION_KINDS`).
FORMAT = "sealbox-bundle/2"
FORMAT_TEXT = (FORMAT + "\n").encode()
#: The ``format`` members a verifier reads -> their version: ``sealbox-bundle/1`` bundles were
#: written before bundles carried grants, revocations, tool changes and re-approvals.
FORMATS = {b"sealbox-bundle/1\n": 1, FORMAT_TEXT: 2}
#: The members of a bundle, in their fixed order.
MEMBERS = ("format", "manifest.json", "checkpoint", "log.vkey", "events.jsonl", "blobs.jsonl", "snapshots.jsonl")
#: The optional last member: RFC 9162 consistency proofs from earlier tree sizes (checkpoints a recipient
#: saved, ``sealbox export --prove-from``) to the bundle's checkpoint. Present only when asked for, so a
#: bundle exported without it is byte for byte what it was before. Not in the export digest: each proof is
#: checked against two signed roots, and leaving one out only makes that check fail.
PROOFS = "consistency.jsonl"
#: The content members the export digest covers, in this order: every member except
#: ``manifest.json`` (derived from the checkpoint) and ``checkpoint`` (which carries the digest).
DIGESTED = ("format", "log.vkey", "events.jsonl", "blobs.jsonl", "snapshots.jsonl")
#: Keyword of the checkpoint extension line ``sealbox-export/v1 sha256:<hex>``.
EXPORT_EXTENSION = "sealbox-export/v1"
#: Tries at signing the export's checkpoint while other writers keep appending.
_SIGN_ATTEMPTS = 8
#: Kinds of the system run that carry the authorization evidence of calls (:func:`authorization_events`).
AUTHORIZATION_KINDS = ("access.granted", "access.revoked", "tools.changed", "tool.reapproved", "tool.revoked")
#: Kinds of the system run a bundle carries (to check approval answers, erasures, grants, revocations
#: and re-approvals).
SYSTEM_KINDS = ("identity.changed", "content.erased", *AUTHORIZATION_KINDS)

_LOCAL_SIG, _CENTRAL_SIG, _END_SIG = 0x04034B50, 0x02014B50, 0x06054B50
_LOCAL = struct.Struct("<IHHHHHIIIHH")  # 30 bytes
_CENTRAL = struct.Struct("<IHHHHHHIIIHHHHHII")  # 46 bytes
_END = struct.Struct("<IHHHHIIH")  # 22 bytes
_VERSION, _DOS_TIME, _DOS_DATE = 20, 0, (0 << 9) | (1 << 5) | 1  # 1980-01-01 00:00:00
_LOCAL_FIELDS = (("signature", 4), ("version needed", 2), ("flags", 2), ("method", 2), ("time", 2), ("date", 2),
                 ("CRC-32", 4), ("compressed size", 4), ("size", 4), ("name length", 2), ("extra length", 2))
_CENTRAL_FIELDS = (("signature", 4), ("version made by", 2), ("version needed", 2), ("flags", 2), ("method", 2),
                   ("time", 2), ("date", 2), ("CRC-32", 4), ("compressed size", 4), ("size", 4),
                   ("name length", 2), ("extra length", 2), ("comment length", 2), ("disk", 2),
                   ("internal attributes", 2), ("external attributes", 4), ("local header offset", 4))
_END_FIELDS = (("signature", 4), ("disk", 2), ("directory disk", 2), ("entries on disk", 2), ("entries", 2),
               ("directory size", 4), ("directory offset", 4), ("comment length", 2))


class BundleError(SealboxError):
    """A bundle cannot be written (nothing selected, unknown run, no key, too large)."""


class BundleFormatError(BundleError):
    """A file cannot be read as a bundle at all (exit 2), or a ZIP structure cannot be parsed."""


class CheckpointNeeded(BundleError):
    """The store is read-only, but every export signs a checkpoint committing to its content."""


# ----------------------------------------------------------------------------- lines


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def event_line(raw: bytes, leaf_index: int, proof: Sequence[bytes]) -> bytes:
    """One line of ``events.jsonl``: the RFC 8785 form of ``{event, leaf_index, proof}``.

    ``event`` is the event's hashed bytes spliced in verbatim (they are already
    canonical JSON); ``proof`` is the RFC 9162 §2.1.3.1 audit path, base64 each.
    """
    proof_json = canonical_bytes([_b64(h) for h in proof])
    return b'{"event":' + raw + b',"leaf_index":' + str(leaf_index).encode() + b',"proof":' + proof_json + b"}\n"


def blob_line(ref: str, salt: bytes | None, content: bytes | None) -> bytes:
    """One line of ``blobs.jsonl``: ``{content, ref, salt}`` with the content's canonical
    bytes spliced in verbatim and the salt in lowercase hex; both null once erased."""
    body = b"null" if content is None else content
    salt_json = b"null" if salt is None else b'"' + salt.hex().encode() + b'"'
    return b'{"content":' + body + b',"ref":' + canonical_bytes(ref) + b',"salt":' + salt_json + b"}\n"


def snapshot_line(fingerprint: str, content: bytes) -> bytes:
    """One line of ``snapshots.jsonl``: ``{content, fingerprint}``, the content spliced in verbatim."""
    return b'{"content":' + content + b',"fingerprint":' + canonical_bytes(fingerprint) + b"}\n"


def proof_line(size1: int, proof: Sequence[bytes]) -> bytes:
    """One line of :data:`PROOFS`: ``{"proof":[base64...],"size1":N}`` (RFC 8785) and a newline: the RFC 9162
    §2.1.4.1 consistency proof from tree size ``size1`` to the bundle's checkpoint size."""
    return canonical_bytes({"proof": [_b64(h) for h in proof], "size1": size1}) + b"\n"


def _hexdigest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def export_digest(members: Sequence[tuple[str, bytes]], hexdigest: Callable[[bytes], str] = _hexdigest) -> bytes:
    """The export digest over the content members (name, bytes), in :data:`DIGESTED` order.

    SHA-256 of the text made of one line per member, ``<lowercase hex SHA-256 of its
    bytes>``, two spaces, its name, ``\n`` -- exactly what ``sha256sum format log.vkey
    events.jsonl blobs.jsonl snapshots.jsonl | sha256sum`` computes over the extracted
    members. Per-member hashes keep the member boundaries unambiguous. ``hexdigest``: the lowercase hex
    SHA-256 of bytes (a verifier passes one that remembers the members it hashed).
    """
    text = "".join(f"{hexdigest(data)}  {name}\n" for name, data in members)
    return hashlib.sha256(text.encode("ascii")).digest()


def export_extension(digest: bytes) -> str:
    """The checkpoint extension line committing to an export: ``sealbox-export/v1 sha256:<hex>``."""
    return f"{EXPORT_EXTENSION} sha256:{digest.hex()}"


def manifest_bytes(*, origin: str, size: int, root: bytes, runs: Sequence[dict[str, Any]], system_events: int,
                   blobs: int, erased: int, snapshots: int, members: Sequence[tuple[str, bytes]],
                   digest: bytes, format: str = FORMAT, hexdigest: Callable[[bytes], str] = _hexdigest) -> bytes:
    """The manifest: RFC 8785 JSON and a newline, derived entirely from the other members.

    Args:
        runs: per exported run, ``{run_id, agent, events, first_leaf, last_leaf, last_kind}``.
        members: (name, bytes) of ``checkpoint``, ``log.vkey``, ``events.jsonl``, ``blobs.jsonl``,
            ``snapshots.jsonl``; each is listed with its size and SHA-256.
        digest: the :func:`export_digest` of the content members (also signed in the checkpoint).
        format: the bundle's format (its ``format`` member without the newline).
        hexdigest: the lowercase hex SHA-256 of bytes (as in :func:`export_digest`).
    """
    doc = {
        "format": format, "origin": origin, "export_digest": "sha256:" + digest.hex(),
        "checkpoint": {"size": size, "root": "sha256:" + root.hex()},
        "runs": list(runs), "system_events": system_events,
        "blobs": blobs, "erased_blobs": erased, "snapshots": snapshots,
        "members": [{"name": n, "size": len(b), "sha256": "sha256:" + hexdigest(b)} for n, b in members],
    }
    return canonical_bytes(doc) + b"\n"


def run_entries(envelopes: Iterable[tuple[int, dict]]) -> list[dict[str, Any]]:
    """The manifest's ``runs`` from (leaf_index, envelope) in log order (system run left out)."""
    runs: dict[str, dict[str, Any]] = {}
    for leaf, env in envelopes:
        if env["run_id"] == SYSTEM_RUN_ID:
            continue
        r = runs.setdefault(env["run_id"], {"run_id": env["run_id"], "agent": None, "events": 0,
                                            "first_leaf": leaf, "last_leaf": leaf, "last_kind": None})
        if env["kind"] == "run.started" and isinstance(env["payload"].get("agent"), str):
            r["agent"] = env["payload"]["agent"]
        r["events"] += 1
        r["last_leaf"], r["last_kind"] = leaf, env["kind"]
    return list(runs.values())


# ----------------------------------------------------------------------------- the container


def zip_local_header(name: str, crc: int, size: int) -> bytes:
    """The canonical local file header (APPNOTE 4.3.7) of a stored member ``name`` of ``size`` bytes
    with CRC-32 ``crc``, its name included: what :func:`zip_bytes` writes before the member's data."""
    raw_name = name.encode("ascii", "surrogateescape")
    return _LOCAL.pack(_LOCAL_SIG, _VERSION, 0, 0, _DOS_TIME, _DOS_DATE, crc, size, size, len(raw_name), 0) + raw_name


def zip_directory(entries: Sequence[tuple[str, int, int, int]]) -> bytes:
    """The canonical central directory and end of central directory record for members
    ``(name, crc, size, local header offset)``, starting at the end of the last member's data: what
    :func:`zip_bytes` writes after the members."""
    central = bytearray()
    for name, crc, n, offset in entries:
        raw_name = name.encode("ascii", "surrogateescape")
        central += _CENTRAL.pack(_CENTRAL_SIG, _VERSION, _VERSION, 0, 0, _DOS_TIME, _DOS_DATE, crc, n, n,
                                 len(raw_name), 0, 0, 0, 0, 0, offset) + raw_name
    start = entries[-1][3] + _LOCAL.size + len(entries[-1][0]) + entries[-1][2] if entries else 0
    return bytes(central + _END.pack(_END_SIG, 0, 0, len(entries), len(entries), len(central), start, 0))


def zip_bytes(members: Sequence[tuple[str, bytes]]) -> bytes:
    """The canonical stored ZIP of ``members`` (APPNOTE 6.3.x, no extensions).

    Raises:
        BundleError: a member or the archive exceeds 4 GiB (ZIP64 is not used).
    """
    out = bytearray()
    entries = []
    for name, data in members:
        crc, n = zlib.crc32(data), len(data)
        if n >= 0xFFFFFFFF or len(out) >= 0xFFFFFFFF:
            raise BundleError("the bundle would exceed 4 GiB (ZIP64 is not supported): export fewer runs")
        entries.append((name, crc, n, len(out)))
        out += zip_local_header(name, crc, n)
        out += data
    out += zip_directory(entries)
    return bytes(out)


def zip_regions(members: Sequence[tuple[str, bytes]]) -> list[tuple[int, int, str]]:
    """(start, end, what) for every field of :func:`zip_bytes` output, to name an offset."""
    regions: list[tuple[int, int, str]] = []
    pos = 0

    def fields(start: int, spec: tuple, what: str) -> int:
        for field, width in spec:
            regions.append((start, start + width, f"{what}: {field}"))
            start += width
        return start

    offsets = []
    for name, data in members:
        offsets.append(pos)
        pos = fields(pos, _LOCAL_FIELDS, f"ZIP local header of {name!r}")
        regions.append((pos, pos + len(name), f"ZIP local header of {name!r}: name"))
        pos += len(name)
        regions.append((pos, pos + len(data), f"member {name!r}"))
        pos += len(data)
    for name, _ in members:
        pos = fields(pos, _CENTRAL_FIELDS, f"ZIP central directory entry of {name!r}")
        regions.append((pos, pos + len(name), f"ZIP central directory entry of {name!r}: name"))
        pos += len(name)
    fields(pos, _END_FIELDS, "ZIP end of central directory record")
    return regions


def shown_name(name: str) -> str:
    """A member name for a message: itself when ASCII, else the repr of its bytes (``b'caf\\xc3\\xa9.txt'``)."""
    return name if name.isascii() else repr(name.encode("ascii", "surrogateescape"))


#: the most members a ZIP archive without ZIP64 (a bundle) holds: its end record counts them in 16 bits
MAX_MEMBERS = 0xFFFF
TOO_MANY_MEMBERS = (f"more than {MAX_MEMBERS} ZIP local headers (a ZIP archive without ZIP64, as a bundle is, "
                    f"holds at most {MAX_MEMBERS} members)")


def read_members(data: bytes) -> list[list[tuple[str, bytes]]]:
    """Candidate member lists of a ZIP file: one read through the central directory and
    one walking the local headers (each that parses), so that a damaged header on
    one side is still located and named by comparing with :func:`zip_bytes`. A name's bytes
    that are not ASCII are kept as lone surrogates (``surrogateescape``), so that such a member
    is reported by its name (:func:`shown_name`) and its container rebuilt byte for byte."""
    out = []
    for reader in (_read_central, _read_local):
        try:
            out.append(reader(data))
        except (BundleFormatError, struct.error, UnicodeDecodeError):
            continue
    return out


#: the ZIP compression methods a message names (APPNOTE 4.4.5)
_METHODS = {8: "deflate", 9: "deflate64", 12: "bzip2", 14: "lzma", 93: "zstd", 95: "xz", 99: "AES encryption"}


def compressed_members(data: bytes) -> list[tuple[str, int]]:
    """(name, method) of each member whose local header or central directory entry declares a compression
    method other than 0 (stored), in file order, each name once: a bundle's members are stored, so such a
    member's bytes in the file are not its content (read as stored, they are only noise)."""
    found: dict[str, int] = {}
    pos, count = 0, 0
    try:
        while data[pos: pos + 4] == struct.pack("<I", _LOCAL_SIG) and count <= MAX_MEMBERS:
            f = _LOCAL.unpack_from(data, pos)
            if f[3]:
                found.setdefault(data[pos + _LOCAL.size: pos + _LOCAL.size + f[9]].decode("ascii", "replace"), f[3])
            pos, count = pos + _LOCAL.size + f[9] + f[10] + f[7], count + 1
        end = data.rfind(struct.pack("<I", _END_SIG))
        if end >= 0 and end + _END.size <= len(data):
            pos = _END.unpack_from(data, end)[6]
            for _ in range(_END.unpack_from(data, end)[4]):
                f = _CENTRAL.unpack_from(data, pos)
                if f[0] != _CENTRAL_SIG:
                    break
                if f[4]:
                    found.setdefault(data[pos + _CENTRAL.size: pos + _CENTRAL.size + f[10]].decode("ascii", "replace"),
                                     f[4])
                pos += _CENTRAL.size + f[10] + f[11] + f[12]
    except struct.error:
        pass
    return list(found.items())


def method_name(method: int) -> str:
    """``8: deflate``: a ZIP compression method for a message."""
    return f"{method}: {_METHODS[method]}" if method in _METHODS else str(method)


def unreadable_reason(data: bytes, size: int | None = None) -> str:
    """Why neither reader of :func:`read_members` could read ``data``, in one phrase: where the file
    ends when it was cut short (the commonest cause: a partial download or copy), else what is missing.
    ``size``: the file's size when ``data`` is only its first bytes (:func:`archive_extent`)."""
    size = len(data) if size is None else size
    pos, count = 0, 0
    while data[pos: pos + 4] == struct.pack("<I", _LOCAL_SIG):
        if count > MAX_MEMBERS:
            return TOO_MANY_MEMBERS
        if pos + _LOCAL.size > size:
            return f"the file ends at byte {size}, inside the ZIP local header of member {count + 1} (it was truncated)"
        f = _LOCAL.unpack_from(data, pos)
        name = data[pos + _LOCAL.size: pos + _LOCAL.size + f[9]].decode("ascii", "replace")
        start = pos + _LOCAL.size + f[9] + f[10]
        if start > size:
            return f"the file ends at byte {size}, inside the ZIP local header of {name!r} (it was truncated)"
        if start + f[7] > size:
            return (f"the file ends at byte {size}, inside member {name!r}, which needs "
                    f"{start + f[7] - size} more byte(s) (it was truncated)")
        pos, count = start + f[7], count + 1
    if pos >= size:
        return (f"the file ends at byte {size}, after {count} member(s) and before the ZIP central directory "
                "(it was truncated)")
    return f"no ZIP local header at byte {pos} and no readable ZIP end of central directory record"


#: how much of a file beyond what its headers describe is read when the archive's end cannot be located
#: (enough for the central directory and end record of any bundle, whose names are few and short)
READ_MARGIN = 1 << 20


def archive_extent(f: BinaryIO, size: int) -> tuple[int, bool]:
    """How many bytes of the ZIP file ``f`` (``size`` bytes) to read, from its headers alone (seeking
    past member data, holding none): (n, exact). ``exact``: ``n`` is where the archive ends (its end of
    central directory record), found by walking the local headers, then the central directory and end
    record after them, or else by scanning back from the end for the record; more bytes after it are
    not part of the archive. Otherwise ``n`` covers every header the readers could reach, so that what
    they and :func:`unreadable_reason` say of a prefix of that length is what they would say of the file.
    Each walk stops after :data:`MAX_MEMBERS` + 1 headers (the readers stop there too): a file of millions
    of tiny headers is not walked to its end."""
    def at(pos: int, n: int) -> bytes:
        f.seek(pos)
        return f.read(n)

    pos, stop, count = 0, None, 0
    while True:
        head = at(pos, _LOCAL.size)
        if len(head) < _LOCAL.size or head[:4] != struct.pack("<I", _LOCAL_SIG):
            break
        fl = _LOCAL.unpack(head)
        nxt = pos + _LOCAL.size + fl[9] + fl[10] + fl[7]
        if nxt > size:  # runs past the end: nothing after this header can be reached by walking
            stop = pos + _LOCAL.size + fl[9] + fl[10]
            break
        pos, count = nxt, count + 1
        if count > MAX_MEMBERS:  # more members than a bundle holds: the readers stop here (TOO_MANY_MEMBERS)
            stop = pos
            break
    if stop is None:
        count = 0
        while (head := at(pos, _CENTRAL.size))[:4] == struct.pack("<I", _CENTRAL_SIG) and len(head) == _CENTRAL.size:
            fc = _CENTRAL.unpack(head)
            pos, count = pos + _CENTRAL.size + fc[10] + fc[11] + fc[12], count + 1
            if count > MAX_MEMBERS:  # an end record counts at most MAX_MEMBERS entries
                break
        head = at(pos, _END.size)
        if len(head) == _END.size and head[:4] == struct.pack("<I", _END_SIG):
            return min(size, pos + _END.size + _END.unpack(head)[7]), True
        stop = pos
    end = _last_end_record(f, size)
    if end is not None:
        return end + _END.size, True
    return min(size, stop + READ_MARGIN), False


def _last_end_record(f: BinaryIO, size: int, chunk: int = 1 << 20) -> int | None:
    """Offset of the last end of central directory record signature followed by a whole record
    (as :func:`_read_central` takes it), scanning back from the end in bounded chunks."""
    sig, hi = struct.pack("<I", _END_SIG), size
    while hi > 0:
        lo = max(0, hi - chunk)
        f.seek(lo)
        block = f.read(hi - lo + len(sig) - 1 if hi < size else hi - lo)
        found = block.rfind(sig)
        while found >= 0 and lo + found + _END.size > size:
            found = block.rfind(sig, 0, found + len(sig) - 1)
        if found >= 0:
            return lo + found
        hi = lo
    return None


def _read_central(data: bytes) -> list[tuple[str, bytes]]:
    end = data.rfind(struct.pack("<I", _END_SIG))
    if end < 0 or end + _END.size > len(data):
        raise BundleFormatError("no ZIP end of central directory record")
    _, _, _, _, count, _, offset, _ = _END.unpack_from(data, end)
    members, pos = [], offset
    for _ in range(count):
        f = _CENTRAL.unpack_from(data, pos)
        if f[0] != _CENTRAL_SIG:
            raise BundleFormatError(f"no central directory entry at offset {pos}")
        name = data[pos + _CENTRAL.size: pos + _CENTRAL.size + f[10]].decode("ascii", "surrogateescape")
        start = f[16] + _LOCAL.size + f[10]
        if start + f[8] > len(data):
            raise BundleFormatError(f"member {name!r} runs past the end of the file")
        members.append((name, data[start: start + f[8]]))
        pos += _CENTRAL.size + f[10] + f[11] + f[12]
    return members


def _read_local(data: bytes) -> list[tuple[str, bytes]]:
    members, pos = [], 0
    while data[pos: pos + 4] == struct.pack("<I", _LOCAL_SIG):
        f = _LOCAL.unpack_from(data, pos)
        name = data[pos + _LOCAL.size: pos + _LOCAL.size + f[9]].decode("ascii", "surrogateescape")
        start = pos + _LOCAL.size + f[9] + f[10]
        if start + f[7] > len(data):
            raise BundleFormatError(f"member {name!r} runs past the end of the file")
        members.append((name, data[start: start + f[7]]))
        if len(members) > MAX_MEMBERS:  # no end record could count them: not a ZIP archive without ZIP64
            raise BundleFormatError(TOO_MANY_MEMBERS)
        pos = start + f[7]
    if not members:
        raise BundleFormatError("no ZIP local header at offset 0")
    return members


# ----------------------------------------------------------------------------- export


@dataclass(frozen=True)
class ExportSummary:
    """What :func:`export_bundle` wrote."""

    path: str
    runs: tuple[str, ...]
    events: int
    system_events: int
    blobs: int
    erased_blobs: int
    snapshots: int
    checkpoint_size: int
    checkpoint_issued: bool
    bytes: int
    vkey: str | None = None  # the log's verifier key (the bundle's log.vkey), for the recipient, sent apart from it
    proven_from: tuple[int, ...] = ()  # sizes the PROOFS member proves the checkpoint consistent with
    #: (run id, status) of the exported runs without ``run.ended``, as ``runs list`` gave them at export:
    #: ``running``, ``suspended`` or ``interrupted`` (its recording process had died). Not in the bundle:
    #: it holds only the log's signed events, and ``interrupted`` is derived when a run is read, never written
    open_runs: tuple[tuple[str, str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {**self.__dict__, "runs": list(self.runs), "proven_from": list(self.proven_from),
                "open_runs": dict(self.open_runs)}


def select_runs(store: Any, run_ids: Sequence[str] = (), *, since: Any = None, until: Any = None,
                agent: str | None = None) -> list[str]:
    """Run ids to export, oldest first: the named runs, narrowed by the filters (all must match).

    With no run named, every run passing the filters (``since``/``until`` bound the
    run's start, as in ``sealbox runs list``). The system run is never selected.

    Raises:
        BundleError: a named run is unknown or is the system run, or nothing matches.
        ConfigError: a bad time.
    """
    for rid in run_ids:
        if rid == SYSTEM_RUN_ID:
            raise BundleError("the system run is not exported as a run (its identity and erasure events come with every bundle)")
        if store.get_run(rid) is None:
            raise BundleError(f"no run {rid!r} in this store")
    rows = store.query_runs(agent=agent, since=since, until=until)
    picked = {r["run_id"]: r for r in rows if r["run_id"] != SYSTEM_RUN_ID and (not run_ids or r["run_id"] in run_ids)}
    if not picked:
        raise BundleError("no run matches the selection")
    return [r["run_id"] for r in sorted(picked.values(), key=lambda r: (r["started_at"], r["run_id"]))]


def with_sub_runs(store: Any, run_ids: Sequence[str]) -> list[str]:
    """``run_ids`` and their sub-agent runs at every depth (runs whose ``parent_run_id`` chain leads to one
    of them), oldest first (by start, then id), each once.

    A sub-agent run is part of what its parent run did (``sealbox replay`` replays it, ``runs show`` and
    ``report`` list it): ``sealbox export RUN`` takes them along, so that the bundle holds everything the
    run set going. The system run is never added.
    """
    rows = store.query_runs()
    children: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r["parent_run_id"] is not None and r["run_id"] != SYSTEM_RUN_ID:
            children.setdefault(r["parent_run_id"], []).append(r)
    by_id = {r["run_id"]: r for r in rows}
    taken: dict[str, dict[str, Any]] = {}
    todo = list(run_ids)
    while todo:
        rid = todo.pop()
        if rid in taken or rid not in by_id:
            continue
        taken[rid] = by_id[rid]
        todo.extend(c["run_id"] for c in children.get(rid, ()))
    return [r["run_id"] for r in sorted(taken.values(), key=lambda r: (r["started_at"], r["run_id"]))]


def export_bundle(store: Any, run_ids: Sequence[str], path: str | os.PathLike,
                  prove_from: Sequence[int] = ()) -> ExportSummary:
    """Write whole runs, everything needed to verify them, into the bundle ``path``.

    Writes each run's events, the system run's ``identity.changed`` events (to check
    approval answers, grants and re-approvals), the ``content.erased`` events of erased
    blobs they reference, the grants their calls name with those grants' revocation steps
    and the tool changes and re-approvals of what they called (:func:`authorization_events`;
    all as of the store snapshot the runs are read in), every referenced blob (following
    chains inside blobs) with its salt,
    the runs' snapshots, a checkpoint of the current log signed for this export
    (it carries the :func:`export_digest` of the content members as a
    ``sealbox-export/v1`` extension line) with an inclusion proof for every event,
    and the log's verifier key. Never the store secret or erased content.

    Args:
        store: a store opened for writing (the export's checkpoint is signed).
        run_ids: runs to export (see :func:`select_runs`).
        path: the file to write (replaced atomically, see :func:`write_atomically`).
        prove_from: tree sizes (of checkpoints the recipient saved) to prove the bundle's checkpoint
            consistent with: each gets an RFC 9162 consistency proof in the :data:`PROOFS` member.
            The caller checks that the store extends those checkpoints (sizes from 1 to the log's size).

    Raises:
        CheckpointNeeded: the store is read-only (every export signs a checkpoint).
        BundleError: a ``prove_from`` size is not from 1 to the log's size (before anything is signed).
        BundleError: an unknown run, no verifier key, a bundle above 4 GiB, or ``path`` is
            refused by :func:`check_target` (one of the store's own files, not a regular file, ...)
            or its temporary file cannot be created (then nothing was written and nothing signed),
            or the bytes cannot be written (the disk is full, ...: then the export's checkpoint was
            signed, but nothing was written).
    """
    if getattr(store, "readonly", False):
        raise CheckpointNeeded("every export signs a checkpoint committing to its content: open the store for writing")
    for n in prove_from:  # the format allows 1 <= N <= the checkpoint's size; the log only grows
        if not isinstance(n, int) or isinstance(n, bool) or not 0 < n <= store.size():
            raise BundleError(f"prove_from: no consistency proof from size {n!r} (sizes go from 1 to the log's "
                              f"size, {store.size()})")
    # the output's temporary file is created first: a target that is refused or cannot be created
    # (one of the store's own files, a read-only folder, ...) fails before a checkpoint is signed for it
    with open_target(path, store_dir=getattr(store, "path", None)) as target:
        with store.read_snapshot():
            events = sorted((e for rid in run_ids for e in store.read_run(rid)), key=lambda e: e.leaf_index)
            if not events:
                raise BundleError("nothing to export")
            system = [e for e in store.read_run(SYSTEM_RUN_ID) if e.kind in SYSTEM_KINDS]
            size = store.size()
            last = {e.run_id: e.kind for e in events}
            # the status runs list gives the runs the bundle shows open (interrupted: read from liveness leases)
            open_runs = tuple((rid, _listed_status(store, rid)) for rid in run_ids if last.get(rid) != "run.ended")
        blob_rows, erased = _collect_blobs(store, events)
        authorization = {e.leaf_index for e in authorization_events(events, system)}
        system = [e for e in system if e.kind == "identity.changed" or e.leaf_index in authorization
                  or (e.kind == "content.erased" and e.payload.get("blob") in erased)]
        everything = sorted(events + system, key=lambda e: e.leaf_index)
        for e in everything:  # one SHA-256 an event: a bundle of an event edited below Sealbox cannot verify
            if "sha256:" + merkle.leaf_hash(e.raw).hex() != e.leaf_hash:
                raise BundleError(f"event leaf {e.leaf_index} (run {e.run_id}, run_seq {e.run_seq}, {e.kind}) no "
                                  "longer hashes to its recorded leaf hash: the store was changed below Sealbox, "
                                  "and a bundle of it would not verify (run `sealbox verify`)")
        vkey = store.pinned_vkey()
        if not vkey:
            raise BundleError("the store has no pinned verifier key (log.vkey): a bundle could not name the key "
                              "it trusts")
        blob_text = b"".join(blob_line(ref, *blob_rows[ref]) for ref in sorted(blob_rows))
        snaps = _collect_snapshots(store, events)
        snap_text = b"".join(snapshot_line(fp, snaps[fp]) for fp in sorted(snaps))
        for _ in range(_SIGN_ATTEMPTS):
            # the proofs depend only on the tree size; the checkpoint is signed over the current log, so
            # if events were appended meanwhile, the proofs are recomputed for the size actually signed
            lines = b"".join(event_line(e.raw, e.leaf_index, store.inclusion_proof(e.leaf_index, size))
                             for e in everything)
            content = [("format", FORMAT_TEXT), ("log.vkey", (vkey + "\n").encode()), ("events.jsonl", lines),
                       ("blobs.jsonl", blob_text), ("snapshots.jsonl", snap_text)]
            digest = export_digest(content)
            cp = store.issue_checkpoint(extensions=(export_extension(digest),))
            if cp.tree_size == size:
                break
            size = cp.tree_size
        else:
            raise BundleError("the log kept growing while the export's checkpoint was signed: try again")
        body = [("checkpoint", cp.note.encode("utf-8")), *content[1:]]
        if prove_from:
            body.append((PROOFS, b"".join(proof_line(n, store.consistency_proof(n, size) if n < size else [])
                                          for n in sorted(set(prove_from)))))
        manifest = manifest_bytes(
            origin=store.origin, size=cp.tree_size, root=bytes(cp.root_hash),
            runs=run_entries((e.leaf_index, e.envelope()) for e in events), system_events=len(system),
            blobs=len(blob_rows), erased=len(erased), snapshots=len(snaps), members=body, digest=digest)
        data = zip_bytes([("format", FORMAT_TEXT), ("manifest.json", manifest), *body])
        target.commit(data)
    return ExportSummary(str(path), tuple(run_ids), len(events), len(system), len(blob_rows), len(erased),
                         len(snaps), cp.tree_size, True, len(data), vkey, tuple(sorted(set(prove_from))), open_runs)


def _listed_status(store: Any, run_id: str) -> str:
    get_run = getattr(store, "get_run", None)
    row = get_run(run_id) if get_run is not None else None
    return row["status"] if row is not None else "running"


def authorization_events(events: Iterable[Any], system: Iterable[Any]) -> list[Any]:
    """The system-run events that carry the authorization evidence of the calls in ``events``.

    Of ``system`` (events of the store's system run, objects with ``kind`` and ``payload``):

    * every ``access.granted`` of a grant a ``tool.call`` in ``events`` names (its ``grant``, unless
      ``implicit:...``, which no grant backs), and every ``access.revoked`` step of those grants;
    * every ``tools.changed`` of a server a call in ``events`` names (a listing is per server, and its
      first one is what was trusted on first use, so all of that server's are kept), and every
      ``tool.reapproved`` and ``tool.revoked`` of a ``(server, tool)`` pair a call names.

    Returns:
        Those events, in the order of ``system``.
    """
    from sealbox.access import is_implicit

    grants: set[str] = set()
    pairs: set[tuple[str, str]] = set()
    for e in events:
        if e.kind != "tool.call" or not isinstance(e.payload, dict):
            continue
        grant = e.payload.get("grant")
        if isinstance(grant, str) and not is_implicit(grant):
            grants.add(grant)
        server, tool = e.payload.get("server"), e.payload.get("tool")
        if isinstance(server, str) and isinstance(tool, str):
            pairs.add((server, tool))
    servers = {server for server, _ in pairs}
    out = []
    for e in system:
        p = e.payload if isinstance(e.payload, dict) else {}
        gid, server, tool = (v if isinstance(v, str) else None for v in (p.get("grant_id"), p.get("server"),
                                                                          p.get("tool")))
        # (a value of another type, in an event changed below Sealbox, selects nothing and is never hashed)
        if e.kind in ("access.granted", "access.revoked"):
            keep = gid in grants
        elif e.kind == "tools.changed":
            keep = server in servers
        elif e.kind in ("tool.reapproved", "tool.revoked"):
            keep = (server, tool) in pairs
        else:
            keep = False
        if keep:
            out.append(e)
    return out


def _collect_blobs(store: Any, events: Sequence[Any]) -> tuple[dict[str, tuple], set[str]]:
    """Every blob the events reference, following references inside blobs: ref -> (salt, content)."""
    pending: list[str] = []
    for e in events:
        for name in content_fields(e.kind, e.payload):
            if name in e.payload:
                pending.extend(_blobs.blob_refs(e.payload[name]))
    rows: dict[str, tuple] = {}
    erased: set[str] = set()
    get_row = getattr(store, "get_blob_row", None) or _scanning_reader(store)
    while pending:
        ref = pending.pop()
        if ref in rows:
            continue
        row = get_row(ref)
        if row is None:
            raise BundleError(f"blob {ref} is referenced but not in the store (run `sealbox verify`)")
        salt, content = row
        if content is None or salt is None:
            rows[ref] = (None, None)
            erased.add(ref)
            continue
        rows[ref] = (salt, content)
        try:
            inner = json.loads(content)
        except (ValueError, RecursionError):  # UnicodeDecodeError included: changed below Sealbox
            raise BundleError(f"blob {ref} is damaged (its content is not JSON): the store was changed below "
                              "Sealbox (run `sealbox verify`)") from None
        pending.extend(_blobs.blob_refs(inner))
    return rows, erased


def _scanning_reader(store: Any) -> Any:
    """For a store without ``get_blob_row``: salts from one pass, contents by ``get_blob``."""
    salts = {ref: salt for ref, salt, _ in store.iter_blobs()}

    def get(ref: str) -> tuple | None:
        if ref not in salts:
            return None
        if salts[ref] is None:
            return (None, None)
        return (salts[ref], store.get_blob(ref))
    return get


def _collect_snapshots(store: Any, events: Sequence[Any]) -> dict[str, bytes]:
    wanted = {e.payload.get("snapshot") for e in events if e.kind == "run.started"} - {None}
    found = {fp: content for fp, content in store.iter_snapshots() if fp in wanted}
    missing = wanted - set(found)
    if missing:
        raise BundleError(f"snapshot {sorted(missing)[0]} is named by a run but not stored (run `sealbox verify`)")
    return found


#: What a path that is not a regular file is, by its ``stat.S_IFMT`` (for the refusal message).
_FILE_KINDS = {stat.S_IFDIR: "a directory", stat.S_IFLNK: "a symbolic link", stat.S_IFIFO: "a FIFO (named pipe)",
               stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket"}


def _store_files() -> dict[str, str]:
    """The files of a store's data folder (``sealbox.store.sqlite``'s layout, and a PostgreSQL store's
    ``postgres.json`` and ``store.secret``) -> what each is."""
    from sealbox.store.sqlite import CHECKPOINT_NAME, DB_NAME, KEY_NAME, VKEY_NAME

    return {DB_NAME: "database", f"{DB_NAME}-wal": "write-ahead log",
            f"{DB_NAME}-shm": "shared-memory index", f"{DB_NAME}-journal": "rollback journal",
            KEY_NAME: "signing key", VKEY_NAME: "pinned verifier key", CHECKPOINT_NAME: "checkpoint file",
            "resume.lock": "resume lock file", "runs.lock": "run liveness lock file", "postgres.json": "PostgreSQL settings",
            "store.secret": "store secret"}


def _own_store_file(path: Path, store_dir: str | os.PathLike) -> str | None:
    """The name of the store file ``path`` is, or None: compared after resolving both paths
    (symbolic links, ``..``), then by :func:`os.path.samefile` (a hard link, another mount of
    the same file), then by name in the store's folder reached another way."""
    names = _store_files()
    target = os.path.realpath(path)
    for name in names:
        own = os.path.join(store_dir, name)
        if target == os.path.realpath(own):
            return name
        try:
            if os.path.samefile(path, own):
                return name
        except OSError:
            pass  # one of them does not exist
    if path.name in names:
        try:
            if os.path.samefile(path.parent, store_dir):
                return path.name
        except OSError:
            pass
    return None


def check_target(path: str | os.PathLike, *, store_dir: str | os.PathLike | None = None) -> None:
    """Refuse, before any work, a target :func:`write_atomically` would refuse.

    Args:
        store_dir: the data folder of the store being exported or reported on: none of its own
            files (``sealbox.db`` and its ``-wal``/``-shm``/``-journal``, ``log.key``, ``log.vkey``,
            ``checkpoint``) may be the target, however it is named.

    Raises:
        BundleError: ``path`` is one of the store's own files, or exists and is not a regular
            file (a symbolic link is not followed), or its folder does not exist or is not a folder.
    """
    path = Path(path)
    if store_dir is not None:
        name = _own_store_file(path, store_dir)
        if name is not None:
            raise BundleError(f"cannot write {path}: it is the store's own {_store_files()[name]} "
                              f"({os.path.join(store_dir, name)}), which is never replaced (nothing was written)")
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise BundleError(f"cannot write {path}: {exc.strerror or exc}") from exc
    if mode is not None and not stat.S_ISREG(mode):
        kind = _FILE_KINDS.get(stat.S_IFMT(mode), "not a regular file")
        raise BundleError(f"cannot write {path}: it exists and is {kind}, not a regular file (nothing was written)")
    if mode is None and not path.parent.is_dir():
        raise BundleError(f"cannot write {path}: the folder {path.parent} does not exist")


def is_bundle(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a Sealbox bundle (a ZIP whose ``format`` member names one of :data:`FORMATS`),
    as far as its first bytes tell: what ``sealbox export -o`` replaces without ``--force``."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            with z.open("format") as f:
                return f.read(64) in FORMATS
    except (OSError, KeyError, ValueError, RuntimeError, NotImplementedError, zipfile.BadZipFile):
        return False


class AtomicTarget:
    """An output file being written (see :func:`open_target`): its temporary file exists
    from the start; :meth:`commit` fills it and renames it onto the target, :meth:`discard`
    (or leaving the ``with`` block without committing) removes it."""

    def __init__(self, path: Path, store_dir: str | os.PathLike | None) -> None:
        self.path, self.store_dir, self.folder = path, store_dir, path.parent
        self._tmp: Path | None = None
        self._fd: int | None = None
        check_target(path, store_dir=store_dir)
        self._found = _file_state(path)  # what commit() may replace: another writer's file is not
        creating: Path | None = None
        try:
            for _ in range(16):
                tmp = self.folder / f".{path.name[:200]}.{secrets.token_hex(8)}.tmp"  # within NAME_MAX (255)
                creating = tmp
                try:
                    self._fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                                       | getattr(os, "O_CLOEXEC", 0), 0o666)
                except FileExistsError:
                    creating = None  # not ours
                    continue
                self._tmp = tmp
                break
        except OSError as exc:
            raise BundleError(f"cannot write {path}: {exc.strerror or exc}") from exc
        except BaseException:
            # an interrupt (Ctrl-C) just as the file was created, before it was noted: not left behind
            if creating is not None and self._tmp is None:
                try:
                    os.unlink(creating)
                except OSError:
                    pass
            self.discard()
            raise
        if self._fd is None:
            raise BundleError(f"cannot write {path}: no unused temporary file name in {self.folder}")

    def commit(self, data: bytes) -> None:
        """Write ``data`` to the temporary file, fsync it, rename it onto the target, fsync the folder.

        Two writers of one target at once (two ``sealbox export -o same.sbx``): the first to commit
        wins; the other finds the target changed since it was opened and fails, its file removed, so
        that no writer reports a file another has since replaced.

        Raises:
            BundleError: the target has become something that is refused, another process wrote it
                since it was opened, or the write failed (the disk is full, ...); the temporary
                file is removed and the target left as it was.
        """
        if self._fd is None or self._tmp is None:
            raise BundleError(f"cannot write {self.path}: already written or discarded")
        try:
            check_target(self.path, store_dir=self.store_dir)  # it may have changed meanwhile
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view):]
            os.fsync(self._fd)
            fd, self._fd = self._fd, None
            os.close(fd)
            with _folder_lock(self.folder):  # the check and the rename, one writer at a time
                if _file_state(self.path) != self._found:
                    raise BundleError(f"cannot write {self.path}: another process wrote it while this one was "
                                      "writing (nothing was written; run the command again to replace it)")
                os.replace(self._tmp, self.path)
            self._tmp = None
        except OSError as exc:
            raise BundleError(f"cannot write {self.path}: {exc.strerror or exc}") from exc
        finally:
            self.discard()
        _fsync_folder(self.folder)

    def discard(self) -> None:
        """Close and remove the temporary file, if it is still there (no-op after :meth:`commit`)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)
        if self._tmp is not None:
            tmp, self._tmp = self._tmp, None
            try:
                os.unlink(tmp)
            except OSError:
                pass

    def __del__(self) -> None:
        # dropped unwritten without discard(): an interrupt after it was made but before the caller's
        # ``with`` (or try) was entered
        try:
            self.discard()
        except Exception:  # noqa: BLE001 - at interpreter exit; never an "Exception ignored in" line
            pass

    def __enter__(self) -> "AtomicTarget":
        return self

    def __exit__(self, *exc: object) -> None:
        self.discard()


def open_target(path: str | os.PathLike, *, store_dir: str | os.PathLike | None = None) -> AtomicTarget:
    """Start writing the regular file ``path``: :func:`check_target`, then create its temporary file.

    The temporary file is created beside ``path`` (a random name, ``O_CREAT | O_EXCL |
    O_NOFOLLOW``, so nothing planted in the folder is followed or reused; permissions as for
    any new file under the umask) now, so that a target that cannot be written fails before
    any work is done or anything is signed for it.

    Raises:
        BundleError: as :func:`check_target`, or the temporary file cannot be created (the
            folder is not writable, ...).
    """
    return AtomicTarget(Path(path), store_dir)


def write_atomically(path: str | os.PathLike, data: bytes, *, store_dir: str | os.PathLike | None = None) -> None:
    """Write ``data`` to the regular file ``path``: all of it or, on any failure, nothing.

    The bytes go to a new temporary file beside ``path`` (see :func:`open_target`), are
    fsync'd, and the file is renamed onto ``path``; then the folder is fsync'd. An existing
    ``path`` must be a regular file (not followed if it is a symbolic link): a directory, a
    symbolic link, a FIFO, a device or a socket is refused before anything is written, so
    that, say, ``-o /dev/full`` does not replace a device node with a file. With ``store_dir``,
    the store's own files are refused too (:func:`check_target`).

    Raises:
        BundleError: ``path`` is refused by :func:`check_target`, or it cannot be written
            (the folder is missing or not writable, the disk is full, ...).
    """
    with open_target(path, store_dir=store_dir) as target:
        target.commit(data)


def _file_state(path: Path) -> tuple[int, ...] | None:
    """What tells one version of the file ``path`` from another (device, inode, size, change time),
    or None when there is none: a rename onto it by another writer changes the inode."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BundleError(f"cannot write {path}: {exc.strerror or exc}") from exc
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class _folder_lock:
    """An exclusive ``flock`` on ``folder`` (best effort: a folder that cannot be opened or locked is
    not), held by :meth:`AtomicTarget.commit` from its check of the target to its rename: two writers of
    one file never both find it unchanged and both rename onto it."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.fd = folder, None

    def __enter__(self) -> "_folder_lock":
        try:
            import fcntl

            self.fd = os.open(self.folder, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except (ImportError, OSError):
            pass
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)  # releases the lock


def _fsync_folder(folder: Path) -> None:
    """Make the rename durable; best effort (some systems cannot open or fsync a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
