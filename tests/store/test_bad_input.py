"""Bad input: one clear error line, a non-zero exit, nothing written; typed errors in Python.

CLI cases run the real ``sealbox`` command in a subprocess. A read-only folder
needs a writer that file modes stop: the tests run as root, so the subprocess
either becomes ``nobody`` (when the venv's interpreter is reachable by it) or
drops CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from its capability bounding set
before exec (root then obeys the owner bits of root-owned files).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from store_testkit import (
    SEALBOX,
    Sample,
    build_sample,
    closing_db,
    decision,
    ended,
    note,
    snapshot_dir,
    started,
    tool_call,
    tool_result,
    big_result,
)
from sealbox import (
    EventDraft,
    InvalidEventError,
    NotAStoreError,
    SchemaVersionError,
    StoreReadOnlyError,
    open_store,
)
from sealbox.store.base import new_run_id

SQLITE_SIDE_FILES = {"sealbox.db-wal", "sealbox.db-shm"}


# --------------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Sample:
    return build_sample(tmp_path_factory.mktemp("template") / "s", nruns=1)


@pytest.fixture
def store_copy(template: Sample, tmp_path: Path) -> Path:
    dst = tmp_path / "store"
    shutil.copytree(template.path, dst)
    return dst


def cli(*args: str, cwd: Path | None = None, preexec_fn: Callable[[], None] | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("SEALBOX_STORE", "SEALBOX_DEBUG")}
    return subprocess.run([str(SEALBOX), *args], capture_output=True, text=True, timeout=60, cwd=cwd,
                          preexec_fn=preexec_fn, env=env)


def assert_one_error_line(res: subprocess.CompletedProcess, *words: str) -> str:
    assert res.returncode != 0, res
    assert "Traceback" not in res.stderr and "Traceback" not in res.stdout
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("error: "), lines[0]
    assert "internal error" not in lines[0]
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def assert_unchanged(before: dict[str, bytes], after: dict[str, bytes], *, allow_sqlite_side_files: bool = False) -> None:
    """Every file is byte-identical and nothing was added (optionally: except SQLite's -wal/-shm)."""
    added = set(after) - set(before)
    if allow_sqlite_side_files:
        added -= SQLITE_SIDE_FILES
    assert not added, f"files created: {sorted(added)}"
    assert set(before) <= set(after), f"files removed: {sorted(set(before) - set(after))}"
    changed = [name for name in before if before[name] != after[name]]
    assert not changed, f"files changed: {changed}"


def other_app_db(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(folder / "sealbox.db")
    db.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, amount REAL)")
    db.execute("INSERT INTO invoices (amount) VALUES (12.5)")
    db.commit()
    db.close()
    return folder


def random_db(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sealbox.db").write_bytes(os.urandom(16384))
    return folder


def newer_schema(store: Path) -> Path:
    with closing_db(store) as db:
        db.execute("INSERT INTO schema_migrations (version, name, checksum, applied_at)"
                   " VALUES (99, 'from_the_future', 'sha256:' || hex(zeroblob(32)), '2030-01-01T00:00:00Z')")
    return store


# --------------------------------------------------------------------------- CLI: not a store, newer schema


def test_cli_verify_a_text_file(tmp_path: Path) -> None:
    f = tmp_path / "notes.txt"
    f.write_text("not a store\n")
    before = snapshot_dir(tmp_path)
    assert_one_error_line(cli("verify", "-s", str(f)), str(f), "not a Sealbox store")
    assert_unchanged(before, snapshot_dir(tmp_path))


def test_cli_verify_a_missing_folder(tmp_path: Path) -> None:
    assert_one_error_line(cli("verify", "-s", str(tmp_path / "nope")), "does not exist")
    assert list(tmp_path.iterdir()) == []


URL_ERROR = ("error: postgresql://… is a URL, not a folder: a Sealbox store is a folder (for PostgreSQL too: its "
             "keys stay there); create one with `sealbox init --postgres URL DIR` and give DIR")


@pytest.mark.parametrize("args", [
    ["init", "postgresql://postgres@127.0.0.1:5432/test"],
    ["runs", "list", "-s", "postgresql://postgres@127.0.0.1:5432/test"],
    ["verify", "-s", "postgresql://postgres@127.0.0.1:5432/test"],
    ["verify", "postgresql://postgres@127.0.0.1:5432/test"],
    ["export", "-s", "postgresql://postgres@127.0.0.1:5432/test", "-o", "case.sbx"],
    ["approvals", "list", "-s", "postgresql://postgres@127.0.0.1:5432/test"],
    ["log", "checkpoint", "-s", "postgresql://postgres@127.0.0.1:5432/test"],
])
def test_cli_a_postgresql_url_is_refused_and_nothing_is_created(tmp_path: Path, args: list[str]) -> None:
    """`sealbox init postgresql://…` created a SQLite store in a folder named `postgresql:` and printed
    "Created a Sealbox store in postgresql://…"; the other commands said the URL (with one slash) did
    not exist and to `sealbox init` it."""
    res = cli(*args, cwd=tmp_path)
    assert (res.returncode, res.stdout, res.stderr) == (2, "", URL_ERROR + "\n")
    assert list(tmp_path.iterdir()) == []


def test_open_and_init_store_refuse_a_url_with_a_typed_error(tmp_path: Path, monkeypatch) -> None:
    from sealbox.store import StoreConfigError, init_store, open_store

    monkeypatch.chdir(tmp_path)
    for fn in (init_store, open_store):
        with pytest.raises(StoreConfigError, match=r"^postgres://… is a URL, not a folder"):
            fn("postgres://u:secret@db.example/sealbox")
    assert list(tmp_path.iterdir()) == []


def test_cli_verify_random_bytes(tmp_path: Path) -> None:
    folder = random_db(tmp_path / "s")
    before = snapshot_dir(folder)
    assert_one_error_line(cli("verify", "-s", str(folder)), "not a Sealbox store", "not an SQLite database")
    assert_unchanged(before, snapshot_dir(folder))


def test_cli_verify_another_applications_database(tmp_path: Path) -> None:
    folder = other_app_db(tmp_path / "s")
    before = snapshot_dir(folder)
    assert_one_error_line(cli("verify", "-s", str(folder)), "not a Sealbox store", "other SQLite database")
    assert_unchanged(before, snapshot_dir(folder))


@pytest.mark.parametrize("args", [["verify", "-s"], ["runs", "list", "-s"], ["log", "checkpoint", "-s"]])
def test_cli_newer_schema(store_copy: Path, args: list[str]) -> None:
    newer_schema(store_copy)
    before = snapshot_dir(store_copy)
    assert_one_error_line(cli(*args, str(store_copy)), "schema version 99", "newer", "upgrade")
    assert_unchanged(before, snapshot_dir(store_copy))


def test_cli_init_over_an_existing_store(store_copy: Path) -> None:
    before = snapshot_dir(store_copy)
    assert_one_error_line(cli("init", str(store_copy)), "already holds a Sealbox store")
    assert_unchanged(before, snapshot_dir(store_copy))


@pytest.mark.parametrize("make", [random_db, other_app_db, lambda folder: (folder.mkdir(), (folder / "sealbox.db").write_text("notes\n"))])
def test_cli_init_over_a_sealbox_db_that_is_not_a_store(tmp_path: Path, make) -> None:
    folder = tmp_path / "s"
    make(folder)
    before = snapshot_dir(folder)
    res = cli("init", str(folder))
    assert res.returncode == 2
    line = assert_one_error_line(res, f"{folder} already holds a file sealbox.db that is not a Sealbox store",
                                 "does not overwrite it")
    assert "already holds a Sealbox store" not in line
    assert res.stdout == ""
    assert_unchanged(before, snapshot_dir(folder))


@pytest.mark.parametrize("make", [random_db, other_app_db])
def test_init_store_over_a_sealbox_db_that_is_not_a_store_says_so(tmp_path: Path, make) -> None:
    """The Python API gives the CLI's reason too, not "already holds a Sealbox store"."""
    from sealbox import init_store
    from sealbox.errors import StoreError

    folder = tmp_path / "s"
    make(folder)
    before = snapshot_dir(folder)
    with pytest.raises(StoreError) as info:
        init_store(folder)
    assert str(info.value).startswith(f"{folder} already holds a file sealbox.db that is not a Sealbox store (")
    assert str(info.value).endswith(": init does not overwrite it (move it away, or create the store in another folder)")
    assert_unchanged(before, snapshot_dir(folder))


def test_cli_verify_with_a_garbage_log_vkey_names_the_file(store_copy: Path, tmp_path: Path) -> None:
    (store_copy / "log.vkey").write_text("garbage\n")
    before = snapshot_dir(store_copy)
    res = cli("verify", "-s", str(store_copy))
    assert res.returncode == 2
    assert res.stderr == (f"error: {store_copy}/log.vkey: malformed verifier key (a verifier key is "
                          "NAME+KEYID+BASE64, as `sealbox init` printed it)\n")
    assert_unchanged(before, snapshot_dir(store_copy), allow_sqlite_side_files=True)
    key_file = tmp_path / "given.vkey"
    key_file.write_text("also+garbage\n")
    res = cli("verify", "-s", str(store_copy), "--key", str(key_file))
    assert res.returncode == 2
    assert_one_error_line(res, f"the key file {key_file}: malformed verifier key")


def test_cli_verify_given_the_private_log_key_says_so(store_copy: Path) -> None:
    """`--key store/log.key` (the signer key beside log.vkey) said only "malformed verifier key: bad name
    or key ID"; it says which key it is and which to give, never printing the key."""
    private = store_copy / "log.key"
    assert private.read_text().startswith("PRIVATE+KEY+")
    for args in (["verify", "-s", str(store_copy), "--key", str(private)], ["verify", str(store_copy), "--key",
                                                                            str(private)]):
        res = cli(*args)
        assert (res.returncode, res.stdout) == (2, "")
        assert res.stderr == (f"error: the key file {private}: this is the log's private signing key, not its verifier "
                              "key: give the verifier key (log.vkey, NAME+KEYID+BASE64 as `sealbox init` printed it); "
                              "keep the private key secret\n")


def test_cli_runs_show_an_unknown_run(store_copy: Path) -> None:
    before = snapshot_dir(store_copy)
    res = cli("runs", "show", "no-such-run", "-s", str(store_copy))
    assert_one_error_line(res, "no run 'no-such-run'")
    assert res.stdout == ""
    assert_unchanged(before, snapshot_dir(store_copy))


def test_read_only_commands_write_nothing(store_copy: Path) -> None:
    """Regression: a read-only open of a WAL store used to create sealbox.db-wal and sealbox.db-shm in the
    store folder and never remove them, so `sealbox verify` and `runs show` wrote to the folder."""
    before = snapshot_dir(store_copy)
    assert cli("verify", "-s", str(store_copy)).returncode == 0
    assert_unchanged(before, snapshot_dir(store_copy))


# --------------------------------------------------------------------------- CLI: read-only folders


def _reachable_by_nobody(path: Path) -> bool:
    """Whether every directory up to ``path`` is searchable, and ``path`` readable, by "other"."""
    path = Path(os.path.realpath(path))
    for parent in list(path.parents)[::-1]:
        if not os.stat(parent).st_mode & stat.S_IXOTH:
            return False
    return bool(os.stat(path).st_mode & stat.S_IROTH)


def _drop_to_nobody() -> None:
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)


_libc = ctypes.CDLL(None, use_errno=True)
PR_CAPBSET_DROP, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 24, 1, 2


def _drop_dac_caps() -> None:
    for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


@pytest.fixture
def unprivileged(tmp_path: Path) -> tuple[Callable[[], None] | None, Path]:
    """(preexec_fn, a folder it can read) such that file modes bind the CLI subprocess."""
    base = Path(os.path.realpath(tmp_path))
    if os.geteuid() != 0:
        yield None, base
        return
    interpreter = Path(os.path.realpath(sys.executable))
    if _reachable_by_nobody(interpreter) and _reachable_by_nobody(SEALBOX) and _reachable_by_nobody(Path(__file__).parents[2] / "src"):
        # nobody must reach the test folder too: pytest's base temp is 0700, so use a fresh one under /tmp
        import tempfile

        base = Path(tempfile.mkdtemp(prefix="sealbox-ro-"))
        os.chmod(base, 0o755)
        fn: Callable[[], None] = _drop_to_nobody
    else:
        fn = _drop_dac_caps
    probe_dir = base / "probe"
    probe_dir.mkdir()
    os.chmod(probe_dir, 0o555)
    res = subprocess.run([sys.executable, "-c", f"open({str(probe_dir / 'x')!r}, 'w')"], capture_output=True,
                         preexec_fn=fn)
    os.chmod(probe_dir, 0o755)
    probe_dir.rmdir()
    if res.returncode == 0:
        pytest.skip("cannot run a subprocess that file modes stop (root keeps DAC override; nobody cannot "
                    f"reach {interpreter}): the read-only folder case is untestable here")
    try:
        yield fn, base
    finally:
        if base != Path(os.path.realpath(tmp_path)):
            for root, dirs, _ in os.walk(base):
                for d in dirs:
                    os.chmod(os.path.join(root, d), 0o755)
            shutil.rmtree(base, ignore_errors=True)


def _make_read_only(folder: Path) -> None:
    for root, dirs, files in os.walk(folder):
        for name in files:
            os.chmod(os.path.join(root, name), 0o444)
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o555)
    os.chmod(folder, 0o555)


