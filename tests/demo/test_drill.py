"""The incident drill (``sealbox demo``), end to end on real parts: the real mcp-server-sqlite and
mcp-server-time in cached venvs, the gateway as a subprocess launched by an OpenAI Agents SDK agent
over stdio MCP, an approver answering from a second process. The facts of the incident are asserted
from the record.

Needs the upstream venvs (built on first use from PyPI): without PyPI the test skips with the
reason, except in CI (``CI=true``), where it fails.
"""

from __future__ import annotations

import os

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
