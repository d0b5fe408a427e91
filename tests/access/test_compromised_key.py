"""A leaked identity key, answered in one command: ``sealbox identities disable|rotate NAME
--compromised-since WHEN``. Everything the identity signed from the first leaf at or after WHEN stops
counting: grants deny (``grant_invalid``), revocation steps are not shown, and ``sealbox verify`` notes
each call that already ran under such a grant (``relied_on_compromised_key``)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from sealbox import verify_store
from sealbox.access import grant_access, grant_status, list_grants, retry, revoke, show_grant
from sealbox.cli.main import main
from sealbox.events import SYSTEM_RUN_ID
from sealbox.interop.bundle_verify import verify_bundle
from sealbox.identities import IdentityError, add_identity, disable_identity, identity_book, rotate_key
from identity_testkit import grant_key  # noqa: E402

from test_access_signed_grants import AGENT, call, decision_of  # noqa: E402


@pytest.fixture
def keys(store, tmp_path):
    root = grant_key(store)
    out = {"root": root}
    for name, role in (("alice", "admin"), ("bob", "approver")):
        out[name] = add_identity(store, name, role, key_path=tmp_path / f"{name}.key", admin_key=root).key_path
    return out


def cli(capsys, *args):
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_grant_signed_before_the_point_keeps_working_one_signed_after_is_denied(store, keys, capsys, tmp_path):
    before = grant_access(store, AGENT, "github", "create_*", key_file=keys["alice"], grant_id="g-before")
    since = store.size()  # the key leaked here: the attacker's grant comes next
    after = grant_access(store, AGENT, "github", "create_*", key_file=keys["alice"], grant_id="g-after")
    result, run_id, ran = call(store, after)  # the attacker's grant authorized a call before anyone noticed
    assert (result, ran) == ("ok", ["x"])
    call_leaf = next(e.leaf_index for e in store.read_run(run_id) if e.kind == "tool.call")
    call_id = next(e.payload["call_id"] for e in store.read_run(run_id) if e.kind == "tool.call")

    code, out, err = cli(capsys, "identities", "disable", "alice", "--compromised-since", f"leaf:{since}",
                         "--reason", "key leaked", "--admin-key", str(keys["root"]), "--store", str(tmp_path / "store"))
    assert (code, err) == (0, "")
    record = [e for e in store.read_run(SYSTEM_RUN_ID) if e.kind == "identity.changed"][-1]
    assert out == (f"identity alice disabled; everything its key signed from leaf {since} on no longer counts "
                   f"(compromise recorded at leaf {record.leaf_index})\n")
    assert {k: record.payload[k] for k in ("change", "compromised_since", "compromised_from_leaf", "reason")} == {
        "change": "disabled", "compromised_since": f"leaf:{since}", "compromised_from_leaf": since,
        "reason": "key leaked"}

    assert call(store, before)[0] == "ok"  # signed before the leak: still authorizes
    denied, run2, ran2 = call(store, after)
    assert ran2 == []
    d = decision_of(store, run2)
    assert (d["effect"], d["reason_code"]) == ("deny", "grant_invalid")
    assert d["reason"] == ("grant g-after does not count: it was signed with its identity's key after the point from "
                           "which that key was declared compromised (`sealbox identities disable|rotate "
                           "--compromised-since`)")
    assert grant_status(store, before, AGENT, "github", "create_issue")[0] is True
    assert [(r["grant_id"], r["signature"]) for r in list_grants(store)] == [
        ("g-before", "valid"), ("g-after", "compromised_key")]

    report = verify_store(store)
    assert report.ok
    assert report.notes == (
        f"the grant g-after of github/create_* to {AGENT!r} by 'alice' at leaf {since} was signed with a key declared "
        f"compromised from leaf {since} (identity.changed at leaf {record.leaf_index}): it authorizes no call from "
        "then on (calls naming it are denied grant_invalid)",
        f"relied_on_compromised_key: call {call_id} in run {run_id} (leaf {call_leaf}) ran under grant g-after, "
        f"signed by 'alice' at leaf {since} with a key declared compromised from leaf {since} (identity.changed at "
        f"leaf {record.leaf_index})",
    )
    code, out, _ = cli(capsys, "verify", "--store", str(tmp_path / "store"), "--json")
    assert code == 0 and json.loads(out)["notes"] == list(report.notes)
    code, out, _ = cli(capsys, "access", "show", "g-after", "--store", str(tmp_path / "store"), "--json")
    assert json.loads(out)["signature"] == "compromised_key"
    code, out, _ = cli(capsys, "identities", "list", "--store", str(tmp_path / "store"), "--json")
    assert [(i["name"], i["disabled"], i["compromised"]) for i in json.loads(out)] == [
        ("alice", True, [{"from_leaf": since, "until_leaf": None, "change_leaf": record.leaf_index}]),
        ("bob", False, []), ("root", False, [])]
    code, out, _ = cli(capsys, "identities", "list", "--store", str(tmp_path / "store"))
    assert code == 0 and f"leaves {since}.." in out

    # the same notes, offline, from an export bundle of the run that relied on the grant
    bundle = tmp_path / "run.sbx"
    code, _, err = cli(capsys, "export", "--store", str(tmp_path / "store"), run_id, "-o", str(bundle))
    assert code == 0, err
    vkey = (tmp_path / "store" / "log.vkey").read_text().strip()
    breport = verify_bundle(bundle, trusted_vkey=vkey)
    assert breport.ok and breport.notes == report.notes


def test_a_time_resolves_to_the_first_leaf_at_or_after_it_and_rotation_closes_the_window(store, keys):
    before = grant_access(store, AGENT, "github", "create_*", key_file=keys["alice"], grant_id="g-before")
    stamp = datetime.now(timezone.utc)
    after = grant_access(store, AGENT, "github", "create_*", key_file=keys["alice"], grant_id="g-after")
    after_leaf = store.size() - 1
    new = rotate_key(store, "alice", store.path.parent / "alice2.key" if hasattr(store, "path") else keys["alice"].parent / "alice2.key",
                     admin_key=keys["root"], compromised_since=stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
    record = [e for e in store.read_run(SYSTEM_RUN_ID) if e.kind == "identity.changed"][-1]
    assert record.payload["compromised_from_leaf"] == after_leaf
    assert record.payload["compromised_since"] == stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    fresh = grant_access(store, AGENT, "github", "create_*", key_file=new.key_path, grant_id="g-new-key")
    assert [grant_status(store, g, AGENT, "github", "create_issue")[0] for g in (before, after, fresh)] == [
        True, False, True]
    assert identity_book(store).compromise_records() == {"alice": [(record.leaf_index, after_leaf, record.leaf_index)]}


def test_a_revocation_step_signed_in_the_window_is_not_shown(store, keys):
    gid = grant_access(store, AGENT, "github", "create_*", key_file=keys["root"], grant_id="g1")
    since = store.size()
    revoke(store, gid, "done", key_file=keys["bob"])  # a local grant: requested only, signed by bob
    assert show_grant(store, gid)["status"] == "revoked (local only: no provider)"
    disable_identity(store, "bob", admin_key=keys["root"], compromised_since=f"leaf:{since}")
    row = show_grant(store, gid)
    assert [s["signature"] for s in row["steps"]] == ["compromised_key"]
    assert row["status"] == "revoked (unsigned request only: denied here; revoke again with a key)"
    assert grant_status(store, gid, AGENT, "github", "create_issue")[0] is False  # a request still denies


@pytest.mark.parametrize("when, message", [
    ("yesterday", "error: compromised-since 'yesterday' is not leaf:N or an RFC 3339 date-time (e.g. 2026-12-03T09:00:00Z)"),
    ("leaf:-1", "error: compromised-since 'leaf:-1': a leaf index is leaf:N with N a non-negative integer without "
                "leading zeros (leaf:0, leaf:4711)"),
    # was: read as leaf:1
    ("leaf:0001", "error: compromised-since 'leaf:0001': a leaf index is leaf:N with N a non-negative integer without "
                  "leading zeros (leaf:0, leaf:4711)"),
    # was: "N a non-negative integer" (it is one: too large)
    ("leaf:99999999999999999999999", "error: compromised-since leaf:99999999999999999999999 is after this change: no "
                                     "log has that many leaves"),
    ("leaf:" + "9" * 5000, "error: compromised-since leaf:" + "9" * 40 + "… is after this change: no log has that "
                           "many leaves"),
    ("2026-12-03", "error: compromised-since '2026-12-03' is not leaf:N or an RFC 3339 date-time (e.g. 2026-12-03T09:00:00Z)"),
    ("2026-12-03T09:00:00", "error: compromised-since '2026-12-03T09:00:00' has no UTC offset (add Z or +hh:mm)"),
    # not RFC 3339 §5.6 date-times, although datetime.fromisoformat reads them
    ("2026-12-03T09:00Z", "error: compromised-since '2026-12-03T09:00Z' is not leaf:N or an RFC 3339 date-time (e.g. 2026-12-03T09:00:00Z)"),
    ("2026-W49-4T09:00:00Z", "error: compromised-since '2026-W49-4T09:00:00Z' is not leaf:N or an RFC 3339 date-time (e.g. 2026-12-03T09:00:00Z)"),
    ("20261203T090000Z", "error: compromised-since '20261203T090000Z' is not leaf:N or an RFC 3339 date-time (e.g. 2026-12-03T09:00:00Z)"),
    ("2026-12-03T09:00:00+0000", "error: compromised-since '2026-12-03T09:00:00+0000' is not leaf:N or an RFC 3339 date-time (e.g. 2026-12-03T09:00:00Z)"),
    ("leaf:999999", "error: compromised-since leaf:999999 is after this change (it is recorded at leaf {size}): a key "
                    "cannot be known to be compromised from a point not yet in the log"),
])
def test_a_bad_or_future_point_is_one_error_line_exit_2_nothing_written(store, keys, capsys, tmp_path, when, message):
    size = store.size()
    code, out, err = cli(capsys, "identities", "disable", "alice", "--compromised-since", when,
                         "--admin-key", str(keys["root"]), "--store", str(tmp_path / "store"))
    assert (code, out, err) == (2, "", message.format(size=size) + "\n")
    assert store.size() == size and not identity_book(store).get("alice").disabled


@pytest.mark.parametrize("when, expected", [
    ("2026-12-03t09:00:00z", datetime(2026, 12, 3, 9, tzinfo=timezone.utc)),  # RFC 3339 §5.6 NOTE: lowercase
    ("2026-12-03 10:30:00+01:30", datetime(2026, 12, 3, 9, tzinfo=timezone.utc)),
    ("2026-12-03T09:00:00.123456789Z", datetime(2026, 12, 3, 9, 0, 0, 123456, tzinfo=timezone.utc)),  # earlier, never later
])
def test_rfc3339_date_times_are_read_in_utc(when, expected):
    from sealbox.identities import parse_compromised_since

    assert parse_compromised_since(when) == ("time", expected)


def test_disabling_a_disabled_identity_with_compromised_since_points_to_rotate(store, keys, capsys, tmp_path):
    disable_identity(store, "bob", admin_key=keys["root"])
    size = store.size()
    code, out, err = cli(capsys, "identities", "disable", "bob", "--compromised-since", "leaf:1",
                         "--admin-key", str(keys["root"]), "--store", str(tmp_path / "store"))
    assert (code, out, err) == (2, "", "error: identity 'bob' is already disabled; to declare its key compromised now, "
                                       "rotate it: `sealbox identities rotate bob --key-out NEW.key --compromised-since "
                                       "WHEN`\n")
    assert store.size() == size
    code, out, err = cli(capsys, "identities", "disable", "bob",
                         "--admin-key", str(keys["root"]), "--store", str(tmp_path / "store"))
    assert (code, out, err) == (2, "", "error: identity 'bob' is already disabled\n")
    code, out, err = cli(capsys, "identities", "rotate", "bob", "--key-out", str(tmp_path / "bob-2.key"),
                         "--compromised-since", "leaf:1", "--admin-key", str(keys["root"]),
                         "--store", str(tmp_path / "store"))
    assert (code, err) == (0, "") and "no longer counts" in out
    record = store.size() - 1  # the rotation
    assert store.size() == size + 1 and identity_book(store).compromised_at("bob", 1) == (record, 1)


def test_a_time_after_the_change_is_refused(store, keys, tmp_path):
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    with pytest.raises(IdentityError, match=r"^compromised-since .* is after this change \(now is "):
        disable_identity(store, "alice", admin_key=keys["root"], compromised_since=later)
    with pytest.raises(IdentityError, match="is after this change"):
        rotate_key(store, "alice", tmp_path / "new.key", admin_key=keys["root"], compromised_since=later)
    assert not (tmp_path / "new.key").exists() and not identity_book(store).get("alice").disabled



def _github_grant(store, provider, key):
    tokens = provider.issue()
    return grant_access(store, AGENT, "github", "create_*", "repo", credential=provider.credential(tokens),
                        key_file=key), tokens


def test_a_confirmed_signed_with_the_leaked_key_is_not_shown_and_a_new_revocation_can_follow(store, keys, provider):
    gid, tokens = _github_grant(store, provider, keys["root"])
    since = store.size()
    assert revoke(store, gid, "leak", key_file=keys["bob"], backoff=0.01, sleep=lambda s: None) == \
        "revoked (confirmed at provider)"
    disable_identity(store, "bob", admin_key=keys["root"], compromised_since=f"leaf:{since}")
    row = show_grant(store, gid)
    assert [(s["step"], s["signature"]) for s in row["steps"]] == [
        ("requested", "compromised_key"), ("sent", "compromised_key"), ("confirmed", "compromised_key")]
    assert row["status"] == "revoked (unsigned request only: denied here; revoke again with a key)"
    # an admin revokes again: a new chain from the grant, confirmed by introspection
    assert revoke(store, gid, "again", key_file=keys["root"], backoff=0.01, sleep=lambda s: None) == \
        "revoked (confirmed at provider)"
    assert [(s["step"], s["signature"]) for s in show_grant(store, gid)["steps"]][3:] == [
        ("requested", "valid"), ("sent", "valid"), ("confirmed", "valid")]
    report = verify_store(store)
    assert report.ok and len(report.notes) == 3 and all("signed with a key declared compromised" in n
                                                         for n in report.notes)


def test_steps_chained_after_a_compromised_step_while_it_counted_still_count(store, keys, provider):
    gid, tokens = _github_grant(store, provider, keys["root"])
    since = store.size()
    provider.stop()
    assert revoke(store, gid, "leak", retries=1, key_file=keys["bob"], backoff=0.01, sleep=lambda s: None) == \
        "revoked (pending at provider)"
    provider.start()
    assert retry(store, gid, key_file=keys["root"], backoff=0.01, sleep=lambda s: None) == \
        "revoked (confirmed at provider)"
    disable_identity(store, "bob", admin_key=keys["root"], compromised_since=f"leaf:{since}")
    row = show_grant(store, gid)
    assert [(s["step"], s["identity"], s["signature"]) for s in row["steps"]] == [
        ("requested", "bob", "compromised_key"), ("failed", "bob", "compromised_key"), ("sent", "root", "valid"),
        ("confirmed", "root", "valid")]
    assert row["status"] == "revoked (confirmed at provider)"
    assert verify_store(store).ok


def test_rotate_from_the_command_line_records_the_point_and_a_bad_one_writes_no_key(store, keys, capsys, tmp_path):
    path = str(tmp_path / "store")
    size = store.size()
    code, out, err = cli(capsys, "identities", "rotate", "alice", "--key-out", str(tmp_path / "bad.key"),
                         "--compromised-since", "leaf:x", "--admin-key", str(keys["root"]), "--store", path)
    assert (code, out, err) == (2, "", "error: compromised-since 'leaf:x': a leaf index is leaf:N with N a "
                                      "non-negative integer without leading zeros (leaf:0, leaf:4711)\n")
    assert store.size() == size and not (tmp_path / "bad.key").exists()
    code, out, err = cli(capsys, "identities", "rotate", "alice", "--key-out", str(tmp_path / "alice2.key"),
                         "--compromised-since", "leaf:0", "--admin-key", str(keys["root"]), "--store", path)
    new = identity_book(store).get("alice")
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == (f"identity alice has a new key {new.key_id}; everything its old key signed from leaf 0 "
                                   f"on no longer counts (compromise recorded at leaf {size})")
    assert identity_book(store).compromise_records() == {"alice": [(size, 0, size)]}


def test_an_identity_whose_key_leaked_is_enabled_only_after_a_rotation(store, keys, capsys, tmp_path):
    path = str(tmp_path / "store")
    disable_identity(store, "bob", admin_key=keys["root"], compromised_since="leaf:0")
    record = store.size() - 1
    size = store.size()
    code, out, err = cli(capsys, "identities", "enable", "bob", "--admin-key", str(keys["root"]), "--store", path)
    assert (code, out, err) == (2, "", f"error: identity 'bob' has the key declared compromised at leaf {record} "
                                      "(from leaf 0): give it a new key first (`sealbox identities rotate bob --key-out "
                                      "FILE --admin-key …`), then enable it\n")
    assert store.size() == size
    rotate_key(store, "bob", tmp_path / "bob2.key", admin_key=keys["root"])
    code, out, err = cli(capsys, "identities", "enable", "bob", "--admin-key", str(keys["root"]), "--store", path)
    assert (code, out, err) == (0, "identity bob enabled\n", "")


def test_a_replay_served_from_the_record_is_not_noted_as_a_call_that_ran_under_the_grant(store, keys):
    """A replay records the call it serves (policy.decision ``replayed``) but runs nothing: only the
    recorded call relied on the compromised grant, as an export bundle of the store reads it too."""
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder
    from sealbox.replay import Replayer

    def agent(run):
        return run.call_tool("github", "create_issue", {"title": "x"}, lambda title: "ok", grant="g-leaked")

    since = store.size()
    grant_access(store, AGENT, "github", "create_*", key_file=keys["alice"], grant_id="g-leaked")
    with Recorder(store, ALLOW_ALL).run(agent="deploy-bot", principal=AGENT) as run:
        agent(run)
    replayed = Replayer(store).replay(run.run_id, agent)
    assert replayed.reproduced
    replay_calls = [e for e in store.read_run(replayed.new_run_id) if e.kind == "tool.call"]
    assert [e.payload["grant"] for e in replay_calls] == ["g-leaked"]  # the replay recorded it, naming the grant
    disable_identity(store, "alice", "leak", admin_key=keys["root"], compromised_since=f"leaf:{since}")

    report = verify_store(store)
    assert report.ok
    call_event = next(e for e in store.read_run(run.run_id) if e.kind == "tool.call")
    assert [n.split(" ran under")[0] for n in report.notes if n.startswith("relied_on_compromised_key")] == [
        f"relied_on_compromised_key: call {call_event.payload['call_id']} in run {run.run_id} (leaf {call_event.leaf_index})"]


@pytest.mark.parametrize("backend", ["sqlite"])  # a copy of its file; a PostgreSQL store's folder names its schema
def test_a_copy_of_the_store_checked_first_in_the_same_process_does_not_hide_the_compromise(store, keys, tmp_path):
    """The names with a compromise record were cached under (origin, leaf of the newest identity change):
    a copy of the store (same origin) whose newest change at that leaf was another one, checked first in
    the same process, left a compromised grant authorizing calls in the original."""
    import shutil

    import sealbox

    since = store.size()
    grant_access(store, AGENT, "github", "create_*", key_file=keys["alice"], grant_id="g-leaked")
    shutil.copytree(tmp_path / "store", tmp_path / "copy" / "store")
    copy = sealbox.open_store(tmp_path / "copy" / "store")
    try:
        add_identity(copy, "carol", "approver", key_path=tmp_path / "carol.key", admin_key=keys["root"])
        disable_identity(store, "alice", "leak", admin_key=keys["root"], compromised_since=f"leaf:{since}")
        assert copy.size() == store.size()  # the two newest identity changes are at the same leaf
        assert grant_status(copy, "g-leaked", AGENT, "github", "create_issue")[0] is True  # not compromised there
    finally:
        copy.close()
    ok, why = grant_status(store, "g-leaked", AGENT, "github", "create_issue")
    assert (ok, why.split(":")[0]) == (False, "grant g-leaked does not count")


def test_a_time_before_the_year_1000_covers_the_whole_log(store, keys, tmp_path):
    """strftime's %Y does not pad years below 1000 ("999-06-01…"): compared as text with the events' ts, no event
    was at or after it, and the window started at the change itself; every grant the key signed still counted."""
    before = grant_access(store, AGENT, "github", "create_*", key_file=keys["alice"], grant_id="g-before")
    rotate_key(store, "alice", tmp_path / "alice2.key", admin_key=keys["root"],
               compromised_since="0999-06-01T00:00:00Z")
    record = [e for e in store.read_run(SYSTEM_RUN_ID) if e.kind == "identity.changed"][-1]
    assert (record.payload["compromised_since"], record.payload["compromised_from_leaf"]) == (
        "0999-06-01T00:00:00.000000Z", 0)
    assert grant_status(store, before, AGENT, "github", "create_issue")[0] is False
    assert verify_store(store).problems == ()


def test_an_aware_datetime_out_of_range_in_utc_is_an_identity_error(store, keys):
    """As the text form ('0001-01-01T00:00:00+01:00'): an IdentityError, not an OverflowError, nothing recorded."""
    from datetime import timedelta as td

    early = datetime(1, 1, 1, tzinfo=timezone(td(hours=1)))
    size = store.size()
    with pytest.raises(IdentityError, match=r"^compromised-since 0001-01-01 00:00:00\+01:00 is out of range in UTC$"):
        disable_identity(store, "alice", admin_key=keys["root"], compromised_since=early)
    assert store.size() == size and not identity_book(store).get("alice").disabled
