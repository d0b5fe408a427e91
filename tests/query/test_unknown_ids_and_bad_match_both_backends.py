"""On each backend (SQLite, and PostgreSQL when SEALBOX_TEST_POSTGRES_URL is set): store.query_calls with a
run id that names nothing echoes it cut to 40 characters and '…' (it was echoed whole: a pasted file, one
100 KB message), and a --match regex holding a lone surrogate (a non-UTF-8 byte of a command line) is a
ConfigError instead of matching nothing."""

from __future__ import annotations

import pytest

from sealbox.errors import ConfigError

LONG = "0" * 100_000


def test_a_long_unknown_run_id_is_cut(store):
    with pytest.raises(ConfigError) as info:
        store.query_calls(run_id=LONG)
    assert str(info.value) == f"run_id: no run '{LONG[:40]}…' in this store"


def test_a_short_unknown_run_id_reads_as_before(store):
    with pytest.raises(ConfigError) as info:
        store.query_calls(run_id="zzzz-not-a-run")
    assert str(info.value) == "run_id: no run 'zzzz-not-a-run' in this store"


def test_a_match_holding_a_lone_surrogate_is_refused(store):
    with pytest.raises(ConfigError, match="is not UTF-8 text"):
        store.query_calls(match="arguments.query~\udcff")
    assert store.query_calls(match="arguments.query~.") != []  # a good regex still matches
