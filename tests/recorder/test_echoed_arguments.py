"""A value redacted from one tool call's arguments, passed by the agent (or the model that read it
in a result) to a later call under an ordinary key, is recorded as its in-string marker there too:
in that call's ``tool.call`` arguments, its ``policy.decision`` inputs, its ``approval.requested``,
its result and error, and in the run's notes (docs/content-modes.md, "Values redacted earlier in
the run"). The policy decides on, and the tool gets, the real value; the approval binding is the
hash of the real arguments, as before; a replay of such a run reproduces.

Checked on the raw bytes of sealbox.db and its -wal, not only through the store's reader.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import sealbox
from sealbox.approvals import ApprovalError, ApprovalPending, answer, binding_hash
from sealbox.canonical import encode
from sealbox.identities import add_identity
from sealbox.policies import ALLOW_ALL
from sealbox.policy import Policy
from sealbox.recorder import Recorder, ToolDenied
from sealbox.replay import Replayer

SECRET = "hunter2-xyz-7781"
SQL = f"select * from users where pw = '{SECRET}'"


def db_bytes(folder: Path) -> bytes:
    """sealbox.db and, while the store is open, its -wal, as they are on disk."""
    return b"".join(p.read_bytes() for p in sorted(folder.iterdir()) if p.name.startswith("sealbox.db") and p.is_file())


def assert_absent(store, folder: Path, secret: str = SECRET) -> None:
    assert any(p.name == "sealbox.db-wal" for p in folder.iterdir())  # the WAL is read too, while it exists
    assert secret.encode() not in db_bytes(folder)
    store.close()
    assert secret.encode() not in db_bytes(folder)


def payloads(store, run_id: str, kind: str) -> list:
    return [store.resolve(e.payload) for e in store.read_run(run_id) if e.kind == kind]


def mark_of(store, run_id: str) -> str:
    """The in-string marker of SECRET: the one the first call's {"$redacted": …} holds."""
    first = payloads(store, run_id, "tool.call")[0]["arguments"]["password"]
    return f"⟦redacted:{first['$redacted']}⟧"


def login(user: str, password: str) -> str:
    return f"welcome {user}, your password {password} is weak"  # the model reads it here


def test_a_secret_passed_on_under_an_ordinary_key_is_recorded_as_its_marker_everywhere(tmp_path):
    store = sealbox.init_store(tmp_path / "store")
    seen: list[str] = []

    def query(sql: str) -> dict:
        seen.append(sql)
        return {"rows": 1, "ran": sql}

    def broken(sql: str) -> None:
        raise ValueError(f"syntax error near {sql!r}")

    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        out = run.call_tool("auth", "login", {"user": "bob", "password": SECRET}, login)
        got = run.call_tool("db", "query", {"sql": SQL}, query)
        with pytest.raises(ValueError):
            run.call_tool("db", "query", {"sql": SQL}, broken)
        run.note(f"queried with {SECRET}", about={"sql": SQL, "raw": SECRET.encode()})
    assert out == f"welcome bob, your password {SECRET} is weak" and got == {"rows": 1, "ran": SQL}
    assert seen == [SQL]  # the tool got the real value
    mark = mark_of(store, run.run_id)
    calls = payloads(store, run.run_id, "tool.call")
    assert [c["arguments"] for c in calls[1:]] == [{"sql": f"select * from users where pw = '{mark}'"}] * 2
    decisions = payloads(store, run.run_id, "policy.decision")
    assert decisions[1]["inputs"]["arguments"] == {"sql": f"select * from users where pw = '{mark}'"}
    assert decisions[1]["inputs"]["redacted"] is True and decisions[0]["inputs"]["arguments"]["user"] == "bob"
    results = payloads(store, run.run_id, "tool.result")
    assert results[0]["result"] == f"welcome bob, your password {mark} is weak"
    assert results[1]["result"] == {"ran": f"select * from users where pw = '{mark}'", "rows": 1}
    assert results[2]["error"]["message"] == f"syntax error near \"select * from users where pw = '{mark}'\""
    assert SECRET not in results[2]["error"]["traceback"]
    (note,) = payloads(store, run.run_id, "note")
    raw = __import__("base64").b64encode(mark.encode()).decode()
    assert note == {"text": f"queried with {mark}",
                    "about": {"raw": {"$bytes": raw}, "sql": f"select * from users where pw = '{mark}'"}}
    assert sealbox.verify_store(store).ok
    assert_absent(store, tmp_path / "store")


