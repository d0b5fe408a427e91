"""A stdio client that stopped reading the gateway's stdout but keeps its stdin open: a disconnect, and the
gateway exits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import sealbox

from .conftest import toy_args


def test_a_stdio_client_that_stops_reading_but_keeps_stdin_open_lets_the_gateway_exit(tmp_path):
    """A client that closed its end of the gateway's stdout (it stopped reading) but not its stdin: the session
    ended (the call recorded, the run ended), but the gateway then waited for good in a read of stdin that no
    line would end (an anyio worker thread, which the cancellation waited for), its upstream running and its
    store not closed (no final checkpoint), until the client closed stdin too or was killed. It now exits 0
    once the session has ended, its store closed."""
    sealbox.init_store(tmp_path / "store").close()
    config = tmp_path / "gateway.yaml"
    config.write_text(f"""version: 1
store: ./store
policy: ALLOW_ALL
upstreams:
  - id: toy
    command: {json.dumps(sys.executable)}
    args: {json.dumps(toy_args())}
""")
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH")}
    sealbox_cli = str(Path(sys.executable).parent / "sealbox")
    proc = subprocess.Popen([sealbox_cli, "gateway", "serve", "--config", str(config)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
        proc.stdin.write(json.dumps(init).encode() + b"\n")
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == 1
        proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n'
                         b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"toy__slow",'
                         b'"arguments":{"seconds":0.5}}}\n')
        proc.stdin.flush()
        proc.stdout.close()  # stops reading; stdin stays open
        code = proc.wait(timeout=30)  # it waited for good (until the client closed stdin)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        proc.stdin.close()
    stderr = proc.stderr.read().decode()
    proc.stderr.close()
    assert code == 0, stderr
    store = sealbox.open_store(tmp_path / "store")
    try:
        kinds = [(e.kind, e.payload.get("ok")) for e in store.read_range(0, store.size()) if e.run_id != "system"]
    finally:
        store.close()
    assert kinds[0][0] == "run.started" and kinds[-1][0] == "run.ended"
    assert [k for k in kinds if k[0] == "tool.result"] == [("tool.result", True)]
    verified = subprocess.run([sealbox_cli, "verify", "--store", str(tmp_path / "store")], capture_output=True,
                              text=True, env=env, timeout=60)
    assert verified.returncode == 0 and "not covered by a signed checkpoint" not in verified.stdout + verified.stderr