def test_cli_init_in_a_read_only_folder(unprivileged) -> None:
    fn, base = unprivileged
    folder = base / "ro"
    folder.mkdir()
    _make_read_only(folder)
    before = snapshot_dir(folder)
    line = assert_one_error_line(cli("init", str(folder), cwd=base, preexec_fn=fn), str(folder))
    assert "cannot write" in line or "Permission denied" in line
    assert_unchanged(before, snapshot_dir(folder))
    assert before == {}


def test_cli_init_below_a_read_only_folder(unprivileged) -> None:
    fn, base = unprivileged
    parent = base / "ro"
    parent.mkdir()
    _make_read_only(parent)
    line = assert_one_error_line(cli("init", str(parent / "store"), cwd=base, preexec_fn=fn), "cannot create")
    assert "Permission denied" in line
    assert snapshot_dir(parent) == {}


def test_cli_open_for_writing_a_read_only_store(unprivileged, template: Sample) -> None:
    """Python-level StoreReadOnlyError from a process that cannot write the folder."""
    fn, base = unprivileged
    folder = base / "store"
    shutil.copytree(template.path, folder)
    _make_read_only(folder)
    before = snapshot_dir(folder)
    code = ("import sys\nfrom sealbox import open_store, StoreReadOnlyError\n"
            "try:\n    open_store(sys.argv[1])\nexcept StoreReadOnlyError as exc:\n    print('ok', exc)\n")
    res = subprocess.run([sys.executable, "-c", code, str(folder)], capture_output=True, text=True, preexec_fn=fn)
    assert res.stdout.startswith("ok ") and str(folder) in res.stdout, (res.stdout, res.stderr)
    assert_unchanged(before, snapshot_dir(folder))


