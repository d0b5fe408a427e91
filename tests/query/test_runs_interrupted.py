"""A run whose recording process died (SIGKILL, a hard crash) is listed ``interrupted``, not
``running`` forever: the process held a liveness lease on the run (sealbox.liveness) that the OS
(SQLite store: a lockf lock on the folder's runs.lock) or the server (PostgreSQL: a session advisory
lock) dropped with it. Derived when reading; nothing is written to the log."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import uuid

import pytest
from conftest import BACKENDS
from query_helpers import SEALBOX, sealbox

from sealbox import EventDraft, init_store, open_store
from sealbox.policy import ALLOW_ALL
from sealbox.recorder import Recorder

CHILD = textwrap.dedent("""
    import sys, time
    from sealbox import open_store
    from sealbox.policy import ALLOW_ALL
    from sealbox.recorder import Recorder

    store = open_store(sys.argv[1])
    run = Recorder(store, ALLOW_ALL).run(agent=sys.argv[2], principal="agent:child").start()
    print(run.run_id, flush=True)

    def blocks(**kwargs):
        print("in the tool", flush=True)
        time.sleep(3600)

    run.call_tool("fs", "read_file", {"path": "/data/x"}, blocks, call_id="c1")
""")


@pytest.fixture(params=BACKENDS)
def store_path(request, tmp_path):
    path = tmp_path / "store"
    if request.param == "sqlite":
        init_store(path).close()
        yield path
        return
    import psycopg

    url = os.environ["SEALBOX_TEST_POSTGRES_URL"]
    schema = f"sbt_live_{uuid.uuid4().hex[:16]}"
    init_store(path, postgres_url=url, schema=schema).close()
    try:
        yield path
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def _child(store_path, agent: str, tmp_path) -> tuple[subprocess.Popen, str]:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    proc = subprocess.Popen([sys.executable, str(script), str(store_path), agent], stdout=subprocess.PIPE, text=True)
    run_id = proc.stdout.readline().strip()
    assert proc.stdout.readline().strip() == "in the tool"  # tool.call and its decision are recorded
    return proc, run_id


def _lock_fds(*folders) -> int:
    """Descriptors of this process open on the runs.lock of these store folders (other descriptors come
    and go with SQLite connections and threads, and other tests' stores keep theirs while a run they left
    open holds its lease: counting them is not what these tests are about)."""
    wanted = {os.path.realpath(os.path.join(folder, "runs.lock")) for folder in folders}
    out = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            out += os.readlink(f"/proc/self/fd/{name}") in wanted
        except OSError:  # closed meanwhile
            pass
    return out


def _lease_connections() -> int:
    """PostgreSQL sessions named ``sealbox-live`` whose client socket is one of this process's."""
    import psycopg

    inodes = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    ports = []
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[9] in inodes:
                    ports.append(int(fields[1].rsplit(":", 1)[1], 16))
    if not ports:
        return 0
    with psycopg.connect(os.environ["SEALBOX_TEST_POSTGRES_URL"], autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'sealbox-live' "
                            "AND client_port = ANY(%s)", (ports,)).fetchone()[0]


def _statuses(rows) -> dict[str, str]:
    return {r["agent"]: r["status"] for r in rows if r["run_id"] != "system"}


def _cli_statuses(store_path, *extra: str) -> dict[str, str]:
    out = sealbox("runs", "list", "--store", str(store_path), "--json", *extra)
    assert out.returncode == 0, out.stderr
    return _statuses(json.loads(out.stdout))


def _wait_status(store, run_id: str, wanted: str) -> None:
    """The server notices a dead client's connection a moment after the kill (PostgreSQL)."""
    deadline = time.monotonic() + 60
    while store.get_run(run_id)["status"] != wanted and time.monotonic() < deadline:
        time.sleep(0.05)


