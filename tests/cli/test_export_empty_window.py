"""`sealbox export --since 1d --until 2d -o x.sbx` (the bounds swapped) said "no run matches the
selection", as if the store held none in that window; `runs list`, `calls` and `approvals list` say
that no time is in such a window. export now says so too, before the store is opened."""

from __future__ import annotations

import subprocess
import sys

import pytest

import sealbox


@pytest.mark.parametrize("mode", [("-o", "x.sbx"), ("--parquet", "x.parquet"), ("--otlp", "http://127.0.0.1:9")])
def test_an_export_window_no_time_is_in_is_one_error_line(tmp_path, mode) -> None:
    sealbox.init_store(tmp_path / "s").close()
    res = subprocess.run([sys.executable, "-m", "sealbox.cli.main", "export", "--since", "2026-12-02",
                          "--until", "2026-12-01", *mode, "-s", tmp_path / "s"], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120)
    assert (res.returncode, res.stdout) == (2, "")
    assert res.stderr == ("error: --until '2026-12-01' (2026-12-01T00:00:00.000000Z) is not after --since '2026-12-02' "
                          "(2026-12-02T00:00:00.000000Z): no time is in that window (--since is inclusive, --until "
                          "exclusive: for the whole of one day, give --until the next day)\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]
