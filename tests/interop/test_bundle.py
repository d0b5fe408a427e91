"""Export bundles: a round trip verified in a subprocess with no store anywhere, and --consistency."""

from __future__ import annotations

import json

import pytest
from bundle_helpers import BIG_RESULT, cli, members, record_runs

import sealbox
from sealbox.interop.bundle import FORMAT_TEXT, MEMBERS
from sealbox.interop.bundle_verify import verify_bundle


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bundle")
    store_path, runs, key = record_runs(folder)
    vkey = (store_path / "log.vkey").read_text().strip()
    return folder, store_path, runs, vkey


@pytest.fixture(scope="module")
def bundle(recorded):
    folder, store_path, runs, _ = recorded
    code, out, err = cli("export", "-s", store_path, runs[0], runs[2], "-o", folder / "case.sbx", "--json", cwd=folder)
    assert code == 0, err
    return folder / "case.sbx", json.loads(out)


def test_a_bundle_holds_the_fixed_members_and_never_the_secret(bundle, recorded):
    path, summary = bundle
    m = members(path)
    assert list(m) == list(MEMBERS) and m["format"] == FORMAT_TEXT
    assert summary["blobs"] >= 3 and summary["snapshots"] == 1 and summary["system_events"] == 2  # root admin, alice
    store = sealbox.open_store(recorded[1], readonly=True)
    try:
        secret = store._secret
        assert secret not in path.read_bytes() and secret.hex().encode() not in path.read_bytes()
        assert (recorded[1] / "log.key").read_text().strip().encode() not in path.read_bytes()
    finally:
        store.close()
    lines = m["events.jsonl"].splitlines()
    assert len(lines) == summary["events"] + summary["system_events"]
    assert BIG_RESULT.encode() in m["blobs.jsonl"] and b'"$cons"' in m["blobs.jsonl"]


def test_each_event_line_holds_the_exact_hashed_bytes(bundle, recorded):
    store = sealbox.open_store(recorded[1], readonly=True)
    try:
        events = {e.leaf_index: e.raw for r in recorded[2] for e in store.read_run(r)}
    finally:
        store.close()
    for line in members(bundle[0])["events.jsonl"].splitlines():
        doc = json.loads(line)
        if doc["leaf_index"] in events:
            assert line.startswith(b'{"event":' + events[doc["leaf_index"]] + b',"leaf_index":')


def test_verify_in_a_subprocess_with_no_store_passes_and_says_which_key(bundle, recorded, tmp_path):
    path = tmp_path / "copy.sbx"
    path.write_bytes(bundle[0].read_bytes())
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out, err = cli("verify", path, "--key", recorded[3], cwd=empty)
    assert code == 0, out + err
    assert "Verified: the bundle is intact." in out
    assert out.splitlines()[-1] == f"Checkpoint signature checked against the key you gave (--key): {recorded[3]}."
    assert list(empty.iterdir()) == []


def test_verify_with_the_real_key_says_so(bundle, recorded, tmp_path):
    code, out, _ = cli("verify", bundle[0], "--key", recorded[3], "--json", cwd=tmp_path)
    report = json.loads(out)
    assert code == 0 and report["ok"] and report["key_source"] == "given" and report["trusted_key"] == recorded[3]
    assert [r["status"] for r in report["runs"]] == ["run.ended", "run.ended"]


def test_verify_reports_the_approval_and_checks_its_signature(bundle, recorded):
    report = verify_bundle(bundle[0], trusted_vkey=recorded[3])
    assert report.ok and report.events == bundle[1]["events"]


def test_export_by_agent_and_time_takes_whole_runs(recorded, tmp_path):
    _, store_path, runs, _ = recorded
    code, out, err = cli("export", "-s", store_path, "--agent", "dba", "--since", "1d", "-o", tmp_path / "a.sbx",
                         "--json", cwd=tmp_path)
    assert code == 0, err
    assert json.loads(out)["runs"] == [runs[0], runs[1]]


def test_export_needs_exactly_one_output_mode(recorded, tmp_path):
    code, _, err = cli("export", "-s", recorded[1], recorded[2][0], cwd=tmp_path)
    assert code == 2 and "exactly one output mode" in err
    code, _, err = cli("export", "-s", recorded[1], "nope", "-o", tmp_path / "x.sbx", cwd=tmp_path)
    assert code == 2 and "no run 'nope'" in err


def test_a_file_that_is_not_a_bundle_is_bad_input(tmp_path):
    (tmp_path / "x.sbx").write_text("hello")
    code, _, err = cli("verify", tmp_path / "x.sbx", cwd=tmp_path)
    assert code == 2 and err.startswith("error:") and "not a Sealbox bundle" in err


def test_consistency_with_a_real_proof_from_a_grown_store_passes(recorded, tmp_path):
    folder, store_path, runs, vkey = recorded
    path = tmp_path / "c.sbx"
    assert cli("export", "-s", store_path, runs[1], "-o", path, cwd=tmp_path)[0] == 0
    size1 = verify_bundle(path).checkpoint_size
    store = sealbox.open_store(store_path)
    try:
        from sealbox.policies import ALLOW_ALL

        with sealbox.Recorder(store, policy=ALLOW_ALL).run(agent="later") as run:
            run.note("the log grows")
        store.issue_checkpoint()
    finally:
        store.close()
    code, out, err = cli("log", "prove", "-s", store_path, "--from-size", size1, cwd=tmp_path)
    assert code == 0, err
    (tmp_path / "proof.json").write_text(out)
    code, out, err = cli("verify", path, "--key", vkey, "--consistency", tmp_path / "proof.json", cwd=tmp_path)
    assert code == 0, out + err
    assert f"grew consistently from size {size1}" in out

    forged = json.loads((tmp_path / "proof.json").read_text())
    forged["proof"][0] = forged["proof"][0][:-2] + ("A=" if forged["proof"][0][-2] != "A" else "E=")
    (tmp_path / "forged.json").write_text(json.dumps(forged))
    code, out, _ = cli("verify", path, "--key", vkey, "--consistency", tmp_path / "forged.json", cwd=tmp_path)
    assert code == 1 and "consistency_proof [--consistency]" in out

    forged = json.loads((tmp_path / "proof.json").read_text())
    forged["size1"] = size1 - 1
    (tmp_path / "moved.json").write_text(json.dumps(forged))
    code, out, _ = cli("verify", path, "--key", vkey, "--consistency", tmp_path / "moved.json", cwd=tmp_path)
    assert code == 1 and "consistency_size" in out


def test_export_summary_counts_in_the_right_number(recorded, tmp_path):
    folder, store_path, runs, _ = recorded
    target = tmp_path / "one.sbx"
    code, out, err = cli("export", "-s", store_path, runs[0], "-o", target, cwd=folder)
    assert code == 0, err
    vkey = recorded[3]
    report = verify_bundle(target, trusted_vkey=vkey)
    assert report.ok and (len(report.runs), report.system_events, report.snapshots) == (1, 2, 1)  # identity.changed of root and alice
    assert report.events > 1 and report.blobs > 1
    assert out.strip() == (f"Wrote {target}: {report.events} events of 1 run, 2 system events, {report.blobs} blobs, "
                           f"1 snapshot, proven against the checkpoint of size {report.checkpoint_size} (signed now). "
                           "Check it anywhere with `sealbox verify FILE --key KEY`; send KEY, the log's verifier key, "
                           "apart from the bundle (publish it where its recipient can check it came from you): "
                           f"{vkey}")
