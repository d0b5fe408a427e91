"""A blob whose content was changed below Sealbox (bytes that are not JSON, a TEXT that is not
UTF-8): `sealbox export` says which blob in one line (exit 2), instead of "internal error:
JSONDecodeError / OperationalError: Could not decode to UTF-8 column 'content'" (exit 70)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from store_testkit import Sample, closing_db, tamper


@pytest.mark.parametrize("content", ["x'7b22'", "CAST(x'ff41' AS TEXT)"], ids=["not-json", "text-not-utf8"])
def test_export_names_the_damaged_blob(sample: Sample, tmp_path, content: str) -> None:
    with closing_db(sample.path) as db:
        ref = db.execute("SELECT min(ref) FROM blobs").fetchone()[0]
    tamper(sample.path, f"UPDATE blobs SET content = {content} WHERE ref = '{ref}'")
    res = subprocess.run([sys.executable, "-m", "sealbox.cli.main", "export", "-s", str(sample.path),
                          "-o", str(tmp_path / "out.sbx")], capture_output=True, text=True)
    assert (res.returncode, res.stderr.splitlines()) == (2, [
        f"error: blob {ref} is damaged (its content is not JSON): the store was changed below Sealbox "
        "(run `sealbox verify`)"]), res.stderr
    assert not (tmp_path / "out.sbx").exists()


def test_export_refuses_a_run_holding_an_event_changed_below_sealbox(sample: Sample, tmp_path) -> None:
    # Regression: `sealbox export RUN` of a run one of whose events was edited in the database
    # ("%test%" -> "%tezt%" in a DELETE's arguments) wrote the bundle and said "proven against the
    # checkpoint of size N (signed now)", exit 0; the bundle then fails `sealbox verify`
    # (inclusion_proof, chain_broken): evidence that cannot verify, handed over without a word.
    leaf, run_id, run_seq, kind = next(r for r in sample.rows if r[1] == sample.runs[0] and r[2] == 2)
    with closing_db(sample.path) as db:
        raw = bytes(db.execute("SELECT raw FROM events WHERE leaf_index = ?", (leaf,)).fetchone()[0])
    changed = raw.replace(b'"principal":"', b'"principal":"x', 1)  # still valid JSON, of another principal
    assert changed != raw
    tamper(sample.path, ("UPDATE events SET raw = ? WHERE leaf_index = ?", (changed, leaf)))
    res = subprocess.run([sys.executable, "-m", "sealbox.cli.main", "export", "-s", str(sample.path), run_id,
                          "-o", str(tmp_path / "out.sbx")], capture_output=True, text=True)
    assert (res.returncode, res.stdout, res.stderr.splitlines()) == (2, "", [
        f"error: event leaf {leaf} (run {run_id}, run_seq {run_seq}, {kind}) no longer hashes to its recorded leaf "
        "hash: the store was changed below Sealbox, and a bundle of it would not verify (run `sealbox verify`)"]), \
        res.stderr
    assert not (tmp_path / "out.sbx").exists()
    # the other runs still export
    res = subprocess.run([sys.executable, "-m", "sealbox.cli.main", "export", "-s", str(sample.path),
                          sample.runs[1], "-o", str(tmp_path / "other.sbx")], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
