"""Analyst export: one Parquet row per tool call (via ``pyarrow``, an optional dependency).

Rows are built from the runs' events (a ``tool.call``, its ``policy.decision``
events, its approval and its ``tool.result``), in log order of the ``tool.call``.
Who answered an approval and its flags come from :func:`sealbox.approvals.get_approval`,
the same evaluation ``sealbox approvals show`` uses (only answers that count).
"""

from __future__ import annotations

import os
from typing import Any, Sequence

from sealbox.canonical import canonical_bytes
from sealbox.errors import BlobNotFoundError, ConfigError

__all__ = ["CALL_FIELDS", "call_rows", "export_parquet", "is_call_table"]

#: (column, Arrow type name) of each row, in order.
CALL_FIELDS = (
    ("run_id", "string"), ("agent", "string"), ("principal", "string"), ("ts", "string"), ("step", "string"),
    ("call_id", "string"), ("server", "string"), ("tool", "string"), ("exposed", "string"), ("grant", "string"),
    ("arguments", "string"), ("decision", "string"), ("rule", "string"), ("reason_code", "string"),
    ("final_decision", "string"), ("approval", "string"), ("approver", "list<string>"), ("flags", "list<string>"),
    ("outcome", "string"), ("ok", "bool"), ("duration_us", "int64"), ("error_type", "string"), ("error", "string"),
)


def call_rows(store: Any, run_ids: Sequence[str]) -> list[dict[str, Any]]:
    """One dict per tool call of ``run_ids`` (keys: :data:`CALL_FIELDS`), in log order.

    ``arguments`` is the RFC 8785 JSON text of the resolved arguments (blob
    references kept where content was erased). ``decision``/``rule``/``reason_code``
    are the first policy decision; ``final_decision`` the last (after an approval);
    ``approval`` is its (latest) request's status (``pending``, ``approved``, ``denied``, ``expired``,
    ``closed``…: :class:`sealbox.approvals.ApprovalState`) or None; ``approver``
    the identities whose answers decided it; ``flags`` sorted markers: the approval's
    flag codes (``shared_identity``, ``multiple_clients``, ``acts_as_agent``, ``quorum_same_client``),
    ``guardrail_tripped``, ``outcome_unknown``, ``malformed_request`` (its request's event fails its
    schema: its outcome is ``unknown``), ``malformed_event`` (a value of the wrong type, read from an event
    that fails its schema, is its JSON text in a string column, else null), ``imported``, ``replayed`` (a call of a replay run:
    served from the record, or run again for real by a replay with live tools; ``sealbox calls``
    leaves these out unless ``--replays``). ``outcome`` is ``ok`` or ``error`` (the tool ran),
    ``denied`` (by the policy); for a call held for approval without a result, what ``sealbox calls``
    gives it (:func:`sealbox.approvals.call_outcome`): ``denied``, ``expired``, ``unknown`` (approved
    and resumed: it may have run; or its request is malformed), ``abandoned`` (its run ended without resuming it) or ``held`` (it
    may still run); else ``unknown`` (allowed, no result: still running, or the process died).
    """
    rows: list[tuple[int, dict[str, Any]]] = []
    for run_id in run_ids:
        rows.extend(_run_rows(store, run_id))
    return [_typed(row) for _, row in sorted(rows, key=lambda r: r[0])]


def _key(call_id: Any) -> Any:
    """A call id as a dict key: in a malformed event (any value), its canonical JSON, marked."""
    return call_id if isinstance(call_id, str) or call_id is None else ("malformed", _canon(call_id))


