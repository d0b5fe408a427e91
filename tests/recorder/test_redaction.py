"""Redaction and content modes through the real Recorder and SQLite store (issue 3 §6, issue 4 §5).

``redacted`` (the default) replaces values under sensitive key names, at
configured paths and substrings matching patterns by HMAC markers before
anything is hashed; ``hashes-only`` keeps only a marker per content field;
``full`` keeps everything. The secret must appear nowhere in the store's files.
A decision whose condition read redacted arguments says ``re_evaluable: false``.

Tests named ``test_bug_*`` show a leak found here; they fail until it is fixed.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from sealbox.canonical import Tagged, decode
from sealbox.errors import ConfigError
from sealbox.policies import ALLOW_ALL
from sealbox.policy import Policy
from sealbox.recorder import Recorder, ToolDenied
from sealbox.redaction import ContentPolicy
from sealbox.store import init_store
from sealbox.verify import verify_store

MARKER = re.compile(r"^hmac-sha256:[0-9a-f]{64}$")
IN_STRING = re.compile(r"⟦redacted:hmac-sha256:[0-9a-f]{64}⟧")

PASSWORD = "correct-horse-battery-staple-91"
API_KEY = "AKx9-api-key-value-7f3e2d1c"
ACCESS = "ya29.access-token-value-2b8c"
REFRESH = "1//refresh-token-value-44aa"
AUTH = "Basic dXNlcjpzdXBlci1zZWNyZXQtYXV0aA=="
COOKIE = "session=cookie-secret-value-9911"
JWT = "abc.def.ghi123"
SECRETS = [PASSWORD, API_KEY, ACCESS, REFRESH, AUTH, COOKIE, JWT]


# --------------------------------------------------------------------------- helpers


def new_store(tmp_path: Path, name: str = "store", **content: Any):
    return init_store(tmp_path / name, content=ContentPolicy(**content) if content else None)


def assert_verified(store) -> None:
    report = verify_store(store)
    assert report.ok, [p.line() for p in report.problems]


def is_marker(value: Any) -> bool:
    return type(value) is dict and list(value) == ["$redacted"] and bool(MARKER.match(value["$redacted"]))


def events_of(store, run_id: str, kind: str) -> list:
    return [e for e in store.read_run(run_id) if e.kind == kind]


def file_bytes(folder: Path) -> bytes:
    """Every byte of every file in the store's folder (db, WAL, keys, checkpoint)."""
    return b"".join(p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file())


def every_text(store) -> str:
    """All strings and bytes (also dict keys and tag payloads) of every event, decoded, blobs resolved."""
    out: list[str] = []
    stack: list[Any] = []
    for e in store.read_range(0, store.size()):
        stack.append(decode(store.resolve(e.payload)))
    while stack:
        v = stack.pop()
        if isinstance(v, Tagged):
            stack.append(v.value)
        elif isinstance(v, dict):
            for k, x in v.items():
                stack.append(k)
                stack.append(x)
        elif isinstance(v, (list, tuple, set)):
            stack.extend(v)
        elif isinstance(v, str):
            out.append(v.encode("utf-8", "surrogatepass").decode("utf-8", "replace"))
        elif isinstance(v, bytes):
            out.append(v.decode("utf-8", "replace"))
    return "\n".join(out)


def assert_nowhere(store, folder: Path, secrets: list[str]) -> None:
    """Not in any blob, not in any decoded value, not in the files after close."""
    blobs = b"".join(c for _, _, c in store.iter_blobs() if c is not None)
    text = every_text(store)
    for s in secrets:
        assert s.encode() not in blobs, f"{s!r} is in a blob"
        assert s not in text, f"{s!r} is in a recorded value"
    store.close()
    data = file_bytes(folder)
    for s in secrets:
        assert s.encode() not in data, f"{s!r} is in the store's files"


def one_call(store, arguments: Any, fn, policy: Policy = ALLOW_ALL, server: str = "api", tool: str = "login"):
    rec = Recorder(store, policy=policy)
    with rec.run(agent="redaction") as run:
        got = run.call_tool(server, tool, arguments, fn)
    call = events_of(store, run.run_id, "tool.call")[0]
    decision = events_of(store, run.run_id, "policy.decision")[0]
    result = events_of(store, run.run_id, "tool.result")[0]
    return got, run, call, decision, result


SENSITIVE_ARGS = {
    "username": "ann",
    "password": PASSWORD,
    "API_KEY": API_KEY,
    "Access_Token": ACCESS,
    "refresh_token": REFRESH,
    "Authorization": AUTH,
    "COOKIE": COOKIE,
    "max_tokens": 256,
    "input_tokens": 12,
    "nested": [{"password": PASSWORD, "keep": 1}, [{"access_token": ACCESS, "scope": "read"}]],
    "note": f"retry with Bearer {JWT} if the first call fails",
}


# --------------------------------------------------------------------------- redacted (the default)


def test_default_mode_replaces_sensitive_keys_by_markers(tmp_path):
    store = new_store(tmp_path)
    assert store.content.mode == "redacted"
    received = []
    got, run, call, decision, result = one_call(store, SENSITIVE_ARGS, lambda **kw: received.append(kw) or "ok")
    assert got == "ok"
    assert received == [SENSITIVE_ARGS]  # the tool got the real values
    args = store.resolve(call.payload["arguments"])
    for key in ("password", "API_KEY", "Access_Token", "refresh_token", "Authorization", "COOKIE"):
        assert is_marker(args[key]), key
    assert args["username"] == "ann"
    assert args["max_tokens"] == 256 and args["input_tokens"] == 12
    assert is_marker(args["nested"][0]["password"]) and args["nested"][0]["keep"] == 1
    assert is_marker(args["nested"][1][0]["access_token"]) and args["nested"][1][0]["scope"] == "read"
    assert JWT not in args["note"]
    assert args["note"].startswith("retry with ") and args["note"].endswith(" if the first call fails")
    assert len(IN_STRING.findall(args["note"])) == 1
    # The decision's inputs hold the arguments as redacted too.
    inputs = store.resolve(decision.payload["inputs"])
    assert inputs["redacted"] is True
    assert is_marker(inputs["arguments"]["password"]) and inputs["arguments"]["max_tokens"] == 256
    assert_verified(store)
    assert_nowhere(store, tmp_path / "store", SECRETS)


def test_key_names_are_exact_not_substrings(tmp_path):
    store = new_store(tmp_path)
    args = {"max_tokens": 5, "input_tokens": 6, "output_tokens": 7, "password_hint": "pet name", "tokenizer": "cl100k",
            "my_api_key_name": "prod", "Password": PASSWORD}
    _, _, call, _, _ = one_call(store, args, lambda **kw: None)
    recorded = store.resolve(call.payload["arguments"])
    assert {k: v for k, v in recorded.items() if k != "Password"} == {k: v for k, v in args.items() if k != "Password"}
    assert is_marker(recorded["Password"])
    assert_verified(store)
    store.close()


def test_equal_secrets_give_equal_markers_and_different_secrets_differ(tmp_path):
    store = new_store(tmp_path)
    rec = Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="redaction") as run:
        run.call_tool("api", "a", {"password": PASSWORD, "note": f"Bearer {JWT}"}, lambda **kw: None)
        run.call_tool("api", "b", {"api_key": PASSWORD, "text": f"token: Bearer {JWT} here"}, lambda **kw: None)
        run.call_tool("api", "c", {"password": PASSWORD + "x", "note": f"Bearer {JWT}x"}, lambda **kw: None)
    a, b, c = (store.resolve(e.payload["arguments"]) for e in events_of(store, run.run_id, "tool.call"))
    assert a["password"] == b["api_key"]  # same secret, same marker, whatever the key
    assert a["password"] != c["password"]
    assert IN_STRING.findall(a["note"]) == IN_STRING.findall(b["text"])
    assert IN_STRING.findall(a["note"]) != IN_STRING.findall(c["note"])
    assert_verified(store)
    # Another store has another secret: the same password gets another marker there.
    other = new_store(tmp_path, "other")
    _, _, call, _, _ = one_call(other, {"password": PASSWORD}, lambda **kw: None)
    theirs = other.resolve(call.payload["arguments"])["password"]
    assert is_marker(theirs) and theirs != a["password"]
    other.close()
    store.close()


def test_secrets_in_every_content_field_never_reach_the_files(tmp_path):
    store = new_store(tmp_path)
    pem = "-----BEGIN PRIVATE KEY-----\n" + ("MIIEvQIBADANBgkqhkiG9w0BAQEFAASC" * 40) + "\n-----END PRIVATE KEY-----"
    rec = Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="redaction") as run:
        request = {"model": "gpt-4o", "messages": [
            {"role": "system", "content": "You are helpful. " * 50},
            {"role": "user", "content": f"use Bearer {JWT} to call the API"}],
            "extra_headers": {"Authorization": AUTH, "Cookie": COOKIE}}
        response = {"object": "chat.completion", "model": "gpt-4o", "choices": [{"index": 0, "message": {
            "role": "assistant", "content": f"I will use Bearer {JWT}."}}], "usage": {"prompt_tokens": 9}}
        run.model_call(request, response)
        token = run.call_tool("oauth", "exchange", {"client_secret": API_KEY, "code": "abc", "private_key": pem},
                              lambda **kw: {"access_token": ACCESS, "refresh_token": REFRESH, "expires_in": 3600})
        assert token["access_token"] == ACCESS  # the caller gets the real result
        run.save_state({"auth": {"password": PASSWORD, "cookie": COOKIE}, "history": request["messages"]})
    kinds = [e.kind for e in store.read_run(run.run_id)]
    assert kinds == ["run.started", "model.call", "tool.call", "policy.decision", "tool.result", "state.saved",
                     "run.ended"]
    result = store.resolve(events_of(store, run.run_id, "tool.result")[0].payload["result"])
    assert is_marker(result["access_token"]) and is_marker(result["refresh_token"]) and result["expires_in"] == 3600
    assert_verified(store)
    assert_nowhere(store, tmp_path / "store", SECRETS + ["MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"])


def test_configured_paths(tmp_path):
    store = new_store(tmp_path, paths=("arguments.user.ssn", "arguments.users.*.ssn", "result.card.number",
                                       "state.profile.dob"))
    args = {"user": {"name": "Ann", "ssn": "123-45-6789"}, "users": [{"name": "Bo", "ssn": "987-65-4321"}],
            "ssn": "top-level-not-on-a-path"}
    rec = Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="redaction") as run:
        run.call_tool("hr", "lookup", args, lambda **kw: {"card": {"number": "4111111111111111", "brand": "visa"}})
        run.save_state({"profile": {"dob": "1990-01-02", "city": "Oslo"}})
    recorded = store.resolve(events_of(store, run.run_id, "tool.call")[0].payload["arguments"])
    assert is_marker(recorded["user"]["ssn"]) and recorded["user"]["name"] == "Ann"
    assert is_marker(recorded["users"][0]["ssn"]) and recorded["users"][0]["name"] == "Bo"
    assert recorded["ssn"] == "top-level-not-on-a-path"
    result = store.resolve(events_of(store, run.run_id, "tool.result")[0].payload["result"])
    assert is_marker(result["card"]["number"]) and result["card"]["brand"] == "visa"
    state = store.resolve(events_of(store, run.run_id, "state.saved")[0].payload["state"])
    assert is_marker(state["profile"]["dob"]) and state["profile"]["city"] == "Oslo"
    assert_verified(store)
    assert_nowhere(store, tmp_path / "store", ["123-45-6789", "987-65-4321", "4111111111111111", "1990-01-02"])


def test_configured_patterns(tmp_path):
    store = new_store(tmp_path, patterns=(r"\b\d{3}-\d{2}-\d{4}\b", r"(?i)\bacct-[0-9]{6}\b"))
    args = {"text": "ssn 123-45-6789 and ACCT-123456, ssn again 123-45-6789", "password": PASSWORD}
    _, _, call, _, _ = one_call(store, args, lambda **kw: "ok")
    recorded = store.resolve(call.payload["arguments"])
    found = IN_STRING.findall(recorded["text"])
    assert len(found) == 3 and found[0] == found[2] != found[1]
    assert recorded["text"].startswith("ssn ⟦redacted:") and ", ssn again " in recorded["text"]
    assert is_marker(recorded["password"])  # the default keys still apply
    assert_verified(store)
    assert_nowhere(store, tmp_path / "store", ["123-45-6789", "ACCT-123456", PASSWORD])


# --------------------------------------------------------------------------- hashes-only and full


def test_hashes_only_keeps_only_markers_for_every_content_field(tmp_path):
    store = new_store(tmp_path, mode="hashes-only")
    ordinary = "an ordinary sentence that is not a secret at all"
    big = "lorem ipsum " * 100_000
    rec = Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="redaction") as run:
        run.model_call({"model": "gpt-4o", "messages": [{"role": "user", "content": ordinary}]},
                       {"object": "chat.completion", "model": "gpt-4o", "choices": [{"index": 0, "message": {
                           "role": "assistant", "content": ordinary + " reply"}}],
                        "usage": {"prompt_tokens": 11, "completion_tokens": 3}})
        got = run.call_tool("db", "query", {"sql": ordinary, "password": PASSWORD}, lambda **kw: {"rows": big})
        assert got == {"rows": big}
        run.save_state({"messages": [ordinary], "blob": big})
    events = store.read_run(run.run_id)
    fields = {"model.call": ("request", "response"), "tool.call": ("arguments",), "policy.decision": ("inputs",),
              "tool.result": ("result",), "state.saved": ("state",)}
    seen = set()
    for e in events:
        for name in fields.get(e.kind, ()):
            assert is_marker(store.resolve(e.payload[name])), (e.kind, name, e.payload[name])
            seen.add((e.kind, name))
    assert len(seen) == 6
    model = events_of(store, run.run_id, "model.call")[0]
    assert model.payload["usage"]["input_tokens"] == 11  # non-content fields stay
    call = events_of(store, run.run_id, "tool.call")[0]
    assert (call.payload["server"], call.payload["tool"]) == ("db", "query")
    # Nothing but commitments: a blob, if any (decision inputs are always one), holds only a marker.
    assert all(is_marker(json.loads(c)) for _, _, c in store.iter_blobs())
    assert_verified(store)
    assert_nowhere(store, tmp_path / "store", [ordinary, PASSWORD, "lorem ipsum lorem"])
    assert sum(p.stat().st_size for p in (tmp_path / "store").iterdir()) < len(big)


def test_full_mode_keeps_everything(tmp_path):
    store = new_store(tmp_path, mode="full")
    got, _, call, decision, result = one_call(store, SENSITIVE_ARGS, lambda **kw: {"access_token": ACCESS})
    assert got == {"access_token": ACCESS}
    assert decode(store.resolve(call.payload["arguments"])) == SENSITIVE_ARGS
    assert decode(store.resolve(result.payload["result"])) == {"access_token": ACCESS}
    assert store.resolve(decision.payload["inputs"])["redacted"] is False
    assert decision.payload["re_evaluable"] is True
    assert_verified(store)
    store.close()
    assert PASSWORD.encode() in file_bytes(tmp_path / "store")


# --------------------------------------------------------------------------- decisions on redacted arguments


READS_ARGUMENTS = """
version: 1
name: payments
rules:
  - id: small-payments
    match: {server: bank, tool: pay}
    when: 'call.arguments.amount < 100'
    effect: allow
  - id: by-role
    match: {server: bank, tool: balance}
    when: 'principal.role == "agent"'
    effect: allow
"""


@pytest.mark.parametrize("mode,arguments,tool,policy,expected", [
    ("redacted", {"amount": 5, "password": PASSWORD}, "pay", "cel", False),
    ("redacted", {"amount": 5, "memo": "nothing secret"}, "pay", "cel", True),
    ("redacted", {"amount": 5, "password": PASSWORD}, "balance", "cel", True),  # the rule never reads arguments
    ("redacted", {"amount": 5, "password": PASSWORD}, "pay", "allow_all", True),
    ("hashes-only", {"amount": 5}, "pay", "cel", False),
    ("hashes-only", {"amount": 5}, "pay", "allow_all", True),
    ("full", {"amount": 5, "password": PASSWORD}, "pay", "cel", True),
], ids=["redacted-read", "nothing-redacted", "rule-reads-principal", "allow-all", "hashes-only-read",
        "hashes-only-allow-all", "full"])
def test_decision_is_not_re_evaluable_when_its_condition_read_redacted_arguments(tmp_path, mode, arguments, tool,
                                                                                  policy, expected):
    store = new_store(tmp_path, mode=mode)
    chosen = Policy.from_text(READS_ARGUMENTS) if policy == "cel" else ALLOW_ALL
    ran = []
    got, run, call, decision, result = one_call(store, arguments, lambda **kw: ran.append(kw) or "paid",
                                                policy=chosen, server="bank", tool=tool)
    assert got == "paid" and ran == [arguments]  # decided on the real arguments
    assert decision.payload["effect"] == "allow"
    if policy == "cel":
        assert decision.payload["rule"] == ("small-payments" if tool == "pay" else "by-role")
    assert decision.payload["re_evaluable"] is expected
    assert_verified(store)
    store.close()


