"""The incident drill (``sealbox demo``), end to end on real parts: the real mcp-server-sqlite and
mcp-server-time in cached venvs, the gateway as a subprocess launched by an OpenAI Agents SDK agent
over stdio MCP, an approver answering from a second process. The facts of the incident are asserted
from the record.

Needs the upstream venvs (built on first use from PyPI): without PyPI the test skips with the
reason, except in CI (``CI=true``), where it fails.
"""

from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("agents")

from sealbox.demo.agent import WRONG_DELETE  # noqa: E402
from sealbox.demo.drill import APPROVER, run_drill  # noqa: E402
from sealbox.demo.upstreams import UpstreamBuildError, server_command  # noqa: E402
from sealbox.store import open_store  # noqa: E402


@pytest.fixture(scope="module")
def drill(tmp_path_factory):
    try:
        server_command("sqlite"), server_command("time")
    except UpstreamBuildError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    out: list[str] = []
    result = run_drill(tmp_path_factory.mktemp("drill") / "ws", echo=out.append, approver_delay_s=1.5)
    return result, "\n".join(out)


def test_the_delete_removed_real_customers_as_recorded(drill):
    result, _ = drill
    assert result.delete_query == WRONG_DELETE == "DELETE FROM customers WHERE email LIKE '%test%'"
    assert result.affected_rows == 17 == result.customers_before - result.customers_after
    assert (result.customers_before, result.customers_after) == (300, 283)
    assert len(result.deleted_test) == 12
    assert sorted(e for _, e in result.deleted_real) == [
        "giulia.testa@libero.it", "marc.testard@orange.fr", "orders@latestgadgets.com",
        "purchasing@fastestship.co", "sofia.testori@mail.com"]


def test_the_approval_was_signed_by_the_shared_oncall_identity_after_a_wait(drill):
    result, _ = drill
    assert result.approver == APPROVER == "ops-oncall"
    assert result.signature == "verified"
    assert "shared_identity" in result.flags
    assert result.wait_s is not None and result.wait_s >= 1.5  # the approver read it for 1.5 s first


def test_the_record_holds_the_whole_story_in_one_run(drill):
    result, _ = drill
    store = open_store(result.workdir / "store", readonly=True)
    try:
        events = store.read_run(result.run_id)
        kinds = [e.kind for e in events]
        calls = [store.resolve(e.payload) for e in events if e.kind == "tool.call"]
        answered = [e for e in events if e.kind == "approval.answered"]
        requested = [e.payload for e in events if e.kind == "approval.requested"]
    finally:
        store.close()
    assert kinds[0] == "run.started" and kinds[-1] == "run.ended"
    assert kinds.count("model.call") == 4 and kinds.count("state.saved") == 3
    assert [(c["server"], c["tool"]) for c in calls] == [("db", "read_query"), ("time", "get_current_time"),
                                                         ("db", "write_query")]
    assert [c["exposed"] for c in calls] == ["db__read_query", "time__get_current_time", "db__write_query"]
    assert calls[2]["arguments"] == {"query": WRONG_DELETE}
    [req] = requested
    assert req["rule"] == "writes-need-ops" and req["ask"] == {"groups": ["ops"], "identities": []}
    [ans] = answered
    assert (ans.principal, ans.payload["identity"], ans.payload["decision"]) == ("ops-oncall", "ops-oncall", "approve")
    assert ans.payload["approval_id"] == result.approval_id
    for k in ("approval.requested", "run.suspended", "approval.answered", "run.resumed", "tool.result"):
        assert k in kinds
    assert kinds.index("approval.requested") < kinds.index("approval.answered") < kinds.index("run.resumed")
    assert result.verified


