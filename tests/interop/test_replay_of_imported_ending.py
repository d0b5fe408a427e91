"""Replaying a run that was cancelled or ended with an error compares the replay's ending with that ending.

A replay ended ``ok`` or ``error`` only, so a run recorded ``cancelled`` (a tool interrupted by Ctrl-C:
the replay serves that recorded KeyboardInterrupt again, and the agent stops the same way) always
diverged, natively and once exported with ``sealbox export --otlp`` and imported. And a run that ended
with an error, exported without ``--otlp-content`` (its error message is not sent) and imported, was
compared by that message, which the importer can only fill with "not exported": it never matched.
Now the same calls and results and the same ending reproduce; another ending, or another exception
type, is still the first divergence.

Recorded with the real Recorder, exported to a real OTLP/HTTP endpoint on 127.0.0.1, imported with
``sealbox import``, replayed with the real Replayer; SQLite, and PostgreSQL when
SEALBOX_TEST_POSTGRES_URL is set.
"""

from __future__ import annotations

import json

from test_import_vs_live import backend  # noqa: F401 - backend is a fixture
from test_otlp_roundtrip import Collector, _sb

from sealbox import open_store
from sealbox.policy import Policy
from sealbox.recorder import Recorder
from sealbox.replay import Replayer

POLICY = "version: 1\nrules:\n  - id: all\n    effect: allow\n"


def _interrupted():
    raise KeyboardInterrupt()


def cancelled_agent(run):
    run.call_tool("db", "read", {}, lambda: "rows")
    run.call_tool("db", "slow", {}, _interrupted)  # Ctrl-C while the tool ran


def carried_on(run):  # the same calls, but it catches the interruption and ends ok
    run.call_tool("db", "read", {}, lambda: "rows")
    try:
        run.call_tool("db", "slow", {}, _interrupted)
    except Exception:  # noqa: BLE001 - a replay serves it as an Exception
        pass


def failing_agent(run):
    run.call_tool("db", "read", {}, lambda: "rows")
    raise RuntimeError("the rows were wrong")


def other_failure(run):
    run.call_tool("db", "read", {}, lambda: "rows")
    raise ValueError("the rows were wrong")


def finishing_agent(run):
    run.call_tool("db", "read", {}, lambda: "rows")


def _export_import(source_path, run_ids, tmp_path, target, backend, content):  # noqa: F811
    collector = Collector()
    try:
        out = _sb("export", *run_ids, "-s", source_path, "--otlp", collector.url,
                  *(["--otlp-content"] if content else []))
        assert out.returncode == 0, out.stderr
    finally:
        collector.close()
    file = tmp_path / f"{target}.json"
    file.write_text(json.dumps(collector.otlp_json(hex_ids=True)), encoding="utf-8")
    backend(tmp_path / target).close()
    out = _sb("import", "-s", tmp_path / target, file, "--json")
    assert out.returncode == 0, out.stderr
    store = open_store(tmp_path / target)
    try:
        return {store.read_run(r)[0].payload["imported"]["original_ids"]["sealbox_run_id"]: r
                for r in json.loads(out.stdout)["runs"]}
    finally:
        store.close()


def _outcome(result):
    d = result.divergence
    return (result.reproduced, result.steps_compared, d.kind if d else None, d.message if d else None)


