"""A bundle (``sealbox export -o``) holds only the log's signed events, so it cannot say that a run
without ``run.ended`` is ``interrupted`` (its recording process died: derived when read, never
written, docs/recording.md): a run listed ``interrupted`` and one listed ``running`` look alike in it
(``sealbox verify``: "has no run.ended: it was open when exported"). The export's own report says
what ``runs list`` said of each such run at export (text and ``--json`` ``open_runs``). Real child
process SIGKILLed inside a tool, both backends."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from test_import_vs_live import backend  # noqa: F401 - backend is a fixture
from test_otlp_interrupted_run import CHILD
from test_otlp_roundtrip import _sb

from sealbox import open_store
from sealbox.policy import ALLOW_ALL
from sealbox.recorder import Recorder


def test_an_export_reports_the_open_runs_with_the_status_runs_list_gives(backend, tmp_path):
    source = tmp_path / "source"
    backend(source).close()
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(source)], stdout=subprocess.PIPE, text=True)
    try:
        dead = child.stdout.readline().strip()
        assert child.stdout.readline().strip() == "in the tool"
    finally:
        child.kill()
        child.wait()
    with open_store(source) as store:
        deadline = time.monotonic() + 60  # the server notices the dead client's connection (PostgreSQL)
        while store.get_run(dead)["status"] != "interrupted" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert store.get_run(dead)["status"] == "interrupted"
        with Recorder(store, ALLOW_ALL).run(agent="ended", principal="agent:bot") as ended:
            pass
        live = Recorder(store, ALLOW_ALL).run(agent="alive", principal="agent:bot").start()
        try:
            listed = _sb("runs", "list", "-s", source, "--json")
            assert {r["run_id"]: r["status"] for r in json.loads(listed.stdout) if r["run_id"] != "system"} == {
                dead: "interrupted", ended.run_id: "ended", live.run_id: "running"}
            out = _sb("export", dead, ended.run_id, live.run_id, "-s", source, "-o", tmp_path / "a.sbx", "--json")
            assert out.returncode == 0, out.stderr
            assert json.loads(out.stdout)["open_runs"] == {dead: "interrupted", live.run_id: "running"}
            out = _sb("export", dead, ended.run_id, live.run_id, "-s", source, "-o", tmp_path / "b.sbx")
            assert out.returncode == 0, out.stderr
            assert out.stdout.startswith(f"Wrote {tmp_path / 'b.sbx'}: ")
            assert (f"\n2 runs were open when exported (no run.ended in the bundle): {dead} interrupted (its "
                    f"recording process had died), {live.run_id} running.\n") in out.stdout
        finally:
            live.end("ok")
    check = _sb("verify", tmp_path / "a.sbx", "--json")
    notes = json.loads(check.stdout)["notes"]
    assert [n for n in notes if "run.ended" in n] == [
        f"run {dead} has no run.ended: it was open when exported (last event policy.decision), or its last events were "
        "left out", f"run {live.run_id} has no run.ended: it was open when exported (last event run.started), or "
        "its last events were left out"]
