"""``sealbox verify`` flags a run with two ``tool.call`` events at one step (replay keys calls by step).

Such a store is what two writers of one run wrote before the step was taken in the write that records
the call (docs/gateway.md, *Steps of a joined call*): a gateway joined to the run and the driving
process both recording at the step a model call assigned. Here it is written that way, with the
check cut out of the recorder, as a Sealbox before it did."""

from __future__ import annotations

import pytest

import sealbox
from sealbox import verify_store
from sealbox.cli.main import main
from sealbox.errors import StepTakenError
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder, RunContext


def _two_writers_one_step(tmp_path, monkeypatch, *, check: bool):
    store = sealbox.init_store(tmp_path / "store")
    other = sealbox.open_store(tmp_path / "store")
    try:
        run = Recorder(store, ALLOW_ALL).run(agent="sdk-agent", principal="agent:sdk")
        run.start()
        run.model_call({"model": "m", "input": []}, {"object": "response", "id": "r1", "model": "m", "output": [
            {"type": "function_call", "call_id": "call_a", "name": "add", "arguments": "{}", "id": "fc_a"}]})
        joined = Recorder(other, ALLOW_ALL).continue_run(run.run_id)  # a gateway joined to the run
        with monkeypatch.context() as m:
            if not check:
                m.setattr(RunContext, "_check_call_free", lambda self, reader, step, call_id: None)
            joined.link_call("call_x", "2.1")
            assert joined.call_tool("toy", "echo", {"text": "gw"}, lambda text: text, call_id="call_x") == "gw"
            if check:
                with pytest.raises(StepTakenError):
                    run.call_tool("local", "add", {"a": 1}, lambda a: a, call_id="call_a")
            else:
                assert run.call_tool("local", "add", {"a": 1}, lambda a: a, call_id="call_a") == 1
        run.end()
        return run.run_id, [e for e in store.read_run(run.run_id) if e.kind == "tool.call"]
    finally:
        other.close()
        store.close()


def _cli_verify(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["verify", str(tmp_path / "store")])
    return exc.value.code, capsys.readouterr().out.splitlines()


def test_two_tool_calls_at_one_step_of_a_run_are_call_step_duplicate(tmp_path, monkeypatch, capsys):
    run_id, calls = _two_writers_one_step(tmp_path, monkeypatch, check=False)
    first, second = calls
    assert [(c.step, c.payload["call_id"]) for c in calls] == [("2.1", "call_x"), ("2.1", "call_a")]
    message = (f"a second tool call at step '2.1' of run {run_id} (call 'call_a'; the first, call 'call_x', is "
               f"run_seq {first.run_seq} at leaf {first.leaf_index}): replay cannot tell the two apart (two "
               "writers of the run took the same step: a Sealbox before 2026-12-04, or a change below Sealbox)")
    with sealbox.open_store(tmp_path / "store") as store:
        report = verify_store(store)
    assert [(p.code, p.run_id, p.run_seq, p.kind, p.leaf_index, p.message, p.expected, p.found)
            for p in report.problems] == [
        ("call_step_duplicate", run_id, second.run_seq, "tool.call", second.leaf_index, message,
         "one tool.call at step '2.1'", f"tool.call at leaves {first.leaf_index} and {second.leaf_index}")]
    code, out = _cli_verify(tmp_path, capsys)
    assert code == 1
    assert out[0] == (f"call_step_duplicate [run {run_id}, run_seq {second.run_seq}, tool.call, leaf "
                      f"{second.leaf_index}]: {message} (expected one tool.call at step '2.1', found tool.call at "
                      f"leaves {first.leaf_index} and {second.leaf_index})")
    assert out[1].startswith("NOT VERIFIED: 1 problem(s) found.")


def test_the_same_writers_with_the_check_leave_one_call_per_step_and_verify_clean(tmp_path, monkeypatch, capsys):
    run_id, calls = _two_writers_one_step(tmp_path, monkeypatch, check=True)
    assert [(c.step, c.payload["call_id"]) for c in calls] == [("2.1", "call_x")]
    code, out = _cli_verify(tmp_path, capsys)
    assert code == 0 and out[0].startswith("Verified: the log is intact.")


def test_a_step_reused_in_another_run_or_after_a_run_ended_is_not_flagged(tmp_path):
    """Steps are per run: two runs each with a call at step 2 are fine (the check forgets a run at its end)."""
    from sealbox.verify import CallStepCheck

    def env(run_id, run_seq, kind, step, call_id=None):
        return {"run_id": run_id, "run_seq": run_seq, "kind": kind, "step": step,
                "payload": {} if call_id is None else {"call_id": call_id}}

    check = CallStepCheck()
    for leaf, e in enumerate([env("r1", 2, "tool.call", "2", "a"), env("r2", 2, "tool.call", "2", "b"),
                              env("r1", 3, "run.ended", "3"), env("r2", 3, "tool.call", "2.1", "c")]):
        check.add(leaf, e)
    assert check.problems == []
    check.add(9, env("r2", 4, "tool.call", "2", "d"))
    assert [(p.code, p.run_id, p.leaf_index, p.found) for p in check.problems] == [
        ("call_step_duplicate", "r2", 9, "tool.call at leaves 1 and 9")]


def test_an_export_bundle_of_that_run_is_call_step_duplicate_too(tmp_path, monkeypatch):
    from sealbox.interop.bundle import export_bundle
    from sealbox.interop.bundle_verify import verify_bundle

    run_id, (first, second) = _two_writers_one_step(tmp_path, monkeypatch, check=False)
    with sealbox.open_store(tmp_path / "store") as store:
        export_bundle(store, [run_id], tmp_path / "run.sbx")
        vkey = store.pinned_vkey()
    report = verify_bundle(tmp_path / "run.sbx", trusted_vkey=vkey)
    assert [(p.code, p.run_id, p.run_seq, p.kind, p.found) for p in report.problems] == [
        ("call_step_duplicate", run_id, second.run_seq, "tool.call",
         f"tool.call at leaves {first.leaf_index} and {second.leaf_index}")]