def test_cancelled_and_failed_runs_replay_to_the_same_ending(backend, tmp_path):  # noqa: F811
    source = backend(tmp_path / "source")
    rec = Recorder(source, policy=Policy.from_text(POLICY))
    try:
        with rec.run(agent="bot", principal="agent:bot") as run:
            cancelled_agent(run)
    except KeyboardInterrupt:
        pass
    cancelled = run.run_id
    try:
        with rec.run(agent="bot", principal="agent:bot") as run:
            failing_agent(run)
    except RuntimeError:
        pass
    failed = run.run_id
    assert [source.read_run(r)[-1].payload["status"] for r in (cancelled, failed)] == ["cancelled", "error"]

    # in the store it was recorded in
    replayer = Replayer(source)
    assert replayer.replay(cancelled, cancelled_agent).head() == "reproduced: 2 step(s) matched"
    assert replayer.replay(failed, failing_agent).head() == "reproduced: 1 step(s) matched"
    source.close()

    ids = _export_import(tmp_path / "source", [cancelled, failed], tmp_path, "target", backend, True)
    store = open_store(tmp_path / "target")
    try:
        ended = {r: store.read_run(ids[r])[-1].payload for r in (cancelled, failed)}
        assert ended[cancelled]["status"] == "cancelled" and ended[failed]["status"] == "error"
        replayer = Replayer(store)
        # the same calls and results, the same ending: reproduced
        result = replayer.replay(ids[cancelled], cancelled_agent)
        assert result.head() == "reproduced: 2 step(s) matched"
        end = store.read_run(result.new_run_id)[-1].payload
        assert (end["status"], end["error"]["type"], end["verdict"]["reproduced"]) == (
            "cancelled", "KeyboardInterrupt", True)
        assert replayer.replay(ids[failed], failing_agent).head() == "reproduced: 1 step(s) matched"

        # a real difference is still the first divergence
        assert _outcome(replayer.replay(ids[cancelled], carried_on)) == (
            False, 2, "outcome", "every step matched, but the recorded run ended cancelled and the replay ended ok")
        assert _outcome(replayer.replay(ids[failed], finishing_agent)) == (
            False, 1, "outcome", "every step matched, but the recorded run ended error and the replay ended ok")
        assert _outcome(replayer.replay(ids[failed], other_failure)) == (
            False, 1, "outcome", "every step matched and both runs ended error, but the recorded run raised "
            "RuntimeError: the rows were wrong and the replay raised ValueError: the rows were wrong (differs in type)")
    finally:
        store.close()


def failing_at_once(run):
    raise RuntimeError("no rows")


def test_error_whose_message_was_not_exported_is_compared_by_type(backend, tmp_path):  # noqa: F811
    """Exported without --otlp-content, the run's error message is not sent: the imported run keeps its
    type, and the replay is compared by that type."""
    source = backend(tmp_path / "source")
    try:
        with Recorder(source, policy=Policy.from_text(POLICY)).run(agent="bot", principal="agent:bot") as run:
            failing_at_once(run)
    except RuntimeError:
        pass
    source.close()
    ids = _export_import(tmp_path / "source", [run.run_id], tmp_path, "target", backend, False)
    store = open_store(tmp_path / "target")
    try:
        assert store.read_run(ids[run.run_id])[-1].payload["error"] == {
            "type": "RuntimeError",
            "message": "the error message was not exported (sealbox export --otlp without --otlp-content)"}
        replayer = Replayer(store)
        assert replayer.replay(ids[run.run_id], failing_at_once).head() == "reproduced: 0 step(s) matched"
        got = _outcome(replayer.replay(ids[run.run_id], lambda run: int("x")))
        assert got == (False, 0, "outcome", "every step matched and both runs ended error, but the recorded run "
                       "raised RuntimeError (its message was not exported) and the replay raised ValueError: invalid "
                       "literal for int() with base 10: 'x' (differs in type)")
    finally:
        store.close()


def _future_cancelled():
    import concurrent.futures

    future = concurrent.futures.Future()
    future.cancel()
    return future.result()  # concurrent.futures.CancelledError: an Exception, not a cancellation of the agent


def future_cancelled_agent(run):
    run.call_tool("db", "read", {}, lambda: "rows")
    run.call_tool("pool", "job", {}, _future_cancelled)


def test_a_run_ended_by_concurrent_futures_cancelled_error_replays_as_the_error_it_was(backend, tmp_path):  # noqa: F811
    """concurrent.futures.CancelledError (a cancelled Future's result()) is an Exception: the recorder ends
    the run ``error`` with it, and its replay (the error served again, named ...CancelledError) ends
    ``error`` too, not ``cancelled`` (which is only for KeyboardInterrupt, asyncio.CancelledError and
    GeneratorExit, the BaseExceptions the recorder ends a run cancelled for)."""
    import concurrent.futures

    source = backend(tmp_path / "source")
    try:
        with Recorder(source, policy=Policy.from_text(POLICY)).run(agent="bot", principal="agent:bot") as run:
            future_cancelled_agent(run)
    except concurrent.futures.CancelledError:
        pass
    assert source.read_run(run.run_id)[-1].payload["status"] == "error"
    result = Replayer(source).replay(run.run_id, future_cancelled_agent)
    assert result.head() == "reproduced: 2 step(s) matched"
    end = source.read_run(result.new_run_id)[-1].payload
    assert (end["status"], end["verdict"]["reproduced"]) == ("error", True)
    source.close()
