"""Importers on the real corpus files (tests/data/corpus, copied unchanged).

Golden files (*.truth.json, *.chatml.json) are compared by facts: tool names,
arguments, results, which result answers which call, token totals.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from import_helpers import (  # noqa: F401 - store is a fixture
    anomalies,
    calls,
    check_shape,
    corpus,
    load,
    model_calls,
    store,
    tokens,
)

from sealbox.interop.importers import (
    IMPORTED_POLICY_FINGERPRINT,
    ImportFormatError,
    detect_format,
    import_file,
)

TAU = "tau-bench-openai-messages/gpt-4o-airline.subset-0-1-3-6-11.json"
SWE_FC = "swe-agent-traj/function_calling_simple.traj.json"
SWE_TEXT = "swe-agent-traj/marshmallow-1867.default_text_actions.traj.json"
ADK = "agentevals-otel/adk_py_v2_default_S2.otlp.json"
JAEGER = "agentevals-otel/jaeger_export_helm.json"
LANGFUSE = ["openai-agents-2025-09-30", "pydantic-ai-tools-2025-12-04", "claude-agent-2025-12-22",
            "vercel-aisdk-2025-11-17"]
RS = "openai-agents-runstate/"
SENTINEL = "RUNSTATE_SECRET_SENTINEL_42"


def _args(raw):
    return json.loads(raw) if isinstance(raw, str) and raw.strip() else ({} if raw == "" else raw)


# ----------------------------------------------------------------------------- detection


@pytest.mark.parametrize("rel,fmt", [
    (TAU, "tau-bench"), (SWE_FC, "swe-agent"), (SWE_TEXT, "swe-agent"), (ADK, "otlp-json"), (JAEGER, "jaeger"),
    *[(f"langfuse-framework-traces/{n}.trace.json", "langfuse") for n in LANGFUSE],
    (RS + "resume/v1_13_pending_tool_approval.json", "openai-agents-runstate"),
    (RS + "minimal/v1_17.json", "openai-agents-runstate"),
])
def test_detects_every_corpus_format(rel, fmt):
    assert detect_format(load(rel)) == fmt


def test_imported_policy_fingerprint_is_fixed():
    # documented in docs/import.md; changing it changes every imported decision
    assert IMPORTED_POLICY_FINGERPRINT == "sha256:9ee5180d5865e3d9e52ed2db3a925ffc4bce3cf7616b966b1ef5bcf0aeed5e67"
    from sealbox.policy import REASON_CODES

    assert "imported" in REASON_CODES


# ----------------------------------------------------------------------------- tau-bench


def _expected_chat_calls(messages):
    """(tool, arguments, result) per call, straight from the messages: a result answers the oldest open
    call with its tool_call_id (tau-bench reuses ids once a call is answered)."""
    out, open_by_id = [], {}
    for m in messages:
        if m.get("role") == "assistant":
            for tc in m.get("tool_calls") or []:
                entry = {"tool": tc["function"]["name"], "arguments": _args(tc["function"]["arguments"]), "result": None}
                out.append(entry)
                open_by_id.setdefault(tc["id"], []).append(entry)
        elif m.get("role") == "tool":
            ids = m.get("tool_call_ids") or [m["tool_call_id"]]
            for i in ids:
                open_by_id[i].pop(0)["result"] = m["content"]
    return out


def test_tau_bench_calls_results_and_ground_truth(store):
    summary = import_file(store, corpus(TAU))
    records = load(TAU)
    assert summary.format == "tau-bench" and len(summary.runs) == 5
    assert [len(calls(store, r)) for r in summary.runs] == [8, 0, 20, 6, 10]  # 44 real gpt-4o calls (README)
    for run_id, record in zip(summary.runs, records):
        check_shape(store, run_id, "tau-bench", summary.source_sha256)
        got = calls(store, run_id)
        want = _expected_chat_calls(record["traj"])
        assert [(c["tool"], c["arguments"], c["result"]) for c in got] == \
            [(w["tool"], w["arguments"], w["result"]) for w in want]
        assert all(c["effect"] == "allow" and c["reason_code"] == "imported" and c["has_result"] for c in got)
        # every model call lists the ids its tool calls carry, and they sit at its step N.k
        for m in model_calls(store, run_id):
            mine = [c for c in got if c["step"].split(".")[0] == m["step"] and "." in c["step"]]
            assert [c["call_id"] for c in mine] == m["tool_call_ids"]
        if record["reward"] == 1.0:  # the ground-truth write actions were all made
            made = [(c["tool"], c["arguments"]) for c in got]
            for action in record["info"]["task"]["actions"]:
                assert (action["name"], action["kwargs"]) in made
    # ids reused by the model after an answer are recorded as anomalies, not merged
    reused = [a for r in summary.runs for a in anomalies(store, r) if a["what"] == "reused_tool_call_id"]
    assert reused and all(a["detail"]["recorded_as"].endswith("#2") or "#" in a["detail"]["recorded_as"] for a in reused)


def test_tau_bench_decision_names_the_imported_pseudo_policy(store):
    summary = import_file(store, corpus(TAU))
    run = summary.runs[0]
    decisions = [store.resolve(e.payload) for e in store.read_run(run) if e.kind == "policy.decision"]
    assert decisions and {d["policy_fingerprint"] for d in decisions} == {IMPORTED_POLICY_FINGERPRINT}
    started = store.read_run(run)[0].payload
    assert started["policy"]["fingerprint"] == IMPORTED_POLICY_FINGERPRINT
    assert started["imported"]["original_ids"]["task_id"] == 0


# ----------------------------------------------------------------------------- SWE-agent


def test_swe_agent_function_calling(store):
    summary = import_file(store, corpus(SWE_FC))
    (run,) = summary.runs
    check_shape(store, run, "swe-agent", summary.source_sha256)
    got = calls(store, run)
    hist = load(SWE_FC)["history"]
    want = _expected_chat_calls(hist)
    assert [c["tool"] for c in got] == ["find_file", "open", "edit", "bash", "submit"]
    assert [(c["tool"], c["arguments"], c["result"]) for c in got] == \
        [(w["tool"], w["arguments"], w["result"]) for w in want]
    assert "\r\n" in got[0]["result"]  # terminal output kept byte for byte
    ids = [tc["id"] for m in hist for tc in m.get("tool_calls") or []]
    assert [c["call_id"] for c in got] == ids


def test_swe_agent_text_actions(store):
    summary = import_file(store, corpus(SWE_TEXT))
    (run,) = summary.runs
    doc = load(SWE_TEXT)
    got = calls(store, run)
    assert len(got) == 14
    for c, step in zip(got, doc["trajectory"]):
        action = step["action"].rstrip("\n")
        assert c["arguments"] == {"action": action}
        assert c["tool"] == action.split()[0]
        assert c["result"] == step["observation"]
    edit = next(c for c in got if c["tool"] == "edit")
    assert "\n" in edit["arguments"]["action"]  # multi-line action kept whole
    assert got[-1]["tool"] == "submit"
    # each action is requested by its own model call (step N -> N.1)
    assert all(c["step"].endswith(".1") for c in got)
    ended = store.read_run(run)[-1].payload
    assert ended["status"] == "ok" and ended["imported"]["exit_status"] == "submitted"


# ----------------------------------------------------------------------------- OTLP / Jaeger


def test_otlp_adk_against_truth(store):
    summary = import_file(store, corpus(ADK))
    truth = load("agentevals-otel/adk_py_v2_default_S2.truth.json")
    (run,) = summary.runs
    check_shape(store, run, "otlp-json", summary.source_sha256)
    got = calls(store, run)
    want = truth["turns"][0]["tool_calls"]
    assert [(c["tool"], c["arguments"], c["result"], not c["ok"]) for c in got] == \
        [(w["name"], w["args"], w["result"], w["is_error"]) for w in want]
    assert tokens(store, run) == (truth["tokens"]["input"], truth["tokens"]["output"])
    assert len(model_calls(store, run)) == 3  # call_llm + generate_content merged: not double counted
    started = store.read_run(run)[0].payload
    assert started["agent"] == truth["turns"][0]["agents"][0]
    assert started["imported"]["original_ids"]["trace_id"] == "65491dbd87609cf635220bd1bc487f43"
    # each tool call hangs under the model call that requested it, with the span's gen_ai.tool.call.id
    for c in got:
        assert c["call_id"].startswith("adk-")
        parent = next(m for m in model_calls(store, run) if m["step"] == c["step"].split(".")[0])
        assert c["call_id"] in parent["tool_call_ids"]


def test_jaeger_export(store):
    summary = import_file(store, corpus(JAEGER))
    (run,) = summary.runs
    check_shape(store, run, "jaeger", summary.source_sha256)
    (call,) = calls(store, run)
    assert call["tool"] == "helm_list_releases" and call["call_id"] == "call_P09kjRKHTTJA02oB9HIe4u5t"
    assert call["arguments"] == {} and call["ok"] is True and "kagent" in json.dumps(call["result"])
    ms = model_calls(store, run)
    assert len(ms) == 2  # 2 openai.chat inside 2 call_llm: one call each
    assert ms[0]["tool_call_ids"] == [call["call_id"]] and call["step"] == ms[0]["step"] + ".1"
    assert tokens(store, run) == (1820 + 1956, 13 + 117)
    assert store.read_run(run)[0].payload["agent"] == "helm_agent"
    # the export's clock-skew warning is kept as an anomaly
    assert any(a["what"] == "source_warning" for a in anomalies(store, run))


# ----------------------------------------------------------------------------- Langfuse


def _chatml_requested(chatml):
    """(id, name, arguments) of every tool call in an observation's expected output."""
    out = []
    for entry in chatml.values():
        data = entry["output"].get("data") if entry["output"].get("success") else None
        for msg in data or []:
            for tc in msg.get("tool_calls") or []:
                out.append((tc["id"], tc["name"], _args(tc["arguments"])))
            for part in msg.get("content") if isinstance(msg.get("content"), list) else []:
                if isinstance(part, dict) and part.get("type") == "tool_use":
                    out.append((part["id"], part["name"], part["input"]))
    return out