def test_a_run_whose_process_was_killed_is_interrupted_not_running(store_path, tmp_path):
    killed, killed_id = _child(store_path, "doomed", tmp_path)
    alive, alive_id = _child(store_path, "alive", tmp_path)
    try:
        with open_store(store_path) as store:
            rec = Recorder(store, ALLOW_ALL)
            with rec.run(agent="finished", principal="agent:me") as done:
                done.call_tool("fs", "read_file", {"path": "/a"}, lambda **kw: "ok", call_id="d1")
            mine = rec.run(agent="mine", principal="agent:me").start()  # open in this live process
            before = _statuses(store.query_runs())
            assert before == {"doomed": "running", "alive": "running", "finished": "ended", "mine": "running"}

            killed.kill()
            killed.wait(timeout=60)
            _wait_status(store, killed_id, "interrupted")
            events_before = [e.kind for e in store.read_run(killed_id)]

            assert _statuses(store.query_runs()) == {"doomed": "interrupted", "alive": "running", "finished": "ended",
                                                     "mine": "running"}
            assert store.get_run(killed_id)["status"] == "interrupted"
            assert store.get_run(alive_id)["status"] == "running"
            assert store.get_run(done.run_id)["status"] == "ended"
            assert store.get_run(done.run_id)["ending"] == "ok"
            assert _statuses(store.query_runs(status="running")) == {"alive": "running", "mine": "running"}
            assert [r["run_id"] for r in store.query_runs(status="interrupted")] == [killed_id]
            assert _statuses(store.query_runs(status="ok")) == {"finished": "ended"}
            # its last call without a result is "outcome unknown", as before
            assert [(c["call_id"], c["outcome"]) for c in store.query_calls(run_id=killed_id)] == [("c1", "unknown")]
            # derived when reading: nothing was written to the log
            assert [e.kind for e in store.read_run(killed_id)] == events_before == [
                "run.started", "tool.call", "policy.decision"]
            assert store.read_run(killed_id)[0].payload["lease"] is True

            # another process (the CLI) sees the same: this process's open run is running, the killed one not
            assert _cli_statuses(store_path) == {"doomed": "interrupted", "alive": "running", "finished": "ended",
                                                 "mine": "running"}
            assert _cli_statuses(store_path, "--status", "running") == {"alive": "running", "mine": "running"}
            assert _cli_statuses(store_path, "--status", "interrupted") == {"doomed": "interrupted"}
            shown = sealbox("runs", "show", killed_id, "--store", str(store_path))
            assert shown.returncode == 0, shown.stderr
            assert shown.stdout.splitlines()[0].split() == ["run", killed_id, "agent", "doomed", "principal",
                                                            "agent:child", "interrupted"]
            # the incident report (HTML / Markdown) shows the run's status from the same row
            from sealbox.report.model import build_report

            assert build_report(store, killed_id, verify=False).run["status"] == "interrupted"
            mine.end()
            assert store.get_run(mine.run_id)["status"] == "ended"
    finally:
        for proc in (killed, alive):
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=60)


def test_runs_without_a_lease_keep_their_status(store_path):
    """A run recorded before leases (no ``lease`` in its run.started), like an imported one or the
    system run, is never said interrupted: nothing tells whether its process lives."""
    with open_store(store_path) as store:
        store.append(EventDraft("run.started", {"agent": "old", "snapshot": None, "parent_run_id": None, "labels": {},
                                                "policy": {"fingerprint": ALLOW_ALL.fingerprint, "name": "ALLOW_ALL"}},
                                run_id="old-run", principal="agent:old"))
        assert store.get_run("old-run")["status"] == "running"
        assert store.get_run("system")["status"] == "running"
        assert [r["run_id"] for r in store.query_runs(status="interrupted")] == []
    assert _cli_statuses(store_path, "--status", "running") == {"old": "running"}


