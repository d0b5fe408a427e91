"""A --match regex holding a byte that is not UTF-8 (it decodes to a lone surrogate) matched nothing and the
command said "no tool calls match", exit 0, where every other filter (--agent, --tool, --run) refuses such a
value: no recorded text can hold it. parse_match now refuses it as they do (ConfigError; one error line,
exit 2)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import sealbox
from sealbox.errors import ConfigError
from sealbox.policies import ALLOW_ALL
from sealbox.query import parse_match
from sealbox.recorder import Recorder


def test_parse_match_refuses_a_lone_surrogate():
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        parse_match("arguments.query~\udcff")
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        parse_match(("arguments.query", "a\udcffb"))
    assert parse_match("arguments.query~(?i)delete").text == "arguments.query~(?i)delete"


def test_calls_match_with_a_non_utf8_byte_is_one_error_line(tmp_path):
    store = sealbox.init_store(tmp_path / "store")
    with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
        run.call_tool("db", "q", {"query": "x"}, lambda **_k: 1)
    store.close()
    out = subprocess.run([sys.executable, "-m", "sealbox.cli.main", "calls", "--match", b"arguments.query~\xff".decode(
        "utf-8", "surrogateescape"), "-s", str(tmp_path / "store")], capture_output=True, text=True)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("error: ") and out.stderr.count("\n") == 1 and "not UTF-8 text" in out.stderr
