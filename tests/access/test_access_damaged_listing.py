"""An ``access.*`` event whose bytes are not JSON (changed below Sealbox: inserted past Sealbox; bytes
that are not UTF-8) does not crash ``list_grants`` /
``show_grant`` / ``sealbox access list|show``: the grants it may belong to are listed flagged ``damaged``
(the leaf), with one warning line, and the exit code of the other tamper cases (``runs list`` / ``calls``
on an altered event: 0, the warning on stderr). Before: json.JSONDecodeError (CLI: an internal error)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from identity_testkit import signed_grant  # noqa: E402
from sealbox.access import list_grants, show_grant

AGENT = "agent:deploy-bot"
SEALBOX = str(Path(sys.executable).parent / "sealbox")


#: Not JSON (not UTF-8), though SQLite's JSON functions read it (they do not check UTF-8): the SQLite
#: index of grant ids (its key ``->>``) takes it, where bytes SQLite cannot parse are refused on insert.
NOT_JSON = b'{"kind":"access.revoked","payload":{"grant_id":"g-?","step":"requested","reason":"\xff"}}'


def damage(store, raw_sql) -> int:
    """Append an ``access.revoked`` row of the system run whose bytes are not JSON; its leaf."""
    leaf = store.size()
    raw_sql(store, "INSERT INTO events (leaf_index, run_id, run_seq, kind, ts, principal, step, raw, leaf_hash)"
                   " SELECT ?, 'system', max(run_seq) + 1, 'access.revoked', '2026-12-05T00:00:00.000000Z', 'x',"
                   " '0', ?, ? FROM events WHERE run_id = 'system'", (leaf, NOT_JSON, b"\x00" * 32))
    return leaf


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([SEALBOX, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "250"})


def test_a_grant_listing_flags_the_grants_an_unreadable_access_event_may_belong_to(store, raw_sql, tmp_path):
    g1 = signed_grant(store, AGENT, "github", "create_*", None)
    g2 = signed_grant(store, AGENT, "db", "read_*", None)
    assert [(r["grant_id"], r["damaged"]) for r in list_grants(store)] == [(g1, []), (g2, [])]
    leaf = damage(store, raw_sql)
    rows = list_grants(store)
    # bytes that are not JSON name no grant: either might be the one it revoked (a check denies both)
    assert [(r["grant_id"], r["status"], r["damaged"]) for r in rows] == [(g1, "active", [leaf]), (g2, "active", [leaf])]
    shown = show_grant(store, g1)
    assert (shown["grant_id"], shown["damaged"], shown["steps"]) == (g1, [leaf], [])

    folder = str(tmp_path / "store")
    listed = cli("access", "list", "--store", folder, "--json")
    assert listed.returncode == 0, listed.stderr
    assert [(r["grant_id"], r["damaged"]) for r in json.loads(listed.stdout)] == [(g1, [leaf]), (g2, [leaf])]
    warning = listed.stderr.strip().splitlines()
    assert len(warning) == 1 and warning[0].startswith("warning: 2 grant(s) listed") and f"leaf {leaf}" in warning[0]
    table = cli("access", "list", "--store", folder)
    assert table.returncode == 0 and table.stderr == listed.stderr
    assert sum(1 for line in table.stdout.splitlines() if f"leaf {leaf}" in line) == 2
    one = cli("access", "show", g1, "--store", folder)
    assert one.returncode == 0, one.stderr
    assert f"damaged    leaf {leaf}" in one.stdout
    warning = one.stderr.strip().splitlines()
    assert len(warning) == 1 and warning[0].startswith(f"warning: grant {g1}") and f"leaf {leaf}" in warning[0]
    assert "Traceback" not in one.stderr + listed.stderr + table.stderr