@pytest.mark.parametrize("name", LANGFUSE)
def test_langfuse_against_chatml(store, name):
    summary = import_file(store, corpus(f"langfuse-framework-traces/{name}.trace.json"))
    chatml = load(f"langfuse-framework-traces/{name}.chatml.json")
    trace = load(f"langfuse-framework-traces/{name}.trace.json")
    (run,) = summary.runs
    check_shape(store, run, "langfuse", summary.source_sha256)
    got = {c["call_id"]: c for c in calls(store, run)}
    requested = {m_id for m in model_calls(store, run) for m_id in m["tool_call_ids"]}
    for cid, tool, args in _chatml_requested(chatml):
        assert cid in requested
        if cid in got:  # executed: same call, same name and arguments
            assert got[cid]["exposed"] == tool and got[cid]["arguments"] == args
    # every TOOL observation is one call, answered by its own output
    tool_obs = [o for o in trace["observations"] if o["type"] == "TOOL"]
    assert len(got) == len(tool_obs)
    by_span = {c["span_id"]: c for c in got.values()}
    for o in tool_obs:
        c = by_span[o["id"]]
        assert c["has_result"] and c["ok"] is True
        assert c["result"] == _maybe_json(o["output"])
        expected = chatml[o["id"]]["output"]
        if expected["success"] and expected["data"] != [{}]:
            value = expected["data"][0]
            assert c["result"] == value.get("json", value)
    # token totals: one model call per innermost GENERATION
    gens = [o for o in trace["observations"] if o["type"] == "GENERATION"]
    inner = [g for g in gens if not any(x.get("parentObservationId") == g["id"] for x in gens)]
    assert tokens(store, run) == (sum(g["usageDetails"]["input"] for g in inner),
                                  sum(g["usageDetails"]["output"] for g in inner))


