"""A model call whose latency was not given is recorded as unknown (``latency_us: null``), not as 0 µs
(which reads as "instant"), and every reader says so; a store holding 0 (written before) still
verifies and shows 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import sealbox
from sealbox import verify_store
from sealbox.errors import InvalidEventError
from sealbox.events import validate_payload
from sealbox.interop.importers import import_file
from sealbox.interop.otlp import build_otlp
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
from sealbox.report import render
from sealbox.report.model import build_report

REQUEST = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
RESPONSE = {"id": "r1", "model": "gpt-4o", "choices": [{"message": {"role": "assistant", "content": "hello"}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2}}
CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """Run ``unknown`` (model_call with no latency) and run ``zero`` (latency=0, as every call without a
    latency was stored before), in one real store."""
    path = tmp_path_factory.mktemp("lat") / "store"
    store = sealbox.init_store(path)
    rec = Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="bot") as unknown:
        unknown.model_call(REQUEST, RESPONSE)
    with rec.run(agent="bot") as zero:
        zero.model_call(REQUEST, RESPONSE, latency=0)
    store.close()
    return {"path": path, "unknown": unknown.run_id, "zero": zero.run_id}


def _model_payload(path, run_id):
    store = sealbox.open_store(path, readonly=True)
    try:
        (p,) = [e.payload for e in store.read_run(run_id) if e.kind == "model.call"]
        return p
    finally:
        store.close()


def _sb(*args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_") and k != "SEALBOX_DEBUG"}
    return subprocess.run([sys.executable, "-m", "sealbox.cli.main", *map(str, args)], capture_output=True,
                          text=True, env=env, timeout=120)


def test_no_latency_is_stored_as_null_and_zero_as_zero(recorded):
    assert _model_payload(recorded["path"], recorded["unknown"])["latency_us"] is None
    assert _model_payload(recorded["path"], recorded["zero"])["latency_us"] == 0
    store = sealbox.open_store(recorded["path"], readonly=True)
    try:
        assert verify_store(store).ok
    finally:
        store.close()


def test_the_schema_takes_null_or_a_count_and_nothing_else():
    base = {"provider": "openai", "model": "m", "request": {}, "response": {}, "usage": {}}
    for ok in (None, 0, 250_000):
        validate_payload("model.call", {**base, "latency_us": ok})
    for bad in (-1, 1.5, "0", True):
        with pytest.raises(InvalidEventError):
            validate_payload("model.call", {**base, "latency_us": bad})
    with pytest.raises(InvalidEventError):  # still required: null says "unknown", absence says nothing
        validate_payload("model.call", base)


def test_runs_show_leaves_an_unknown_latency_blank_and_shows_a_recorded_zero(recorded):
    out = _sb("runs", "show", recorded["unknown"], "-s", recorded["path"], "--json")
    assert out.returncode == 0, out.stderr
    (row,) = [r for r in json.loads(out.stdout)["events"] if r["kind"] == "model.call"]
    assert (row["duration_us"], row["duration"]) == (None, "")
    out = _sb("runs", "show", recorded["zero"], "-s", recorded["path"], "--json")
    (row,) = [r for r in json.loads(out.stdout)["events"] if r["kind"] == "model.call"]
    assert (row["duration_us"], row["duration"]) == (0, "0 µs")
    out = _sb("runs", "show", recorded["unknown"], "-s", recorded["path"], "--csv")
    assert out.returncode == 0, out.stderr
    (line,) = [ln for ln in out.stdout.splitlines() if ",model.call," in ln]
    assert ",model.call,agent:" in line and ",,,openai/gpt-4o" in line.replace('"', "")


def test_the_report_says_latency_unknown(recorded):
    store = sealbox.open_store(recorded["path"], readonly=True)
    try:
        unknown = build_report(store, recorded["unknown"], verify=False, now="2026-01-01T00:00:00Z")
        zero = build_report(store, recorded["zero"], verify=False, now="2026-01-01T00:00:00Z")
    finally:
        store.close()
    assert unknown.model_calls[0].latency_us is None and zero.model_calls[0].latency_us == 0
    assert "latency unknown" in render(unknown, "md") and "latency unknown" in render(unknown, "html")
    assert "latency 0.0 ms" in render(zero, "md") and "latency 0.0 ms" in render(zero, "html")
    (entry,) = [t for t in unknown.timeline if t.kind == "model.call"]
    assert entry.duration_s is None


def test_otlp_chat_span_of_an_unknown_latency_has_no_length_and_no_latency_attribute(recorded):
    store = sealbox.open_store(recorded["path"], readonly=True)
    try:
        batch = build_otlp(store, [recorded["unknown"], recorded["zero"]])
    finally:
        store.close()
    chats = {s.attributes["sealbox.run_id"]: s for s in batch.spans if s.name.startswith("chat ")}
    unknown, zero = chats[recorded["unknown"]], chats[recorded["zero"]]
    assert unknown.start_time == unknown.end_time and "sealbox.model.latency_us" not in unknown.attributes
    assert zero.start_time == zero.end_time and zero.attributes["sealbox.model.latency_us"] == 0


def test_imports_without_timing_record_null_and_span_imports_their_duration(tmp_path):
    store = sealbox.init_store(tmp_path / "store")
    try:
        tau = import_file(store, CORPUS / "tau-bench-openai-messages/gpt-4o-airline.subset-0-1-3-6-11.json")
        swe = import_file(store, CORPUS / "swe-agent-traj/function_calling_simple.traj.json")
        adk = import_file(store, CORPUS / "agentevals-otel/adk_py_v2_default_S2.otlp.json")
        latencies = {name: [e.payload["latency_us"] for r in s.runs for e in store.read_run(r) if e.kind == "model.call"]
                     for name, s in (("tau", tau), ("swe", swe), ("adk", adk))}
        assert verify_store(store).ok
    finally:
        store.close()
    assert latencies["tau"] and set(latencies["tau"]) == {None}
    assert latencies["swe"] and set(latencies["swe"]) == {None}
    assert latencies["adk"] and all(type(us) is int and us > 0 for us in latencies["adk"])
