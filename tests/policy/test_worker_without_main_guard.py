"""A script recording under a policy with an ``expensive: true`` condition, written without an
``if __name__ == "__main__":`` guard (as most quick scripts are): the condition worker was started
with multiprocessing's ``spawn``, which imports the main module again in the worker, so the worker
ran the script's recording once more and never answered; the script hung 30 s and its call was denied
``guardrail_error`` ("policy worker did not start"). The worker is now a fresh interpreter that
runs only sealbox.policy.worker: the script records its calls, decided by the condition, once."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import sealbox

POLICY = """\
version: 1
name: t
rules:
  - id: big-query
    when: 'size(call.arguments.query) > 10'
    expensive: true
    effect: deny
  - id: rest
    effect: allow
"""

SCRIPT = textwrap.dedent("""\
    import sealbox
    from sealbox import Policy
    from sealbox.recorder import Recorder, ToolDenied

    print("script body ran", flush=True)
    store = sealbox.open_store("store")
    rec = Recorder(store, policy=Policy.load("policy.yaml"))
    with rec.run(agent="bot", principal="agent:bot") as run:
        print(run.call_tool("db", "read_query", {"query": "select 1"}, lambda query: "small ok"))
        try:
            run.call_tool("db", "read_query", {"query": "select * from everything"}, lambda query: "big ran")
        except ToolDenied as exc:
            print("denied:", exc.decision.rule, exc.decision.reason_code)
    store.close()
""")


def test_a_script_without_a_main_guard_records_under_an_expensive_condition(tmp_path):
    sealbox.init_store(tmp_path / "store").close()
    (tmp_path / "policy.yaml").write_text(POLICY)
    (tmp_path / "agent.py").write_text(SCRIPT)
    out = subprocess.run([sys.executable, "agent.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert (out.returncode, out.stderr) == (0, "")
    # the script's body ran once: the worker did not import it again
    assert out.stdout == "script body ran\nsmall ok\ndenied: big-query policy_deny\n"
    listed = subprocess.run([sys.executable, "-m", "sealbox.cli.main", "calls", "--json", "-s", tmp_path / "store"],
                            capture_output=True, text=True, timeout=60)
    calls = json.loads(listed.stdout)
    assert [(c["decision"], c["rule"], c["outcome"]) for c in calls] == [
        ("allow", "rest", "ok"), ("deny", "big-query", "not_run")]
    assert len({c["run_id"] for c in calls}) == 1
