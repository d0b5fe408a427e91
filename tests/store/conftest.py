"""Helpers for the store tests: real SQLite stores in tmp_path, sample runs, tampering below the triggers."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import pytest

import sealbox
from sealbox import CheckpointPolicy, EventDraft
from sealbox.store.base import new_run_id

#: The venv's ``sealbox`` command (next to the interpreter running the tests).
SEALBOX = Path(sys.executable).parent / "sealbox"

POLICY_FP = "sha256:" + "ab" * 32


def started(run_id: str, agent: str = "test-agent") -> EventDraft:
    return EventDraft("run.started", {
        "agent": agent, "snapshot": None, "parent_run_id": None, "labels": {},
        "policy": {"fingerprint": POLICY_FP, "name": "test"},
    }, run_id=run_id, principal=f"agent:{agent}")


def tool_call(run_id: str, call_id: str, arguments: Any = None) -> EventDraft:
    return EventDraft("tool.call", {
        "call_id": call_id, "server": "db", "tool": "read_query", "exposed": "db__read_query",
        "arguments": arguments if arguments is not None else {"q": call_id}, "grant": "implicit:agent:test-agent",
    }, run_id=run_id, principal="agent:test-agent")


def decision(run_id: str, call_id: str) -> EventDraft:
    return EventDraft("policy.decision", {
        "call_id": call_id, "effect": "allow", "reason_code": "policy_allow", "rule": "r1",
        "reason": "rule r1 allows it", "policy_fingerprint": POLICY_FP, "eval_us": 3,
    }, run_id=run_id, principal="agent:test-agent")


def tool_result(run_id: str, call_id: str, result: Any) -> EventDraft:
    return EventDraft("tool.result", {"call_id": call_id, "ok": True, "result": result, "duration_us": 10},
                      run_id=run_id, principal="agent:test-agent")


def note(run_id: str, text: str) -> EventDraft:
    return EventDraft("note", {"text": text}, run_id=run_id, principal="investigator")


def ended(run_id: str) -> EventDraft:
    return EventDraft("run.ended", {"status": "ok"}, run_id=run_id, principal="agent:test-agent")


def big_result(tag: str, size: int = 2000) -> dict:
    """A tool result well above the 512-byte inline limit (so it becomes one blob)."""
    return {"tag": tag, "text": (tag + "-") * (size // (len(tag) + 1))}


def record_run(store, index: int) -> str:
    """One complete run: started, tool.call+policy.decision (one txn), tool.result with a blob, note, ended."""
    run_id = new_run_id()
    store.append(started(run_id))
    call = f"call-{index}"
    store.append([tool_call(run_id, call), decision(run_id, call)])
    store.append(tool_result(run_id, call, big_result(f"result-{index}")))
    store.append(note(run_id, f"note {index}"))
    store.append(ended(run_id))
    return run_id


@dataclass
class Sample:
    """A closed sample store and what was written to it."""

    path: Path
    runs: list[str]
    vkey: str
    origin: str
    size: int
    rows: list[tuple] = field(default_factory=list)  # (leaf_index, run_id, run_seq, kind) in log order


def build_sample(path: Path, nruns: int = 3, every_events: int = 10) -> Sample:
    store = sealbox.init_store(path, checkpoint_policy=CheckpointPolicy(every_events=every_events))
    runs = [record_run(store, i) for i in range(nruns)]
    vkey, origin, size = store.pinned_vkey(), store.origin, store.size()
    store.close()
    return Sample(path, runs, vkey, origin, size, event_rows(path))


def event_rows(path: Path) -> list[tuple]:
    with closing_db(path) as db:
        return db.execute("SELECT leaf_index, run_id, run_seq, kind FROM events ORDER BY leaf_index").fetchall()


@pytest.fixture
def sample(tmp_path: Path) -> Sample:
    return build_sample(tmp_path / "s")


class closing_db:
    """``with closing_db(store_dir) as db:`` - a plain sqlite3 connection, committed and closed on exit."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(Path(path) / "sealbox.db", isolation_level=None)

    def __enter__(self) -> sqlite3.Connection:
        return self.conn

    def __exit__(self, *exc: Any) -> None:
        self.conn.close()


def drop_triggers(db: sqlite3.Connection) -> list[str]:
    names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")]
    for name in names:
        db.execute(f"DROP TRIGGER {name}")
    return names


def tamper(path: Path, *statements: tuple[str, Iterable[Any]] | str, restore_triggers: bool = True) -> None:
    """Drop every trigger, run ``statements`` in one transaction below Sealbox, then (a careful
    attacker) put the triggers back, so that only the data change is left to find."""
    with closing_db(path) as db:
        db.execute("BEGIN IMMEDIATE")
        saved = [r[0] for r in db.execute("SELECT sql FROM sqlite_master WHERE type = 'trigger'")]
        drop_triggers(db)
        for st in statements:
            sql, params = (st, ()) if isinstance(st, str) else st
            db.execute(sql, tuple(params))
        if restore_triggers:
            for sql in saved:
                db.execute(sql)
        db.execute("COMMIT")


def leaf_hash(raw: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + raw).digest()


def tag(digest: bytes) -> str:
    return "sha256:" + digest.hex()


def snapshot_dir(path: Path) -> dict[str, bytes]:
    """Every file under ``path`` (relative name -> bytes), to prove nothing was written."""
    out = {}
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            full = Path(root) / name
            rel = str(full.relative_to(path))
            out[rel] = full.read_bytes() if full.is_file() else b"<dir>"
    return out


# Test modules import these helpers as ``from store_testkit import ...``: another test folder's
# conftest.py may also be imported as ``conftest`` when several folders are collected at once.
sys.modules.setdefault("store_testkit", sys.modules[__name__])
