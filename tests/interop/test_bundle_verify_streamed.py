"""A bundle whose container is canonical is checked streaming, a chunk and a line at a time from the file
(``_stream_container``, ``_FileMember``): every report equals the one the in-memory check gives, on the
untouched bundle and on bundles whose content was changed inside a canonical container (an event's
bytes, a blob swapped, a blob line repeated, a line cut, a missing final newline, lines reordered), for
lines longer than a read chunk too. A file changed between the container check and the content check
is refused, not reported as verified."""

from __future__ import annotations

import dataclasses
import json

import pytest
from bundle_helpers import cli, members, record_runs, rezip

from sealbox.interop import bundle_verify
from sealbox.interop.bundle import BundleFormatError
from sealbox.interop.bundle_verify import verify_bundle


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    folder = tmp_path_factory.mktemp("streamed")
    store_path, runs, _ = record_runs(folder)
    path = folder / "case.sbx"
    assert cli("export", "-s", store_path, *runs, "-o", path, cwd=folder)[0] == 0
    return path, (store_path / "log.vkey").read_text().strip()


def _both(path, key, monkeypatch):
    """(the streamed report, the in-memory report), their timings left out."""
    streamed = []
    real = bundle_verify._stream_container
    monkeypatch.setattr(bundle_verify, "_stream_container",
                        lambda f, size, held: streamed.append(1) or real(f, size, held))
    a = verify_bundle(path, trusted_vkey=key)
    assert streamed, "the canonical container was not streamed"
    monkeypatch.setattr(bundle_verify, "_stream_container", lambda f, size, held: "held in memory")
    b = verify_bundle(path, trusted_vkey=key)
    return (dataclasses.replace(a, seconds=0).to_dict(), dataclasses.replace(b, seconds=0).to_dict())


def _changed(m):
    ev = m["events.jsonl"].splitlines(keepends=True)
    bl = m["blobs.jsonl"].splitlines(keepends=True)
    swapped = json.loads(bl[0])
    yield "event byte", {**m, "events.jsonl": m["events.jsonl"].replace(b'"run_seq":2', b'"run_seq":3', 1)}
    yield "blob swapped", {**m, "blobs.jsonl": b'{"content":"swapped","ref":"' + swapped["ref"].encode()
                           + b'","salt":"' + swapped["salt"].encode() + b'"}\n' + b"".join(bl[1:])}
    yield "blob repeated", {**m, "blobs.jsonl": b"".join(bl[:2] + bl[1:])}
    yield "blob line cut", {**m, "blobs.jsonl": b"".join(bl[:1] + [bl[1][:40] + b"\n"] + bl[2:])}
    yield "no final newline", {**m, "events.jsonl": m["events.jsonl"][:-1]}
    yield "events reordered", {**m, "events.jsonl": b"".join(ev[:2] + [ev[3], ev[2]] + ev[4:])}
    yield "a line longer than a chunk", {**m, "snapshots.jsonl": m["snapshots.jsonl"] + b'{"x":"'
                                         + b"y" * (bundle_verify._CHUNK * 2 + 5) + b'"}\n'}


def test_the_untouched_bundle_is_streamed_and_verifies_as_in_memory(case, monkeypatch):
    path, key = case
    a, b = _both(path, key, monkeypatch)
    assert a == b and a["ok"] and a["blobs"] > 0 and a["events"] > 0


@pytest.mark.parametrize("what", ["event byte", "blob swapped", "blob repeated", "blob line cut", "no final newline",
                                  "events reordered", "a line longer than a chunk"])
def test_changed_content_in_a_canonical_container_is_reported_as_in_memory(case, tmp_path, monkeypatch, what):
    path, key = case
    m = dict(_changed(members(path)))[what]
    rezip(tmp_path / "t.sbx", m)
    a, b = _both(tmp_path / "t.sbx", key, monkeypatch)
    assert a == b
    assert not a["ok"] and a["problems"]


def test_small_chunks_read_the_same_lines(case, monkeypatch):
    path, key = case
    expected = dataclasses.replace(verify_bundle(path, trusted_vkey=key), seconds=0).to_dict()
    monkeypatch.setattr(bundle_verify, "_CHUNK", 7)  # lines cut across many reads
    assert dataclasses.replace(verify_bundle(path, trusted_vkey=key), seconds=0).to_dict() == expected