def test_verify_a_read_only_folder(unprivileged, template: Sample) -> None:
    """Regression: an auditor who can read but not write the store folder (a copy on read-only media,
    another user's store) could not verify it: SQLite could not create sealbox.db-shm and `sealbox verify`
    failed with "cannot open ... for writing: attempt to write a readonly database"."""
    fn, base = unprivileged
    folder = base / "store"
    shutil.copytree(template.path, folder)
    _make_read_only(folder)
    res = cli("verify", "-s", str(folder), cwd=base, preexec_fn=fn)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("Verified: the log is intact.")


# --------------------------------------------------------------------------- Python: typed errors


def test_open_store_typed_errors_for_non_stores(tmp_path: Path) -> None:
    f = tmp_path / "notes.txt"
    f.write_text("hello")
    for readonly in (True, False):
        with pytest.raises(NotAStoreError, match="it is a file"):
            open_store(f, readonly=readonly)
        with pytest.raises(NotAStoreError, match="does not exist"):
            open_store(tmp_path / "missing", readonly=readonly)
        with pytest.raises(NotAStoreError, match="no sealbox.db"):
            open_store(tmp_path, readonly=readonly)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_a_folder_named_sealbox_db_is_said_to_be_a_directory_not_a_missing_database(store_copy: Path) -> None:
    (store_copy / "sealbox.db").unlink()
    (store_copy / "sealbox.db").mkdir()
    said = (f"{store_copy} is not a Sealbox store (its sealbox.db is a directory, not the database file; "
            "move it away and put the store's database file there)")
    for readonly in (True, False):
        with pytest.raises(NotAStoreError) as exc:
            open_store(store_copy, readonly=readonly)
        assert str(exc.value) == said
    res = cli("verify", "-s", str(store_copy))
    assert (res.returncode, res.stderr) == (2, f"error: {said}\n")
    res = cli("init", str(store_copy))
    assert (res.returncode, res.stderr) == (2, f"error: {store_copy} holds a directory named sealbox.db where the "
                                            "store's database file goes: init does not overwrite it (move it away, "
                                            "or create the store in another folder)\n")
    assert (store_copy / "sealbox.db").is_dir() and not any((store_copy / "sealbox.db").iterdir())