def test_the_gateway_records_each_call_under_the_step_the_model_call_gave_it(drill):
    """The SDK sends each MCP call's step and call id in _meta (sealbox/step, sealbox/call_id): the
    gateway's tool.call events are "<model step>.1" of the model call that requested them, never a
    top-level step of the gateway's own that collides with the SDK process's steps."""
    result, _ = drill
    store = open_store(result.workdir / "store", readonly=True)
    try:
        events = store.read_run(result.run_id)
    finally:
        store.close()
    models = [e for e in events if e.kind == "model.call"]
    calls = [e for e in events if e.kind == "tool.call"]
    requested = {cid: (m.step, i) for m in models for i, cid in enumerate(m.payload["tool_call_ids"], start=1)}
    assert [c.step for c in calls] == [f"{requested[c.payload['call_id']][0]}.1" for c in calls] == ["2.1", "4.1", "6.1"]
    assert [c.payload["call_id"] for c in calls] == ["call_drill_1", "call_drill_2", "call_drill_3"]
    assert result.delete_call_id == "call_drill_3"
    top = [e.step for e in events if "." not in e.step]
    assert len(top) == len(set(top)), f"two events share a top-level step: {top}"
    assert [e.step for e in events if e.kind == "state.saved"] == ["3", "5", "7"]
    # every event of a call sits at the call's step (decision, approval, suspension, result)
    for c in calls:
        related = [e for e in events if e.payload.get("call_id") == c.payload["call_id"]]
        assert {e.step for e in related} == {c.step}


def test_replay_reproduces_the_run_step_for_step(drill):
    from sealbox.cli.main import COMMANDS

    if "replay" not in COMMANDS:
        pytest.skip("`sealbox replay` does not exist in this build")
    result, out = drill
    assert f"$ sealbox replay {result.run_id} --agent sealbox.demo.drill:replay_agent" in out
    assert result.replay_reproduced is True, out
    assert result.replay_steps == 10  # 4 model calls, 3 tool calls, 3 saved states
    store = open_store(result.workdir / "store", readonly=True)
    try:
        replay = store.read_run(result.replay_run_id)
        recorded = store.read_run(result.run_id)
    finally:
        store.close()
    assert replay[0].payload["replay_of"] == result.run_id
    assert replay[-1].kind == "run.ended" and replay[-1].payload["status"] == "ok"
    assert replay[-1].payload["verdict"]["reproduced"] is True
    compared = ("model.call", "tool.call", "state.saved")
    assert [(e.step, e.kind) for e in replay if e.kind in compared] == \
        [(e.step, e.kind) for e in recorded if e.kind in compared]
    # served from the record: nothing ran again (the database is as the incident left it)
    import sqlite3

    conn = sqlite3.connect(result.workdir / "shop.db")
    try:
        assert conn.execute("SELECT count(*) FROM customers").fetchone()[0] == result.customers_after == 283
    finally:
        conn.close()


def test_whatif_with_the_fixed_policy_would_deny_the_delete(drill):
    from sealbox.cli.main import COMMANDS

    if "whatif" not in COMMANDS:
        pytest.skip("`sealbox whatif` does not exist in this build")
    result, out = drill
    assert f"$ sealbox whatif --policy fixed.yaml {result.run_id}" in out
    assert result.whatif_delete == ("require_approval", "deny", "deletes-name-the-test-domain")


def test_the_investigation_is_printed_with_the_commands_and_writes_the_reports(drill):
    result, out = drill
    run = result.run_id
    for cmd in (f"$ sealbox runs show {run}", "$ sealbox calls --tool write_query",
                f"$ sealbox report {run} -o incident.html", f"$ sealbox report {run} -o incident.md"):
        assert cmd in out
    html = (result.workdir / "incident.html").read_text(encoding="utf-8")
    md = (result.workdir / "incident.md").read_text(encoding="utf-8")
    assert "LIKE &#x27;%test%&#x27;" in html and "signature verified" in html
    assert "signature verified; counts; identity: role approver, groups ops" in md and "SHARED ACCOUNT" in md
    assert f"Workspace: {result.workdir}" in out
    # the report is opened with this platform's opener: the line said `open incident.html`, macOS's command;
    # on Linux `open` is missing or is openvt ("Couldn't get a file descriptor referring to the console")
    opener = {"darwin": "open", "win32": "start"}.get(sys.platform, "xdg-open")
    assert out.splitlines()[-1].endswith(f"; {opener} incident.html"), out.splitlines()[-1]


def test_export_replay_and_whatif_run_when_they_exist(drill):
    from sealbox.cli.main import COMMANDS

    result, out = drill
    for name in ("export", "replay", "whatif"):
        ran = [c for c in result.commands if c.startswith(f"sealbox {name} ")]
        if name in COMMANDS:
            assert ran, f"sealbox {name} exists but the drill did not run it"
        else:
            assert not ran and any(k.startswith(name) for k in result.skipped)
    failed = {k: v for k, v in result.skipped.items() if v.startswith("failed")}
    assert failed == {}


