"""What ``sealbox import`` prints when its stderr is not a terminal (a script, CI, ``2> log``).

Found by importing files of 1 MiB or more with stderr redirected: the default progress bar (rich,
transient) printed an empty line on stderr, so a refused file gave two lines, the first empty,
instead of one ``error:`` line, and a successful import left a stray newline in the log. The bar is
now shown by default only when stderr is a terminal (``--progress`` still forces it).
"""

from __future__ import annotations

import json
import subprocess
import sys

from import_helpers import corpus

TAU = "tau-bench-openai-messages/gpt-4o-airline.subset-0-1-3-6-11.json"


def _sb(*args):
    return subprocess.run([sys.executable, "-m", "sealbox.cli.main", *map(str, args)], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=300)


def test_a_large_file_gives_one_error_line_or_nothing_on_a_stderr_that_is_not_a_terminal(tmp_path):
    st = tmp_path / "s"
    assert _sb("init", st).returncode == 0
    data = b" " * (1 << 20) + corpus(TAU).read_bytes()  # leading whitespace: still the same JSON, over 1 MiB
    big = tmp_path / "big.json"
    big.write_bytes(data)
    cut = tmp_path / "cut.json"
    cut.write_bytes(data[:(1 << 20) + 9])  # truncated in its first item

    bad = _sb("import", "-s", st, cut)
    assert (bad.returncode, bad.stdout, bad.stderr) == (
        2, "", "error: cut.json is not valid JSON (line 3, column 4: Expecting property name enclosed in double "
               "quotes)\n")
    ok = _sb("import", "-s", st, big)
    assert ok.returncode == 0 and ok.stderr == ""
    assert ok.stdout.startswith("imported 5 run(s), ")
    runs = _sb("runs", "list", "-s", st, "--json")
    assert runs.returncode == 0 and runs.stdout.count('"run_id"') == 6  # the 5 imported and the system run


def test_a_bundle_parquet_gzip_or_utf16_file_is_named_for_what_it_is_and_nothing_is_written(tmp_path):
    # was: each gave "error: FILE is not UTF-8 text (byte N); no importable format is binary", which says
    # neither that an export bundle is verified, not imported, nor how to read a compressed or UTF-16 file
    import gzip

    st = tmp_path / "s"
    assert _sb("init", st).returncode == 0
    src = corpus("swe-agent-traj/function_calling_simple.traj.json")
    ok = _sb("import", "-s", st, src, "--json")
    assert ok.returncode == 0, ok.stderr
    run_id = json.loads(ok.stdout)["runs"][0]
    bundle, table = tmp_path / "incident.sbx", tmp_path / "calls.parquet"
    assert _sb("export", "-s", st, run_id, "-o", bundle).returncode == 0
    assert _sb("export", "-s", st, run_id, "--parquet", table).returncode == 0
    (tmp_path / "trace.json.gz").write_bytes(gzip.compress(src.read_bytes()))
    (tmp_path / "trace16.json").write_bytes(src.read_text(encoding="utf-8").encode("utf-16"))
    size = _size(st)
    for name, why in [
        ("incident.sbx", "is a Sealbox export bundle, which import does not read: check it with "
                         "`sealbox verify incident.sbx --key KEY`; import reads the JSON trace files of the formats "
                         "listed in `sealbox import --help`"),
        ("calls.parquet", "is a Parquet file (as `sealbox export --parquet` writes), which import does not read; "
                          "import reads the JSON trace files of the formats listed in `sealbox import --help`"),
        ("trace.json.gz", "is gzip-compressed: decompress it first (gunzip)"),
        ("trace16.json", "is UTF-16 text: convert it to UTF-8 first (iconv -f UTF-16 -t UTF-8)"),
    ]:
        res = _sb("import", "-s", st, tmp_path / name)
        assert (res.returncode, res.stdout, res.stderr) == (2, "", f"error: {name} {why}; nothing was imported\n")
    assert _size(st) == size
    assert _sb("verify", "-s", st).returncode == 0


def _size(st) -> int:
    import sealbox

    store = sealbox.open_store(st)
    try:
        return store.size()
    finally:
        store.close()