@pytest.mark.parametrize("readonly", [True, False])
def test_open_store_random_bytes(tmp_path: Path, readonly: bool) -> None:
    folder = random_db(tmp_path / "s")
    before = snapshot_dir(folder)
    with pytest.raises(NotAStoreError, match="not an SQLite database"):
        open_store(folder, readonly=readonly)
    assert_unchanged(before, snapshot_dir(folder))


def test_open_store_another_applications_database_read_only(tmp_path: Path) -> None:
    folder = other_app_db(tmp_path / "s")
    before = snapshot_dir(folder)
    with pytest.raises(NotAStoreError, match="some other SQLite database"):
        open_store(folder, readonly=True)
    assert_unchanged(before, snapshot_dir(folder))


def test_open_for_writing_another_applications_database_writes_nothing(tmp_path: Path) -> None:
    """Regression: ``PRAGMA journal_mode = WAL`` used to run before application_id was checked, so
    open_store(path) on another application's sealbox.db switched it to WAL (header bytes 18-19 went
    from 1 to 2) and left -wal/-shm files before raising NotAStoreError."""
    folder = other_app_db(tmp_path / "s")
    before = snapshot_dir(folder)
    with pytest.raises(NotAStoreError, match="some other SQLite database"):
        open_store(folder)
    after = snapshot_dir(folder)
    assert after["sealbox.db"][18:20] == before["sealbox.db"][18:20] == b"\x01\x01"
    assert_unchanged(before, after)