def _maybe_json(value):
    try:
        return json.loads(value) if isinstance(value, str) else value
    except ValueError:
        return value


def test_langfuse_parallel_calls_are_siblings(store):
    summary = import_file(store, corpus("langfuse-framework-traces/pydantic-ai-tools-2025-12-04.trace.json"))
    got = calls(store, summary.runs[0])
    steps = sorted(c["step"] for c in got)
    top = steps[0].split(".")[0]
    assert steps == [f"{top}.1", f"{top}.2", f"{top}.3"]
    assert [c["tool"] for c in sorted(got, key=lambda c: c["step"])] == \
        ["get_pun_suggestion", "get_dad_joke_suggestion", "get_one_liner_suggestion"]


def test_langfuse_mcp_tools_and_double_encoding(store):
    summary = import_file(store, corpus("langfuse-framework-traces/claude-agent-2025-12-22.trace.json"))
    (run,) = summary.runs
    got = calls(store, run)
    assert [(c["server"], c["tool"], c["exposed"], c["arguments"]) for c in got] == [
        ("weather", "get_weather", "mcp__weather__get_weather", {"city": "Berlin"}),
        ("weather", "get_weather", "mcp__weather__get_weather", {"city": "New York"}),
    ]
    assert "°F" in json.dumps(got[0]["result"], ensure_ascii=False)
    assert any(a["what"] == "double_encoded_json" for a in anomalies(store, run))


# ----------------------------------------------------------------------------- OpenAI Agents RunState


