"""A provider answering with JSON nested deeper than Python's parser goes.

A revocation endpoint answering ``200`` with ``[[[[…]]]]`` (200,000 levels, 400 KB: under the 1 MiB read)
made ``json.loads`` raise RecursionError, which no one caught: ``sealbox access revoke`` ended in a
traceback after the local ``requested`` step, and no step recorded what the provider did."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from access_provider import ScriptedServer
from identity_testkit import signed_grant

import sealbox
from sealbox.access import STATUS_PENDING
from sealbox.events import SYSTEM_RUN_ID

DEEP = b"[" * 200_000 + b"]" * 200_000


@pytest.fixture
def deep_provider():
    srv = ScriptedServer(lambda method, path, form: (200, {"Content-Type": "application/json"}, DEEP))
    yield srv
    srv.stop()


def steps(store, gid):
    return [(e.payload["step"], e.payload["detail"]) for e in store.read_run(SYSTEM_RUN_ID)
            if e.kind == "access.revoked" and e.payload["grant_id"] == gid]


def test_a_revocation_answered_with_too_deep_json_is_recorded_and_the_cli_says_so(store, deep_provider, tmp_path):
    base = deep_provider.base
    gid = signed_grant(store, "agent:deploy-bot", "db", "*", None, credential={
        "revocation_endpoint": f"{base}/revoke", "introspection_endpoint": f"{base}/introspect", "client_id": "c",
        "client_secret": "client-secret-value", "access_token": "access-token-value-0123456789"})
    store.close()
    out = subprocess.run([sys.executable, "-m", "sealbox.cli.main", "access", "revoke", gid, "--reason", "offboarding",
                          "--key-file", str(tmp_path / "root.key"), "-s", str(tmp_path / "store")],
                         capture_output=True, text=True, env={**os.environ, "COLUMNS": "400"})
    assert "Traceback" not in out.stderr, out.stderr
    assert (out.returncode, out.stdout) == (3, f"{gid}: {STATUS_PENDING}\n")
    reopened = sealbox.open_store(tmp_path / "store")
    try:
        recorded = steps(reopened, gid)
    finally:
        reopened.close()
    assert [s for s, _ in recorded] == ["requested", "sent", "failed"]
    assert recorded[1][1] == {"endpoint": f"{base}/revoke", "attempts": 1, "introspection": True,
                              "tokens": [{"token_type_hint": "access_token", "http_status": 200}]}
    assert recorded[2][1] == {
        "stage": "introspection", "pending": True, "endpoint": f"{base}/introspect", "attempts": 1,
        "tokens": [{"token_type_hint": "access_token", "http_status": 200, "error": None}],
        "error": "access_token: introspection answered HTTP 200 without a JSON object body"}