def _typed(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with each value of its column's type (:data:`CALL_FIELDS`): a value of another type (read
    from an event that fails its schema: written below Sealbox) is its canonical JSON text in a string
    column, else None, and the row is flagged ``malformed_event``. The file can always be written."""
    bad = False
    for name, kind in CALL_FIELDS:
        value = row[name]
        if value is None:
            continue
        if kind == "string" and not isinstance(value, str):
            row[name], bad = _canon(value), True
        elif kind == "list<string>" and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            row[name] = [v if isinstance(v, str) else _canon(v) for v in value] \
                if isinstance(value, list) else [_canon(value)]
            bad = True
        elif kind == "int64" and (not isinstance(value, int) or isinstance(value, bool) or not -2**63 <= value < 2**63):
            row[name], bad = None, True
        elif kind == "bool" and not isinstance(value, bool):
            row[name], bad = None, True
    if bad:
        row["flags"] = sorted({*row["flags"], "malformed_event"})
    return row


def _run_rows(store: Any, run_id: str) -> list[tuple[int, dict[str, Any]]]:
    from sealbox.approvals import _RELATED, evaluate
    from sealbox.identities import identity_book

    events = store.read_run(run_id)
    start = next((e for e in events if e.kind == "run.started"), None)
    agent = start.payload.get("agent") if start else None
    imported = bool(start and start.payload.get("imported"))
    replayed = bool(start and start.payload.get("replay_of"))
    calls: dict[str, dict[str, Any]] = {}
    order: list[tuple[int, str]] = []
    call_at: dict[str, Any] = {}  # step -> the call made there
    for e in events:
        cid = _key(e.payload.get("call_id"))
        if e.kind == "approval.requested" and not isinstance(e.payload.get("call_id"), str):
            cid = call_at.get(e.step)  # a malformed request naming no call: the call at its step
        if e.kind == "tool.call":
            calls[cid] = {"call": e, "decisions": [], "result": None, "approval": None, "guard": False}
            order.append((e.leaf_index, cid))
            call_at.setdefault(e.step, cid)
        elif cid in calls:
            slot = calls[cid]
            if e.kind == "policy.decision":
                slot["decisions"].append(e.payload)
            elif e.kind == "tool.result":
                slot["result"] = e.payload
            elif e.kind == "approval.requested":
                slot["approval"] = e  # this run's own request (a malformed one may have no usable id)
            elif e.kind == "guardrail.tripped":
                slot["guard"] = True
    out = []
    book: Any = None  # the store's identities, read once, when a call of the run went to approval
    related = [e for e in events if e.kind in _RELATED]
    for leaf, cid in order:
        slot = calls[cid]
        state = None
        if slot["approval"] is not None:
            # the request in this run, not the first the store holds under that id, evaluated as every reader does
            book = identity_book(store) if book is None else book
            state = evaluate(slot["approval"], related, book)
        out.append((leaf, _row(store, run_id, agent, imported, replayed, slot, state)))
    return out


def _row(store: Any, run_id: str, agent: str | None, imported: bool, replayed: bool, slot: dict,
         state: Any) -> dict[str, Any]:
    call, first = slot["call"], (slot["decisions"][0] if slot["decisions"] else {})
    last, result = (slot["decisions"][-1] if slot["decisions"] else {}), slot["result"]
    p = call.payload
    error = (result or {}).get("error") if result and not result["ok"] else None
    flags = {f.get("code") for f in (state.flags if state else []) if f.get("code")}
    flags |= {"malformed_request"} if state is not None and state.malformed else set()
    outcome = _outcome(last.get("effect"), result, state, p)
    flags |= {"guardrail_tripped"} if slot["guard"] else set()
    flags |= {"outcome_unknown"} if outcome == "unknown" else set()
    flags |= {"imported"} if imported else set()
    flags |= {"replayed"} if replayed else set()  # a replay run's call: served from the record, or run again
    return {
        "run_id": run_id, "agent": agent, "principal": call.principal, "ts": call.ts, "step": call.step,
        "call_id": p.get("call_id"), "server": p.get("server"), "tool": p.get("tool"), "exposed": p.get("exposed"),
        "grant": p.get("grant"), "arguments": _json_text(store, p.get("arguments")),
        "decision": first.get("effect"), "rule": first.get("rule"), "reason_code": first.get("reason_code"),
        "final_decision": last.get("effect"), "approval": state.status if state else None,
        "approver": list(state.decided_by) if state else [], "flags": sorted(flags), "outcome": outcome,
        "ok": None if result is None else bool(result["ok"]),
        "duration_us": None if result is None else result.get("duration_us"),
        "error_type": error.get("type") if isinstance(error, dict) else None,
        "error": error.get("message") if isinstance(error, dict) else None,
    }


def _outcome(effect: str | None, result: dict | None, state: Any, call: Any = None) -> str:
    """``effect``: the call's last decision; ``state``: its (latest) approval request's, or None;
    ``call``: its ``tool.call`` payload."""
    from sealbox.approvals import call_outcome, imported_call_outcome

    if result is not None:
        return "ok" if result["ok"] else "error"
    if state is not None:  # held for approval: what its request came to, as `sealbox calls` gives it
        return call_outcome(state)
    if effect == "deny":
        return "denied"
    if effect == "require_approval":  # imported: the outcome its exporting store gave it
        return imported_call_outcome(call) or "held"
    return "unknown"


def _canon(value: Any) -> str:
    """The RFC 8785 JSON text of a value read from an event."""
    return canonical_bytes(value).decode("utf-8")


def _json_text(store: Any, value: Any) -> str:
    try:
        value = store.resolve(value)
    except BlobNotFoundError:
        pass  # erased: the commitment stays
    return canonical_bytes(value).decode("utf-8")


#: The schema metadata entry marking a file written by :func:`export_parquet` (what ``sealbox export
#: --parquet`` replaces without ``--force``).
_MARK_KEY, _MARK_VALUE = b"sealbox.export", b"calls"


def is_call_table(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a Parquet file written by :func:`export_parquet`, as its footer tells: its
    schema carries the ``sealbox.export`` mark, or (written before the mark) has exactly the columns
    of :data:`CALL_FIELDS`. Any other file, or no pyarrow to read it, is False."""
    try:
        with open(path, "rb") as f:
            if f.read(4) != b"PAR1":
                return False
            f.seek(-4, os.SEEK_END)
            if f.read(4) != b"PAR1":
                return False
        import pyarrow.parquet as pq

        schema = pq.read_schema(path)
    except Exception:  # noqa: BLE001 - unreadable, too short, not Parquet after all, no pyarrow: not ours
        return False
    if (schema.metadata or {}).get(_MARK_KEY) == _MARK_VALUE:
        return True
    return list(schema.names) == [name for name, _ in CALL_FIELDS]


