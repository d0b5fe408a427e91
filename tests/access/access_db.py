"""SQL on an access test's store database below Sealbox, on either backend."""

from __future__ import annotations

import os

PG_URL = os.environ.get("SEALBOX_TEST_POSTGRES_URL")


def _raw_sql(store, sql, params=()):
    """Run ``sql`` (``?`` parameters) on ``store``'s database below Sealbox; the rows it returns."""
    if store.backend == "sqlite":
        import sqlite3

        db = sqlite3.connect(store.db_path, isolation_level=None)
        try:
            return db.execute(sql, params).fetchall()
        finally:
            db.close()
    import psycopg

    with psycopg.connect(store.url, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{store.schema}"')
        cur = conn.execute(sql.replace("?", "%s"), params or None)
        rows = []
        while True:  # several statements: the rows of the last that returns some
            if cur.description:
                rows = cur.fetchall()
            if not cur.nextset():
                return rows