def _notes(store, run):
    return [store.resolve(e.payload) for e in store.read_run(run) if e.kind == "note"]


def test_runstate_pending_approval(store):
    summary = import_file(store, corpus(RS + "resume/v1_13_pending_tool_approval.json"))
    (run,) = summary.runs
    check_shape(store, run, "openai-agents-runstate", summary.source_sha256)
    (call,) = calls(store, run)
    assert call["call_id"] == "historical-approval-1" and call["tool"] == "historical_approval"
    assert call["arguments"] == {"account_id": "account-1"}
    assert call["effect"] == "require_approval" and not call["has_result"]  # held, never ran
    (note,) = _notes(store, run)
    approval = note["about"]["imported_approval"]
    assert approval["decision"] == "pending" and approval["identity_authenticated"] is False
    ended = store.read_run(run)[-1].payload
    assert ended["imported"]["final_state"] == "interrupted"
    rows = store.query_calls(run_id=run)
    assert rows[0]["outcome"] == "held"


def test_runstate_rejection_with_message(store):
    summary = import_file(store, corpus(RS + "features/v1_6_approval_rejection_message.json"))
    (note,) = _notes(store, summary.runs[0])
    a = note["about"]["imported_approval"]
    assert (a["decision"], a["call_id"], a["message"], a["identity_authenticated"]) == \
        ("deny", "approval-1", "Denied by release reviewer", False)


def test_runstate_per_call_override_and_hosted_mcp(store):
    s1 = import_file(store, corpus(RS + "features/v1_16_per_call_approval_override.json"))
    got = {(n["about"]["imported_approval"]["decision"], n["about"]["imported_approval"]["scope"],
            n["about"]["imported_approval"]["call_id"]) for n in _notes(store, s1.runs[0])}
    assert got == {("approve", "tool", None), ("deny", "call", "exception-call")}
    s2 = import_file(store, corpus(RS + "features/v1_14_hosted_mcp_approval_scope.json"))
    notes = [n["about"]["imported_approval"] for n in _notes(store, s2.runs[0])]
    assert {(n["source"], n["tool"], n["decision"]) for n in notes} == {
        ("context.hosted_mcp_approvals", "lookup_account", "approve")}
    assert all(n["identity_authenticated"] is False for n in notes)


def test_runstate_programmatic_tool_calling_nests(store):
    summary = import_file(store, corpus(RS + "features/v1_13_programmatic_tool_calling.json"))
    got = {c["call_id"]: c for c in calls(store, summary.runs[0])}
    assert got["program-call"]["arguments"] == {"code": "lookup()"} and got["program-call"]["result"] == "done"
    assert got["function-call"]["step"] == got["program-call"]["step"] + ".1"


def test_runstate_minimal(store):
    summary = import_file(store, corpus(RS + "minimal/v1_17.json"))
    assert summary.events == 2 and summary.anomalies == 0


@pytest.mark.parametrize("name", ["future_version", "missing_version", "malformed_current_agent"])
@pytest.mark.parametrize("fmt", ["auto", "openai-agents-runstate"])
def test_runstate_negative_rejected_without_echo(store, name, fmt):
    before = store.size()
    with pytest.raises(ImportFormatError) as exc:
        import_file(store, corpus(f"{RS}negative/{name}.json"), fmt)
    assert SENTINEL not in str(exc.value) and "999" not in str(exc.value)
    assert store.size() == before


def test_cli_import_and_rejection(tmp_path):
    exe = [sys.executable, "-m", "sealbox.cli.main"]
    st = tmp_path / "s"
    assert subprocess.run([*exe, "init", str(st)], capture_output=True).returncode == 0
    ok = subprocess.run([*exe, "import", "--store", str(st), "--json", str(corpus(ADK))], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    out = json.loads(ok.stdout)
    assert out["format"] == "otlp-json" and len(out["runs"]) == 1 and out["events"] == 11
    bad = subprocess.run([*exe, "import", "--store", str(st), str(corpus(RS + "negative/future_version.json"))],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and SENTINEL not in bad.stderr + bad.stdout
    assert bad.stderr.startswith("error: ") and len(bad.stderr.strip().splitlines()) == 1
    bar = subprocess.run([*exe, "import", "--store", str(st), "--progress", str(corpus(TAU))],
                         capture_output=True, text=True)
    assert bar.returncode == 0 and "imported 5 run(s)" in bar.stdout
    v = subprocess.run([*exe, "verify", "--store", str(st)], capture_output=True, text=True)
    assert v.returncode == 0, v.stdout + v.stderr
