"""``sealbox snapshot show --json FP`` prints a snapshot's exact canonical bytes (what ``sealbox replay
--snapshot NOW.json`` takes). For a snapshot holding a whole-number float beyond 2**53 (``seed: 1e16``),
stored as its digits and read back as an int outside I-JSON's range, it ended with ``error: integer
outside ±(2**53 - 1) …``; it now prints the stored bytes, whose SHA-256 is the fingerprint."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import sealbox
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
from sealbox.snapshot import Snapshot

SEALBOX = str(Path(sys.executable).parent / "sealbox")


def test_show_json_prints_the_canonical_bytes_of_such_a_snapshot(tmp_path):
    snap = Snapshot(model={"name": "m", "parameters": {"seed": 1e16}})
    store = sealbox.init_store(tmp_path / "s")
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot", snapshot=snap) as run:
        run.call_tool("local", "t", {"a": 1}, lambda a: a)
    store.close()
    done = subprocess.run([SEALBOX, "snapshot", "show", "--json", snap.fingerprint, "--store", str(tmp_path / "s")],
                          capture_output=True, text=True)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == ('{"extra":{},"knowledge":[],"limits":{},"model":{"name":"m","parameters":{"seed":'
                           '10000000000000000}},"policy":null,"skills":[],"system_prompt":null,"tools":[]}\n')
    assert "sha256:" + hashlib.sha256(done.stdout[:-1].encode()).hexdigest() == snap.fingerprint
    (tmp_path / "now.json").write_text(done.stdout)
    (tmp_path / "snap_agent.py").write_text("def agent(run):\n    run.call_tool('local', 't', {'a': 1}, lambda a: a)\n")
    replayed = subprocess.run([SEALBOX, "replay", run.run_id, "--agent", "snap_agent:agent", "--snapshot", "now.json",
                               "--store", str(tmp_path / "s")], capture_output=True, text=True, cwd=tmp_path)
    assert (replayed.returncode, replayed.stderr) == (0, "")
    assert replayed.stdout.startswith("reproduced: 1 step(s) matched; replay run ")