def test_the_same_secret_under_a_sensitive_key_again_keeps_the_stores_marker(tmp_path):
    """A second call naming the secret under a sensitive key is redacted by the store as before
    (the same {"$redacted": …}); only what the store keeps in clear is scrubbed, also inside
    the call's own arguments (the secret under a key and repeated in a query)."""
    store = sealbox.init_store(tmp_path / "store")
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        run.call_tool("auth", "login", {"user": "bob", "password": SECRET}, login)
        run.call_tool("auth", "login", {"user": "ann", "password": SECRET}, login)
        run.call_tool("db", "connect", {"password": "other-secret-55", "dsn": "host=db pw=other-secret-55"},
                      lambda password, dsn: "ok")
    first, second, third = (c["arguments"] for c in payloads(store, run.run_id, "tool.call"))
    assert second == {"password": first["password"], "user": "ann"}
    assert set(third["password"]) == {"$redacted"}
    other = f"⟦redacted:{third['password']['$redacted']}⟧"
    assert third["dsn"] == f"host=db pw={other}"
    assert_absent(store, tmp_path / "store", "other-secret-55")


def test_nothing_changes_while_nothing_was_redacted(tmp_path):
    """The fast path: no argument of the run lost anything, so arguments, inputs and notes are as given."""
    store = sealbox.init_store(tmp_path / "store")
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        run.call_tool("db", "query", {"sql": SQL}, lambda sql: sql)
        run.note(SECRET, about={"sql": SQL})
    assert payloads(store, run.run_id, "tool.call")[0]["arguments"] == {"sql": SQL}
    assert payloads(store, run.run_id, "policy.decision")[0]["inputs"]["arguments"] == {"sql": SQL}
    assert payloads(store, run.run_id, "note")[0] == {"text": SECRET, "about": {"sql": SQL}}


def test_full_mode_keeps_a_secret_passed_on(tmp_path):
    store = sealbox.init_store(tmp_path / "store", content=sealbox.ContentPolicy(mode="full"))
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        run.call_tool("auth", "login", {"user": "bob", "password": SECRET}, login)
        run.call_tool("db", "query", {"sql": SQL}, lambda sql: 1)
    assert payloads(store, run.run_id, "tool.call")[1]["arguments"] == {"sql": SQL}


DENY_SECRET = textwrap.dedent("""
    version: 1
    rules:
      - id: no-weak-password-in-sql
        match: {tool: query}
        when: 'call.arguments.sql.contains("hunter2-")'
        effect: deny
      - id: rest-ok
        effect: allow
""")


def test_the_policy_decides_on_the_real_arguments(tmp_path):
    store = sealbox.init_store(tmp_path / "store")
    with Recorder(store, policy=Policy.from_text(DENY_SECRET)).run(agent="bot") as run:
        run.call_tool("auth", "login", {"user": "bob", "password": SECRET}, login)
        with pytest.raises(ToolDenied) as denied:
            run.call_tool("db", "query", {"sql": SQL}, lambda sql: 1)
    assert denied.value.decision.rule == "no-weak-password-in-sql"
    decision = payloads(store, run.run_id, "policy.decision")[1]
    assert (decision["effect"], decision["re_evaluable"]) == ("deny", False)  # it read what the record lacks
    assert_absent(store, tmp_path / "store")


APPROVE_QUERIES = textwrap.dedent("""
    version: 1
    rules:
      - id: queries-need-ops
        match: {tool: query}
        effect: require_approval
        approval: {groups: [ops], quorum: 1, expires: 1h}
      - id: rest-ok
        effect: allow
""")