def test_many_runs_opened_and_closed_leak_no_descriptors(store_path):
    with open_store(store_path) as store:
        rec = Recorder(store, ALLOW_ALL)
        with rec.run(agent="warm", principal="agent:me"):
            pass
        sqlite = store_path.joinpath("sealbox.db").exists()
        opened = [rec.run(agent=f"r{i}", principal="agent:me").start() for i in range(300)]
        assert {r["status"] for r in store.query_runs(status="running")} == {"running"}
        assert len(store.query_runs(status="running")) == 301  # and the system run
        # SQLite: one descriptor of runs.lock for all 300, closed with the last lease; PostgreSQL: the
        # one lease connection opened by the warm-up run, no more
        assert (_lock_fds(store_path) == 1) if sqlite else (_lease_connections() == 1)
        for run in opened:
            run.end()
        for _ in range(300):
            with rec.run(agent="again", principal="agent:me"):
                pass
        assert (_lock_fds(store_path) == 0) if sqlite else (_lease_connections() == 1)
        assert {r["status"] for r in store.query_runs() if r["run_id"] != "system"} == {"ended"}


def test_runs_in_many_store_folders_keep_no_descriptor_once_ended(tmp_path):
    """A process recording into many stores (a test suite, a service with a store per tenant) keeps no
    descriptor of a store's runs.lock once none of its runs there is open: before, one per folder stayed
    open for the process's life, and 1,000 folders exhausted a default 1,024-descriptor limit."""
    folders = [tmp_path / f"s{i}" for i in range(40)]
    for folder in folders:
        init_store(folder).close()
    assert _lock_fds(*folders) == 0
    for folder in folders:
        with open_store(folder) as store:
            rec = Recorder(store, ALLOW_ALL)
            with rec.run(agent="a", principal="agent:me") as run:
                assert [r["status"] for r in store.query_runs(agent="a")] == ["running"]
                assert _lock_fds(*folders) == 1
            assert [r["status"] for r in store.query_runs(agent="a")] == ["ended"]
    assert _lock_fds(*folders) == 0
    with open_store(folders[0]) as store:  # a listing asking about leases opens no descriptor for good either
        run = Recorder(store, ALLOW_ALL).run(agent="b", principal="agent:me").start()
        run.end()
        assert [r["status"] for r in store.query_runs(agent="b")] == ["ended"]
    assert _lock_fds(*folders) == 0


