"""Runs imported into a store are not the store's own: their usage (model tokens and cost, tool calls)
happened elsewhere and is accounted there, so it never counts toward the live limits of the store's
policy (``tokens.per_day``, ``cost.per_day``, ``calls_per_minute``), even though imported events are
stamped with the import time and name the same agent.

Recorded with the real Recorder, exported with ``sealbox export --otlp`` to a real OTLP/HTTP endpoint on
127.0.0.1, then ``sealbox import``-ed into a store where a live agent of the same name runs.

On every backend: SQLite, and PostgreSQL when SEALBOX_TEST_POSTGRES_URL is set.
"""

from __future__ import annotations

import importlib.util
import os
import textwrap
import uuid

import pytest

import sealbox
from sealbox.policy import Policy
from sealbox.recorder import Recorder, ToolDenied

BACKENDS = ["sqlite"]
if os.environ.get("SEALBOX_TEST_POSTGRES_URL") and importlib.util.find_spec("psycopg") is not None:
    BACKENDS.append("postgres")

ALLOW = "version: 1\nrules:\n  - id: allow-all\n    effect: allow\nprices:\n  \"openai/*\": {input: 1, output: 1}\n"
#: each bound is what the live agent itself used today, this call included: one more token, cent or call
#: of the imported run counted toward it trips it
LIMITS = {
    "tokens": ALLOW + "limits:\n  tokens: {per_day: 200}\n",
    "cost": ALLOW + "limits:\n  cost: {per_day: 0.001, currency: USD}\n",
    "rate": ALLOW + "limits:\n  calls_per_minute: {per_agent: 4, per_tool: 4}\n",
}

REQUEST = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
RESPONSE = {"choices": [{"message": {"role": "assistant", "content": "hello"}}]}


@pytest.fixture(params=BACKENDS)
def backend(request, tmp_path):
    """``init(path)``: a new store at ``path`` on the backend (PostgreSQL: its own schema, dropped after)."""
    schemas: list[str] = []

    def init(path):
        if request.param == "sqlite":
            return sealbox.init_store(path)
        schemas.append(f"sbt_imp_live_{uuid.uuid4().hex[:16]}")
        return sealbox.init_store(path, postgres_url=os.environ["SEALBOX_TEST_POSTGRES_URL"], schema=schemas[-1])

    yield init
    if schemas:
        import psycopg

        with psycopg.connect(os.environ["SEALBOX_TEST_POSTGRES_URL"], autocommit=True) as conn:
            for schema in schemas:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def test_live_token_and_cost_budgets_are_enforced_on_every_backend(backend, tmp_path):
    """The day's tokens and cost are numbers on PostgreSQL too (its sum of a bigint is a numeric, read as
    a Decimal: every call under a token budget was denied as a guardrail_error)."""
    live = backend(tmp_path / "live")
    try:
        with Recorder(live, policy=Policy.from_text(ALLOW)).run(agent="bot", principal="agent:bot") as run:
            run.model_call(REQUEST, RESPONSE, usage={"input_tokens": 100, "output_tokens": 100},
                           provider="openai", model="gpt-4o")
        for name, text in LIMITS.items():
            with Recorder(live, policy=Policy.from_text(text)).run(agent="bot", principal="agent:bot") as run:
                run.model_call(REQUEST, RESPONSE, usage={"input_tokens": 0, "output_tokens": 0},
                               provider="openai", model="gpt-4o")
                assert run.call_tool("db", "query", {"q": name}, lambda q: "rows") == "rows", name
        over = ALLOW + "limits:\n  tokens: {per_day: 199}\n  cost: {per_day: 0.0001, currency: USD}\n"
        with Recorder(live, policy=Policy.from_text(over)).run(agent="bot", principal="agent:bot") as run:
            with pytest.raises(ToolDenied) as denied:
                run.call_tool("db", "query", {"q": "over"}, lambda q: "rows")
        d = denied.value.decision
        assert (d.effect, d.reason_code, d.reason) == (
            "deny", "limit_exceeded", "limit tokens.per_day exceeded: 200 > 199")
    finally:
        live.close()


