"""Shared helpers for the importer tests: a fresh store, corpus paths, facts of imported runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sealbox.store import init_store
from sealbox.verify import verify_store

CORPUS = Path(__file__).resolve().parents[2] / "data" / "corpus"


@pytest.fixture
def store(tmp_path):
    s = init_store(tmp_path / "store")
    yield s
    report = verify_store(s)
    assert report.ok, [p.to_dict() if hasattr(p, "to_dict") else str(p) for p in report.problems]
    s.close()


def corpus(rel: str) -> Path:
    return CORPUS / rel


def load(rel: str) -> Any:
    return json.loads(corpus(rel).read_text(encoding="utf-8"))


def events(store, run_id: str) -> list:
    return store.read_run(run_id)


def payload(store, event) -> dict:
    return store.resolve(event.payload)


def calls(store, run_id: str) -> list[dict[str, Any]]:
    """Every tool call of a run with its decision and result, in record order."""
    out: dict[str, dict[str, Any]] = {}
    for e in store.read_run(run_id):
        p = store.resolve(e.payload)
        if e.kind == "tool.call":
            out[p["call_id"]] = {"step": e.step, "call_id": p["call_id"], "server": p["server"], "tool": p["tool"],
                                 "exposed": p["exposed"], "arguments": p["arguments"], "has_result": False,
                                 "span_id": (p.get("imported") or {}).get("span_id")}
        elif e.kind == "policy.decision":
            out[p["call_id"]]["effect"] = p["effect"]
            out[p["call_id"]]["reason_code"] = p["reason_code"]
        elif e.kind == "tool.result":
            c = out[p["call_id"]]
            assert c["step"] == e.step, "a result shares its call's step"
            c.update(has_result=True, ok=p["ok"], result=p.get("result"), error=p.get("error"))
    return list(out.values())


def model_calls(store, run_id: str) -> list[dict[str, Any]]:
    return [{"step": e.step, **store.resolve(e.payload)} for e in store.read_run(run_id) if e.kind == "model.call"]


def anomalies(store, run_id: str) -> list[dict[str, Any]]:
    return [store.resolve(e.payload) for e in store.read_run(run_id) if e.kind == "anomaly"]


def tokens(store, run_id: str) -> tuple[int, int]:
    ms = model_calls(store, run_id)
    return (sum(m["usage"].get("input_tokens", 0) for m in ms), sum(m["usage"].get("output_tokens", 0) for m in ms))


def check_shape(store, run_id: str, fmt: str, sha: str) -> None:
    """run.started marked imported first, run.ended last, nothing forged."""
    evs = store.read_run(run_id)
    assert evs[0].kind == "run.started" and evs[-1].kind == "run.ended"
    imported = evs[0].payload["imported"]
    assert imported["format"] == fmt and imported["source_sha256"] == sha
    assert evs[0].payload["labels"]["imported"] == "true"
    assert not [e for e in evs if e.kind in ("approval.answered", "approval.requested")]