@pytest.mark.parametrize("readonly", [True, False])
def test_open_store_newer_schema(store_copy: Path, readonly: bool) -> None:
    """Also checks that a refused open leaves the folder as it was. BUG (src/sealbox/store/sqlite.py,
    SqliteStore.__init__): when the constructor raises, the connection it opened is not closed; the
    exception's traceback keeps it alive, so sealbox.db-wal/-shm stay in the folder until garbage
    collection (the CLI hides it by exiting). Fix: close every connection before re-raising."""
    newer_schema(store_copy)
    before = snapshot_dir(store_copy)
    with pytest.raises(SchemaVersionError, match="schema version 99, newer than this Sealbox supports"):
        open_store(store_copy, readonly=readonly)
    assert_unchanged(before, snapshot_dir(store_copy))


def test_open_store_altered_migration(store_copy: Path) -> None:
    with closing_db(store_copy) as db:
        db.execute("UPDATE schema_migrations SET checksum = 'sha256:' || hex(zeroblob(32)) WHERE version = 1")
    with pytest.raises(SchemaVersionError, match="differs from the one applied"):
        open_store(store_copy)


def test_open_store_read_only_refuses_writes(store_copy: Path) -> None:
    store = open_store(store_copy, readonly=True)
    try:
        with pytest.raises(StoreReadOnlyError):
            store.append(note("system", "x"))
        with pytest.raises(StoreReadOnlyError):
            store.issue_checkpoint()
    finally:
        store.close()