def test_a_file_changed_while_checked_is_refused(case, tmp_path, monkeypatch):
    path, key = case
    copy = tmp_path / "c.sbx"
    copy.write_bytes(path.read_bytes())
    real = bundle_verify._stream_container

    def then_change(f, size, held):
        out = real(f, size, held)
        data = bytearray(copy.read_bytes())
        at = data.index(b'"run_seq":1')
        data[at + 10] = ord("7")  # same size, other bytes, after the container check read them
        copy.write_bytes(bytes(data))
        return out

    monkeypatch.setattr(bundle_verify, "_stream_container", then_change)
    with pytest.raises(BundleFormatError, match="changed while it was being checked"):
        verify_bundle(copy, trusted_vkey=key)
    code, out, _ = cli("verify", copy, "--key", key, cwd=tmp_path)
    assert code == 1 and "NOT VERIFIED" in out  # checked again from the start: the change is reported


def _env(kind, seq, payload, step="1"):
    return {"kind": kind, "payload": payload, "prev": "sha256:" + "0" * 64, "principal": "agent:a", "run_id": "r1",
            "run_seq": seq, "step": step, "ts": "2026-12-05T10:00:00.000000Z", "v": 1}


def test_the_calls_and_decisions_kept_after_the_events_read_as_the_whole_envelopes():
    """The check keeps of each tool.call and policy.decision only the fields the call checks read, and
    counts the manifest's runs as it goes: each check reads the same from them as from the envelopes."""
    from sealbox.verify import CallStepCheck, lets_through

    decisions = [{"call_id": "c1", "effect": "allow", "reason_code": "policy_allow", "rule": "r", "inputs": {"q": 1}},
                 {"call_id": "c2", "effect": "deny", "reason_code": "policy_deny"},
                 {"call_id": "c3", "effect": "allow", "reason_code": "imported"},
                 {"call_id": "c4", "effect": "allow", "reason_code": "policy_allow", "replayed": {"from": "x"}}]
    envs = [_env("run.started", 1, {"agent": "dba"})]
    for i, d in enumerate(decisions):
        envs.append(_env("tool.call", len(envs) + 1, {"arguments": {"a": "x" * 100}, "call_id": d["call_id"],
                                                      "exposed": "db.q", "grant": f"g{i}", "server": "db", "tool": "q"},
                         step="1" if i < 2 else str(i)))
        envs.append(_env("policy.decision", len(envs) + 1, d, step="1" if i < 2 else str(i)))
        envs.append(_env("tool.result", len(envs) + 1, {"call_id": d["call_id"], "ok": True}))
    check = bundle_verify._Check(b"", None, 0.0)
    for leaf, env in enumerate(envs):
        check._keep(leaf, env)
    kept = dict(check.envs)
    assert set(kept) == {leaf for leaf, e in enumerate(envs) if e["kind"] in ("tool.call", "policy.decision")}
    for leaf, slim in kept.items():
        full = envs[leaf]
        assert {k: slim[k] for k in ("kind", "principal", "run_id", "run_seq", "step", "ts")} == \
            {k: full[k] for k in ("kind", "principal", "run_id", "run_seq", "step", "ts")}
        assert lets_through(slim["payload"]) == lets_through(full["payload"])
        assert "arguments" not in slim["payload"] and "inputs" not in slim["payload"]
    assert [lets_through(kept[leaf]["payload"]) for leaf in sorted(kept) if kept[leaf]["kind"] == "policy.decision"] \
        == [True, False, False, False]
    calls, stopped = check._calls()
    assert [c[1]["payload"] for c in calls] == [{"call_id": d["call_id"], "grant": f"g{i}", "server": "db", "tool": "q"}
                                               for i, d in enumerate(decisions)]
    assert stopped == {("r1", "c2"), ("r1", "c3"), ("r1", "c4")}
    steps_full, steps_slim = CallStepCheck(), CallStepCheck()
    for leaf, env in enumerate(envs):
        if env["kind"] == "tool.call":
            steps_full.add(leaf, env)
            steps_slim.add(leaf, kept[leaf])
    assert steps_slim.problems == steps_full.problems and [p.code for p in steps_slim.problems] == ["call_step_duplicate"]
    assert check._run_entries() == [{"run_id": "r1", "agent": "dba", "events": len(envs), "first_leaf": 0,
                                     "last_leaf": len(envs) - 1, "last_kind": "tool.result"}]
    assert check._system_events == 0


def test_a_bad_key_or_proof_leaves_no_bundle_file_open(case):
    """The bundle file kept open for the streamed check is closed when the key or a proof is refused (not
    left to the garbage collector, which warns of an unclosed file)."""
    import gc
    import warnings

    from sealbox.errors import ConfigError, NoteError

    path, key = case
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        with pytest.raises(NoteError):
            verify_bundle(path, trusted_vkey="not a key")
        with pytest.raises(ConfigError):
            verify_bundle(path, trusted_vkey=key, consistency=[])
        assert verify_bundle(path, trusted_vkey=key).ok
        gc.collect()
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []
