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
