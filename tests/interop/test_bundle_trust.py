"""Which key a bundle is verified against. A bundle's own log.vkey proves nothing about who wrote it:
a forger who alters its events can rebuild the tree, sign a checkpoint with a key of their own and put
that key in the bundle, and the result is consistent with itself. So `sealbox verify case.sbx` without
--key fails closed (exit 3, a NO TRUSTED KEY line); --key of the real log catches the forgery as a key
mismatch; --trust-bundle-key is an explicit integrity-only opt-in (exit 0, a WARNING line)."""

from __future__ import annotations

import json

import pytest
from bundle_helpers import cli, members, rebuild_manifest, record_runs, rezip

from sealbox.canonical import canonical_bytes
from sealbox.interop.bundle import DIGESTED, event_line, export_digest, export_extension
from sealbox.interop.bundle_verify import verify_bundle
from sealbox.ledger import merkle
from sealbox.ledger.checkpoint import Checkpoint, Signer, Verifier, generate_key, parse_note, sign_checkpoint


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    folder = tmp_path_factory.mktemp("trust")
    store_path, runs, _ = record_runs(folder)
    path = folder / "case.sbx"
    code, out, err = cli("export", "-s", store_path, runs[0], "-o", path, "--json", cwd=folder)
    assert code == 0, err
    vkey = (store_path / "log.vkey").read_text().strip()
    return folder, store_path, path, vkey, _forge(path, folder / "forged.sbx")


def _forge(genuine, target):
    """The genuine bundle with one tool result changed ("1 row" -> "0 rows"), its runs' chains
    relinked, a new tree over its events, a checkpoint of that tree signed with a new key of the
    same name, that key as log.vkey and the manifest rebuilt: everything a forger can do."""
    m = members(genuine)
    cp = Checkpoint.parse(parse_note(m["checkpoint"].decode()).text)
    envs = [json.loads(line)["event"] for line in m["events.jsonl"].splitlines()]
    changed = [e for e in envs if e["kind"] == "tool.result" and e["payload"].get("result") == "1 row"]
    assert len(changed) == 1
    changed[0]["payload"]["result"] = "0 rows"
    last: dict[str, str] = {}
    raws = []
    for env in envs:
        if env["run_seq"] > 1 and env["run_id"] in last:
            env["prev"] = last[env["run_id"]]
        raw = canonical_bytes(env)
        last[env["run_id"]] = "sha256:" + merkle.leaf_hash(raw).hex()
        raws.append(raw)
    tree = merkle.MemoryTree([merkle.leaf_hash(r) for r in raws])
    m["events.jsonl"] = b"".join(event_line(r, i, tree.inclusion_proof(i)) for i, r in enumerate(raws))
    skey, vkey = generate_key(cp.origin)
    m["log.vkey"] = (vkey + "\n").encode()
    digest = export_digest([(n, m[n]) for n in DIGESTED])
    forged_cp = Checkpoint(cp.origin, tree.size, tree.root(), (export_extension(digest),))
    m["checkpoint"] = sign_checkpoint(forged_cp, Signer.from_key(skey)).encode()
    rebuild_manifest(m)
    rezip(target, m)
    return target, vkey


def _no_key_line(path, vkey):
    v = Verifier.from_vkey(vkey)
    return (f"NO TRUSTED KEY: no --key was given, so nothing shows who signed this bundle (whoever rewrites a bundle "
            f"can sign it again with a key of their own). The bundle's key is {vkey} (name {v.name}, key ID "
            f"{v.key_id.hex()}): compare it with the log's verifier key obtained from the log's owner separately "
            f"(what `sealbox init` and `sealbox log key` print), then run: sealbox verify {path} --key KEY")


def test_the_forgery_is_consistent_with_its_own_key(case):
    """The forged bundle passes every check against the key it carries: only a trusted key tells it apart."""
    (forged, forger_vkey) = case[4]
    report = verify_bundle(forged)
    assert report.problems == () and report.consistent
    assert (report.ok, report.status, report.key_trusted) == (False, "untrusted_key", False)
    assert (report.key_source, report.trusted_key, report.bundle_key) == ("bundle", forger_vkey, forger_vkey)
    tool_results = [json.loads(line)["event"]["payload"].get("result")
                    for line in members(forged)["events.jsonl"].splitlines()]
    assert "0 rows" in tool_results and "1 row" not in tool_results


def test_a_re_signed_forgery_without_key_exits_3_and_names_its_key(case):
    folder, _, _, real_vkey, (forged, forger_vkey) = case
    code, out, err = cli("verify", forged.name, cwd=folder)
    assert (code, err) == (3, "")
    lines = out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("NOT VERIFIED (no trusted key): the bundle is consistent with the key it carries. "
                               "14 events in 1 run (+2 system events), ")
    assert lines[1] == _no_key_line("forged.sbx", forger_vkey)
    assert forger_vkey != real_vkey and forger_vkey.split("+")[0] == real_vkey.split("+")[0]  # same name, other key