def test_an_approval_request_holds_the_marker_and_binds_the_real_arguments(tmp_path):
    from identity_testkit import admin_key

    store = sealbox.init_store(tmp_path / "store")
    alice = add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "alice.key",
                         admin_key=admin_key(store, tmp_path)).key_path
    policy = Policy.from_text(APPROVE_QUERIES)
    run = Recorder(store, policy=policy, approvals="suspend").run(agent="bot")
    with pytest.raises(ApprovalPending) as pending:
        with run:
            run.call_tool("auth", "login", {"user": "bob", "password": SECRET}, login)
            run.call_tool("db", "query", {"sql": SQL}, lambda sql: "never")
    mark = mark_of(store, run.run_id)
    (request,) = payloads(store, run.run_id, "approval.requested")
    assert request["arguments"] == {"sql": f"select * from users where pw = '{mark}'"}
    assert request["binding"] == binding_hash("db", "query", encode({"sql": SQL}), policy.fingerprint)
    shown = sealbox.approvals.get_approval(store, pending.value.approval_id).to_dict()  # `sealbox approvals show`
    assert shown["arguments"] == request["arguments"] and shown["binding"] == request["binding"]
    answer(store, pending.value.approval_id, "approve", "ok", alice, binding=request["binding"])
    seen: list[str] = []

    def query(sql: str) -> str:
        seen.append(sql)
        return f"ran {sql}"

    later = Recorder(store, policy=policy, approvals="suspend")  # another process: it knows no secret yet
    with pytest.raises(ApprovalError) as refused:  # the record lacks the value: it must be given again
        later.resume(run.run_id, {("db", "query"): query})
    assert refused.value.code == "arguments_redacted" and seen == []
    call_id = request["call_id"]
    with pytest.raises(ApprovalError) as other:
        later.resume(run.run_id, {("db", "query"): query}, arguments={call_id: {"sql": "select 1"}})
    assert other.value.code == "binding_mismatch"
    with later.resume(run.run_id, {("db", "query"): query}, arguments={call_id: {"sql": SQL}}) as resumed:
        (done,) = resumed.resumed_calls
    assert done.value() == f"ran {SQL}" and seen == [SQL]
    # the resuming process learnt nothing of the login call's password; its own call's result is
    # scrubbed of what its own arguments lost (nothing here), so the echo is stored as the tool said:
    # a limit stated in docs/content-modes.md
    assert payloads(store, run.run_id, "tool.result")[-1]["result"] == f"ran {SQL}"
    store.close()


def _agent(run) -> None:
    password = SECRET  # the agent's own value: passed under a sensitive key, then in a query
    run.call_tool("auth", "login", {"user": "bob", "password": password}, lambda user, password: "ok")
    run.call_tool("db", "query", {"sql": f"select * from users where pw = '{password}'"}, lambda sql: {"rows": 1})
    run.note(f"done with {password}", about={"pw": password, "q": [password]})


@pytest.mark.parametrize("tools", ["record", "live"])
def test_a_replay_of_such_a_run_reproduces_and_stores_no_secret(tmp_path, tools):
    store = sealbox.init_store(tmp_path / "store")
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        _agent(run)
    mark = mark_of(store, run.run_id)
    assert payloads(store, run.run_id, "tool.call")[1]["arguments"] == {"sql": f"select * from users where pw = '{mark}'"}
    extra = {"side_effects": True} if tools == "live" else {}
    result = Replayer(store, policy=ALLOW_ALL).replay(run.run_id, _agent, tools=tools, **extra)
    assert result.reproduced and result.divergence is None and result.steps_compared == 3
    assert payloads(store, result.new_run_id, "tool.call")[1]["arguments"] == \
        payloads(store, run.run_id, "tool.call")[1]["arguments"]
    assert payloads(store, result.new_run_id, "note") == payloads(store, run.run_id, "note")
    assert sealbox.verify_store(store).ok
    assert_absent(store, tmp_path / "store")


# --------------------------------------------------------------------------- values redacted from other content


KEY = "ak-live-55e1-0c9d-secret"


