"""An unknown run id (or snapshot fingerprint) was echoed in full in the error message however long it was:
`sealbox runs show "$(cat file)"` printed one 100 KB line. Approval ids were cut since 30d2b80; run ids now
are too, by every command taking one (and the Python API's ConfigError): their first 40 characters and `…`,
one `error:` line, exit 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

import sealbox
from sealbox.errors import ConfigError
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder

LONG = "0" * 100_000
SHOWN = f"'{LONG[:40]}…'"


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("ids") / "store"
    store = sealbox.init_store(path)
    with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
        run.note("one")
    store.close()
    (path.parent / "fixed.yaml").write_text("version: 1\nrules:\n  - id: all\n    match: {tool: '*'}\n    effect: allow\n")
    return path


@pytest.mark.parametrize("args", [
    ["runs", "show", LONG],
    ["calls", "--run", LONG],
    ["report", LONG, "-o", "OUT/r.md"],
    ["export", LONG, "-o", "OUT/x.sbx"],
    ["export", LONG, "--otlp", "OUT/x.json"],
    ["replay", LONG, "--agent", "os:getcwd"],
    ["whatif", "--policy", "FIXED", LONG],
    ["snapshot", "show", "sha256:" + "a" * 100_000],
], ids=lambda a: " ".join(x if len(x) < 50 else "LONG" for x in a[:2]))
def test_a_long_unknown_run_id_is_cut_in_the_error(store_path, tmp_path, args):
    argv = [str(tmp_path) + x[3:] if x.startswith("OUT/") else str(store_path.parent / "fixed.yaml") if x == "FIXED"
            else x for x in args]
    out = subprocess.run([sys.executable, "-m", "sealbox.cli.main", *argv, "-s", str(store_path)],
                         capture_output=True, text=True)
    assert out.returncode == 2, out.stderr[:300]
    assert out.stderr.startswith("error: ") and out.stderr.count("\n") == 1, out.stderr[:300]
    assert len(out.stderr) < 400, out.stderr[:300]
    assert "…" in out.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_python_api_cuts_it_too(store_path):
    store = sealbox.open_store(store_path, readonly=True)
    try:
        with pytest.raises(ConfigError) as info:
            store.query_calls(run_id=LONG)
    finally:
        store.close()
    assert len(str(info.value)) < 400 and SHOWN in str(info.value)
