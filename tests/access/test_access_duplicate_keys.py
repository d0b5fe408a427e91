"""A provider answer whose JSON object names a key twice.

RFC 8259 §4: names within an object SHOULD be unique; when they are not, "the behavior of software that
receives such an object is unpredictable" - some parsers keep the first value, some the last. Python's
``json.loads`` keeps the last, so an introspection answer ``{"active": true, "active": false}`` (a token
the provider, or anything in front of it, also said is active) was read as inactive and the revocation
recorded ``confirmed``. Sealbox never shows a revocation as confirmed when it is not: such a body is no
answer (as a body that is not a JSON object), the step is ``failed`` and the grant stays pending."""

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

AMBIGUOUS = b'{"active": true, "client_id": "c", "active": false}'


@pytest.fixture
def ambiguous_provider():
    def answer(method, path, form):  # noqa: ANN001, ANN202
        if path == "/introspect":
            return 200, {"Content-Type": "application/json"}, AMBIGUOUS
        return 200, {}, b""  # RFC 7009: 200, empty body
    srv = ScriptedServer(answer)
    yield srv
    srv.stop()


def steps(store, gid):
    return [(e.payload["step"], e.payload["detail"]) for e in store.read_run(SYSTEM_RUN_ID)
            if e.kind == "access.revoked" and e.payload["grant_id"] == gid]


def test_an_introspection_answer_naming_active_twice_does_not_confirm_a_revocation(store, ambiguous_provider,
                                                                                     tmp_path):
    base = ambiguous_provider.base
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
    assert recorded[2][1] == {
        "stage": "introspection", "pending": True, "endpoint": f"{base}/introspect", "attempts": 1,
        "tokens": [{"token_type_hint": "access_token", "http_status": 200, "error": None}],
        "error": "access_token: introspection answered HTTP 200 without a JSON object body"}
