"""A store's redactor builds its searches (tens of milliseconds of regex compiling) on first use, once per
process for equal settings: opening a store to read compiles nothing, and a second store (or a second open)
reuses the compiled searches; what is redacted is unchanged. SQLite, and PostgreSQL when
SEALBOX_TEST_POSTGRES_URL is set."""

from __future__ import annotations

import os
import uuid

import pytest

from sealbox import redaction
from sealbox.redaction import DEFAULT_PATTERNS, ContentPolicy, Redactor
from sealbox.store import init_store, open_store
from sealbox import EventDraft
from sealbox.store.base import new_run_id

from conftest import started

URL = os.environ.get("SEALBOX_TEST_POSTGRES_URL")
BACKENDS = ["sqlite"] + (["postgres"] if URL else [])

SECRETS = {
    "password": "hunter2-x",
    "text": "curl -u bob:s3cretpw https://example.org and Authorization: Bearer abcdefgh12345678",
    "nested": [{"api_key": "k-1234567890"}, "sk-ABCDEFGHIJKLMNOPqrstu"],
    "plain": "nothing to see here",
}


@pytest.fixture(params=BACKENDS)
def store_path(request, tmp_path):
    path = tmp_path / "store"
    if request.param == "sqlite":
        init_store(path).close()
        yield path
        return
    import psycopg

    schema = f"sbt_{uuid.uuid4().hex[:20]}"
    init_store(path, postgres_url=URL, schema=schema).close()
    yield path
    with psycopg.connect(URL, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def _built(redactor: Redactor) -> bool:
    return "_quick" in vars(redactor)


def test_opening_a_store_compiles_no_redaction_search_and_recording_still_redacts(store_path):
    store = open_store(store_path)
    try:
        redactor = store._builder.redactor
        assert not _built(redactor)
        assert store.content.mode == "redacted"
        run_id = new_run_id()
        store.append(started(run_id))
        store.append(EventDraft("note", {"text": "password=hunter2-x and plain words"}, run_id=run_id,
                                principal="investigator"))
        assert _built(redactor)
        text = [e for e in store.read_run(run_id) if e.kind == "note"][0].payload["text"]
        assert "hunter2-x" not in text and "plain words" in text and "redacted:hmac-sha256:" in text
    finally:
        store.close()


def test_equal_settings_share_the_compiled_searches_not_the_secret_or_the_memos():
    a, b = Redactor(b"a" * 32), Redactor(b"b" * 32)
    out_a, changed_a = a.apply("arguments", SECRETS)
    out_b, changed_b = b.apply("arguments", SECRETS)
    assert changed_a and changed_b
    assert a._patterns is b._patterns and a._any is b._any  # compiled once
    assert a._seen is not b._seen and a._texts is not b._texts and a._mask_searches is not b._mask_searches
    assert out_a != out_b  # markers under each store's own secret
    assert out_a == Redactor(b"a" * 32).apply("arguments", SECRETS)[0]
    # other settings: other searches
    custom = Redactor(b"a" * 32, ContentPolicy(patterns=(r"\bzz[0-9]{3}\b",)))
    assert custom._patterns is not a._patterns
    out, changed = custom.apply("arguments", {"t": "id zz123 and hunter2", "password": "kept-by-key"})
    assert changed and "zz123" not in out["t"] and "hunter2" in out["t"] and out["password"] != "kept-by-key"


def test_a_shared_plan_redacts_as_a_freshly_built_one(monkeypatch):
    fresh_out = Redactor(b"s" * 32).apply("result", SECRETS)
    monkeypatch.setattr(redaction, "_PLANS", {})
    assert Redactor(b"s" * 32).apply("result", SECRETS) == fresh_out


def test_the_built_in_patterns_pass_the_check_they_are_spared():
    for pattern in redaction._BUILT_IN_PATTERNS:
        assert redaction._pattern_problem.__wrapped__(pattern, False) == ""
    assert set(DEFAULT_PATTERNS) <= redaction._BUILT_IN_PATTERNS
    with pytest.raises(Exception, match="can match the empty string"):
        ContentPolicy(patterns=("x*",))
    assert ContentPolicy.from_dict({"patterns": ["x*"]}).patterns == ("x*",)  # a pinned one still opens
