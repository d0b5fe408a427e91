"""A run whose recording process died (listed ``interrupted``, docs/recording.md) is exported to OTLP
with ``sealbox.run.status`` ``interrupted``, not ``running``, and imported from that export it is
listed ``interrupted (imported)``. Real child process SIGKILLed inside a tool, real OTLP/HTTP endpoint
on 127.0.0.1, both backends."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

from test_import_vs_live import _export, backend  # noqa: F401 - backend is a fixture
from test_otlp_roundtrip import _sb

from sealbox import open_store
from sealbox.interop.otlp import build_otlp

CHILD = textwrap.dedent("""
    import sys, time
    from sealbox import open_store
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder

    run = Recorder(open_store(sys.argv[1]), ALLOW_ALL).run(agent="doomed", principal="agent:bot").start()
    print(run.run_id, flush=True)

    def blocks(**kwargs):
        print("in the tool", flush=True)
        time.sleep(3600)

    run.call_tool("fs", "read_file", {"path": "/data/x"}, blocks, call_id="c1")
""")


def _json(*args):
    out = _sb(*args, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_an_interrupted_run_is_exported_and_imported_interrupted(backend, tmp_path):
    backend(tmp_path / "source").close()
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path / "source")], stdout=subprocess.PIPE, text=True)
    try:
        run_id = child.stdout.readline().strip()
        assert child.stdout.readline().strip() == "in the tool"
    finally:
        child.kill()
        child.wait()
    with open_store(tmp_path / "source", readonly=True) as store:
        deadline = time.monotonic() + 60  # the server notices the dead client's connection (PostgreSQL)
        while store.get_run(run_id)["status"] != "interrupted" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert store.get_run(run_id)["status"] == "interrupted"
        spans = build_otlp(store, [run_id]).spans
        assert [s.attributes["sealbox.run.status"] for s in spans
                if s.attributes.get("gen_ai.operation.name") == "invoke_agent"] == ["interrupted"]
    file = _export(tmp_path / "source", [run_id], tmp_path)
    backend(tmp_path / "live").close()
    summary = _json("import", "-s", tmp_path / "live", file)
    [imported] = summary["runs"]
    rows = {r["run_id"]: r for r in _json("runs", "list", "-s", tmp_path / "live")}
    assert (rows[imported]["status"], rows[imported]["ending"], rows[imported]["imported"]) == (
        "interrupted", None, True)
    assert [r["run_id"] for r in _json("runs", "list", "-s", tmp_path / "live", "--status", "interrupted")] == [imported]
    assert [r["run_id"] for r in _json("runs", "list", "-s", tmp_path / "live", "--status", "ok")] == []