@pytest.mark.skipif(not os.environ.get("SEALBOX_TEST_POSTGRES_URL"), reason="SEALBOX_TEST_POSTGRES_URL is not set")
def test_runs_in_many_postgres_schemas_share_one_lease_connection(tmp_path):
    """The lease connection is one per database, not one per store (schema): a process recording into 12
    schemas held 12 idle connections for its life before, and a test suite or a service with a schema per
    tenant ran the server out of connections (max_connections, 100 by default)."""
    import psycopg

    url = os.environ["SEALBOX_TEST_POSTGRES_URL"]
    schemas = [f"sbt_live_{uuid.uuid4().hex[:16]}" for _ in range(12)]
    folders = [tmp_path / f"s{i}" for i in range(len(schemas))]
    try:
        for folder, schema in zip(folders, schemas):
            init_store(folder, postgres_url=url, schema=schema).close()
        with open_store(folders[0]) as store:  # the lease connection of this database, opened once
            with Recorder(store, ALLOW_ALL).run(agent="warm", principal="agent:me"):
                pass
        for folder in folders:
            with open_store(folder) as store:
                with Recorder(store, ALLOW_ALL).run(agent="a", principal="agent:me"):
                    assert [r["status"] for r in store.query_runs(agent="a")] == ["running"]
                assert [r["status"] for r in store.query_runs(agent="a")] == ["ended"]
        assert _lease_connections() == 1  # before: one idle lease connection per schema (13)
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            for schema in schemas:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def test_runs_recorded_through_two_spellings_of_one_folder_keep_their_leases(tmp_path, monkeypatch):
    """POSIX locks belong to the process and the file: closing any descriptor of runs.lock drops all of
    the process's locks on it. A store opened as 'store' and as its absolute path (or through a
    symlink) must share the one descriptor, or ending a run in one drops the lease of a run still
    recording in the other, which other processes then list 'interrupted'."""
    init_store(tmp_path / "store").close()
    (tmp_path / "link").symlink_to(tmp_path / "store")
    monkeypatch.chdir(tmp_path)
    relative, absolute, linked = open_store("store"), open_store(tmp_path / "store"), open_store("link")
    try:
        a = Recorder(relative, ALLOW_ALL).run(agent="a", principal="agent:x").start()
        b = Recorder(absolute, ALLOW_ALL).run(agent="b", principal="agent:x").start()
        c = Recorder(linked, ALLOW_ALL).run(agent="c", principal="agent:x").start()
        assert _cli_statuses(tmp_path / "store") == {"a": "running", "b": "running", "c": "running"}
        # a listing in this process through yet another spelling of the folder
        assert _statuses(open_store(os.path.join("..", tmp_path.name, "store")).query_runs()) == {
            "a": "running", "b": "running", "c": "running"}
        assert _cli_statuses(tmp_path / "store") == {"a": "running", "b": "running", "c": "running"}
        b.__exit__(None, None, None)
        assert _cli_statuses(tmp_path / "store") == {"a": "running", "b": "ended", "c": "running"}
        c.__exit__(None, None, None)
        assert _cli_statuses(tmp_path / "store") == {"a": "running", "b": "ended", "c": "ended"}
        a.__exit__(None, None, None)
        assert _cli_statuses(tmp_path / "store") == {"a": "ended", "b": "ended", "c": "ended"}
        assert _lock_fds() == 0
    finally:
        for s in (relative, absolute, linked):
            s.close()


@pytest.mark.skipif(not os.environ.get("SEALBOX_TEST_POSTGRES_URL"), reason="SEALBOX_TEST_POSTGRES_URL is not set")
def test_a_lease_connection_killed_by_the_server_is_reopened_with_its_leases(tmp_path):
    """The server ending the process's sealbox-live session (pg_terminate_backend by an admin or a
    connection reaper, a server restart) drops its advisory locks while the runs still record. The next
    lease taken reconnects and takes the open runs' leases again, and is itself a lease (not a run
    recorded without one because the dead connection failed its first query)."""
    import psycopg

    from sealbox import liveness

    url = os.environ["SEALBOX_TEST_POSTGRES_URL"]
    schema = f"sbt_live_{uuid.uuid4().hex[:16]}"
    path = tmp_path / "store"
    init_store(path, postgres_url=url, schema=schema).close()
    try:
        with open_store(path) as store:
            a = Recorder(store, ALLOW_ALL).run(agent="a", principal="agent:me").start()
            assert _cli_statuses(path) == {"a": "running"}
            backend = liveness._pg[url][1].info.backend_pid
            with psycopg.connect(url, autocommit=True) as admin:
                assert admin.execute("SELECT pg_terminate_backend(%s)", (backend,)).fetchone() == (True,)
                for _ in range(600):  # the session is gone once its locks are
                    if not admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (backend,)).fetchall():
                        break
                    time.sleep(0.1)
            b = Recorder(store, ALLOW_ALL).run(agent="b", principal="agent:me").start()
            started = [e for e in store.read_run(b.run_id) if e.kind == "run.started"]
            assert started[0].payload.get("lease") is True
            assert _cli_statuses(path) == {"a": "running", "b": "running"}
            b.__exit__(None, None, None)
            assert _cli_statuses(path) == {"a": "running", "b": "ended"}
            a.__exit__(None, None, None)
            assert _cli_statuses(path) == {"a": "ended", "b": "ended"}
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def test_a_live_run_read_where_runs_lock_cannot_be_written_is_running(tmp_path):
    """An investigator's view of the store that cannot write runs.lock (the folder mounted read-only
    in a sidecar container, or runs.lock not writable by the reading account) still asks the lock
    whether the run's process lives (F_GETLK needs no write access): a live run is 'running', not
    'interrupted'; a killed one is still 'interrupted'."""
    folder = tmp_path / "store"
    init_store(folder).close()
    proc, live_id = _child(folder, "alive", tmp_path)
    doomed, doomed_id = _child(folder, "doomed", tmp_path)
    doomed.kill()
    doomed.wait()
    try:
        if os.geteuid() == 0:  # root writes any file: a read-only bind mount in a mount namespace of its own
            view = tmp_path / "view"
            view.mkdir()
            mount = ["unshare", "-m", "sh", "-c", f'mount --bind -o ro "{folder}" "{view}" && exec "$0" "$@"']
            try:
                probe = subprocess.run([*mount, "true"], capture_output=True, text=True)
            except FileNotFoundError:
                pytest.skip("no unshare here")
            if probe.returncode != 0:
                pytest.skip(f"no read-only bind mount here: {probe.stderr.strip()}")
            listing = subprocess.run([*mount, SEALBOX, "runs", "list", "--store", str(view), "--json"],
                                     capture_output=True, text=True)
        else:
            os.chmod(folder / "runs.lock", 0o400)
            listing = sealbox("runs", "list", "--store", str(folder), "--json")
        assert listing.returncode == 0, listing.stderr
        assert _statuses(json.loads(listing.stdout)) == {"alive": "running", "doomed": "interrupted"}
    finally:
        proc.kill()
        proc.wait()


