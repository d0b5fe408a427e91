"""`sealbox snapshot show/diff` given a run id instead of a fingerprint."""

from __future__ import annotations

import subprocess
import sys

import sealbox
from sealbox.recorder import Recorder


def sb(*args):
    return subprocess.run([sys.executable, "-m", "sealbox.cli.main", *map(str, args)], capture_output=True, text=True)


def test_a_run_id_given_to_snapshot_show_or_diff_says_which_snapshot_it_ran_under(tmp_path) -> None:
    """`sealbox snapshot diff RUN_A RUN_B` (what an investigator types: the runs are what they have)
    said "A '…' is not a snapshot fingerprint" or "no snapshot '01a24305' in this store", and no
    table shows a run's snapshot. The error now names the run's fingerprint to give instead."""
    from sealbox.snapshot import Snapshot

    store = sealbox.init_store(tmp_path / "s")
    snap = Snapshot(model={"provider": "p", "name": "m"}, system_prompt="hi")
    with Recorder(store, policy=sealbox.policies.ALLOW_ALL).run(agent="bot", snapshot=snap) as run:
        run.note("hello")
    store.close()
    rid, fp = run.run_id, snap.fingerprint
    for args, option, given in ((("show", rid), "FINGERPRINT", rid), (("show", rid[:8]), "FINGERPRINT", rid[:8]),
                                (("diff", rid, fp), "A", rid), (("diff", fp, rid[:13]), "B", rid[:13])):
        proc = sb("snapshot", *args, "-s", tmp_path / "s")
        assert (proc.returncode, proc.stdout, proc.stderr) == (
            2, "", f"error: {option} {given!r} is a run, not a snapshot: run {rid} ran under snapshot {fp}\n"), args
    proc = sb("snapshot", "show", "deadbeef", "-s", tmp_path / "s")  # neither: as before
    assert (proc.returncode, proc.stderr) == (2, "error: no snapshot 'deadbeef' in this store\n")
