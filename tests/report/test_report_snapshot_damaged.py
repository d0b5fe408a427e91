"""A run whose snapshot was changed below Sealbox: the store refuses the snapshot (its bytes no
longer hash to its fingerprint), and the report says so instead of showing no snapshot silently."""

from __future__ import annotations

import sqlite3

import pytest

import sealbox
from sealbox.canonical import canonical_bytes
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
from sealbox.report import build_report, render_html, render_markdown
from sealbox.snapshot import Snapshot

NOW = "2026-01-01T00:00:00Z"
SAID = ("the snapshot could not be shown: its stored content does not match its fingerprint "
        "(tampered or damaged; run `sealbox verify`)")


@pytest.fixture
def damaged(tmp_path):
    path = tmp_path / "store"
    store = sealbox.init_store(path)
    with Recorder(store, policy=ALLOW_ALL).run(agent="a", snapshot=Snapshot(model={"provider": "p", "name": "safe"})) as run:
        run.note("n")
    fp = store.read_run(run.run_id)[0].payload["snapshot"]
    store.close()
    db = sqlite3.connect(path / "sealbox.db")
    db.execute("DROP TRIGGER snapshots_no_update")
    db.execute("UPDATE snapshots SET content = ? WHERE fingerprint = ?",
               (canonical_bytes({"model": {"provider": "p", "name": "forged"}}), fp))
    db.commit()
    db.close()
    store = sealbox.open_store(path)
    yield store, run.run_id, fp
    store.close()


def test_the_report_says_a_damaged_snapshot_could_not_be_shown(damaged):
    store, run_id, fp = damaged
    report = build_report(store, run_id, now=NOW)
    assert report.snapshot is None
    assert report.snapshot_problem == SAID
    text = render_markdown(report)
    section = text.split("## Configuration snapshot\n\n", 1)[1].split("## Verification", 1)[0]
    assert section == f"{fp}\n\n**{SAID.replace('`', chr(92) + '`')}**\n\n"
    assert "forged" not in text
    page = render_html(report)
    assert (f'<h2>Configuration snapshot</h2><p class="muted">{fp}</p>'
            f'<p><span class="badge bad">NOT SHOWN</span> {SAID}</p><h2>Verification</h2>') in page
    assert "forged" not in page


def test_an_intact_snapshot_has_no_problem(damaged, tmp_path):
    store = sealbox.init_store(tmp_path / "ok")
    with Recorder(store, policy=ALLOW_ALL).run(agent="a", snapshot=Snapshot(model={"provider": "p", "name": "safe"})) as run:
        run.note("n")
    report = build_report(store, run.run_id, now=NOW)
    assert report.snapshot_problem is None and '"name": "safe"' in render_markdown(report)
    assert "could not be shown" not in render_html(report)
    store.close()