STARTS_AND_EXITS = textwrap.dedent("""
    import os, sys
    from sealbox import open_store
    from sealbox.policy import ALLOW_ALL
    from sealbox.recorder import Recorder

    run = Recorder(open_store(sys.argv[1]), ALLOW_ALL).run(agent="worker", principal="agent:child").start()
    print(run.run_id, flush=True)
    os._exit(0)  # gone without ending it (as after a crash)
""")

CONTINUES_WITHOUT_WITH = textwrap.dedent("""
    import sys, time
    from sealbox import open_store
    from sealbox.policy import ALLOW_ALL
    from sealbox.recorder import Recorder

    run = Recorder(open_store(sys.argv[1]), ALLOW_ALL).continue_run(sys.argv[2])  # no with block

    def blocks(**kwargs):
        print("in the tool", flush=True)
        time.sleep(3600)

    run.call_tool("fs", "read_file", {"path": "/data/x"}, blocks, call_id="c2")
""")


def test_a_run_continued_without_a_with_block_holds_the_lease(store_path, tmp_path):
    """continue_run took the liveness lease only on entering a with block: a process carrying on a run
    through the context it returned (call_tool, end) held none, so the run it was recording was listed
    'interrupted' (its first process had died) while it worked, and 'running' never."""
    first = tmp_path / "first.py"
    first.write_text(STARTS_AND_EXITS)
    out = subprocess.run([sys.executable, str(first), str(store_path)], capture_output=True, text=True, timeout=120)
    run_id = out.stdout.strip()
    with open_store(store_path) as store:
        _wait_status(store, run_id, "interrupted")
        assert store.get_run(run_id)["status"] == "interrupted"
        second = tmp_path / "second.py"
        second.write_text(CONTINUES_WITHOUT_WITH)
        proc = subprocess.Popen([sys.executable, str(second), str(store_path), run_id], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline().strip() == "in the tool"
            assert store.get_run(run_id)["status"] == "running"
            assert _cli_statuses(store_path) == {"worker": "running"}
        finally:
            proc.kill()
            proc.wait()
        _wait_status(store, run_id, "interrupted")
        assert _cli_statuses(store_path) == {"worker": "interrupted"}
        # in this process: the lease is taken by continue_run and dropped by end()
        from sealbox.liveness import checker

        run = Recorder(store, ALLOW_ALL).continue_run(run_id)
        assert checker(store)(run_id) is True
        assert store.get_run(run_id)["status"] == "running"
        run.end("ok")
        assert checker(store)(run_id) is False
        assert (store.get_run(run_id)["status"], store.get_run(run_id)["ending"]) == ("ended", "ok")


@pytest.mark.skipif(not os.environ.get("SEALBOX_TEST_POSTGRES_URL"), reason="SEALBOX_TEST_POSTGRES_URL is not set")
def test_a_lease_connection_killed_by_the_server_is_retaken_without_a_new_run(tmp_path):
    """After the server ended the process's sealbox-live session, its open runs read 'interrupted' until
    the process next started a run there (the only time the dead connection was noticed): a process
    recording one long run stayed 'interrupted' to every reader while it worked. The connection is now
    watched (no per-call cost): its leases are taken again as soon as the server has closed it."""
    import psycopg

    from sealbox import liveness

    url = os.environ["SEALBOX_TEST_POSTGRES_URL"]
    schema = f"sbt_live_{uuid.uuid4().hex[:16]}"
    path = tmp_path / "store"
    init_store(path, postgres_url=url, schema=schema).close()
    try:
        with open_store(path) as store:
            a = Recorder(store, ALLOW_ALL).run(agent="a", principal="agent:me").start()
            assert _cli_statuses(path) == {"a": "running"}
            backend = liveness._pg[url][1].info.backend_pid
            with psycopg.connect(url, autocommit=True) as admin:
                assert admin.execute("SELECT pg_terminate_backend(%s)", (backend,)).fetchone() == (True,)
            deadline = time.monotonic() + 60  # the server closes the session, then the watcher reconnects
            while time.monotonic() < deadline:
                new = liveness._pg[url][1]
                if new.info.backend_pid != backend and _cli_statuses(path) == {"a": "running"}:
                    break
                time.sleep(0.1)
            assert liveness._pg[url][1].info.backend_pid != backend
            assert _cli_statuses(path) == {"a": "running"}
            a.call_tool("fs", "read_file", {"path": "/x"}, lambda **kw: "ok", call_id="c1")
            assert _cli_statuses(path) == {"a": "running"}
            a.end("ok")
            assert _cli_statuses(path) == {"a": "ended"}
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


@pytest.mark.skipif(not os.environ.get("SEALBOX_TEST_POSTGRES_URL"), reason="SEALBOX_TEST_POSTGRES_URL is not set")
def test_the_lease_connection_is_closed_when_the_process_exits(tmp_path):
    """The process's sealbox-live connection was never closed: the interpreter's teardown collected it still
    open and psycopg warned "ResourceWarning: ... was deleted while still open" (seen at the end of every
    gateway test run on PostgreSQL, traced to liveness._pg_conn). It is now closed by an atexit hook."""
    import psycopg

    url = os.environ["SEALBOX_TEST_POSTGRES_URL"]
    schema = f"sbt_live_{uuid.uuid4().hex[:16]}"
    path = tmp_path / "store"
    init_store(path, postgres_url=url, schema=schema).close()
    child = textwrap.dedent("""
        import atexit, sys
        from sealbox import liveness, open_store
        from sealbox.policy import ALLOW_ALL
        from sealbox.recorder import Recorder

        with open_store(sys.argv[1]) as store:
            with Recorder(store, ALLOW_ALL).run(agent="a", principal="agent:me"):
                pass
        conn = liveness._pg[store.url][1]
        print(conn.closed, flush=True)
        atexit._run_exitfuncs()  # what the interpreter does as it exits
        print(conn.closed, liveness._pg, flush=True)
    """)
    try:
        out = subprocess.run([sys.executable, "-W", "error::ResourceWarning", "-c", child, str(path)],
                             capture_output=True, text=True, timeout=120)
        assert (out.returncode, out.stdout, out.stderr) == (0, "False\nTrue {}\n", "")
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
