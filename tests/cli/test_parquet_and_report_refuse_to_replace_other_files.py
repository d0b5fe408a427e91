"""`sealbox export --parquet FILE` and `sealbox report RUN -o FILE` replaced whatever FILE was (a
user's source file, notes) without a word, where `export -o` refuses. Both now replace only their
own earlier output (a Parquet export of Sealbox's calls; an incident report, Markdown or HTML) or an
empty file; any other existing file is refused with one error line before the store is read,
unless --force is given."""

from __future__ import annotations

import subprocess
import sys

import pyarrow.parquet as pq
import pytest

import sealbox
from sealbox.interop.parquet import CALL_FIELDS
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder

SOURCE = b'print("my code")\n'


def sb(*args):
    return subprocess.run([sys.executable, "-m", "sealbox.cli.main", *map(str, args)], capture_output=True, text=True)


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "store"
    store = sealbox.init_store(path)
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot", principal="agent:bot") as run:
        run.call_tool("fs", "read", {"path": "/tmp/x"}, lambda path: "ok")
        run_id = run.run_id
    store.close()
    return path, run_id


def _leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_parquet_refuses_to_replace_a_file_that_is_not_a_parquet_export(store, tmp_path):
    path, _ = store
    source = tmp_path / "main.py"
    source.write_bytes(SOURCE)
    out = sb("export", "--parquet", source, "-s", path)
    assert (out.returncode, out.stdout, out.stderr) == (2, "", (
        f"error: cannot write {source}: it exists and is not a Sealbox Parquet export (give --force to replace "
        "it; nothing was written)\n"))
    assert source.read_bytes() == SOURCE and _leftovers(tmp_path) == []
    other = tmp_path / "other.parquet"  # someone's own Parquet table is not ours either
    import pyarrow as pa
    pq.write_table(pa.table({"x": [1, 2]}), other)
    before = other.read_bytes()
    assert sb("export", "--parquet", other, "-s", path).returncode == 2
    assert other.read_bytes() == before
    forced = sb("export", "--parquet", source, "--force", "-s", path)
    assert (forced.returncode, forced.stdout) == (0, f"Wrote {source}: 1 tool call of 1 run.\n"), forced.stderr
    assert pq.read_table(source).column("tool").to_pylist() == ["read"]


def test_parquet_replaces_its_own_export_and_an_empty_file(store, tmp_path):
    path, _ = store
    table = tmp_path / "calls.parquet"
    assert sb("export", "--parquet", table, "-s", path).returncode == 0
    assert pq.read_schema(table).metadata == {b"sealbox.export": b"calls"}
    again = sb("export", "--parquet", table, "-s", path)
    assert (again.returncode, again.stdout) == (0, f"Wrote {table}: 1 tool call of 1 run.\n"), again.stderr
    # an export written before the mark: Sealbox's columns exactly
    import pyarrow as pa
    old = tmp_path / "old.parquet"
    pq.write_table(pa.table({name: [None] for name, _ in CALL_FIELDS}), old)
    assert sb("export", "--parquet", old, "-s", path).returncode == 0
    assert pq.read_table(old).column("tool").to_pylist() == ["read"]
    empty = tmp_path / "empty.parquet"
    empty.write_bytes(b"")
    assert sb("export", "--parquet", empty, "-s", path).returncode == 0
    assert pq.read_table(empty).num_rows == 1


def test_report_refuses_to_replace_a_file_that_is_not_a_report(store, tmp_path):
    path, run_id = store
    for name in ("main.py", "notes.md", "page.html"):
        target = tmp_path / name
        target.write_bytes(SOURCE)
        out = sb("report", run_id, "-o", target, "--format", "md", "-s", path)
        assert (out.returncode, out.stdout, out.stderr) == (2, "", (
            f"error: cannot write {target}: it exists and is not a Sealbox incident report (give --force to "
            "replace it; nothing was written)\n"))
        assert target.read_bytes() == SOURCE
    assert _leftovers(tmp_path) == []
    forced = sb("report", run_id, "-o", tmp_path / "notes.md", "--force", "-s", path)
    assert forced.returncode == 0, forced.stderr
    assert (tmp_path / "notes.md").read_text().startswith(f"# Sealbox incident report: run `{run_id}`\n")


def test_report_replaces_an_earlier_report_and_an_empty_file(store, tmp_path):
    path, run_id = store
    for name in ("incident.md", "incident.html"):
        target = tmp_path / name
        assert sb("report", run_id, "-o", target, "-s", path).returncode == 0
        first = target.read_bytes()
        again = sb("report", run_id, "-o", target, "-s", path)
        assert again.returncode == 0 and again.stdout.startswith(f"wrote {target} ("), again.stderr
        assert target.read_bytes()[:40] == first[:40]
    empty = tmp_path / "empty.md"
    empty.write_bytes(b"")
    assert sb("report", run_id, "-o", empty, "-s", path).returncode == 0
    assert empty.read_text().startswith("# Sealbox incident report: run ")


def test_report_force_goes_with_o(store):
    path, run_id = store
    out = sb("report", run_id, "--force", "-s", path)
    assert (out.returncode, out.stdout, out.stderr) == (2, "", "error: --force goes with -o FILE\n")