def test_redacted_condition_input_still_decides_deny_on_the_real_value(tmp_path):
    store = new_store(tmp_path)
    rec = Recorder(store, policy=Policy.from_text(READS_ARGUMENTS))
    with rec.run(agent="redaction") as run:
        with pytest.raises(ToolDenied):
            run.call_tool("bank", "pay", {"amount": 500, "password": PASSWORD}, lambda **kw: "paid")
    decision = events_of(store, run.run_id, "policy.decision")[0]
    assert decision.payload["effect"] == "deny" and decision.payload["re_evaluable"] is False
    assert [e.kind for e in store.read_run(run.run_id)] == ["run.started", "tool.call", "policy.decision", "run.ended"]
    assert_verified(store)
    assert_nowhere(store, tmp_path / "store", [PASSWORD])


# --------------------------------------------------------------------------- leaks found


SK = "sk-live0123456789abcdefghijkl"


def test_bug_secret_in_a_tool_error_message_is_stored_in_clear(tmp_path):
    """tool.result's error.message / error.traceback and run.ended's error.message
    are not content fields, so neither patterns nor hashes-only apply to them. An
    HTTP client's "401 for https://…?api_key=sk-…" puts the key in the log."""
    store = new_store(tmp_path)

    def tool(url: str) -> None:
        raise PermissionError(f"401 Unauthorized for {url}: Bearer {JWT} rejected")

    rec = Recorder(store, policy=ALLOW_ALL)
    with pytest.raises(PermissionError):
        with rec.run(agent="redaction") as run:
            run.call_tool("api", "get", {"url": f"https://api.example/v1?key={SK}"}, tool)
    assert [e.kind for e in store.read_run(run.run_id)][-2:] == ["tool.result", "run.ended"]
    assert_verified(store)
    assert_nowhere(store, tmp_path / "store", [SK, JWT])


@pytest.mark.parametrize("arguments", [
    {"raw_headers": [(b"authorization", f"Bearer {JWT}".encode())]},
    {"body": f"token={SK}".encode()},
    {"sessions": {SK: {"user": "ann"}}},
    {"text": f"Bearer {JWT} \ud800"},
    {"cfg": {1: "first", "password": PASSWORD}},
], ids=["bytes-header", "bytes-body", "dict-key", "str-with-lone-surrogate", "dict-with-int-key"])
def test_bug_secret_in_a_type_tagged_value_escapes_redaction(tmp_path, arguments):
    """The redactor walks the type-tagged encoding but does not look inside the
    tags: $bytes and $badstr (base64 of the text, so the pattern never sees it),
    dict keys (patterns only scrub values) and $map (a dict with a non-str key:
    key names are not checked). The secret is stored, base64-encoded or plain."""
    store = new_store(tmp_path)
    one_call(store, arguments, lambda **kw: "ok")
    assert_verified(store)
    assert_nowhere(store, tmp_path / "store", [JWT, SK, PASSWORD])


def test_bug_configured_path_misses_a_dict_with_a_dollar_key(tmp_path):
    """A dict with a key starting with "$" is encoded as {"$esc": {...}}, so the
    path arguments.user.ssn no longer matches (the walk sees arguments.user.$esc.ssn)."""
    store = new_store(tmp_path, paths=("arguments.user.ssn",))
    one_call(store, {"user": {"ssn": "123-45-6789", "$schema": "v1"}}, lambda **kw: "ok")
    assert_verified(store)
    assert_nowhere(store, tmp_path / "store", ["123-45-6789"])


# --------------------------------------------------------------------------- the quick check agrees with the walk

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from sealbox.canonical import encode  # noqa: E402
from sealbox.redaction import Redactor  # noqa: E402

_PIECES = ["bearer ", "BeArEr ", "Bearer\t", "abcdefghij", "sk-", "sk_live", "AKIA", "ABCDEFGHIJKLMNOP", "ghp_",
           "x" * 30, "-----BEGIN RSA PRIVATE KEY-----", "\n", "-----END RSA PRIVATE KEY-----", "password",
           "Token", "api_key", " ", "é", "\"", "\\", "$map", "$bytes", ":", "1.5", "\u212a", "pwd=", "hunter2",
           "name", "Key", "value"]
_secretish = st.lists(st.sampled_from(_PIECES), max_size=6).map("".join)
_PAIR_NAMES = ["Cookie", "AUTHORIZATION", "x_api_key", "X-Api-Key", "Password", "password ", "Accept", "\u212aey",
               "to\u212aen", "s\u0131d", "[", "a\"b", "é"]
_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | _secretish,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_secretish, inner, max_size=4)
    | st.tuples(st.sampled_from(_PAIR_NAMES) | _secretish, inner).map(list),  # [name, value] pairs (headers)
    max_leaves=20,
)
_POLICIES = [ContentPolicy(), ContentPolicy(patterns=(r"(?i)\btok(en)?\b", r"(?i)\bsecret|hunter2", r"\d{3}-\d{2}"),
                                            keys=("Password", "x-api-key")),
             ContentPolicy(patterns=(r"pwd=(?>\S+)\b", r"\bsk-\S++\b"))]


@settings(max_examples=600, deadline=None)
@given(value=_values, which=st.sampled_from([0, 1, 2]), raw=st.binary(max_size=12), c_scan=st.booleans())
def test_the_quick_check_never_disagrees_with_the_walk(value, which, raw, c_scan):
    """Redactor._clean (one canonical text, C-speed searches) may only say "nothing to redact" when
    the full walk redacts nothing; generated values mix secrets, sensitive keys, escapes and tags.
    Both forms of the check: the one-pass C scan (sealbox._speedups.scan_text) and the regex searches."""
    redactor = Redactor(b"k" * 32, _POLICIES[which])
    if c_scan and not redactor._scan:
        assert redactor._quick is False or os.environ.get("SEALBOX_REQUIRE_SPEEDUPS") != "1"
    redactor._scan = redactor._scan and c_scan
    value = encode({"v": value, "b": raw} if raw else value)
    quick, quick_changed = redactor.apply("arguments", value)
    changed = [False]
    walked = redactor._walk(value, ["arguments"], changed)
    assert (quick, quick_changed) == (walked, changed[0])


def test_the_quick_check_is_off_where_it_would_be_unsound():
    assert Redactor(b"k" * 32, ContentPolicy(paths=("arguments.user",)))._quick is False
    assert Redactor(b"k" * 32, ContentPolicy(patterns=(r"^sk-\w+",)))._quick is False
    assert Redactor(b"k" * 32, ContentPolicy(keys=("pässword",)))._quick is False
    for possessive in (r"pwd=(?>\S+)\b", r"\bpwd=\S++\b", r"k=\w*+x", r"k=\d?+1", r"k=\d{2,}+\b"):
        redactor = Redactor(b"k" * 32, ContentPolicy(patterns=(possessive,)))
        assert redactor._quick is False, possessive
    redactor = Redactor(b"k" * 32, ContentPolicy(patterns=(r"pwd=(?>\S+)\b",)))
    assert redactor.apply("arguments", {"dsn": "host=db pwd=hunter2"})[1] is True
    assert Redactor(b"k" * 32, ContentPolicy())._quick is True


@pytest.mark.parametrize("value", [
    {"accessToken": "abc123"}, {"X-Auth-Token": "abc123"}, {"CLIENT-SECRET": "abc123"}, {"aws_secret_access_key": "abc123"},
    {"nested": [{"refreshToken": "abc123"}]},
])
def test_sensitive_keys_match_in_any_case_and_with_or_without_separators(value):
    redactor = Redactor(b"k" * 32, ContentPolicy())
    out, changed = redactor.apply("arguments", encode(value))
    assert changed is True
    assert "abc123" not in json.dumps(out)


@pytest.mark.parametrize("text, secret", [
    ("token github_pat_11ABCDEFG0123456789abcdefghij_more", "github_pat_11ABCDEFG0123456789abcdefghij_more"),
    ("slack xoxb-1234567890-abcdefghij", "xoxb-1234567890-abcdefghij"),
    ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJl", "eyJzdWIiOiIxMjM0NTY3ODkwIn0"),
    ("dsn postgres://app:hunter2@db:5432/shop", "hunter2"),
    ("aws ASIAABCDEFGHIJKLMNOP here", "ASIAABCDEFGHIJKLMNOP"),
])
def test_more_secret_shapes_are_redacted_by_default(text, secret):
    out, changed = Redactor(b"k" * 32, ContentPolicy()).apply("result", encode({"text": text}))
    assert changed is True and secret not in out["text"] and "⟦redacted:hmac-sha256:" in out["text"]


def test_non_string_keys_and_lossy_reprs_do_not_carry_secrets_past_redaction():
    import enum
    import types

    class Header(str, enum.Enum):
        AUTH = "Authorization"

    value = {"h": {Header.AUTH: "LEAK1"}, "b": {b"api_key": b"LEAK2"}, "ns": types.SimpleNamespace(password="LEAK3"),
             "ok": types.SimpleNamespace(colour="blue")}
    out, changed = Redactor(b"k" * 32, ContentPolicy()).apply("arguments", encode(value))
    text = json.dumps(out)
    assert changed is True
    for leak in ("LEAK1", "TEVBSzI=", "LEAK3"):  # TEVBSzI= is base64 of LEAK2
        assert leak not in text
    assert out["ns"]["$lossy"]["reason"] == "unsupported" and out["ns"]["$lossy"]["repr"].startswith("⟦redacted:")
    assert out["ok"]["$lossy"]["repr"] == "namespace(colour='blue')"


def test_a_private_key_cut_by_the_traceback_truncation_is_still_redacted(tmp_path):
    pem = "-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join("MIIEow" + "A" * 58 for _ in range(60)) + \
          "\n-----END RSA PRIVATE KEY-----"
    store = init_store(tmp_path / "s")
    try:
        def load_key() -> None:
            raise ValueError("could not load key (" + "x" * 1200 + "): " + pem)

        with pytest.raises(ValueError):
            with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
                run.call_tool("vault", "load", {}, lambda: load_key())
        (result,) = [e for e in store.read_run(run.run_id) if e.kind == "tool.result"]
        error = result.payload["error"]
        assert "MIIEow" not in error["message"] and "MIIEow" not in error["traceback"]
        assert "⟦redacted:hmac-sha256:" in error["traceback"]
    finally:
        store.close()
    assert b"MIIEow" not in b"".join(p.read_bytes() for p in (tmp_path / "s").iterdir() if p.is_file())


@pytest.mark.parametrize("patterns, text", [
    ((r"ssn-(\d{3})", r"pin=(\d)\1\1\1"), "my pin=7777 ok"),            # a backreference after another group
    ((r"(x)y", r"(a)?(?(1)b|c)z"), "abz"),                                 # a conditional on a group number
    ((r"(?i)(k)ey-(\d+)", r"(?P<d>\d)(?P=d)(?P=d)-code"), "999-code"),     # a named backreference
])
def test_patterns_referring_to_their_groups_by_number_still_redact(tmp_path, patterns, text):
    """Joined into one alternation, a pattern's \\1 would name another pattern's group (found by a
    fresh-clone break test): such patterns are searched on their own, and the secret is redacted."""
    red = Redactor(b"k" * 32, ContentPolicy(keys=(), patterns=patterns))
    out, changed = red.apply("arguments", {"note": text})
    assert changed and "⟦redacted:hmac-sha256:" in out["note"]
    assert re.search(patterns[1], out["note"]) is None


# --------------------------------------------------------------------------- the quick verdict's shortcuts


def test_the_quick_verdict_is_kept_per_text_and_per_policy(tmp_path):
    """Redactor._clean keeps its last verdicts by canonical text: the same text gets the same
    answer on a second look, and another policy's redactor decides afresh."""
    from sealbox.canonical import canonical_bytes
    from sealbox.redaction import Redactor

    value = {"query": "select 1", "motto": "open sesame"}
    data = canonical_bytes(value)
    default = Redactor(b"k" * 32)
    strict = Redactor(b"k" * 32, ContentPolicy(patterns=("sesame",)))
    assert default.surely_clean(value, data) and default.surely_clean(value, data)
    assert not strict.surely_clean(value, data) and not strict.surely_clean(value, data)
    assert default.apply("arguments", value, data) == (value, False)
    out, changed = strict.apply("arguments", value, data)
    assert changed and out["query"] == "select 1" and "sesame" not in out["motto"]
    assert data in default._seen and default._seen[data] is True and strict._seen[data] is False
    for i in range(20):  # bounded: a few texts at a time
        default.surely_clean({"i": i})
    assert len(default._seen) <= 8
    paths = Redactor(b"k" * 32, ContentPolicy(paths=("arguments.motto",)))
    assert not paths.surely_clean(value, data)  # a path rule: no quick verdict at all


def test_decision_inputs_clean_as_a_whole_are_stored_as_before(tmp_path):
    """Inputs whose canonical text is clean skip the separate arguments pass and are written as
    one blob from the bytes already made: the same commitment as canonical_bytes gives."""
    from sealbox import blobs
    from sealbox.canonical import canonical_bytes

    store = new_store(tmp_path)
    args = {"query": "select * from orders where id = 42", "limit": 5}
    got, run, call, decision, result = one_call(store, args, lambda **kw: "ok")
    assert got == "ok"
    ref = decision.payload["inputs"]["$blob"]
    inputs = store.resolve(decision.payload["inputs"])
    assert inputs["arguments"] == args and inputs["redacted"] is False
    content = canonical_bytes(inputs)
    assert ref == blobs.commitment(blobs.salt_for(store._builder._secret, content), content)
    assert_verified(store)


def test_decision_inputs_with_a_secret_in_the_arguments_only_are_still_redacted(tmp_path):
    """The whole-inputs verdict fails when the arguments hold a sensitive key: the arguments pass runs."""
    store = new_store(tmp_path)
    got, run, call, decision, result = one_call(store, {"user": "ann", "password": PASSWORD}, lambda **kw: "ok")
    inputs = store.resolve(decision.payload["inputs"])
    assert inputs["arguments"]["user"] == "ann" and is_marker(inputs["arguments"]["password"])
    assert PASSWORD not in json.dumps(inputs)
    assert_verified(store)


# --------------------------------------------------------------------------- results echoing argument secrets


def _marker_hex(value: dict) -> str:
    assert is_marker(value), value
    return value["$redacted"].split(":", 1)[1]


def test_a_result_echoing_a_redacted_argument_stores_its_marker_not_the_secret(tmp_path):
    """A tool that repeats the password it was given, under ordinary keys, in a key, in
    bytes and in a dict with a "$" key: the caller gets the real result, the record the
    in-string marker of the argument's marker (same HMAC), nowhere the secret."""
    store = new_store(tmp_path)

    def login(user: str, password: str) -> dict:
        return {"message": f"logged in {user} with {password}!", "raw": b"pw=" + password.encode(),
                "seen": {password: True}, "$echo": [password], "user": user}

    got, run, call, _, result = one_call(store, {"user": "bob", "password": PASSWORD}, login)
    assert got["message"] == f"logged in bob with {PASSWORD}!"  # the agent is not affected
    hex_ = _marker_hex(call.payload["arguments"]["password"])
    mark = f"⟦redacted:hmac-sha256:{hex_}⟧"
    stored = store.resolve(result.payload)["result"]
    assert stored == {"$esc": {
        "$echo": [mark],
        "message": f"logged in bob with {mark}!",
        "raw": {"$bytes": __import__("base64").b64encode(b"pw=" + mark.encode()).decode()},
        "seen": {mark: True},
        "user": "bob",
    }}
    assert_verified(store)
    assert_nowhere(store, tmp_path / "store", [PASSWORD])


def test_a_result_is_unchanged_when_nothing_was_redacted_from_the_arguments(tmp_path):
    """Only values redaction took out of *this* call's arguments are looked for; a result
    without them, or a call whose arguments hold no secret, is stored exactly."""
    store = new_store(tmp_path)
    value = {"user": "bob", "note": PASSWORD, "n": 3, "b": b"\x00\xff"}
    _, _, _, _, result = one_call(store, {"user": "bob"}, lambda user: value)
    assert store.resolve(result.payload)["result"] == {"b": {"$bytes": "AP8="}, "n": 3, "note": PASSWORD,
                                                       "user": "bob"}
    _, _, _, _, result = one_call(store, {"password": PASSWORD}, lambda password: {"ok": True, "n": 1.5})
    assert store.resolve(result.payload)["result"] == {"n": 1.5, "ok": True}


def test_short_argument_secrets_are_not_scrubbed_from_results(tmp_path):
    """As for error messages: values under 4 characters would scrub ordinary words."""
    store = new_store(tmp_path)
    _, _, _, _, result = one_call(store, {"password": "abc"}, lambda password: f"abcdef {password}")
    assert store.resolve(result.payload)["result"] == "abcdef abc"


