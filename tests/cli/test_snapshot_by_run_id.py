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


def test_a_run_that_pinned_no_snapshot_says_so(tmp_path) -> None:
    """The id of a run recorded without a snapshot (``recorder.run(snapshot=None)``, an errored run of
    an agent that never pinned one) was answered "is not a snapshot fingerprint (sha256: and up to 64
    hex digits) or a prefix of one", as if the id were mistyped; it now says the run has none."""
    store = sealbox.init_store(tmp_path / "s")
    with Recorder(store, policy=sealbox.policies.ALLOW_ALL).run(agent="bot") as run:
        run.note("hello")
    store.close()
    rid = run.run_id
    for args, option, given in ((("show", rid), "FINGERPRINT", rid), (("diff", rid, rid), "A", rid),
                                (("diff", "sha256:" + "0" * 64, rid[:13]), "B", rid[:13])):
        proc = sb("snapshot", *args, "-s", tmp_path / "s")
        assert (proc.returncode, proc.stdout, proc.stderr) == (
            2, "", f"error: {option} {given!r} is a run, not a snapshot: run {rid} was recorded without a "
                   "snapshot (recorder.run(snapshot=...) pins one)\n"), args


def test_the_readme_says_what_a_run_id_gets() -> None:
    """README said `snapshot show|diff` "take a fingerprint prefix of at least 8 hex digits, or a run id as
    above"; a run id is refused (the tests above), with the run's fingerprint named. The README's sentence
    must say so, not promise a run id is taken."""
    from pathlib import Path

    text = " ".join((Path(__file__).parents[2] / "README.md").read_text().split())
    start = text.index("(`snapshot show|diff` take")
    sentence = text[start:text.index(")", text.index("digits", start)) + 1]
    assert "or a run id as above" not in sentence
    assert sentence == ("(`snapshot show|diff` take a fingerprint prefix of at least 8 hex digits; given a run id "
                        "instead, they refuse it and name the snapshot that run ran under, to give in its place.)")
