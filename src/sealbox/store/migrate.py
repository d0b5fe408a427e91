"""Forward-only, numbered SQL migrations, the same mechanism for every backend.

Migrations are files ``store/migrations/<backend>/NNNN_name.sql``. Each is
applied in one transaction and recorded in ``schema_migrations`` with the
SHA-256 of its text, so that a store written by a newer Sealbox, or a migration
edited after it was applied, is refused instead of being misread. A writer's open
applies the pending ones under one lock held across all of them (PostgreSQL: the
store's advisory lock at session level; SQLite: an flock on the store's folder),
so that concurrent upgraders serialise: the first applies them all.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources

from sealbox.errors import SchemaVersionError

__all__ = ["Migration", "load_migrations", "check_applied", "created_by", "unrecorded_message"]

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    """One migration file: its number, name, SQL text and ``sha256:`` checksum."""

    version: int
    name: str
    sql: str
    checksum: str


def load_migrations(backend: str) -> list[Migration]:
    """The migrations shipped for ``backend`` ("sqlite" or "postgres"), in order."""
    folder = resources.files("sealbox.store") / "migrations" / backend
    out = []
    for entry in folder.iterdir():
        m = _NAME.match(entry.name)
        if not m:
            continue
        sql = entry.read_text(encoding="utf-8")
        checksum = "sha256:" + hashlib.sha256(sql.encode("utf-8")).hexdigest()
        out.append(Migration(int(m.group(1)), m.group(2), sql, checksum))
    out.sort(key=lambda mig: mig.version)
    for i, mig in enumerate(out, start=1):
        if mig.version != i:
            raise RuntimeError(f"migrations for {backend} are not numbered 1..n (found {mig.version} at {i})")
    return out


def check_applied(applied: dict[int, str], known: list[Migration], where: str) -> list[Migration]:
    """Compare applied migrations with the known ones; return those still to apply.

    Args:
        applied: version -> checksum, as recorded in the store.
        known: this version's migrations.
        where: the store's location, for messages.

    Raises:
        SchemaVersionError: the store has a migration this version does not know
            (written by a newer Sealbox), or an applied migration's checksum differs.
    """
    by_version = {m.version: m for m in known}
    newest = max(applied, default=0)
    if newest > len(known):
        raise SchemaVersionError(
            f"{where} has schema version {newest}, newer than this Sealbox supports ({len(known)}); upgrade sealbox"
        )
    for version, checksum in applied.items():
        if by_version[version].checksum != checksum:
            raise SchemaVersionError(
                f"{where}: migration {version:04d}_{by_version[version].name} differs from the one applied "
                f"(recorded {checksum}, shipped {by_version[version].checksum})"
            )
    return [m for m in known if m.version not in applied]


_CREATE = re.compile(r"\bCREATE\s+(?:UNIQUE\s+)?(TABLE|INDEX|TRIGGER|VIEW)\s+(IF\s+NOT\s+EXISTS\s+)?(\w+)", re.I)
_DROP = re.compile(r"\bDROP\s+(TABLE|INDEX|TRIGGER|VIEW)\s+(?:IF\s+EXISTS\s+)?(\w+)", re.I)
_ADD_COLUMN = re.compile(r"\bALTER\s+TABLE\s+(\w+)\s+ADD\s+(?:COLUMN\s+)?(\w+)", re.I)
_STATEMENT = re.compile(r"\bCREATE\b[^;]*", re.I)
_META_KEY = re.compile(r"\bINSERT\s+(?:OR\s+REPLACE\s+)?INTO\s+store_meta\s*\(\s*key\s*,\s*value\s*\)\s*"
                       r"VALUES\s*\(\s*'(\w+)'", re.I)


def created_by(mig: Migration) -> list[tuple[str, str, str | None]]:
    """What ``mig`` adds to a schema that no earlier migration has: ``(type, name, None)`` for the
    tables, indexes, triggers and views it creates (not with IF NOT EXISTS, and not those it
    drops too: a migration that re-creates an object finds it there before), and
    ``("column", table, column)`` for the columns it adds, and ``("meta", key, None)`` for the
    ``store_meta`` keys it writes (no other code writes those keys), and ``("redefined", name, sql)``
    for a table, index or view it drops and creates again with the definition ``sql`` (whitespace
    squashed): the store's object holding that definition shows it. Any of them in a store whose
    ``schema_migrations`` lacks ``mig`` shows the migration was applied and its row removed."""
    text = re.sub(r"--[^\n]*", "", mig.sql)
    dropped = {(kind.lower(), name) for kind, name in _DROP.findall(text)}
    out: list[tuple[str, str, str | None]] = [
        (kind.lower(), name, None) for kind, guarded, name in _CREATE.findall(text)
        if not guarded and (kind.lower(), name) not in dropped]
    for statement in _STATEMENT.findall(text):  # re-created with another definition: the new one shows it
        m = _CREATE.match(statement)
        if m and not m.group(2) and (m.group(1).lower(), m.group(3)) in dropped and m.group(1).lower() != "trigger":
            out.append(("redefined", m.group(3), " ".join(statement.split())))
    out += [("column", table, column) for table, column in _ADD_COLUMN.findall(text)]
    out += [("meta", key, None) for key in _META_KEY.findall(text)]
    return out


def unrecorded_message(where: str, mig: Migration, why: str) -> str:
    """The error for a migration the store shows applied (``why``) while schema_migrations lacks it."""
    return (f"{where}: the store's schema_migrations table lacks migration {mig.version} "
            f"({mig.version:04d}_{mig.name}) but {why}: it was changed below Sealbox; run `sealbox verify`")