def test_full_mode_keeps_an_echoed_secret(tmp_path):
    store = new_store(tmp_path, mode="full")
    _, _, _, _, result = one_call(store, {"password": PASSWORD}, lambda password: f"pw {password}")
    assert store.resolve(result.payload)["result"] == f"pw {PASSWORD}"


async def _async_echo(access_token: str) -> list:
    return [access_token, {"t": access_token}]


def test_acall_tool_scrubs_an_echoed_secret_too(tmp_path):
    import asyncio

    store = new_store(tmp_path)
    rec = Recorder(store, policy=ALLOW_ALL)

    async def main() -> tuple[Any, str]:
        async with rec.run(agent="redaction") as run:
            return await run.acall_tool("api", "echo", {"access_token": ACCESS}, _async_echo), run.run_id

    got, run_id = asyncio.run(main())
    assert got == [ACCESS, {"t": ACCESS}]
    call = events_of(store, run_id, "tool.call")[0]
    mark = f"⟦redacted:hmac-sha256:{_marker_hex(call.payload['arguments']['access_token'])}⟧"
    result = events_of(store, run_id, "tool.result")[0]
    assert store.resolve(result.payload)["result"] == [mark, {"t": mark}]
    assert_nowhere(store, tmp_path / "store", [ACCESS])


@pytest.mark.parametrize("path, problem", [
    ("arguments.user.ssn", ""), ("request.messages.*.content", ""), ("*.ssn", ""), ("res*.token", ""),
    ("about.customer", ""), ("user.ssn", "redaction path 'user.ssn' starts with no content field"),
    ("ssn", "redaction path 'ssn' starts with no content field"),
    ("arguments..ssn", "redaction path 'arguments..ssn' has an empty segment"),
    ("arguments.", "redaction path 'arguments.' has an empty segment"),
])
def test_path_problem_names_a_path_that_could_never_redact(path, problem):
    # Regression (input: --redact-path without its content field): init kept 'user.ssn' and
    # the store then recorded arguments.user.ssn in clear
    from sealbox.redaction import path_problem

    assert path_problem(path)[:len(problem)] == problem and bool(path_problem(path)) == bool(problem)


def test_every_path_root_is_a_field_the_store_redacts(tmp_path):
    from sealbox.events import CONTENT_FIELDS
    from sealbox.redaction import PATH_ROOTS

    assert set(PATH_ROOTS) == {name for names in CONTENT_FIELDS.values() for name in names} | {"about"}


# --------------------------------------------------------------------------- patterns a store refuses

_EMPTY_MATCH_WHY = ("can match the empty string (its empty matches would put markers into strings that hold no "
                    "secret, dict keys included); make every match at least one character long")


@pytest.mark.parametrize("pattern", ["x*", "(?=a)", "^", r"\b", r"\B", "$", "a|", "(?<=a)", r"(a*)\1", "(?:ab)?",
                                     r"\d{0,3}", "(?i)(?!x)"])
def test_a_pattern_that_can_match_the_empty_string_is_refused(tmp_path, pattern):
    """x*, (?=a), ^ and \\b were accepted and put a marker between the characters of every string and
    dict key ({"q": "banana"} recorded as {"⟦redacted…⟧q⟦redacted…⟧": ...})."""
    with pytest.raises(ConfigError) as exc:
        ContentPolicy(patterns=(pattern,))
    assert str(exc.value) == f"redaction pattern {pattern!r} {_EMPTY_MATCH_WHY}"
    with pytest.raises(ConfigError):
        init_store(tmp_path / "s", content=ContentPolicy(
            patterns=(*ContentPolicy().patterns, pattern)))
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("pattern, why", [
    ("a{99999999999}", "a number in it is too large (the repetition number is too large)"),
    ("(" * 500 + ")" * 500, "it is nested too deeply"),
    ("(unclosed", "missing ), unterminated subpattern at position 0"),
])
def test_a_pattern_re_compile_cannot_build_is_a_config_error(pattern, why):
    """OverflowError and RecursionError from re.compile escaped ContentPolicy (it caught re.error only)."""
    with pytest.raises(ConfigError) as exc:
        ContentPolicy(patterns=(pattern,))
    shown = repr(pattern) if len(pattern) <= 80 else repr(pattern[:79]) + "…"
    assert str(exc.value) == f"redaction pattern {shown} is not a valid regular expression: {why}"


def test_patterns_that_match_at_least_one_character_are_kept_and_keys_stay_readable(tmp_path):
    from sealbox.redaction import DEFAULT_PATTERNS, pattern_problem

    assert [pattern_problem(p) for p in DEFAULT_PATTERNS] == [""] * len(DEFAULT_PATTERNS)
    for fine in (r"\bEMP-[0-9]{6}\b", "(?<=id=)[0-9]+", r"x+", "(?:ab)+", r"^sk-\w+"):
        assert pattern_problem(fine) == "", fine
    store = new_store(tmp_path, patterns=(r"\bEMP-[0-9]{6}\b",))
    _, _, call, _, _ = one_call(store, {"q": "banana", "EMP-123456": "EMP-654321"}, lambda **kw: "ok")
    recorded = store.resolve(call.payload["arguments"])
    assert recorded["q"] == "banana"  # no marker in a key or a value without a match
    (key,) = [k for k in recorded if k != "q"]
    assert IN_STRING.fullmatch(key) and IN_STRING.fullmatch(recorded[key])  # a secret used as a key is redacted too
    assert_verified(store)
    assert_nowhere(store, tmp_path / "store", ["EMP-123456", "EMP-654321"])


def test_a_store_created_with_an_empty_matching_pattern_still_opens():
    """Settings pinned before such patterns were refused are read as they are (from_dict)."""
    policy = ContentPolicy.from_dict({"mode": "redacted", "keys": ["password"], "paths": [], "patterns": ["x*"]})
    assert (policy.mode, policy.keys, policy.patterns) == ("redacted", ("password",), ("x*",))
    with pytest.raises(ConfigError, match="is not a valid regular expression"):
        ContentPolicy.from_dict({"patterns": ["a{99999999999}"]})


# --------------------------------------------------------------------------- [name, value] pairs (header lists)

HEADERS = {"url": "https://api.example.com",
           "headers": [("Cookie", "sessionid=COOKIEPAIRSECRET"), ("Authorization", "Basic QkFTSUNTRUNSRVQ6eA=="),
                       ("Accept", "application/json"), ("X-Api-Key", "APIKEYPAIRSECRET"), ("set_cookie", None)],
           "raw": [["proxy-authorization", ["Digest", "PROXYSECRET"]], ["cookie", "A", "B"]]}


@pytest.mark.parametrize("c_scan", [True, False])
def test_the_value_of_a_name_value_pair_named_as_a_sensitive_key_is_redacted(tmp_path, c_scan, monkeypatch):
    """headers=[("Cookie", "sessionid=..."), ("Authorization", "Basic ...")] was stored in clear: key names
    were only looked for in mappings. A two-item list whose first item is a sensitive key name (compared as
    keys are: case and - / _ ignored) now has its second item replaced by its marker; the name stays."""
    if not c_scan:
        monkeypatch.setattr("sealbox.redaction._c_scan_text", None)
    store = new_store(tmp_path)
    assert store.redactor._scan is (c_scan and __import__("sealbox.redaction").redaction._c_scan_text is not None)
    _, _, call, _, _ = one_call(store, HEADERS, lambda **kw: "ok")
    got = store.resolve(call.payload["arguments"])
    assert got["url"] == HEADERS["url"]
    cookie, auth, accept, api_key, set_cookie = got["headers"]
    assert cookie[0] == "Cookie" and is_marker(cookie[1])
    assert auth[0] == "Authorization" and is_marker(auth[1])
    assert api_key[0] == "X-Api-Key" and is_marker(api_key[1])
    assert accept == ["Accept", "application/json"]  # not a sensitive name
    assert set_cookie == ["set_cookie", None]  # None is kept, as under a key
    proxy, three = got["raw"]
    assert proxy[0] == "proxy-authorization" and is_marker(proxy[1])  # the whole value, a list here
    assert three == ["cookie", "A", "B"]  # three items: not a pair
    # the marker is the one the same value gets under a key
    assert cookie[1] == store.redactor.marker("sessionid=COOKIEPAIRSECRET")
    assert_verified(store)
    assert_nowhere(store, tmp_path / "store", ["COOKIEPAIRSECRET", "QkFTSUNTRUNSRVQ6eA", "APIKEYPAIRSECRET",
                                               "PROXYSECRET"])


def test_a_pair_value_is_scrubbed_from_the_tool_error_and_an_echoing_result(tmp_path):
    store = new_store(tmp_path)

    def fail(**kw):
        raise RuntimeError(f"login refused for cookie {kw['headers'][0][1]}")

    with pytest.raises(RuntimeError):
        one_call(store, {"headers": [["Cookie", "sessionid=COOKIEPAIRSECRET"]]}, fail)
    _, _, _, _, result = one_call(store, {"headers": [["Cookie", "sessionid=OTHERPAIRSECRET"]]},
                                  lambda **kw: {"echo": kw["headers"][0][1]})
    assert IN_STRING.fullmatch(store.resolve(result.payload["result"])["echo"])
    assert_verified(store)
    assert_nowhere(store, tmp_path / "store", ["COOKIEPAIRSECRET", "OTHERPAIRSECRET"])


def test_pairs_follow_the_configured_keys_and_full_mode_keeps_them(tmp_path):
    value = encode({"h": [["Cookie", "c1"], ["SSN", "123-45-6789"]]})
    only_ssn = Redactor(b"k" * 32, ContentPolicy(keys=("ssn",)))  # keys= replaces the defaults
    out, changed = only_ssn.apply("arguments", value)
    assert changed and out["h"][0] == ["Cookie", "c1"] and out["h"][1][0] == "SSN" and is_marker(out["h"][1][1])
    assert Redactor(b"k" * 32, ContentPolicy(mode="full")).apply("arguments", value) == (value, False)
    assert Redactor(b"k" * 32, ContentPolicy(keys=())).apply("arguments", value) == (value, False)
    # a pair whose name is not sensitive: the documented workaround is a path (or a pattern)
    by_path = Redactor(b"k" * 32, ContentPolicy(paths=("arguments.headers.*.1",)))
    out, changed = by_path.apply("arguments", encode({"headers": [["X-Session", "SESSIONVALUE"], ["Accept", "j"]]}))
    assert changed and out["headers"][0][0] == "X-Session" and is_marker(out["headers"][0][1])
    assert out["headers"][1][0] == "Accept" and is_marker(out["headers"][1][1])


def test_only_the_kelvin_sign_lower_cases_to_one_ascii_letter():
    """The Python form of the pair check (redaction._pair_regex) spells each key letter in both ASCII
    cases plus _FOLDS_TO_ASCII; str.lower() must give no other way to reach a key's name."""
    from sealbox.redaction import _FOLDS_TO_ASCII

    others = {}
    for i in range(0x80, 0x110000):
        if 0xD800 <= i < 0xE000:
            continue
        low = chr(i).lower()
        if len(low) == 1 and low.isascii():
            others[low] = chr(i)
    assert others == _FOLDS_TO_ASCII
    redactor = Redactor(b"k" * 32, ContentPolicy())
    redactor._scan = False
    out, changed = redactor.apply("arguments", encode({"h": [["CO-O\u212aIE", "v"], ["Accept", "j"]]}))
    assert changed and is_marker(out["h"][0][1]) and out["h"][1] == ["Accept", "j"]


# --------------------------------------------------------------------------- JSON held in a string


def test_a_secret_in_a_models_json_string_arguments_never_reaches_the_store(tmp_path):
    """OpenAI chat and Responses send a function call's arguments as a JSON *string*; the tool.call
    decodes it (its password becomes a marker) but the model.call kept the text, secret and all.
    Now the text holds the in-string marker of the same HMAC, in the response and in the next request."""
    store = new_store(tmp_path)
    rec = Recorder(store, policy=ALLOW_ALL)
    chat_args = json.dumps({"user": "bob", "password": PASSWORD}, separators=(",", ":"))
    chat = {"id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": None,
                "tool_calls": [{"id": "call_1", "type": "function",
                                "function": {"name": "login", "arguments": chat_args}}]}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}}
    responses = {"id": "resp_1", "object": "response", "model": "gpt-4o",
                 "output": [{"type": "function_call", "id": "fc_1", "call_id": "c_r", "name": "login",
                             "arguments": json.dumps({"api_key": API_KEY}), "status": "completed"}],
                 "usage": {"input_tokens": 1, "output_tokens": 1}}
    with rec.run(agent="redaction") as run:
        m = run.model_call({"model": "gpt-4o", "messages": [{"role": "user", "content": "log in"}]}, chat)
        assert m.tool_calls[0].arguments == {"user": "bob", "password": PASSWORD}  # the agent gets the real ones
        run.call_tool("api", "login", m.tool_calls[0].arguments, lambda user, password: "ok", call_id="call_1")
        follow_up = [{"role": "user", "content": "log in"}, chat["choices"][0]["message"],
                     {"role": "tool", "tool_call_id": "call_1", "content": "ok"}]
        run.model_call({"model": "gpt-4o", "messages": follow_up}, responses)
    calls = events_of(store, run.run_id, "model.call")
    mark = f"⟦redacted:hmac-sha256:{_marker_hex(events_of(store, run.run_id, 'tool.call')[0].payload['arguments']['password'])}⟧"
    first = store.resolve(calls[0].payload)
    stored = first["response"]["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(stored) == {"user": "bob", "password": mark}
    second = store.resolve(calls[1].payload)
    assert json.loads(second["request"]["messages"][1]["tool_calls"][0]["function"]["arguments"]) == \
        {"user": "bob", "password": mark}
    api_key = json.loads(second["response"]["output"][0]["arguments"])["api_key"]
    assert IN_STRING.fullmatch(api_key)
    assert first["tool_call_ids"] == ["call_1"] and second["tool_call_ids"] == ["c_r"]
    assert_verified(store)
    assert_nowhere(store, tmp_path / "store", [PASSWORD, API_KEY])


def test_json_text_is_kept_as_it_is_when_nothing_in_it_is_redacted(tmp_path):
    """Only a JSON text that loses something is rewritten: other texts, JSON or not, are stored exactly."""
    store = new_store(tmp_path)
    texts = ['{"city":"Paris",  "n": 1}', "[1, 2,3]", "{not json", '{"max_tokens": 5}', "[", " {}"]
    _, _, call, _, result = one_call(store, {"t": texts}, lambda t: t)
    assert store.resolve(call.payload)["arguments"] == {"t": texts}
    assert store.resolve(result.payload)["result"] == texts


def test_json_text_secrets_are_scrubbed_from_errors_and_echoing_results(tmp_path):
    """A value redacted from JSON text in the arguments counts as redacted from the arguments: the
    tool's error message and a result that repeats it get its in-string marker too."""
    store = new_store(tmp_path)

    def post(body: str) -> str:
        raise RuntimeError(f"rejected {json.loads(body)['token']}")

    rec = Recorder(store, policy=ALLOW_ALL)
    body = json.dumps({"token": ACCESS, "to": "x"})
    with pytest.raises(RuntimeError, match=re.escape(ACCESS)):  # the caller's exception is unchanged
        with rec.run(agent="redaction") as run:
            run.call_tool("api", "post", {"body": body}, post)
    _, _, _, _, echoed = one_call(store, {"body": body}, lambda body: f"sent {json.loads(body)['token']}")
    mark = f"⟦redacted:hmac-sha256:{Redactor(store.redactor.secret).marker(ACCESS)['$redacted'][12:]}⟧"
    stored_call = store.resolve(events_of(store, run.run_id, "tool.call")[0].payload)["arguments"]
    assert json.loads(stored_call["body"]) == {"token": mark, "to": "x"}
    error = store.resolve(events_of(store, run.run_id, "tool.result")[0].payload)["error"]
    assert error["message"] == f"rejected {mark}"
    assert store.resolve(echoed.payload)["result"] == f"sent {mark}"
    assert_verified(store)
    assert_nowhere(store, tmp_path / "store", [ACCESS])


# --------------------------------------------------------------------------- paths through objects


def test_configured_paths_reach_into_pydantic_models_and_dataclasses(tmp_path):
    """An object is encoded as {"$pydantic"|"$dataclass": {"type", "fields"}}, so a path such as
    result.content or state.messages.*.content (a LangChain ToolMessage, a list of messages) never
    matched: the text was stored. Now the object is its fields for paths, as a dict is."""
    import dataclasses

    import pydantic

    class Message(pydantic.BaseModel):
        role: str
        content: str

    @dataclasses.dataclass
    class Reply:
        content: str
        status: str

    store = new_store(tmp_path, paths=("result.content", "state.messages.*.content", "request.messages.*.content"))
    rec = Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="paths") as run:
        got = run.call_tool("api", "ask", {"q": "x"}, lambda q: Reply(content="PRIVATE-RESULT-1", status="ok"))
        run.save_state({"messages": [Message(role="user", content="PRIVATE-STATE-1"), {"role": "ai", "content": "PRIVATE-STATE-2"}]})
        run.model_call({"model": "m", "messages": [Message(role="user", content="PRIVATE-REQUEST-1")]}, {"text": "ok"})
    assert got.content == "PRIVATE-RESULT-1"
    result = store.resolve(events_of(store, run.run_id, "tool.result")[0].payload)["result"]
    assert result["$dataclass"]["fields"]["status"] == "ok" and is_marker(result["$dataclass"]["fields"]["content"])
    assert result["$dataclass"]["type"].endswith("Reply")
    state = store.resolve(events_of(store, run.run_id, "state.saved")[0].payload)["state"]
    assert state["messages"][0]["$pydantic"]["fields"]["role"] == "user"
    assert is_marker(state["messages"][0]["$pydantic"]["fields"]["content"]) and is_marker(state["messages"][1]["content"])
    request = store.resolve(events_of(store, run.run_id, "model.call")[0].payload)["request"]
    assert request["messages"][0]["role"] == "user" and is_marker(request["messages"][0]["content"])  # made plain
    assert_verified(store)
    assert_nowhere(store, tmp_path / "store", ["PRIVATE-RESULT-1", "PRIVATE-STATE-1", "PRIVATE-STATE-2", "PRIVATE-REQUEST-1"])


def test_a_tool_output_echoing_a_secret_is_scrubbed_from_the_next_model_request_and_the_saved_state(tmp_path):
    """The tool.result of a login tool that says "logged in with <password>" stores the marker, but
    the agent sends that output back to the model: the next model.call's request, and a saved
    conversation, held the password in clear. They now hold the same in-string marker."""
    store = new_store(tmp_path)
    rec = Recorder(store, policy=ALLOW_ALL)
    first = {"id": "c1", "object": "chat.completion", "model": "gpt-4o", "choices": [{"index": 0, "message": {
        "role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "login", "arguments": json.dumps({"user": "bob", "password": PASSWORD})}}]}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 5}}
    with rec.run(agent="redaction") as run:
        m = run.model_call({"model": "gpt-4o", "messages": [{"role": "user", "content": "log in"}]}, first)
        tc = m.tool_calls[0]
        output = run.call_tool("api", "login", tc.arguments, lambda user, password: f"logged in {user} with {password}",
                               call_id=tc.id)
        messages = [{"role": "user", "content": "log in"}, first["choices"][0]["message"],
                    {"role": "tool", "tool_call_id": "call_1", "content": output}]
        run.model_call({"model": "gpt-4o", "messages": messages},
                       {"id": "c2", "object": "chat.completion", "model": "gpt-4o", "choices": [{"index": 0, "message": {
                           "role": "assistant", "content": f"Done: {output}"}}],
                        "usage": {"prompt_tokens": 9, "completion_tokens": 3}})
        run.save_state({"messages": messages})
    assert output == f"logged in bob with {PASSWORD}"  # the agent is not affected
    mark = f"⟦redacted:hmac-sha256:{_marker_hex(events_of(store, run.run_id, 'tool.call')[0].payload['arguments']['password'])}⟧"
    second = store.resolve(events_of(store, run.run_id, "model.call")[1].payload)
    assert second["request"]["messages"][2] == {"role": "tool", "tool_call_id": "call_1", "content": f"logged in bob with {mark}"}
    assert second["response"]["choices"][0]["message"]["content"] == f"Done: logged in bob with {mark}"
    state = store.resolve(events_of(store, run.run_id, "state.saved")[0].payload)["state"]
    assert state["messages"][2]["content"] == f"logged in bob with {mark}"
    assert_verified(store)
    assert_nowhere(store, tmp_path / "store", [PASSWORD])


def test_model_calls_and_state_are_stored_as_given_when_no_argument_lost_anything(tmp_path):
    store = new_store(tmp_path)
    rec = Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="redaction") as run:
        run.call_tool("api", "echo", {"text": PASSWORD}, lambda text: text)  # not under a sensitive name: kept
        run.model_call({"model": "m", "messages": [{"role": "tool", "content": PASSWORD}]}, {"text": PASSWORD})
        run.save_state({"last": PASSWORD})
    assert store.resolve(events_of(store, run.run_id, "model.call")[0].payload)["request"]["messages"][0]["content"] == PASSWORD
    assert store.resolve(events_of(store, run.run_id, "state.saved")[0].payload)["state"] == {"last": PASSWORD}


@pytest.mark.parametrize("text, redacted", [
    ('{"Pass-Word" : "xyz-secret-1"}', True),           # a sensitive name however spelled and spaced
    ('{"pass\\u0077ord": "xyz-secret-1"}', True),        # or written with a \u escape
    ('[ "Cookie" , "session=1" ]', True),                # a [name, value] pair
    ('{"body": "{\\"password\\": \\"xyz-secret-1\\"}"}', True),  # JSON text inside JSON text (its quotes escaped)
    ('["{\\"api_key\\": \\"xyz-secret-1\\"}"]', True),
    ('{"city": "Paris", "tokens": 3}', False),           # no sensitive name: not rewritten (nor parsed)
    ('{"note": "the password is in the vault"}', False),  # the word in a value is no key
])
def test_json_text_is_redacted_when_it_names_a_sensitive_key(text, redacted):
    redactor = Redactor(b"k" * 32)
    out, changed = redactor.apply("arguments", {"body": text})
    assert changed is redacted
    if redacted:
        assert "xyz-secret-1" not in out["body"] and "session=1" not in out["body"]
        assert IN_STRING.search(out["body"])
    else:
        assert out == {"body": text}


def test_a_conversation_resent_each_turn_is_not_searched_again(tmp_path, monkeypatch):
    """A conversation holding JSON text (tool outputs, function-call arguments) declines the quick
    check, so every turn walks it whole; its strings' verdicts are kept, so that a 200-turn
    conversation does not run the patterns over every earlier message again each turn. A kept
    verdict says the same: the text's markers, and that the value changed."""
    from sealbox.redaction import Redactor

    redactor = Redactor(b"k" * 32)
    searched: list[str] = []
    scrub = Redactor._scrub
    monkeypatch.setattr(Redactor, "_scrub", lambda self, text, changed: (searched.append(text), scrub(self, text, changed))[1])
    leak = "key sk-" + "A" * 40 + " in a long enough message to be kept " + "x" * 30
    messages = [{"role": "tool", "content": json.dumps({"rows": ["r" * 80, i]})} for i in range(50)]
    first, changed1 = redactor.apply("request", {"messages": messages + [{"role": "user", "content": leak}]})
    assert changed1 and "sk-AAAA" not in json.dumps(first) and len([t for t in searched if len(t) >= 64]) == 51
    searched.clear()
    messages.append({"role": "user", "content": "one more " * 10})
    again, changed2 = redactor.apply("request", {"messages": messages + [{"role": "user", "content": leak}]})
    assert changed2 and again["messages"][-1] == first["messages"][-1] and IN_STRING.search(again["messages"][-1]["content"])
    assert again["messages"][:50] == first["messages"][:50]
    assert [t for t in searched if len(t) >= 64] == ["one more " * 10]  # of the long texts, only the new one was searched
    # with a configured path a string's redaction depends on where it is: nothing is kept
    by_path = Redactor(b"k" * 32, ContentPolicy(paths=("request.messages.*.content",)))
    out, changed = by_path.apply("request", {"messages": [{"content": "m" * 80}], "note": "m" * 80})
    assert changed and out["note"] == "m" * 80 and out["messages"][0]["content"] != "m" * 80


@pytest.mark.parametrize("path", ["result.$pydantic.fields.content", "result.*.fields.content", "result.content"])
def test_a_spelled_out_path_into_an_object_still_redacts_it(tmp_path, path):
    """Before objects became their fields for paths, the spelled-out path (result.$pydantic.fields.content,
    or result.*.fields.content) was the one that redacted a pydantic model's field; a store's paths are
    fixed for its life, so it must go on matching, beside the plain result.content."""
    import pydantic

    class Message(pydantic.BaseModel):
        role: str
        content: str

    store = new_store(tmp_path, paths=(path,))
    with Recorder(store, policy=ALLOW_ALL).run(agent="paths") as run:
        run.call_tool("api", "ask", {}, lambda: Message(role="tool", content="PRIVATE-SPELLED-1"))
    result = store.resolve(events_of(store, run.run_id, "tool.result")[0].payload)["result"]
    assert result["$pydantic"]["fields"]["role"] == "tool" and is_marker(result["$pydantic"]["fields"]["content"])
    assert_verified(store)
    assert_nowhere(store, tmp_path / "store", ["PRIVATE-SPELLED-1"])


# ------------------------------------------------------------- free-text key=value secrets (default patterns)


def _error_message(store, run_id: str) -> str:
    (result,) = events_of(store, run_id, "tool.result")
    return decode(store.resolve(result.payload))["error"]["message"]


@pytest.mark.parametrize("message, kept, secret", [
    ("bad password=hunter22", "bad password=", "hunter22"),
    ("Authorization: Basic dXNlcjpwYXNzd29yZDEyMw==", "Authorization: Basic ", "dXNlcjpwYXNzd29yZDEyMw=="),
    ("GET https://x/api?api_key=abc123def456&q=1 failed", "GET https://x/api?api_key=", "abc123def456"),
    ("Cookie: sessionid=s3ss10n-v4lue; csrftoken=abcdef", "Cookie: ", "sessionid=s3ss10n-v4lue; csrftoken=abcdef"),
    ("Set-Cookie: sid=zzz-9911; Path=/", "Set-Cookie: ", "sid=zzz-9911; Path=/"),
    ("refused: {'client_secret': 'cs-77aa', 'user': 'bob'}", "refused: {'client_secret': '", "cs-77aa"),
    ("access_token: at-1234, next", "access_token: ", "at-1234"),
    ("GET /v1?apiKey=k-55aa77&x=1", "GET /v1?apiKey=", "k-55aa77"),
    ('{"accessToken": "at-88"} refused', '{"accessToken": "', "at-88"),
    ("PASSWORD=Sup3r", "PASSWORD=", "Sup3r"),
])
def test_free_text_key_value_secrets_in_a_tool_error_are_redacted_value_only(tmp_path, message, kept, secret):
    store = new_store(tmp_path)

    def tool() -> None:
        raise ValueError(message)

    rec = Recorder(store, policy=ALLOW_ALL)
    with pytest.raises(ValueError):
        with rec.run(agent="redaction") as run:
            run.call_tool("api", "get", {}, tool)
    text = _error_message(store, run.run_id)
    marker = "⟦redacted:" + store.redactor.marker(secret)["$redacted"] + "⟧"
    assert text == message.replace(kept + secret, kept + marker, 1)
    assert_verified(store)
    assert_nowhere(store, tmp_path / "store", [secret])


@pytest.mark.parametrize("text", [
    "max_tokens=100", "input_tokens: 5", "tokens=3", "the password is wrong", "password=", "tokenizer=bpe",
    "secretary: ann",
])
def test_free_text_without_a_secret_value_is_kept(tmp_path, text):
    store = new_store(tmp_path)
    rec = Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="redaction") as run:
        run.call_tool("api", "get", {"note": text}, lambda note: note)
    (call,) = events_of(store, run.run_id, "tool.call")
    assert decode(store.resolve(call.payload))["arguments"] == {"note": text}


def test_a_store_keeps_the_patterns_pinned_in_it_when_the_defaults_change(tmp_path):
    from sealbox.redaction import DEFAULT_PATTERNS
    from sealbox.store import open_store

    old = DEFAULT_PATTERNS[:9]
    store = new_store(tmp_path, patterns=old)
    store.close()
    reopened = open_store(tmp_path / "store")
    assert reopened.content.patterns == old
    assert reopened.redactor.apply_error({"type": "E", "message": "password=hunter22"})["message"] == "password=hunter22"
    assert ContentPolicy().patterns == DEFAULT_PATTERNS and len(DEFAULT_PATTERNS) == 52


def test_a_state_label_is_redacted_like_free_text(tmp_path):
    """run.save_state(state, label="sk-…") stored the label in clear: it is free text the caller
    wrote, so the patterns apply to it (the label stays a readable name otherwise)."""
    store = new_store(tmp_path)
    rec = Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="redaction") as run:
        run.save_state({"n": 1}, label=f"after login {SK}")
        run.save_state({"n": 2}, label="checkpoint password=hunter22")
        run.save_state({"n": 3}, label="plain")
        run.save_state({"n": 4}, label="")
    labels = [e.payload.get("label") for e in events_of(store, run.run_id, "state.saved")]
    mark = lambda v: "⟦redacted:" + store.redactor.marker(v)["$redacted"] + "⟧"  # noqa: E731
    assert labels == [f"after login {mark(SK)}", f"checkpoint password={mark('hunter22')}", "plain", None]
    assert_verified(store)
    assert_nowhere(store, tmp_path / "store", [SK, "hunter22"])


def test_a_state_label_is_kept_in_full_mode(tmp_path):
    store = new_store(tmp_path, mode="full")
    with Recorder(store, policy=ALLOW_ALL).run(agent="redaction") as run:
        run.save_state({"n": 1}, label=f"after login {SK}")
    assert [e.payload.get("label") for e in events_of(store, run.run_id, "state.saved")] == [f"after login {SK}"]


def test_json_text_encoded_twice_is_redacted(tmp_path):
    """A JSON text that holds, as a JSON string, another JSON text (arguments encoded twice, as some
    OpenAI-compatible servers send them: ``"arguments": "\\"{\\\\\\"password\\\\\\": …}\\""``) loses its
    sensitive values as the once-encoded text does, in a tool's arguments and in a model's response;
    text that holds a JSON string with no object or array in it is kept as it is."""
    inner = json.dumps({"user": "bob", "password": "xyz-secret-1"})
    twice = json.dumps(inner)
    store = init_store(tmp_path / "s")
    rec = Recorder(store, policy=ALLOW_ALL)
    response = {"id": "c1", "object": "chat.completion", "model": "m", "choices": [{"index": 0, "finish_reason": "tool_calls",
                "message": {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "login", "arguments": twice}}]}}]}
    with rec.run(agent="redaction") as run:
        run.call_tool("api", "send", {"body": twice, "plain": json.dumps("just text")}, lambda body, plain: "ok")
        run.model_call({"model": "m", "messages": [{"role": "user", "content": "hi"}]}, response)
    call = store.resolve(events_of(store, run.run_id, "tool.call")[0].payload)
    model = store.resolve(events_of(store, run.run_id, "model.call")[0].payload)
    stored_args = model["response"]["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
    for text in (call["arguments"]["body"], stored_args):
        assert "xyz-secret-1" not in text
        decoded = json.loads(json.loads(text))
        assert decoded["user"] == "bob"
        assert IN_STRING.fullmatch(decoded["password"])
    assert call["arguments"]["plain"] == json.dumps("just text")
    assert b"xyz-secret-1" not in (tmp_path / "s" / "sealbox.db").read_bytes()
    store.close()


_BACKENDS = ["sqlite"] + (["postgres"] if os.environ.get("SEALBOX_TEST_POSTGRES_URL") else [])


@pytest.fixture(params=_BACKENDS)
def either_store(request, tmp_path):
    """A new store on SQLite, and on PostgreSQL when SEALBOX_TEST_POSTGRES_URL is set."""
    if request.param == "sqlite":
        s = init_store(tmp_path / "s")
    else:
        import uuid

        s = init_store(tmp_path / "s", postgres_url=os.environ["SEALBOX_TEST_POSTGRES_URL"],
                       schema=f"sbt_lone_{uuid.uuid4().hex[:16]}")
    yield request.param, s
    s.close()


def test_json_text_with_an_escaped_lone_surrogate_is_recorded_redacted(tmp_path, either_store):
    """A JSON text (once or twice encoded) whose only odd part is a ``\\ud800`` escape (plain ASCII
    text, a valid argument) next to a sensitive key: the call runs and is recorded with the key's
    value redacted, instead of the call failing RecordingError (a lone surrogate reached the
    marker's hash or the re-encoded text). The escape stays an escape in the recorded text."""
    texts = ['{"password": "\\ud800xyz-secret-2"}', '{"password": "xyz-secret-3", "x": "\\ud800"}']
    texts += [json.dumps(t) for t in texts]
    backend, store = either_store
    rec = Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="redaction") as run:
        answers = [run.call_tool("api", "send", {"body": t}, lambda body: "ok") for t in texts]
    assert answers == ["ok"] * 4
    calls = [store.resolve(e.payload)["arguments"]["body"] for e in events_of(store, run.run_id, "tool.call")]
    assert len(calls) == 4
    for i, text in enumerate(calls):
        assert "\ud800" not in text  # the escape, not the code point (which UTF-8 cannot hold)
        decoded = json.loads(text) if i < 2 else json.loads(json.loads(text))
        assert IN_STRING.fullmatch(decoded["password"])
        if "x" in decoded:
            assert decoded["x"] == "\ud800"
    if backend == "sqlite":
        data = (tmp_path / "s" / "sealbox.db").read_bytes()
        assert b"xyz-secret-2" not in data and b"xyz-secret-3" not in data


def test_a_redacted_value_holding_a_lone_surrogate_is_scrubbed_from_the_error_text(either_store):
    """A sensitive value holding a lone surrogate (parsed from a JSON text's \\ud800 escape) is remembered as
    redacted; the tool's error message repeating it is recorded with the surrogate as the text \\ud800
    (valid Unicode), and that form is scrubbed too: the rest of the secret is not stored in clear."""
    _, store = either_store
    rec = Recorder(store, policy=ALLOW_ALL)

    def tool(body):
        raise ValueError("login failed for \ud800xyz-secret-4")

    with pytest.raises(ValueError):
        with rec.run(agent="redaction") as run:
            run.call_tool("api", "send", {"body": '{"password": "\\ud800xyz-secret-4"}'}, tool)
    messages = [store.resolve(e.payload)["error"]["message"] for e in store.read_run(run.run_id)
                if e.kind in ("tool.result", "run.ended")]
    assert len(messages) == 2
    for message in messages:
        assert message.startswith("login failed for ⟦redacted:hmac-sha256:") and "xyz-secret-4" not in message


def test_a_redacted_argument_holding_a_lone_surrogate_is_scrubbed_from_the_result(either_store):
    """A sensitive argument holding a lone surrogate (a Python string, recorded as {"$badstr": ...}) was
    remembered only in its error-text form (the text \\ud800): a result repeating the value itself was
    recorded with it in clear (inside its own $badstr). Both forms are scrubbed now."""
    _, store = either_store
    rec = Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="redaction") as run:
        run.call_tool("api", "send", {"password": "\ud800xyz-secret-5"}, lambda password: "echo \ud800xyz-secret-5")
    (result,) = [store.resolve(e.payload)["result"] for e in store.read_run(run.run_id) if e.kind == "tool.result"]
    text = decode(result) if isinstance(result, dict) else result
    assert text.startswith("echo ⟦redacted:hmac-sha256:") and "xyz-secret-5" not in text


def test_huge_strings_holding_quotes_and_many_json_layers_are_redacted_exactly():
    """A 2 MB string starting with '"' (not a JSON text) and a JSON object encoded 14 times (a 160 KB
    string of backslashes) were redacted right but slowly (each pattern's regex tried every position,
    ~1.7 s for 10 MB; json.loads attempted on the unclosed quote): now the patterns run only on a text
    holding a string each match requires, and a text that cannot close what it opens is not parsed.
    The output is unchanged: the exact text with each secret as its in-string marker."""
    from sealbox.redaction import Redactor

    redactor = Redactor(b"k" * 32, ContentPolicy())

    def mark(secret: str) -> str:
        return f"⟦redacted:{redactor.marker(secret)['$redacted']}⟧"

    body = '"' + "a" * 2_000_000 + " Bearer abcdefghijkl and sk-" + "b" * 20 + " end"
    out, changed = redactor.apply("arguments", {"body": body, "plain": '"' + "c" * 1_000_000})
    assert changed is True
    assert out == {"body": '"' + "a" * 2_000_000 + f" {mark('Bearer abcdefghijkl')} and {mark('sk-' + 'b' * 20)} end",
                   "plain": '"' + "c" * 1_000_000}

    layered = expected = json.dumps({"password": "hunter2", "note": "x" * 1000})
    expected = json.dumps({"password": mark("hunter2"), "note": "x" * 1000}, ensure_ascii=False)
    for _ in range(14):
        layered, expected = json.dumps(layered), json.dumps(expected, ensure_ascii=False)
    assert len(layered) > 150_000
    out, changed = redactor.apply("arguments", {"text": layered})
    assert (out, changed) == ({"text": expected}, True)
    # a layer whose decoded text opens nothing is left as it is (a JSON string of prose, encoded 14 times)
    prose = "no secret here " * 1000
    for _ in range(14):
        prose = json.dumps(prose)
    assert redactor.apply("arguments", {"text": prose}) == ({"text": prose}, False)


@pytest.mark.parametrize("url", [
    "redis://:Zr7-redis-pass-41q@cache:6379/0",     # a password with no user name (redis, a DSN's ':pw@')
    "amqp://:Zr7-redis-pass-41q@mq/vhost",
])
def test_a_url_password_with_an_empty_user_name_is_redacted_by_default(tmp_path, url):
    """``redis://:password@host`` is how redis (and others) take a password alone: the default
    ``user:password@`` pattern asked for a non-empty user name and stored the password in clear."""
    from sealbox.interop.bundle import export_bundle

    store = new_store(tmp_path)
    try:
        with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
            run.call_tool("cache", "connect", {"url": url}, lambda url: "ok")
        (call,) = events_of(store, run.run_id, "tool.call")
        assert call.payload["arguments"]["url"].startswith(url.split(":")[0] + "⟦redacted:hmac-sha256:")
        export_bundle(store, [run.run_id], tmp_path / "out.sbx")
    finally:
        store.close()
    assert b"Zr7-redis-pass-41q" not in file_bytes(tmp_path / "store")
    assert b"Zr7-redis-pass-41q" not in (tmp_path / "out.sbx").read_bytes()


def test_a_header_pair_whose_name_is_bytes_is_redacted_as_one_named_by_a_string(tmp_path):
    """ASGI's ``scope["headers"]`` and httpx's ``headers.raw`` are lists of ``(bytes, bytes)`` pairs:
    ``[(b"authorization", b"Token …"), (b"cookie", b"sid=…")]``. A pair was recognised only when its
    name was a ``str``, and both values were stored in clear."""
    from sealbox.interop.bundle import export_bundle

    headers = [(b"host", b"api.example.com"), (b"authorization", b"Token Zb4-asgi-token-88k"),
               (b"Cookie", "sid=Zb4-asgi-cookie-77j")]
    store = new_store(tmp_path)
    try:
        with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
            run.call_tool("web", "forward", {"headers": headers}, lambda headers: "ok")
        (call,) = events_of(store, run.run_id, "tool.call")
        stored = decode(call.payload["arguments"])["headers"]
        assert stored[0] == [b"host", b"api.example.com"]
        assert [name for name, _ in stored[1:]] == [b"authorization", b"Cookie"]
        assert all(is_marker(value) for _, value in call.payload["arguments"]["headers"][1:])
        export_bundle(store, [run.run_id], tmp_path / "out.sbx")
    finally:
        store.close()
    for secret in (b"Zb4-asgi-token-88k", b"Zb4-asgi-cookie-77j"):
        for form in (secret, __import__("base64").b64encode(b"Token " + secret)[:12]):
            assert form not in file_bytes(tmp_path / "store")
            assert form not in (tmp_path / "out.sbx").read_bytes()


def test_client_secret_in_camel_case_in_free_text_is_redacted_by_default(tmp_path):
    """The free-text ``key=value`` pattern covers camelCase names (``apiKey``, ``accessToken``), but
    ``clientSecret=…`` (an OAuth client's settings printed by JavaScript or Java code) was kept in clear."""
    from sealbox.interop.bundle import export_bundle

    def fail(config: str) -> str:
        raise RuntimeError("token request refused for clientSecret=Zc5-client-secret-31x")

    store = new_store(tmp_path)
    try:
        with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
            run.call_tool("oauth", "settings", {}, lambda: "clientId: app, clientSecret: 'Zc5-client-secret-30w'")
            with pytest.raises(RuntimeError):
                run.call_tool("oauth", "token", {"config": "clientId=app"}, fail)
        results = events_of(store, run.run_id, "tool.result")
        assert IN_STRING.fullmatch(results[0].payload["result"].split("clientSecret: '")[1].rstrip("'"))
        assert "clientSecret=⟦redacted:hmac-sha256:" in results[1].payload["error"]["message"]
        export_bundle(store, [run.run_id], tmp_path / "out.sbx")
    finally:
        store.close()
    for secret in (b"Zc5-client-secret-30w", b"Zc5-client-secret-31x"):
        assert secret not in file_bytes(tmp_path / "store")
        assert secret not in (tmp_path / "out.sbx").read_bytes()


def test_aws_credentials_and_secret_keys_in_free_text_are_redacted_by_default(tmp_path):
    """The free-text ``key=value`` pattern knew ``secret`` and ``access_token`` but not the other
    default key names that hold such values: boto3's ``sts.assume_role()['Credentials']`` printed by
    a tool (``'SecretAccessKey': '…', 'SessionToken': '…'``), an ``AWS_SECRET_ACCESS_KEY=…`` line of
    a shell's environment, ``secret_key: …`` were stored in clear (an OIDC ``id_token`` is a JWT: that
    pattern has it)."""
    from sealbox.interop.bundle import export_bundle

    creds = {"AccessKeyId": "ASIAABCDEFGHIJKLMNOP", "SecretAccessKey": "Zs6-secret-access-key-10a",
             "SessionToken": "Zs6-session-token-11b", "Expiration": "2026-01-01T00:00:00Z"}
    env = "HOME=/root\nAWS_SECRET_ACCESS_KEY=Zs6-env-secret-key-12c\nAWS_SESSION_TOKEN=Zs6-env-session-13d\n"
    store = new_store(tmp_path)
    try:
        with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
            run.call_tool("aws", "assume_role", {}, lambda: f"Credentials: {creds}")
            run.call_tool("sh", "run", {"cmd": "env"}, lambda cmd: env)
            run.call_tool("oidc", "callback", {"url": "https://app/cb?state=1"},
                          lambda url: "secret_key: Zs6-secret-key-15f")
        results = [e.payload["result"] for e in events_of(store, run.run_id, "tool.result")]
        assert "'SecretAccessKey': '⟦redacted:hmac-sha256:" in results[0]
        assert "'SessionToken': '⟦redacted:hmac-sha256:" in results[0]
        assert "'Expiration': '2026-01-01T00:00:00Z'" in results[0] and "HOME=/root" in results[1]
        export_bundle(store, [run.run_id], tmp_path / "out.sbx")
    finally:
        store.close()
    for secret in (b"Zs6-secret-access-key-10a", b"Zs6-session-token-11b", b"Zs6-env-secret-key-12c",
                   b"Zs6-env-session-13d", b"Zs6-secret-key-15f"):
        assert secret not in file_bytes(tmp_path / "store"), secret
        assert secret not in (tmp_path / "out.sbx").read_bytes(), secret


def test_a_value_named_by_a_sibling_name_or_key_member_is_redacted_by_default(tmp_path):
    """A header list as name/value objects (HAR: ``[{"name": "Authorization", "value": "Token …"}]``),
    a Kubernetes/ECS container's env (``[{"name": "PASSWORD", "value": "…"}]``) and AWS tags
    (``[{"Key": "api_key", "Value": "…"}]``) name the secret in a sibling member: the value was stored in
    clear (its key is ``value``; the sensitive name is a string). Found by recording such lists with
    call_tool and grepping sealbox.db. Other members stay as they are; so does a value named by no
    sensitive key."""
    from sealbox.interop.bundle import export_bundle

    har = {"request": {"url": "https://api/x", "headers": [
        {"name": "Authorization", "value": "Token Zn7-har-token-20a"}, {"name": "Cookie", "value": "sid=Zn7-har-cookie-21b"},
        {"name": "Accept", "value": "application/json"}]}}
    env = [{"name": "PASSWORD", "value": "Zn7-env-password-22c"}, {"name": "LOG_LEVEL", "value": "debug"}]
    tags = [{"Key": "api_key", "Value": "Zn7-tag-api-key-23d"}, {"Key": "team", "Value": "data"}]
    store = new_store(tmp_path)
    try:
        with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
            run.call_tool("http", "replay", har, lambda request: "ok")
            run.call_tool("k8s", "describe", {"pod": "web-1"}, lambda pod: {"containers": [{"name": "web", "env": env}]})
            run.call_tool("aws", "tags", {}, lambda: json.dumps(tags))
        call = events_of(store, run.run_id, "tool.call")[0]
        headers = store.resolve(call.payload["arguments"])["request"]["headers"]
        assert headers[0]["name"] == "Authorization" and is_marker(headers[0]["value"])
        assert headers[1]["name"] == "Cookie" and is_marker(headers[1]["value"])
        assert headers[2] == {"name": "Accept", "value": "application/json"}
        results = [store.resolve(e.payload["result"]) for e in events_of(store, run.run_id, "tool.result")]
        recorded_env = results[1]["containers"][0]["env"]
        assert recorded_env[0]["name"] == "PASSWORD" and is_marker(recorded_env[0]["value"])
        assert recorded_env[1] == {"name": "LOG_LEVEL", "value": "debug"}
        recorded_tags = json.loads(results[2])
        assert recorded_tags[0]["Key"] == "api_key" and IN_STRING.fullmatch(recorded_tags[0]["Value"])
        assert recorded_tags[1] == {"Key": "team", "Value": "data"}
        assert_verified(store)
        export_bundle(store, [run.run_id], tmp_path / "out.sbx")
    finally:
        store.close()
    for secret in (b"Zn7-har-token-20a", b"Zn7-har-cookie-21b", b"Zn7-env-password-22c", b"Zn7-tag-api-key-23d"):
        assert secret not in file_bytes(tmp_path / "store"), secret
        assert secret not in (tmp_path / "out.sbx").read_bytes(), secret


def test_authorization_credentials_of_any_scheme_in_free_text_are_redacted_by_default(tmp_path):
    """Only ``Authorization: Basic …`` (and any ``Bearer …``) was redacted in free text: a tool printing
    request headers stored ``Authorization: Token …`` (Django REST framework, GitLab), a ``Digest``
    answer (its ``response=`` and ``nonce``), a bare API key (``Authorization: <key>``) and
    ``Proxy-Authorization: …`` in clear. Found by recording such text with call_tool and grepping
    sealbox.db. The scheme and the other headers stay readable; so does prose naming the header."""
    from sealbox.interop.bundle import export_bundle

    digest = ('Digest username="bob", realm="api", nonce="Za1-nonce-40a", uri="/x", '
              'response="Za1-digest-response-41b", qop=auth, nc=00000001, cnonce="Za1-cnonce-42c"')
    text = ("GET /x HTTP/1.1\r\nAuthorization: Token Za1-drf-token-43d\r\nAccept: */*\r\n"
            f"Authorization: {digest}\r\nProxy-Authorization: Token Za1-proxy-44e\r\nAuthorization: Za1apikey45f\r\n")
    headers = "{'Authorization': 'Token Za1-repr-token-46a', 'Accept': 'application/json'}"
    store = new_store(tmp_path)
    try:
        with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
            run.call_tool("http", "dump", {}, lambda: text)
            run.call_tool("http", "headers", {}, lambda: headers)
            run.call_tool("http", "why", {}, lambda: "Authorization: required (authorization failed for bob)")
        results = [e.payload["result"] for e in events_of(store, run.run_id, "tool.result")]
        lines = results[0].split("\r\n")
        assert IN_STRING.fullmatch(lines[1].removeprefix("Authorization: Token ")) and lines[2] == "Accept: */*"
        assert IN_STRING.fullmatch(lines[3].removeprefix("Authorization: Digest "))
        assert IN_STRING.fullmatch(lines[4].removeprefix("Proxy-Authorization: Token "))
        assert IN_STRING.fullmatch(lines[5].removeprefix("Authorization: "))
        assert IN_STRING.sub("M", results[1]) == "{'Authorization': 'Token M', 'Accept': 'application/json'}"
        assert results[2] == "Authorization: required (authorization failed for bob)"
        export_bundle(store, [run.run_id], tmp_path / "out.sbx")
    finally:
        store.close()
    for secret in (b"Za1-nonce-40a", b"Za1-digest-response-41b", b"Za1-cnonce-42c", b"Za1-drf-token-43d",
                   b"Za1-proxy-44e", b"Za1apikey45f", b"Za1-repr-token-46a"):
        assert secret not in file_bytes(tmp_path / "store"), secret
        assert secret not in (tmp_path / "out.sbx").read_bytes(), secret


def test_passphrases_and_private_keys_in_free_text_are_redacted_by_default(tmp_path):
    """``passphrase`` and ``private_key`` are default key names, but the free-text ``key=value``
    patterns did not know them: ``passphrase=…``, ``Passphrase: …``, ``private_key=…``,
    ``privateKey: '…'`` and an env dump's ``PRIVATE_KEY=…`` in a tool's text result were stored in
    clear, as was an OpenPGP private key block (``-----BEGIN PGP PRIVATE KEY BLOCK-----``: the PEM
    pattern wanted ``PRIVATE KEY-----``). Found by recording such text with call_tool and grepping
    sealbox.db. The names stay readable; a path to a key file and prose stay as they are."""
    from sealbox.interop.bundle import export_bundle

    text = ("gpg --batch passphrase=Zk2-passphrase-50a\nPassphrase: Zk2-passphrase-51b\n"
            "private_key=Zk2-private-key-52c\nconfig {'privateKey': 'Zk2-private-key-53d'}\n"
            "PRIVATE_KEY=Zk2-private-key-54e\nprivate_key_path=/home/bob/.ssh/id_ed25519\n"
            "the passphrase is wrong\nGPG_PASSPHRASE=Zk2-passphrase-57b\n")
    pgp = ("-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBGZk2pgpBODY55f\nZk2pgpBODY56a\n=Zk2c\n"
           "-----END PGP PRIVATE KEY BLOCK-----\n")
    store = new_store(tmp_path)
    try:
        with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
            run.call_tool("sh", "run", {"cmd": "cat notes"}, lambda cmd: text)
            run.call_tool("gpg", "export", {}, lambda: "key:\n" + pgp)
        results = [decode(store.resolve(e.payload))["result"] for e in events_of(store, run.run_id, "tool.result")]
        assert IN_STRING.sub("M", results[0]) == (
            "gpg --batch passphrase=M\nPassphrase: M\nprivate_key=M\nconfig {'privateKey': 'M'}\nPRIVATE_KEY=M\n"
            "private_key_path=/home/bob/.ssh/id_ed25519\nthe passphrase is wrong\nGPG_PASSPHRASE=M\n")
        assert IN_STRING.sub("M", results[1]) == "key:\nM\n"
        export_bundle(store, [run.run_id], tmp_path / "out.sbx")
    finally:
        store.close()
    for secret in (b"Zk2-passphrase-50a", b"Zk2-passphrase-51b", b"Zk2-private-key-52c", b"Zk2-private-key-53d",
                   b"Zk2-private-key-54e", b"Zk2pgpBODY55f", b"Zk2pgpBODY56a", b"Zk2-passphrase-57b"):
        assert secret not in file_bytes(tmp_path / "store"), secret
        assert secret not in (tmp_path / "out.sbx").read_bytes(), secret


def test_secrets_in_xml_elements_are_redacted_by_default(tmp_path):
    """A tool returning XML (a Maven settings.xml, a SOAP answer, an app config) stored
    ``<password>…</password>``, ``<apiKey>…</apiKey>``, ``<token …>…</token>`` in clear: no pattern
    looked at an element named as a key. Found by recording such text with call_tool and grepping
    sealbox.db. The element's text (CDATA too) becomes the marker, the tags stay; other elements,
    an empty element and a name merely containing a key name are kept."""
    from sealbox.interop.bundle import export_bundle

    xml = ('<settings><server><id>repo</id><username>app</username><password>Zx5-xml-pass-60a</password></server>'
           '<apiKey>Zx5-xml-apikey-61b</apiKey><token type="bearer">Zx5-xml-token-62c</token>'
           '<ns:Secret>Zx5-xml-secret-63d</ns:Secret><passphrase><![CDATA[Zx5 <cd> cdata-64e]]></passphrase>'
           '<max_tokens>100</max_tokens><password/><label>Password</label></settings>')
    store = new_store(tmp_path)
    try:
        with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
            run.call_tool("fs", "read", {"path": "settings.xml"}, lambda path: xml)
        (result,) = [decode(store.resolve(e.payload))["result"] for e in events_of(store, run.run_id, "tool.result")]
        assert IN_STRING.sub("M", result) == (
            '<settings><server><id>repo</id><username>app</username><password>M</password></server>'
            '<apiKey>M</apiKey><token type="bearer">M</token><ns:Secret>M</ns:Secret><passphrase>M</passphrase>'
            '<max_tokens>100</max_tokens><password/><label>Password</label></settings>')
        export_bundle(store, [run.run_id], tmp_path / "out.sbx")
    finally:
        store.close()
    for secret in (b"Zx5-xml-pass-60a", b"Zx5-xml-apikey-61b", b"Zx5-xml-token-62c", b"Zx5-xml-secret-63d", b"cdata-64e"):
        assert secret not in file_bytes(tmp_path / "store"), secret
        assert secret not in (tmp_path / "out.sbx").read_bytes(), secret


def test_passwords_on_command_lines_are_redacted_by_default(tmp_path):
    """A shell tool's command line (in its arguments, or echoed in its output) stored the password of
    ``curl -u user:password`` (``--user``, ``-uuser:pw``, quoted), of ``mysql -pPASSWORD`` (mysqldump,
    quoted) and of ``--password PASSWORD`` (docker login) in clear; ``--password=…`` and URLs with
    ``user:password@`` already were redacted. Found by recording such commands with call_tool and
    grepping sealbox.db. The user name and the rest of the line stay; commands with no password
    (``mysql -p`` prompting, ``--port``, ``curl -u alice``, ``--password-stdin``) are kept."""
    from sealbox.interop.bundle import export_bundle

    commands = ["curl -u alice:Zc6-curl-pass-70a https://api/x", "curl -s --user 'bob:Zc6-curl-pass-71b' https://api/y",
                "curl -uadmin:Zc6-curl-pass-72c http://h", "mysql -h db -u root -pZc6mysqlpass73d shop",
                "mysqldump -u root -p'Zc6-dump-pass-74e' shop > shop.sql",
                "docker login --password Zc6-docker-pass-75f registry.local"]
    kept = ["mysql -u root -p shop", "mysql --port=3306 -u root shop", "curl -u alice https://api/x",
            "docker login --password-stdin registry.local", "sort -u file:2"]
    store = new_store(tmp_path)
    try:
        with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
            for cmd in commands + kept:
                run.call_tool("sh", "run", {"cmd": cmd}, lambda cmd: f"$ {cmd}\nok")
        calls = [decode(store.resolve(e.payload))["arguments"]["cmd"] for e in events_of(store, run.run_id, "tool.call")]
        assert [IN_STRING.sub("M", c) for c in calls] == [
            "curl -u alice:M https://api/x", "curl -s --user 'bob:M' https://api/y", "curl -uadmin:M http://h",
            "mysql -h db -u root -pM shop", "mysqldump -u root -p'M' shop > shop.sql",
            "docker login --password M registry.local"] + kept
        export_bundle(store, [run.run_id], tmp_path / "out.sbx")
    finally:
        store.close()
    for secret in (b"Zc6-curl-pass-70a", b"Zc6-curl-pass-71b", b"Zc6-curl-pass-72c", b"Zc6mysqlpass73d",
                   b"Zc6-dump-pass-74e", b"Zc6-docker-pass-75f"):
        assert secret not in file_bytes(tmp_path / "store"), secret
        assert secret not in (tmp_path / "out.sbx").read_bytes(), secret


def test_secrets_under_prefixed_environment_variable_names_are_redacted_by_default(tmp_path):
    """A tool printing its environment (``printenv``, a ``.env`` file, ``docker inspect``'s ``Env``, a
    compose file) or returning it as a dict or a name/value list stored ``DB_PASSWORD``, ``PGPASSWORD``,
    ``MYSQL_PWD``, ``GITHUB_TOKEN``, ``OPENAI_API_KEY``, ``STRIPE_SECRET_KEY`` … in clear: the free-text
    pattern wanted the bare name (``\\bPASSWORD=``) and the key names are exact. Found by recording them
    with call_tool and grepping sealbox.db. Now an UPPER_CASE assignment whose name ends with a secret
    suffix is redacted in free text, and well-known names are default keys; ``TOKENIZERS_PARALLELISM``,
    ``MAX_TOKENS``, ``*_TOKEN_COUNT``, ``max_tokens``, ``completion_tokens`` are kept."""
    from sealbox.interop.bundle import export_bundle

    names = ["DB_PASSWORD", "PGPASSWORD", "MYSQL_PWD", "POSTGRES_PASSWORD", "REDIS_PASSWORD", "GITHUB_TOKEN",
             "GH_TOKEN", "NPM_TOKEN", "SLACK_BOT_TOKEN", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "STRIPE_SECRET_KEY"]
    secret = {n: f"Zc8-{n.lower().replace('_', '-')}-{i:02d}x" for i, n in enumerate(names)}
    secret["DATABASE_URL"] = "Zc8-database-url-pw-99x"
    url = f"postgres://app:{secret['DATABASE_URL']}@db:5432/shop"
    kept_lines = ["TOKENIZERS_PARALLELISM=false", "MAX_TOKENS=4096", "PROMPT_TOKEN_COUNT=12", "max_tokens=100",
                  "completion_tokens: 7", "total_tokens=19", "PATH=/usr/local/bin:/usr/bin", "OLDPWD=/home/app",
                  "KEY_PASSWORD_FILE=/run/secrets/db"]
    printenv = "\n".join([f"{n}={secret[n]}" for n in names] + [f"DATABASE_URL={url}"] + kept_lines)
    dotenv = (f'export POSTGRES_PASSWORD="{secret["POSTGRES_PASSWORD"]} with spaces"\n'
              f"GH_TOKEN='{secret['GH_TOKEN']}'\nREDIS_PASSWORD: {secret['REDIS_PASSWORD']}\n"
              f"{{'OPENAI_API_KEY': '{secret['OPENAI_API_KEY']}', 'MAX_TOKENS': '4096'}}")
    inspect_env = [f"MYSQL_PWD={secret['MYSQL_PWD']}", f"NPM_TOKEN={secret['NPM_TOKEN']}", "TOKENIZERS_PARALLELISM=false"]
    as_dict = {**{n: secret[n] for n in names}, "DATABASE_URL": url, "max_tokens": 100, "input_tokens": 5,
               "total_tokens": 19, "completion_tokens": 7, "TOKENIZERS_PARALLELISM": "false", "PROMPT_TOKEN_COUNT": 12}
    listed = {n: f"Zc9-listed-{i:02d}y" for i, n in enumerate(names)}  # not the dict's (echoes of those: in-string markers)
    as_list = [{"name": n, "value": listed[n]} for n in names] + [
        {"name": "TOKENIZERS_PARALLELISM", "value": "false"}, {"name": "PATH", "value": "/usr/bin"}]
    store = new_store(tmp_path)
    try:
        with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
            run.call_tool("sh", "printenv", {}, lambda: printenv)
            run.call_tool("sh", "cat", {"path": ".env"}, lambda path: dotenv)
            run.call_tool("docker", "inspect", {}, lambda: {"Config": {"Env": inspect_env}})
            run.call_tool("app", "settings", {}, lambda: as_dict)
            run.call_tool("k8s", "pod_env", {}, lambda: as_list)
        results = [store.resolve(e.payload["result"]) for e in events_of(store, run.run_id, "tool.result")]
        export_bundle(store, [run.run_id], tmp_path / "out.sbx")
    finally:
        store.close()
    assert IN_STRING.sub("M", results[0]) == "\n".join(
        [f"{n}=M" for n in names] + ["DATABASE_URL=postgresMdb:5432/shop"] + kept_lines)
    assert IN_STRING.sub("M", results[1]) == (
        'export POSTGRES_PASSWORD="M"\nGH_TOKEN=\'M\'\nREDIS_PASSWORD: M\n{\'OPENAI_API_KEY\': \'M\', \'MAX_TOKENS\': \'4096\'}')
    assert [IN_STRING.sub("M", s) for s in results[2]["Config"]["Env"]] == [
        "MYSQL_PWD=M", "NPM_TOKEN=M", "TOKENIZERS_PARALLELISM=false"]
    settings = results[3]
    assert all(is_marker(settings[n]) for n in names)
    assert IN_STRING.sub("M", settings["DATABASE_URL"]) == "postgresMdb:5432/shop"
    assert {k: v for k, v in settings.items() if k not in names and k != "DATABASE_URL"} == {
        "max_tokens": 100, "input_tokens": 5, "total_tokens": 19, "completion_tokens": 7,
        "TOKENIZERS_PARALLELISM": "false", "PROMPT_TOKEN_COUNT": 12}
    assert [m["name"] for m in results[4]] == names + ["TOKENIZERS_PARALLELISM", "PATH"]
    assert all(is_marker(m["value"]) for m in results[4][:len(names)]), results[4]
    assert results[4][len(names):] == [{"name": "TOKENIZERS_PARALLELISM", "value": "false"},
                                       {"name": "PATH", "value": "/usr/bin"}]
    for value in [*secret.values(), *listed.values()]:
        assert value.encode() not in file_bytes(tmp_path / "store"), value
        assert value.encode() not in (tmp_path / "out.sbx").read_bytes(), value


def test_a_store_created_before_the_environment_names_keeps_its_pinned_keys_and_patterns(tmp_path):
    """The names and the suffix pattern above are for new stores: one created with the defaults before them
    (keys and patterns pinned in its metadata) records DB_PASSWORD as it did; a new store does not."""
    from sealbox.redaction import DEFAULT_KEYS, DEFAULT_PATTERNS
    from sealbox.store import open_store

    before = new_store(tmp_path, "before", keys=DEFAULT_KEYS[:25], patterns=DEFAULT_PATTERNS[:18])
    before.close()
    for name, kept in (("before", True), ("store", False)):
        store = open_store(tmp_path / name) if name == "before" else new_store(tmp_path)
        try:
            out, changed = store.redactor.apply("result", {"DB_PASSWORD": "Zc8-pw", "env": "GH_TOKEN=Zc8-tok"})
            assert (out == {"DB_PASSWORD": "Zc8-pw", "env": "GH_TOKEN=Zc8-tok"}) is kept and changed is not kept
        finally:
            store.close()


_REPEATS_SCRIPT = r"""
import json, sys
from sealbox.redaction import ContentPolicy, Redactor

r = Redactor(b"k" * 32, ContentPolicy(mode="redacted"))
out = {}
for name, unit, tail in json.loads(sys.argv[1]):
    text = unit * (262144 // len(unit)) + tail
    value, changed = r.apply("result", text)
    out[name] = value[-120:]
print(json.dumps(out))
"""


@pytest.mark.parametrize("pure", ["0", "1"])
def test_a_text_repeating_the_start_of_a_command_line_or_cdata_pattern_is_redacted_in_linear_time(pure):
    """The curl / mysql / XML CDATA patterns scanned, from each occurrence of their literal, to the end
    of the line (curl: a lazy scan; mysql: every option, and the rest of a word after 'mysql'; an
    unclosed CDATA: the rest of the text): a 256 KiB tool result repeating 'curl ', 'mysql -a ',
    'mysqlmysql…' or '<password><![CDATA[' took minutes to record (quadratic), holding the call. Each
    is now done in well under the subprocess's 120 s guard (about 0.1 s), and a real secret at its end is
    still redacted."""
    cases = [("curl", "curl ", "curl -u bob:Zc6-curl-tail-81a http://h"),
             ("mysql options", "mysql -a ", "\nmysql -h db -pZc6mysqltail82b shop"),
             ("mariadb words", "mariadb -", "\nmariadb -u root -pZc6mariatail83c"),
             ("mysql word", "mysql", " -u root -pZc6wordtail84d x"),
             ("cdata", "<password><![CDATA[", "<password><![CDATA[Zc6-cdata-tail-85e]]></password>")]
    import subprocess
    import sys

    env = {**os.environ, "SEALBOX_PURE_PYTHON": pure}
    done = subprocess.run([sys.executable, "-c", _REPEATS_SCRIPT, json.dumps(cases)], capture_output=True,
                          text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    tails = json.loads(done.stdout)
    for name, _unit, tail in cases:
        secret = re.search(r"Zc6[\w-]*tail-?\d\d[a-e]", tail).group(0)
        assert secret not in tails[name], (name, tails[name])
        assert re.search(r"⟦redacted:hmac-sha256:[0-9a-f]{64}⟧", tails[name]), (name, tails[name])


@pytest.mark.parametrize("pure", [False, True], ids=["c-scan", "pure-python"])
def test_lower_case_yaml_and_ini_assignments_of_suffixed_secret_names_are_redacted(tmp_path, monkeypatch, pure):
    """A tool returning a YAML or INI file (``db_password: hunter2x``, ``db_password = hunter2x``) stored the
    password in clear: the key=value pattern wants the name to start a word (``\\bpassword``: none after ``db_``),
    and the environment pattern takes UPPER_CASE names only. Found by recording such a config with call_tool and
    grepping sealbox.db. Now a lower-case name ending with a secret suffix after ``_`` has its value redacted
    (quoted whole); ``max_tokens``, ``page_token``, ``eos_token``, ``db_password_file`` are kept."""
    from sealbox import redaction

    if pure:
        monkeypatch.setattr(redaction, "_c_scan_text", None)
    yaml_text = ("database:\n  db_password: Zd1-yaml-pw-01a\n  app_secret: 'Zd1 quoted secret 02b'\n"
                 "  stripe_api_key: \"Zd1-stripe-03c\"\n  my_access_token: Zd1-token-04d\n"
                 "  slack_bot_token: Zd1-bot-05e\n  max_tokens: 4096\n  page_token: abc123\n  eos_token: </s>\n"
                 "  db_password_file: /run/secrets/db\n")
    ini_text = "[db]\ndb_password = Zd1-ini-pw-06f\nmysql_pwd=Zd1-ini-pwd-07g;\nssh_private_key = Zd1-key-08h\ninput_tokens = 12\n"
    store = new_store(tmp_path)
    try:
        with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
            run.call_tool("fs", "read", {"path": "config.yaml"}, lambda path: yaml_text)
            run.call_tool("fs", "read", {"path": "db.ini"}, lambda path: ini_text)
        results = [store.resolve(e.payload["result"]) for e in events_of(store, run.run_id, "tool.result")]
    finally:
        store.close()
    assert IN_STRING.sub("M", results[0]) == (
        "database:\n  db_password: M\n  app_secret: 'M'\n  stripe_api_key: \"M\"\n  my_access_token: M\n"
        "  slack_bot_token: M\n  max_tokens: 4096\n  page_token: abc123\n  eos_token: </s>\n"
        "  db_password_file: /run/secrets/db\n")
    assert IN_STRING.sub("M", results[1]) == (
        "[db]\ndb_password = M\nmysql_pwd=M;\nssh_private_key = M\ninput_tokens = 12\n")
    data = file_bytes(tmp_path / "store")
    for secret in (b"Zd1-yaml-pw-01a", b"Zd1 quoted secret 02b", b"Zd1-stripe-03c", b"Zd1-token-04d", b"Zd1-bot-05e",
                   b"Zd1-ini-pw-06f", b"Zd1-ini-pwd-07g", b"Zd1-key-08h"):
        assert secret not in data, secret


def test_names_ending_with_a_secret_suffix_are_redacted_by_default(tmp_path):
    """Names not in the default list but secret by their suffix were stored in clear: ``{"MY_APP_PASSWORD": …}``,
    ``my_app_secret``, ``SECRET_KEY_BASE``, a header pair ``["X-Stripe-Api-Key", …]``, a container env member
    ``{"name": "MY_APP_PASSWORD", "value": …}`` (reproduced by an earlier review; key names matched as a whole).
    Now the default keys include suffixes (``*password``, ``*secret``, ``*api_key``, ``*access_token``, …) and
    ``secret_key_base``; token counts (``max_tokens``, ``input_tokens``, ``token_count``, ``num_tokens``) and other
    ``_token`` names (``page_token``) are kept."""
    names = ["MY_APP_PASSWORD", "my_app_secret", "stripe_api_key", "github_token", "SECRET_KEY_BASE", "webhookSecret",
             "STRIPE_LIVE_API_KEY", "x_personal_access_token"]
    secret = {n: f"Zd2-{i:02d}-{n.lower()}" for i, n in enumerate(names)}
    counts = {"max_tokens": 4096, "input_tokens": 12, "output_tokens": 40, "total_tokens": 52, "token_count": 3,
              "num_tokens": 9, "page_token": "CAoQAA", "password_file": "/run/secrets/db"}
    store = new_store(tmp_path)
    try:
        with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
            run.call_tool("app", "settings", {**secret, **counts}, lambda **kw: "ok")
            run.call_tool("http", "get", {"headers": [["X-Stripe-Api-Key", "Zd2-header-91a"], ["Accept", "json"]]},
                          lambda headers: "ok")
            run.call_tool("k8s", "pod_env", {}, lambda: [{"name": "MY_APP_PASSWORD", "value": "Zd2-env-92b"},
                                                         {"name": "MAX_TOKENS", "value": "4096"}])
        calls = [store.resolve(e.payload["arguments"]) for e in events_of(store, run.run_id, "tool.call")]
        (*_, env), = [[store.resolve(e.payload["result"]) for e in events_of(store, run.run_id, "tool.result")]]
    finally:
        store.close()
    assert all(is_marker(calls[0][n]) for n in names), calls[0]
    assert {k: v for k, v in calls[0].items() if k not in names} == counts
    assert calls[1]["headers"][0][0] == "X-Stripe-Api-Key" and is_marker(calls[1]["headers"][0][1])
    assert calls[1]["headers"][1] == ["Accept", "json"]
    assert env[0]["name"] == "MY_APP_PASSWORD" and is_marker(env[0]["value"])
    assert env[1] == {"name": "MAX_TOKENS", "value": "4096"}
    data = file_bytes(tmp_path / "store")
    for value in [*secret.values(), "Zd2-header-91a", "Zd2-env-92b"]:
        assert value.encode() not in data, value


_PEM_SCRIPT = r"""
import json, sys
from sealbox.redaction import ContentPolicy, Redactor

old = sys.argv[1]
text = "-----BEGIN RSA PRIVATE KEY-----\n" * (1048576 // 32)
tail = "-----BEGIN RSA PRIVATE KEY-----\nMIIEZe3-pem-tail-86f+/=\n-----END RSA PRIVATE KEY-----"
out = {}
for name, policy in (("default", ContentPolicy()), ("pinned before", ContentPolicy(patterns=(old,)))):
    value, changed = Redactor(b"k" * 32, policy).apply("result", text + tail)
    out[name] = [changed, value[:64], value[-200:]]
    unclosed, changed = Redactor(b"k" * 32, policy).apply("result", text)  # no END at all: each BEGIN scanned on
    out[name].append(unclosed == text and not changed)
print(json.dumps(out))
"""

_OLD_PEM = r"-{5}BEGIN [A-Z ]*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY(?: BLOCK)?-----"


@pytest.mark.parametrize("pure", ["0", "1"])
def test_a_text_repeating_unclosed_pem_begin_lines_is_redacted_in_linear_time(pure):
    """The PEM private-key pattern's lazy ``[\\s\\S]*?`` scanned from each '-----BEGIN … PRIVATE KEY-----' to the
    text's end when no END followed (reproduced by an earlier review: 40 KB of such lines took 0.35 s, quadratic; 1 MiB
    would take minutes, holding the call). The body now stops at the next run of five dashes (END, or another BEGIN
    from which the match is found), in a new store and in one created with the former pattern pinned (searched with
    its linear equivalent): 1 MiB is done well within the subprocess's 60 s guard, and the key at its end is still
    redacted (its BEGIN line and the unclosed ones before it kept)."""
    import subprocess
    import sys

    env = {**os.environ, "SEALBOX_PURE_PYTHON": pure}
    done = subprocess.run([sys.executable, "-c", _PEM_SCRIPT, _OLD_PEM], capture_output=True, text=True, timeout=60,
                          env=env)
    assert done.returncode == 0, done.stderr
    for name, (changed, head, tail, unclosed_kept) in json.loads(done.stdout).items():
        assert unclosed_kept is True, name
        assert changed is True, name
        assert head == "-----BEGIN RSA PRIVATE KEY-----\n" * 2, name
        assert IN_STRING.sub("M", tail).endswith("-----BEGIN RSA PRIVATE KEY-----\nM"), (name, tail[-120:])
        assert "MIIEZe3" not in tail, name


def test_a_pem_key_with_headers_and_an_openpgp_block_are_still_redacted_whole():
    """The linear PEM pattern matches what the former one did on real blocks (headers with single dashes, OpenPGP's
    '=' checksum line), and a key after an unclosed BEGIN line is redacted from its own BEGIN."""
    from sealbox.redaction import Redactor

    r = Redactor(b"k" * 32)
    rsa = ("-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: DES-EDE3-CBC,AB12\n\nMIIEpZe4+/=\n"
           "-----END RSA PRIVATE KEY-----")
    pgp = "-----BEGIN PGP PRIVATE KEY BLOCK-----\nVersion: x\n\nlQ-Ze5abc\n=AbCd\n-----END PGP PRIVATE KEY BLOCK-----"
    assert IN_STRING.sub("M", r.apply("result", f"key: {rsa} end")[0]) == "key: M end"
    assert IN_STRING.sub("M", r.apply("result", pgp)[0]) == "M"
    two = "-----BEGIN PRIVATE KEY-----\n-----BEGIN PRIVATE KEY-----\nMIIZe6\n-----END PRIVATE KEY-----"
    assert IN_STRING.sub("M", r.apply("result", two)[0]) == "-----BEGIN PRIVATE KEY-----\nM"


@pytest.mark.parametrize("text, kept", [
    ("<token>USD</token>", True),
    ("Authorization: Negotiate is not supported", True),
    ("Authorization: Bearer is required", True),
    ("<token>Zd7abc123def</token>", False),
    ("<ns:token a='1'><![CDATA[Zd7]]></ns:token>", False),
    ("<token>Zd7abcdefghij</token>", False),
    ("<access_token>Zd7</access_token>", False),
    ("Authorization: Negotiate YIIZd7abc123", False),
    ("Authorization: Basic Zd7XNlcjpwYXNz", False),
    ("Authorization: Digest username=\"Zd7\", response=\"Zd7resp\"", False),
])
def test_prose_naming_a_token_or_an_authorization_scheme_is_kept(tmp_path, text, kept):
    """Over-redaction of prose (reproduced by an earlier review): '<token>USD</token>' (a tokenizer's output) and
    'Authorization: Negotiate is not supported' had their words replaced by markers. Now a bare <token> element's
    text, and the first credential after an Authorization scheme, are taken only when they hold a digit, '=', one of
    +/._~- or at least 8 characters (a CDATA section, a named token element and Digest parameters as before): real
    credentials are still redacted."""
    store = new_store(tmp_path)
    try:
        with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
            run.call_tool("api", "get", {}, lambda: text)
        (result,) = [store.resolve(e.payload["result"]) for e in events_of(store, run.run_id, "tool.result")]
    finally:
        store.close()
    if kept:
        assert result == text
    else:
        assert IN_STRING.search(result) and "Zd7" not in result and b"Zd7" not in file_bytes(tmp_path / "store"), result


_CAMEL_AND_SERVICE_TOKEN_TEXT = (
    'config = {"dbPassword": "Zg1 camel pw 01a", "pool": 5}\nmysqlPassword=Zg1-mysql-02b\nadminPwd: Zg1-admin-03c\n'
    "appSecret: 'Zg1-app-04d'\nminioAccessKey=Zg1-minio-05e\nmyGitHubToken: Zg1-gh-06f\nmyAccessToken = Zg1-acc-07g\n"
    'github_token: Zg1-ghtok-08h\nslack_token=Zg1-slack-09i\ngitlab_token: "Zg1-gl-10j"\nnpm_token=Zg1-npm-11k\n'
    "hf_token: Zg1-hf-12l\nstripeSecretKey: Zg1-stripe-13m\n"
    "max_tokens: 100, input_tokens=5, num_tokens=7, tokens: 12, maxTokens: 100, page_token: abc, nextPageToken: xyz,"
    " pageToken: abc, eos_token: </s>\n"
    "the dbPassword field is required; the password policy requires 12 characters; Bearer of bad news\n")


@pytest.mark.parametrize("pure", [False, True], ids=["c-scan", "pure-python"])
def test_camel_case_and_service_token_names_in_free_text_are_redacted(tmp_path, monkeypatch, pure):
    """A tool printing a config or a log (``dbPassword: …``, ``"dbPassword": "…"`` inside a longer text,
    ``mysqlPassword=…``, ``myGitHubToken: …``, ``github_token: …``, ``slack_token=…``) stored the secret in clear: the
    key=value patterns want the secret word to start a word (``\\bpassword``; none in ``dbPassword``), the lower-case
    suffix pattern wants a credential's word before ``_token`` after a ``_`` (``my_access_token``, not ``github_token``),
    though the same names as dict keys are redacted (``*password``, ``github_token``). Found by an earlier review,
    reproduced by recording such a text with call_tool. Now a camelCase name ending with a secret word and a
    service's ``<name>_token`` have their value redacted; token counts, page tokens and prose stay."""
    from sealbox import redaction

    if pure:
        monkeypatch.setattr(redaction, "_c_scan_text", None)
    store = new_store(tmp_path)
    try:
        with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
            run.call_tool("fs", "read", {"path": "app.log"}, lambda path: _CAMEL_AND_SERVICE_TOKEN_TEXT)
        (result,) = [store.resolve(e.payload["result"]) for e in events_of(store, run.run_id, "tool.result")]
    finally:
        store.close()
    assert IN_STRING.sub("M", result) == (
        'config = {"dbPassword": "M", "pool": 5}\nmysqlPassword=M\nadminPwd: M\n'
        "appSecret: 'M'\nminioAccessKey=M\nmyGitHubToken: M\nmyAccessToken = M\n"
        'github_token: M\nslack_token=M\ngitlab_token: "M"\nnpm_token=M\n'
        "hf_token: M\nstripeSecretKey: M\n"
        "max_tokens: 100, input_tokens=5, num_tokens=7, tokens: 12, maxTokens: 100, page_token: abc, nextPageToken: xyz,"
        " pageToken: abc, eos_token: </s>\n"
        "the dbPassword field is required; the password policy requires 12 characters; Bearer of bad news\n")
    data = file_bytes(tmp_path / "store")
    for secret in re.findall(r"Zg1[\w -]*?\d\d[a-m]", _CAMEL_AND_SERVICE_TOKEN_TEXT):
        assert secret.encode() not in data, secret


@pytest.mark.parametrize("text", ["dbPassword: Zg2-pw", '{"note": "x", "cfg": "myGitHubToken=Zg2-tok"}', "slack_token: Zg2-sl"])
def test_the_quick_check_finds_camel_case_and_service_token_names(text):
    """The C pre-filter (scan_text) gates each pattern on its required literals: a text holding only the new
    names must not be declared clean by it (it would skip the walk, and the secret would be stored)."""
    redactor = Redactor(b"k" * 32, ContentPolicy())
    value = {"text": text}
    assert redactor.surely_clean(value) is False
    out, changed = redactor.apply("result", encode(value))
    assert changed is True and "Zg2" not in json.dumps(out)


_RUN_TOGETHER_TEXT = (
    "mypassword=Zr1-mypw-01a\ndbpasswd: Zr1-dbpw-02b\nappsecret = 'Zr1 app 03c'\nstripeapikey=Zr1-stripe-04d\n"
    'minioaccesskey: "Zr1-minio-05e"\nmyaccesstoken=Zr1-acc-06f\ngithubtoken=Zr1-ghl-07g\ngithubToken: Zr1-ghc-08h\n'
    '{"slackToken": "Zr1-slack-09i"}\nnpmToken=Zr1-npm-10j\n'
    "max_tokens=100 input_tokens: 5 pageToken: abc nextPageToken=x passwordless=yes maxTokens: 4 tokens: 12\n"
    "the password policy requires 12 characters; secretary: ann; compass: north\n")


@pytest.mark.parametrize("pure", [False, True], ids=["c-scan", "pure-python"])
def test_lower_case_run_together_secret_names_in_free_text_are_redacted(tmp_path, monkeypatch, pure):
    """A tool printing ``mypassword=…``, ``appsecret = '…'``, ``githubToken: …`` (lower-case names run together with the
    secret word, or a service's lower-case word before ``Token``) stored the secret in clear: the key=value patterns want
    the word to start a word (``\\bpassword``), the others a ``_`` or a capital before it (``db_password``,
    ``dbPassword``), though the same names as dict keys are redacted (``*password``). Found by an earlier review. Now
    the value is redacted; token counts, page tokens, ``passwordless=`` and prose stay. A store created before (the
    previous 22 default patterns pinned in it) keeps its behaviour."""
    from sealbox import redaction
    from sealbox.redaction import DEFAULT_PATTERNS

    if pure:
        monkeypatch.setattr(redaction, "_c_scan_text", None)
    results = {}
    for name, patterns in (("new", DEFAULT_PATTERNS), ("pinned", DEFAULT_PATTERNS[:22])):
        store = new_store(tmp_path, name, patterns=patterns)
        try:
            with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
                run.call_tool("fs", "read", {"path": "app.cfg"}, lambda path: _RUN_TOGETHER_TEXT)
            (results[name],) = [store.resolve(e.payload["result"]) for e in events_of(store, run.run_id, "tool.result")]
        finally:
            store.close()
    assert IN_STRING.sub("M", results["new"]) == (
        "mypassword=M\ndbpasswd: M\nappsecret = 'M'\nstripeapikey=M\n"
        'minioaccesskey: "M"\nmyaccesstoken=M\ngithubtoken=M\ngithubToken: M\n'
        '{"slackToken": "M"}\nnpmToken=M\n'
        "max_tokens=100 input_tokens: 5 pageToken: abc nextPageToken=x passwordless=yes maxTokens: 4 tokens: 12\n"
        "the password policy requires 12 characters; secretary: ann; compass: north\n")
    data = file_bytes(tmp_path / "new")
    secrets = re.findall(r"Zr1[\w -]*?\d\d[a-j]", _RUN_TOGETHER_TEXT)
    assert len(secrets) == 10
    for secret in secrets:
        assert secret.encode() not in data, secret
    assert results["pinned"] == _RUN_TOGETHER_TEXT


@pytest.mark.parametrize("text", ["mypassword=Zr2-pw", '{"note": "x", "cfg": "githubToken=Zr2-tok"}', "x myaccesstoken: Zr2-a"])
def test_the_quick_check_finds_lower_case_run_together_names(text):
    """The quick check (C scan and its regex form) must not declare such a text clean: it would skip the walk."""
    from sealbox import redaction

    for scan in (redaction._c_scan_text, None):
        redactor = Redactor(b"k" * 32, ContentPolicy())
        redactor._scan = redactor._scan and scan is not None
        value = {"text": text}
        assert redactor._quick is True and redactor.surely_clean(value) is False
        out, changed = redactor.apply("result", encode(value))
        assert changed is True and "Zr2" not in json.dumps(out)


_API_KEY_HEADER_TEXT = (
    "> GET /v1/items HTTP/1.1\r\n> Host: api.example.com\r\n> X-API-Key: Zk3-hdr-01a\r\n> Accept: */*\r\n"
    'curl -H "X-API-Key: Zk3-curl-02b" https://api.example.com\n'
    "settings: {'API_Key': 'Zk3-repr-03c'}\nAPIKey=Zk3-env-04d\nAPI-Token: Zk3-tok-05e\n"
    "the API-Key header is required; API-Keys: 3 per project; API Key: see the docs\n")


def test_an_api_key_header_written_with_a_capitalised_key_is_redacted(tmp_path):
    """``X-API-Key: …`` (a request dump, a ``curl -H``; the default key ``x-api-key`` as most docs spell the header)
    was stored in clear: the key=value pattern takes ``Api-Key``, ``api_key`` and ``API_KEY`` only. Now the value of
    an ``API-Key`` / ``API_Key`` / ``APIKey`` / ``API-Token`` assignment is redacted; prose naming the header stays."""
    store = new_store(tmp_path)
    try:
        with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
            run.call_tool("http", "get", {"url": "https://api.example.com"}, lambda url: _API_KEY_HEADER_TEXT)
        (result,) = [store.resolve(e.payload["result"]) for e in events_of(store, run.run_id, "tool.result")]
    finally:
        store.close()
    assert IN_STRING.sub("M", result) == (
        "> GET /v1/items HTTP/1.1\r\n> Host: api.example.com\r\n> X-API-Key: M\r\n> Accept: */*\r\n"
        'curl -H "X-API-Key: M" https://api.example.com\n'
        "settings: {'API_Key': 'M'}\nAPIKey=M\nAPI-Token: M\n"
        "the API-Key header is required; API-Keys: 3 per project; API Key: see the docs\n")
    data = file_bytes(tmp_path / "store")
    for secret in re.findall(r"Zk3-\w+-\d\d[a-e]", _API_KEY_HEADER_TEXT):
        assert secret.encode() not in data, secret


_LOGIN_COMMANDS_TEXT = (
    "$ sshpass -p Zc4-ssh-01a ssh deploy@web1 uptime\n$ sshpass -v -P assword -p 'Zc4-ssh-02b' scp f h:\n"
    "$ docker login -u ci -p Zc4-dock-03c registry.example.com\n$ podman login -u ci -p=Zc4-pod-04d quay.io\n"
    "$ helm registry login r.example.com -u ci -p Zc4-helm-05e\n$ redis-cli -h cache -p 6379 -a Zc4-redis-06f ping\n"
    "$ redis-cli --pass Zc4-redis-07g info\n"
    "$ ssh -p 2222 host\n$ docker run -p 8080:80 nginx\n$ redis-cli -p 6379 ping\n$ sshpass -f pwfile ssh h\n"
    "$ echo $PW | docker login --username ci --password-stdin r.io\n$ docker login registry.example.com\n")


def test_passwords_of_sshpass_registry_logins_and_redis_cli_are_redacted(tmp_path):
    """A tool's shell transcript with ``sshpass -p PASSWORD``, ``docker login -u ci -p PASSWORD`` (podman, helm
    registry, ...) or ``redis-cli -a PASSWORD`` stored the password in clear (found by probing common secret shapes;
    the command-line patterns knew curl -u, mysql -p and --password only). Now the password is redacted; ssh -p 2222,
    docker run -p 8080:80, redis-cli -p 6379, sshpass -f file and --password-stdin are kept."""
    store = new_store(tmp_path)
    try:
        with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
            run.call_tool("sh", "run", {"cmd": "history"}, lambda cmd: _LOGIN_COMMANDS_TEXT)
        (result,) = [store.resolve(e.payload["result"]) for e in events_of(store, run.run_id, "tool.result")]
        repeated = store.redactor._scrub("docker login -u a " * 4000 + "-p Zc4-late-08h", [False])
    finally:
        store.close()
    assert IN_STRING.sub("M", result) == (
        "$ sshpass -p M ssh deploy@web1 uptime\n$ sshpass -v -P assword -p 'M' scp f h:\n"
        "$ docker login -u ci -p M registry.example.com\n$ podman login -u ci -p=M quay.io\n"
        "$ helm registry login r.example.com -u ci -p M\n$ redis-cli -h cache -p 6379 -a M ping\n"
        "$ redis-cli --pass M info\n"
        "$ ssh -p 2222 host\n$ docker run -p 8080:80 nginx\n$ redis-cli -p 6379 ping\n$ sshpass -f pwfile ssh h\n"
        "$ echo $PW | docker login --username ci --password-stdin r.io\n$ docker login registry.example.com\n")
    data = file_bytes(tmp_path / "store")
    for secret in re.findall(r"Zc4-\w+-\d\d[a-g]", _LOGIN_COMMANDS_TEXT):
        assert secret.encode() not in data, secret
    assert IN_STRING.sub("M", repeated) == "docker login -u a " * 4000 + "-p M"


_NETRC_TEXT = (
    "machine api.heroku.com login me@example.com password Zn6-heroku-01a\n"
    "machine git.example.com\n  login ci\n  password \"Zn6-git-02b\"\n"
    "default login anonymous password Zn6-default-03c\n"
    "# the machine login password is stored in this file; machine h login u (no password)\n")


def test_netrc_passwords_are_redacted(tmp_path):
    """A tool printing a ``.netrc`` (``machine HOST login USER password PASSWORD``, on one line or several, or a
    ``default`` entry) stored the passwords in clear: no ``=`` or ``:`` follows ``password`` (found by probing common
    secret shapes). Now the password is redacted; the host, the user and prose stay."""
    store = new_store(tmp_path)
    try:
        with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
            run.call_tool("fs", "read", {"path": "~/.netrc"}, lambda path: _NETRC_TEXT)
        (result,) = [store.resolve(e.payload["result"]) for e in events_of(store, run.run_id, "tool.result")]
    finally:
        store.close()
    assert IN_STRING.sub("M", result) == (
        "machine api.heroku.com login me@example.com password M\n"
        "machine git.example.com\n  login ci\n  password \"M\"\n"
        "default login anonymous password M\n"
        "# the machine login password is stored in this file; machine h login u (no password)\n")
    data = file_bytes(tmp_path / "store")
    for secret in re.findall(r"Zn6-\w+-\d\d[a-c]", _NETRC_TEXT):
        assert secret.encode() not in data, secret


_PREFIXED_TOKENS = {
    "google": "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY",
    "stripe secret": "sk_live_51HqLyjWDarjtT1zdp7dcXYZ00abcdEFGH",
    "stripe restricted": "rk_live_51HqLyjWDarjtT1zdp7dcXYZ00abcd",
    "stripe test": "sk_test_4eC39HqLyjWDarjtT1zdp7dc",
    "stripe webhook": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    "gitlab": "glpat-xXy1Zz2AbCdEfGhIjKlM",
    "slack app": "xapp-1-A0123456789-1234567890123-0123456789abcdef",
    "slack refresh": "xoxe-1-My0xLTEyMzQ1Njc4OS0xMjM0NTY3ODkwMTIz",
    "npm": "npm_abcdefghijklmnopqrstuvwxyz0123456789",
    "hugging face": "hf_abcdefghijklmnopqrstuvwxyzABCDEFGH",
    "sendgrid": "SG.abcdefghijklmnopqrstuv.abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ",
    "pypi": "pypi-AgEIcHlwaS5vcmcCJGFiY2RlZmdoLWlqa2wtbW5vcC1xcnN0LXV2d3h5ejAxMjM0AAIqWzMsImFiYyJd",
    "shopify": "shpat_0123456789abcdef0123456789abcdef",
    "digitalocean": "dop_v1_" + "0123456789abcdef" * 4,
}


@pytest.mark.parametrize("pure", [False, True], ids=["c-scan", "pure-python"])
def test_well_known_token_formats_are_redacted_without_a_key_name(tmp_path, monkeypatch, pure):
    """Tokens of well-known formats written with no key name before them (pasted in prose, a config dump, a URL):
    Google (AIza…), Stripe (sk_live_…, rk_live_…, sk_test_…, whsec_…), GitLab (glpat-…), Slack app / refresh tokens
    and incoming webhook URLs, npm, Hugging Face, SendGrid, PyPI, Shopify, DigitalOcean were stored in clear (GitHub,
    Slack xox[abprs]-, OpenAI / Anthropic sk-…, AWS AKIA… were already redacted). Now each is redacted whole (a Slack
    webhook's secret part); look-alikes in prose stay."""
    import sealbox.redaction as redaction_module

    if pure:
        monkeypatch.setattr(redaction_module, "_c_scan_text", None)
    lines = [f"{name} - use {token} here" for name, token in _PREFIXED_TOKENS.items()]
    lines.append("post to https://hooks.slack.com/services/T0123ABCD/B0456EFGH/aBcDeFgHiJkLmNoPqRsTuVwX now")
    kept = ("AIza is a prefix; task_live_0123456789abcdef; desk_test_0123456789abcdef; npm_config_cache; "
            "hf_hub_download; myhf_zyxwvutsrqponmlkjihgfedcbaZYXWVUTS; SG.1; glpat-short; "
            "https://hooks.slack.com/services/ is the host; shpat_xyz; dop_v1_abc")
    text = "\n".join(lines + [kept])
    store = new_store(tmp_path)
    try:
        if os.environ.get("SEALBOX_PURE_PYTHON") != "1":  # (the whole file may run without the C scan)
            assert bool(store.redactor._scan) is not pure
        with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
            run.call_tool("shell", "exec", {"cmd": "cat notes.txt"}, lambda cmd: text)
        (result,) = [store.resolve(e.payload["result"]) for e in events_of(store, run.run_id, "tool.result")]
    finally:
        store.close()
    assert IN_STRING.sub("M", result).split("\n") == [f"{name} - use M here" for name in _PREFIXED_TOKENS] + [
        "post to https://hooks.slack.com/services/T0123ABCD/B0456EFGH/M now", kept]
    data = file_bytes(tmp_path / "store")
    for secret in [*_PREFIXED_TOKENS.values(), "aBcDeFgHiJkLmNoPqRsTuVwX"]:
        assert secret.encode() not in data, secret


@pytest.mark.parametrize("pure", [False, True], ids=["c-scan", "pure-python"])
def test_a_url_password_holding_a_slash_is_redacted(tmp_path, monkeypatch, pure):
    """``postgres://u:p/ss@h/db`` (a password holding '/', as SQLAlchemy and others accept it) was stored in clear:
    the user:password@ pattern stops at '/'. Now the user:password@ part is redacted; a port before a path
    (``http://localhost:3000/api/@me``) and a path holding '@' stay."""
    import sealbox.redaction as redaction_module

    if pure:
        monkeypatch.setattr(redaction_module, "_c_scan_text", None)
    text = ("db: postgres://u:Zp7/ss@h/db\n"
            "url: postgresql+psycopg://app:Zk8/x+y/z@db.internal:5432/prod?sslmode=require\n"
            "kept: http://localhost:3000/api/users/@me https://mastodon.social/@alice https://h:8443/a/b@c "
            "https://example.com/a:b/c@d")
    store = new_store(tmp_path)
    try:
        with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
            run.call_tool("shell", "exec", {"cmd": "env"}, lambda cmd: text)
        (result,) = [store.resolve(e.payload["result"]) for e in events_of(store, run.run_id, "tool.result")]
    finally:
        store.close()
    assert IN_STRING.sub("M", result).split("\n") == [
        "db: postgresMh/db", "url: postgresql+psycopgMdb.internal:5432/prod?sslmode=require", text.split("\n")[2]]
    data = file_bytes(tmp_path / "store")
    for secret in ("Zp7/ss", "Zk8/x+y/z"):
        assert secret.encode() not in data, secret


@pytest.mark.parametrize("pure", [False, True], ids=["c-scan", "pure-python"])
def test_a_presigned_url_s_signature_is_redacted(tmp_path, monkeypatch, pure):
    """A pre-signed URL (S3 SigV4 X-Amz-Signature=…, GCS X-Goog-Signature=…) gives its object to whoever holds it
    until it expires: its signature was stored in clear. Now the signature's value is redacted (and the session
    token's, as before); the other parameters stay."""
    import sealbox.redaction as redaction_module

    if pure:
        monkeypatch.setattr(redaction_module, "_c_scan_text", None)
    sig = "fe5f80f77d5fa3beca038a248ff027d0445342fe2855ddc963176630326f1024"
    goog = "0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9"
    text = ("https://b.s3.amazonaws.com/k.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Date=20261205T000000Z"
            f"&X-Amz-Expires=3600&X-Amz-SignedHeaders=host&X-Amz-Signature={sig}\n"
            f"https://storage.googleapis.com/b/o?X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Signature={goog}&x=1\n"
            "the X-Amz-Signature parameter is computed last")
    store = new_store(tmp_path)
    try:
        with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
            run.call_tool("s3", "presign", {"key": "k.txt"}, lambda key: text)
        (result,) = [store.resolve(e.payload["result"]) for e in events_of(store, run.run_id, "tool.result")]
    finally:
        store.close()
    assert IN_STRING.sub("M", result) == text.replace(sig, "M").replace(goog, "M")
    data = file_bytes(tmp_path / "store")
    for secret in (sig, goog):
        assert secret.encode() not in data, secret


def test_netrc_passwords_after_an_account_field_are_redacted(tmp_path):
    """A ``.netrc`` entry with an ``account`` field before the password (``machine H login U account A password PW``)
    or with the account first (the tokens come in any order) kept the password in clear: the .netrc pattern wants
    ``login USER password``. Now the password is redacted; the host, user, account and prose stay."""
    text = ("machine ftp.example.com login me account acct1 password Zr5-acct-01a\n"
            "machine h2 account a2 password Zr5-first-02b login u2\n"
            "default account a3 login u3 password \"Zr5-default-03c\"\n"
            "machine h4 login u4 account a4 (no password)\n")
    store = new_store(tmp_path)
    try:
        with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
            run.call_tool("fs", "read", {"path": "~/.netrc"}, lambda path: text)
        (result,) = [store.resolve(e.payload["result"]) for e in events_of(store, run.run_id, "tool.result")]
    finally:
        store.close()
    assert IN_STRING.sub("M", result) == (
        "machine ftp.example.com login me account acct1 password M\n"
        "machine h2 account a2 password M login u2\n"
        "default account a3 login u3 password \"M\"\n"
        "machine h4 login u4 account a4 (no password)\n")
    data = file_bytes(tmp_path / "store")
    for secret in re.findall(r"Zr5-\w+-\d\d[a-c]", text):
        assert secret.encode() not in data, secret


@pytest.mark.parametrize("pure", [False, True], ids=["c-scan", "pure-python"])
def test_an_api_key_named_in_two_words_is_redacted(tmp_path, monkeypatch, pure):
    """``API Key: …`` (a space between the words, as logs and READMEs write it) was stored in clear: the patterns want
    API-Key, API_Key, APIKey. Now its value is redacted when it holds a digit or is at least 20 characters; prose
    (``API key: required``) stays."""
    import sealbox.redaction as redaction_module

    if pure:
        monkeypatch.setattr(redaction_module, "_c_scan_text", None)
    text = ("API Key: Zq9-key-01a\nApi token = \"Zq9-tok-02b\"\napi key: ZqNoDigitsButLongEnoughKey\n"
            "API TOKEN:Zq9-tok-04d\nthe API key: required; API Key: see below; rapi key: 1")
    store = new_store(tmp_path)
    try:
        with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
            run.call_tool("shell", "exec", {"cmd": "cat config.log"}, lambda cmd: text)
        (result,) = [store.resolve(e.payload["result"]) for e in events_of(store, run.run_id, "tool.result")]
    finally:
        store.close()
    assert IN_STRING.sub("M", result) == (
        "API Key: M\nApi token = \"M\"\napi key: M\nAPI TOKEN:M\nthe API key: required; API Key: see below; rapi key: 1")
    data = file_bytes(tmp_path / "store")
    for secret in ("Zq9-key-01a", "Zq9-tok-02b", "ZqNoDigitsButLongEnoughKey", "Zq9-tok-04d"):
        assert secret.encode() not in data, secret