# --------------------------------------------------------------------------- Python: invalid events write nothing


def _state(store) -> tuple:
    conn = sqlite3.connect(store.db_path)
    try:
        return (store.size(),
                conn.execute("SELECT count(*) FROM blobs").fetchone()[0],
                conn.execute("SELECT count(*) FROM runs").fetchone()[0],
                conn.execute("SELECT count(*) FROM tree_nodes").fetchone()[0],
                conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0])
    finally:
        conn.close()


@pytest.fixture
def live(store_copy: Path):
    store = open_store(store_copy)
    run = new_run_id()
    store.append(started(run))
    yield store, run
    store.close()


BAD_DRAFTS = {
    "unknown kind": lambda run: EventDraft("tool.exploded", {"x": 1}, run_id=run),
    "missing field": lambda run: EventDraft("note", {}, run_id=run),
    "wrong type": lambda run: EventDraft("tool.result", {"call_id": "c", "ok": "yes", "duration_us": 1}, run_id=run),
    "bad enum": lambda run: EventDraft("run.ended", {"status": "fine"}, run_id=run),
    "negative int": lambda run: EventDraft("tool.result", {"call_id": "c", "ok": True, "duration_us": -1}, run_id=run),
    "payload not a dict": lambda run: EventDraft("note", ["text"], run_id=run),  # type: ignore[arg-type]
    "empty principal": lambda run: EventDraft("note", {"text": "t"}, run_id=run, principal=""),
    "bad step": lambda run: EventDraft("note", {"text": "t"}, run_id=run, step="four"),
    "empty run id": lambda run: EventDraft("note", {"text": "t"}, run_id=""),
    "not a draft": lambda run: {"kind": "note", "payload": {"text": "t"}},
}


@pytest.mark.parametrize("name", list(BAD_DRAFTS))
def test_invalid_event_writes_nothing(live, name: str) -> None:
    store, run = live
    before = _state(store)
    with pytest.raises(InvalidEventError):
        store.append(BAD_DRAFTS[name](run))
    assert _state(store) == before


@pytest.mark.parametrize("name", ["unknown kind", "missing field", "wrong type"])
def test_invalid_event_in_an_atomic_batch_writes_nothing(live, name: str) -> None:
    """The batch's valid events (with a new blob) come first; all of it is rolled back."""
    store, run = live
    before = _state(store)
    with pytest.raises(InvalidEventError):
        store.append([tool_call(run, "c1", arguments=big_result("batch")), decision(run, "c1"), BAD_DRAFTS[name](run)])
    assert _state(store) == before
    assert [e.kind for e in store.read_run(run)] == ["run.started"]
    # the run goes on normally afterwards, with contiguous run_seq
    placed = store.append([tool_call(run, "c1"), decision(run, "c1")])
    assert [e.run_seq for e in placed] == [2, 3]


def test_append_to_a_run_that_never_started(live) -> None:
    store, _ = live
    before = _state(store)
    with pytest.raises(InvalidEventError, match="has not started"):
        store.append(note(new_run_id(), "orphan"))
    with pytest.raises(InvalidEventError, match="has not started"):
        store.append([tool_call("ghost", "c"), decision("ghost", "c")])
    assert _state(store) == before