def test_a_re_signed_forgery_with_the_real_key_fails_as_a_key_mismatch(case):
    folder, store_path, _, real_vkey, (forged, forger_vkey) = case
    for key in (real_vkey, str(store_path / "log.vkey")):
        code, out, err = cli("verify", forged, "--key", key, cwd=folder)
        assert (code, err) == (1, "")
        lines = out.splitlines()
        name, real_id, forger_id = real_vkey.split("+")[0], real_vkey.split("+")[1], forger_vkey.split("+")[1]
        assert lines[0] == (f"bundle_key_mismatch [log.vkey]: the bundle's verifier key is not the key you trust: "
                            f"both name the log {name}, with the key ids {forger_id} (the bundle's) and {real_id} "
                            "(yours): the bundle was signed again with another key, or yours is not this log's "
                            f"(expected {real_vkey}, found {forger_vkey})")
        assert lines[1].startswith("checkpoint_signature [checkpoint]: ")
        assert lines[-2].startswith("NOT VERIFIED: ")
        assert lines[-1] == f"Checkpoint signature checked against the key you gave (--key): {real_vkey}."


def test_a_re_signed_forgery_with_trust_bundle_key_exits_0_with_a_warning(case):
    folder, _, _, _, (forged, forger_vkey) = case
    code, out, err = cli("verify", forged, "--trust-bundle-key", cwd=folder)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].startswith("Consistent: the bundle is intact, checked against the key it carries. 14 events")
    assert lines[1] == (f"WARNING: checked only against the key inside the bundle ({forger_vkey}), accepted because "
                        "of --trust-bundle-key: this proves that the bundle is consistent with itself, not that the "
                        "log's owner signed it (whoever rewrites a bundle can sign it again with a key of their own).")


def test_a_genuine_bundle_with_the_key_exits_0(case):
    folder, _, path, real_vkey, _ = case
    code, out, err = cli("verify", path, "--key", real_vkey, cwd=folder)
    assert (code, err) == (0, "")
    assert out.splitlines()[0].startswith("Verified: the bundle is intact. 14 events in 1 run (+2 system events), ")
    assert out.splitlines()[1] == f"Checkpoint signature checked against the key you gave (--key): {real_vkey}."


def test_a_genuine_bundle_without_key_is_not_verified_either(case):
    folder, _, path, real_vkey, _ = case
    code, out, _ = cli("verify", path, cwd=folder)
    assert code == 3
    assert out.splitlines()[-1] == _no_key_line(path, real_vkey)


def test_json_carries_the_trust_state(case):
    folder, _, path, real_vkey, (forged, forger_vkey) = case
    code, out, _ = cli("verify", forged, "--json", cwd=folder)
    doc = json.loads(out)
    assert code == 3
    assert {k: doc[k] for k in ("ok", "status", "consistent", "key_trusted", "key_source", "bundle_key",
                                "bundle_key_accepted", "trusted_key", "problems")} == {
        "ok": False, "status": "untrusted_key", "consistent": True, "key_trusted": False, "key_source": "bundle",
        "bundle_key": forger_vkey, "bundle_key_accepted": False, "trusted_key": forger_vkey, "problems": []}
    assert doc["trust"] == _no_key_line(forged, forger_vkey)

    code, out, _ = cli("verify", forged, "--json", "--trust-bundle-key", cwd=folder)
    doc = json.loads(out)
    assert code == 0
    assert (doc["ok"], doc["status"], doc["key_trusted"], doc["bundle_key_accepted"]) == (True, "verified", True, True)
    assert doc["trust"].startswith("WARNING: ")

    code, out, _ = cli("verify", forged, "--json", "--key", real_vkey, cwd=folder)
    doc = json.loads(out)
    assert code == 1
    assert (doc["ok"], doc["status"], doc["consistent"], doc["key_source"], doc["bundle_key"]) == (
        False, "problems", False, "given", forger_vkey)
    assert [p["code"] for p in doc["problems"]][:2] == ["bundle_key_mismatch", "checkpoint_signature"]

    code, out, _ = cli("verify", path, "--json", "--key", real_vkey, cwd=folder)
    doc = json.loads(out)
    assert code == 0
    assert (doc["ok"], doc["status"], doc["key_trusted"], doc["bundle_key"]) == (True, "verified", True, real_vkey)


def test_trust_options_misused_are_one_error_line(case):
    folder, store_path, path, real_vkey, _ = case
    assert cli("verify", path, "--key", real_vkey, "--trust-bundle-key", cwd=folder) == (
        2, "", "error: --key and --trust-bundle-key exclude each other: give the log's key with --key, or accept "
               "the bundle's own key with --trust-bundle-key (an integrity check only)\n")
    assert cli("verify", "-s", store_path, "--trust-bundle-key", cwd=folder) == (
        2, "", "error: --trust-bundle-key applies to a bundle (a file); a store is checked against the key pinned "
               "at init, or --key\n")


def test_the_api_refuses_a_key_and_trusting_the_bundle_key_together(case):
    from sealbox.errors import ConfigError

    _, _, path, real_vkey, _ = case
    with pytest.raises(ConfigError, match="not both"):
        verify_bundle(path, trusted_vkey=real_vkey, trust_bundle_key=True)
    assert verify_bundle(path, trust_bundle_key=True).ok
    assert verify_bundle(path, trusted_vkey=real_vkey).ok

