"""``sealbox runs list`` and ``sealbox runs show RUN``."""

from __future__ import annotations

import json

import click

from sealbox.cli.common import emit_rows, format_options, open_for_reading, store_option


@click.group("runs")
def runs_group() -> None:
    """List and show recorded runs."""


def _status(last_kind: str | None) -> str:
    return {"run.ended": "ended", "run.suspended": "suspended"}.get(last_kind or "", "running")


@runs_group.command("list")
@store_option
@click.option("--limit", type=int, default=50, show_default=True, help="At most this many runs (newest first).")
@format_options
def list_cmd(store_path: str, limit: int, as_json: bool, as_csv: bool) -> None:
    """List runs, newest first."""
    store = open_for_reading(store_path)
    try:
        rows = store.runs(limit=limit)
    finally:
        store.close()
    for row in rows:
        row["status"] = _status(row.get("last_kind"))
    emit_rows(rows, ["run_id", "agent", "principal", "status", "events", "started_at", "parent_run_id"],
              as_json=as_json, as_csv=as_csv, title="Runs")


@runs_group.command("show")
@click.argument("run_id")
@store_option
@format_options
def show_cmd(run_id: str, store_path: str, as_json: bool, as_csv: bool) -> None:
    """Show one run's events: time, kind, tool, decision, duration."""
    store = open_for_reading(store_path)
    try:
        events = store.read_run(run_id)
    finally:
        store.close()
    if not events:
        raise click.ClickException(f"no run {run_id!r} in this store")
    rows = [_event_row(e) for e in events]
    emit_rows(rows, ["run_seq", "step", "ts", "kind", "principal", "detail"], as_json=as_json, as_csv=as_csv,
              title=f"Run {run_id}")


def _event_row(event) -> dict:
    p = event.payload
    detail = ""
    if event.kind == "tool.call":
        detail = f"{p.get('server')}/{p.get('tool')} call {p.get('call_id')} args={_short(p.get('arguments'))}"
    elif event.kind == "policy.decision":
        detail = f"{p.get('effect')} by rule {p.get('rule')} ({p.get('reason_code')})"
    elif event.kind == "tool.result":
        detail = f"{'ok' if p.get('ok') else 'error'} in {p.get('duration_us')} us"
    elif event.kind == "run.ended":
        detail = p.get("status", "")
    elif event.kind == "note":
        detail = p.get("text", "")
    elif event.kind == "run.started":
        detail = f"agent {p.get('agent')}"
    return {"run_seq": event.run_seq, "step": event.step, "ts": event.ts, "kind": event.kind,
            "principal": event.principal, "detail": detail, "leaf_index": event.leaf_index, "payload": p}


def _short(value, limit: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"