def test_append_after_run_ended(live) -> None:
    store, run = live
    store.append(ended(run))
    before = _state(store)
    with pytest.raises(InvalidEventError, match="has ended"):
        store.append(tool_result(run, "c", {"late": True}))
    with pytest.raises(InvalidEventError, match="has ended"):
        store.append(ended(run))
    assert _state(store) == before


def test_start_a_run_twice(live) -> None:
    store, run = live
    before = _state(store)
    with pytest.raises(InvalidEventError, match="already started"):
        store.append(started(run))
    assert _state(store) == before


def test_store_is_clean_after_rejected_appends(live) -> None:
    from sealbox import verify_store

    store, run = live
    for name in BAD_DRAFTS:
        with pytest.raises(InvalidEventError):
            store.append(BAD_DRAFTS[name](run))
    store.append(note(run, "fine"))
    report = verify_store(store)
    assert report.ok, report.problems


@pytest.mark.parametrize("content, words", [(b"garbage\n", "log.key: malformed signer key (the log's signing key"),
                                            (b"\xff\xfe", "cannot read the signing key")])
def test_a_corrupt_signing_key_names_the_file(store_copy: Path, content: bytes, words: str) -> None:
    (store_copy / "log.key").write_bytes(content)
    before = snapshot_dir(store_copy)
    line = assert_one_error_line(cli("identities", "add", "x", "--role", "approver", "--key-out",
                                     str(store_copy.parent / "x.key"), "-s", str(store_copy)), words)
    assert str(store_copy / "log.key") in line
    assert_unchanged(before, snapshot_dir(store_copy), allow_sqlite_side_files=True)
    assert cli("verify", "-s", str(store_copy)).returncode == 0  # reading and verifying need no signing key


@pytest.mark.parametrize("origin", ["a+b", "has space", "tab\there", "line\nbreak"])
def test_init_with_an_origin_that_is_no_key_name_creates_nothing(tmp_path: Path, origin: str) -> None:
    """Regression (input: --origin with '+', a space or a control character): init failed after it had
    created the folder and an empty sealbox.db, so the retry without the bad origin was refused
    ("already holds a file sealbox.db that is not a Sealbox store") until the user cleaned up."""
    from sealbox import init_store
    from sealbox.errors import NoteError

    with pytest.raises(NoteError):
        init_store(tmp_path / "api", origin=origin)
    assert not (tmp_path / "api").exists()
    res = cli("init", str(tmp_path / "cli"), "--origin", origin)
    assert (res.returncode, res.stdout) == (2, "")
    assert res.stderr == (f"error: --origin {origin!r} cannot name the log's key: it may not hold '+', spaces or "
                          "control characters (e.g. example.com/agents)\n")
    assert not (tmp_path / "cli").exists()
    assert cli("init", str(tmp_path / "cli")).returncode == 0  # the retry works


def test_the_project_folder_or_the_database_file_given_for_the_store_names_the_store_folder(tmp_path: Path) -> None:
    """``sealbox calls -s PROJECT`` (the folder holding ``.sealbox``) said 'PROJECT is not a Sealbox store (no
    sealbox.db; create one with `sealbox init`)', and ``-s .sealbox/sealbox.db`` '… (it is a file; give the store's
    folder)': neither named the store that is right there."""
    from sealbox import init_store

    init_store(tmp_path / ".sealbox").close()
    db = tmp_path / ".sealbox" / "sealbox.db"
    for readonly in (True, False):
        with pytest.raises(NotAStoreError) as project:
            open_store(tmp_path, readonly=readonly)
        assert str(project.value) == (f"{tmp_path} is not a Sealbox store (no sealbox.db; the store is its .sealbox "
                                      f"folder: give {tmp_path / '.sealbox'})")
        with pytest.raises(NotAStoreError) as database:
            open_store(db, readonly=readonly)
        assert str(database.value) == (f"{db} is not a Sealbox store (it is the store's database file; give the "
                                       f"store's folder, {tmp_path / '.sealbox'})")