def test_a_value_redacted_from_a_result_is_scrubbed_from_everything_recorded_after_it(tmp_path):
    """A tool answers {"api_key": ...}: the store redacts it there (a sensitive key); the model reads
    it and passes it to another tool under an ordinary key, puts it in its next request, and the
    agent saves it and notes it. Every one of those holds the in-string marker of the result's marker."""
    store = sealbox.init_store(tmp_path / "store")
    seen: list[str] = []
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        creds = run.call_tool("vault", "read", {"name": "billing"}, lambda name: {"api_key": KEY, "name": name})
        key = creds["api_key"]
        run.call_tool("http", "get", {"url": "https://billing.example/v1", "header": f"Key {key}"},
                      lambda url, header: seen.append(header) or 200)
        run.model_call({"model": "m", "messages": [{"role": "tool", "content": f"key is {key}"}]},
                       {"text": f"I used {key}"})
        run.save_state({"last_key": key})
        run.note(f"used {key}")
    assert seen == [f"Key {KEY}"]  # the tool got the real value
    result = payloads(store, run.run_id, "tool.result")[0]["result"]
    mark = f"⟦redacted:{result['api_key']['$redacted']}⟧"
    assert payloads(store, run.run_id, "tool.call")[1]["arguments"]["header"] == f"Key {mark}"
    assert payloads(store, run.run_id, "policy.decision")[1]["inputs"]["arguments"]["header"] == f"Key {mark}"
    model = payloads(store, run.run_id, "model.call")[0]
    assert (model["request"]["messages"][0]["content"], model["response"]["text"]) == (f"key is {mark}", f"I used {mark}")
    assert payloads(store, run.run_id, "state.saved")[0]["state"] == {"last_key": mark}
    assert payloads(store, run.run_id, "note")[0]["text"] == f"used {mark}"
    assert_absent(store, tmp_path / "store", KEY)


def test_a_value_redacted_from_a_note_or_a_model_request_is_scrubbed_later(tmp_path):
    store = sealbox.init_store(tmp_path / "store")
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        run.note("connecting", about={"token": KEY})
        run.model_call({"model": "m", "headers": [["Authorization", SECRET]], "messages": []}, {"text": "ok"})
        run.call_tool("db", "query", {"sql": f"-- {KEY} {SECRET}"}, lambda sql: "ok")
    note = payloads(store, run.run_id, "note")[0]
    header = payloads(store, run.run_id, "model.call")[0]["request"]["headers"][0][1]
    first, second = (f"⟦redacted:{m['$redacted']}⟧" for m in (note["about"]["token"], header))
    assert payloads(store, run.run_id, "tool.call")[0]["arguments"] == {"sql": f"-- {first} {second}"}
    assert_absent(store, tmp_path / "store", KEY)


@pytest.mark.parametrize("mode", ["full", "hashes-only"])
def test_other_modes_learn_nothing(tmp_path, mode):
    store = sealbox.init_store(tmp_path / "store", content=sealbox.ContentPolicy(mode=mode))
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        run.call_tool("vault", "read", {"name": "billing"}, lambda name: {"api_key": KEY})
        run.note(f"used {KEY}")
        assert run._run_secrets() == []
    text = payloads(store, run.run_id, "note")[0]["text"]
    assert text == (f"used {KEY}" if mode == "full" else text) and (mode == "full" or KEY not in str(text))


def _vault_agent(run) -> None:
    creds = run.call_tool("vault", "read", {"name": "billing"}, lambda name: {"api_key": KEY})
    run.call_tool("http", "get", {"header": f"Key {creds['api_key']}"}, lambda header: 200)


def test_a_live_replay_of_a_run_that_passed_on_a_result_value_reproduces(tmp_path):
    """Served from the record, the vault's result holds a marker (not replayable, as before); with live
    tools the replay learns the value from the result as the recorded run did, and compares equal."""
    store = sealbox.init_store(tmp_path / "store")
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        _vault_agent(run)
    result = Replayer(store, policy=ALLOW_ALL).replay(run.run_id, _vault_agent, tools="live", side_effects=True)
    assert result.reproduced and result.steps_compared == 2
    assert payloads(store, result.new_run_id, "tool.call")[1]["arguments"] == \
        payloads(store, run.run_id, "tool.call")[1]["arguments"]
    assert_absent(store, tmp_path / "store", KEY)