def test_the_bundle_is_verified_against_the_logs_key(drill):
    """The drill verifies its bundle with --key (without it, `sealbox verify` exits 3: the bundle's
    own key proves nothing about who signed it), and says which key it trusted."""
    from sealbox.cli.main import COMMANDS

    if "export" not in COMMANDS:
        pytest.skip("`sealbox export` does not exist in this build")
    result, out = drill
    vkey = (result.workdir / "store" / "log.vkey").read_text(encoding="utf-8").strip()
    assert "sealbox verify incident.sbx --key store/log.vkey" in result.commands
    after = out.split("$ sealbox verify incident.sbx --key store/log.vkey\n", 1)[1].splitlines()
    assert after[0].startswith("Verified: the bundle is intact. ")
    assert after[1] == f"Checkpoint signature checked against the key you gave (--key): {vkey}."


def test_demo_into_a_folder_holding_a_drill_is_a_usage_error(tmp_path):
    """A --dir that already holds a drill is the user's mistake: one error line, exit 2 (it was 1,
    the status of a drill that ran and failed to verify)."""
    import subprocess
    import sys

    (tmp_path / "store").mkdir()
    res = subprocess.run([sys.executable, "-m", "sealbox.cli.main", "demo", "--dir", str(tmp_path)],
                         capture_output=True, text=True)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr == f"error: {tmp_path} already holds a drill; pass a new --dir\n"


@pytest.mark.parametrize("name", ["policy.yaml", "fixed.yaml", "gateway.yaml", "keys", "incident.html",
                                  "incident.md", "incident.sbx"])
def test_demo_refuses_a_folder_holding_a_file_it_would_overwrite(tmp_path, name):
    """`sealbox demo --dir DIR` writes policy.yaml, fixed.yaml, gateway.yaml, keys/ and incident.*
    into DIR: a user's own file of that name is refused (one error line, exit 2), not overwritten."""
    import subprocess
    import sys

    mine = tmp_path / name
    if name == "keys":
        mine.mkdir()
        (mine / "mine.key").write_text("my key\n", encoding="utf-8")
    else:
        mine.write_text("my own file\n", encoding="utf-8")
    res = subprocess.run([sys.executable, "-m", "sealbox.cli.main", "demo", "--dir", str(tmp_path)],
                         capture_output=True, text=True)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr == (f"error: {tmp_path} already holds {name}, which the drill would overwrite; "
                          "pass a new or empty --dir\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]
    if name != "keys":
        assert mine.read_text(encoding="utf-8") == "my own file\n"


def test_demo_with_a_relative_dir_runs_in_that_folder(tmp_path):
    """`sealbox demo --dir d` (a relative path): the gateway the agent launches runs in the workspace
    and was given 'd/gateway.yaml', which it looked for as d/d/gateway.yaml: step 4 failed with
    'error: d/gateway.yaml: no such file' and 'error: internal error: ExceptionGroup: …'. The
    workspace is now made absolute first; the drill runs and names the absolute folder."""
    import subprocess
    import sys

    try:
        server_command("sqlite"), server_command("time")
    except UpstreamBuildError as exc:
        pytest.skip(str(exc))
    res = subprocess.run([sys.executable, "-m", "sealbox.cli.main", "demo", "--dir", "d"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=600)
    assert "error" not in res.stderr
    assert res.returncode == 0
    assert f"\nWorkspace: {tmp_path / 'd'}\n" in res.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]


def test_a_gateway_that_stops_at_start_is_one_clear_error(tmp_path):
    """The agent's gateway exiting before it answers (here: its config is missing) came out of the
    MCP client as 'internal error: ExceptionGroup: unhandled errors in a TaskGroup'; it is now a
    DrillError naming the gateway command (its own error line is printed above it, on stderr)."""
    import asyncio

    from sealbox.demo.drill import DrillError, _agent
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder
    from sealbox.store import init_store

    store = init_store(tmp_path / "store")
    try:
        async def go():
            async with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
                return await _agent(run, tmp_path / "missing.yaml", tmp_path)

        with pytest.raises(DrillError) as err:
            asyncio.run(go())
    finally:
        store.close()
    assert str(err.value) == (f"the gateway the agent launched (sealbox gateway serve --config "
                              f"{tmp_path / 'missing.yaml'}) closed the connection before answering; "
                              "its error is printed above")
