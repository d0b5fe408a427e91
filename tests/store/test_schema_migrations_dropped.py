"""The whole schema_migrations table dropped below Sealbox: verify reports each migration row as
missing (as when its rows are deleted), instead of stopping with "error: cannot upgrade the copy
of DIR: no such table: schema_migrations" (exit 2) while the listings say to run verify."""

from __future__ import annotations

import subprocess
import sys

from store_testkit import Sample, tamper


def test_verify_reports_a_dropped_schema_migrations_table(sample: Sample) -> None:
    tamper(sample.path, "DROP TABLE schema_migrations")
    res = subprocess.run([sys.executable, "-m", "sealbox.cli.main", "verify", "-s", str(sample.path)],
                         capture_output=True, text=True)
    assert (res.returncode, res.stderr) == (1, ""), res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert [line.split(":", 1)[0] for line in lines[:7]] == ["schema_migration_missing"] * 7
    assert lines[0] == ("schema_migration_missing: the store's schema_migrations table lacks migration 1 "
                        "(0001_ledger) but the store already has its changes (table store_meta): its row was "
                        "removed below Sealbox")
