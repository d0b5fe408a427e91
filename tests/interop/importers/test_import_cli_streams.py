"""What ``sealbox import`` prints when its stderr is not a terminal (a script, CI, ``2> log``).

Found by importing files of 1 MiB or more with stderr redirected: the default progress bar (rich,
transient) printed an empty line on stderr, so a refused file gave two lines, the first empty,
instead of one ``error:`` line, and a successful import left a stray newline in the log. The bar is
now shown by default only when stderr is a terminal (``--progress`` still forces it).
"""

from __future__ import annotations

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