def export_parquet(store: Any, run_ids: Sequence[str], path: str | os.PathLike) -> dict[str, Any]:
    """Write :func:`call_rows` of ``run_ids`` to the Parquet file ``path``.

    The table is built in memory and written as a bundle is
    (:func:`sealbox.interop.bundle.open_target`: its temporary file is created before the rows
    are read, then filled, fsync'd and renamed onto ``path``).

    Returns:
        ``{"path", "rows", "runs"}``.

    Raises:
        ConfigError: ``pyarrow`` is not installed (``pip install 'sealbox[parquet]'``).
        BundleError: ``path`` is one of the store's own files, exists and is not a regular
            file, or cannot be written (then nothing was written).
    """
    from sealbox.interop.bundle import open_target

    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ConfigError("Parquet export needs pyarrow: pip install 'sealbox[parquet]'") from exc
    with open_target(path, store_dir=getattr(store, "path", None)) as target:
        types = {"string": pa.string(), "bool": pa.bool_(), "int64": pa.int64(), "list<string>": pa.list_(pa.string())}
        schema = pa.schema([(name, types[t]) for name, t in CALL_FIELDS], metadata={_MARK_KEY: _MARK_VALUE})
        rows = call_rows(store, run_ids)
        sink = pa.BufferOutputStream()
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), sink)
        target.commit(sink.getvalue().to_pybytes())
    return {"path": str(path), "rows": len(rows), "runs": len(run_ids)}
