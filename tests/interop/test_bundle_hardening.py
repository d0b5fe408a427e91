"""Break-test fixes: how export, report and Parquet files are written (no planted temporary
file is followed, no FIFO, device, directory or symbolic link is replaced), and bundles that
are hostile but well-formed ZIPs (a number in a proof, JSON nested 100,000 deep, an unhashable
kind, a leaf index or checkpoint size beyond I-JSON, a malformed key) are reported as
problems, never raised."""

from __future__ import annotations

import json
import os
import stat

import pytest
from bundle_helpers import cli, members, rezip

import sealbox
from sealbox.interop.bundle import BundleError, export_bundle, write_atomically
from sealbox.interop.bundle_verify import LINE_DEPTH, nested_deeper, verify_bundle
from sealbox.ledger.checkpoint import Checkpoint, Signer, generate_key, parse_note, sign_checkpoint
from sealbox.canonical import Tagged
from sealbox.errors import RecordingError
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder

DEEP = 100_000  # far past Python's recursion limit: json.loads raises RecursionError


def _nested(n: int) -> bytes:
    return b"[" * n + b"]" * n


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    """A store with one run of two tool calls (one result large enough to be a blob), exported."""
    folder = tmp_path_factory.mktemp("hardening")
    store = sealbox.init_store(folder / "store")
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot", principal="agent:bot") as run:
        run.call_tool("db", "read_query", {"query": "SELECT 1"}, lambda **_: [[1]])
        run.call_tool("db", "dump", {"table": "t"}, lambda **_: {"rows": ["x" * 700]})
    store.close()
    code, _, err = cli("export", run.run_id, "-s", folder / "store", "-o", folder / "base.sbx", cwd=folder)
    assert code == 0, err
    return folder, folder / "store", run.run_id


def _checkpoints(store_path) -> int:
    store = sealbox.open_store(store_path, readonly=True)
    try:
        return len(store.checkpoints())
    finally:
        store.close()


# ----------------------------------------------------------------------------- writing


def test_export_does_not_follow_a_symlink_planted_at_the_old_tmp_name(case, tmp_path):
    folder, store_path, run_id = case
    shared, victim = tmp_path / "shared", tmp_path / "victim"
    shared.mkdir()
    victim.mkdir()
    (victim / "authorized_keys").write_bytes(b"precious content\n")
    (shared / "case.sbx.tmp").symlink_to(victim / "authorized_keys")
    code, out, err = cli("export", run_id, "-s", store_path, "-o", shared / "case.sbx", cwd=tmp_path)
    assert (code, err) == (0, "")
    assert out.startswith(f"Wrote {shared / 'case.sbx'}: 8 events of 1 run, ")
    assert (victim / "authorized_keys").read_bytes() == b"precious content\n"
    assert os.readlink(shared / "case.sbx.tmp") == str(victim / "authorized_keys")  # left alone
    assert sorted(p.name for p in shared.iterdir()) == ["case.sbx", "case.sbx.tmp"]  # no temporary file left
    assert stat.S_ISREG(os.lstat(shared / "case.sbx").st_mode)
    assert verify_bundle(shared / "case.sbx", trusted_vkey=(store_path / "log.vkey").read_text().strip()).ok


def test_export_to_a_fifo_is_refused_before_anything_is_signed(case, tmp_path):
    folder, store_path, run_id = case
    fifo = tmp_path / "pipe.sbx"
    os.mkfifo(fifo)
    before = _checkpoints(store_path)
    code, out, err = cli("export", run_id, "-s", store_path, "-o", fifo, cwd=tmp_path)
    assert (code, out) == (2, "")
    assert err == (f"error: cannot write {fifo}: it exists and is a FIFO (named pipe), not a regular file "
                   "(nothing was written)\n")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["pipe.sbx"]
    assert _checkpoints(store_path) == before  # refused before the export's checkpoint was signed


def test_export_bundle_refuses_a_directory_and_a_symlink_to_one(case, tmp_path):
    folder, store_path, run_id = case
    target = tmp_path / "dir.sbx"
    target.mkdir()
    (target / "keep").write_bytes(b"kept")
    link = tmp_path / "link.sbx"
    link.symlink_to(target)
    store = sealbox.open_store(store_path)
    try:
        with pytest.raises(BundleError) as exc:
            export_bundle(store, [run_id], target)
        assert str(exc.value) == (f"cannot write {target}: it exists and is a directory, not a regular file "
                                  "(nothing was written)")
        with pytest.raises(BundleError) as exc:
            export_bundle(store, [run_id], link)
        assert str(exc.value) == (f"cannot write {link}: it exists and is a symbolic link, not a regular file "
                                  "(nothing was written)")
    finally:
        store.close()
    assert os.readlink(link) == str(target) and [p.name for p in target.iterdir()] == ["keep"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir.sbx", "link.sbx"]


def test_write_atomically_replaces_a_regular_file_and_refuses_a_symlink_to_one(tmp_path):
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    write_atomically(target, b"new")
    assert target.read_bytes() == b"new"
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    (tmp_path / "link.bin").symlink_to(victim)
    with pytest.raises(BundleError) as exc:
        write_atomically(tmp_path / "link.bin", b"evil")
    assert str(exc.value) == (f"cannot write {tmp_path / 'link.bin'}: it exists and is a symbolic link, "
                              "not a regular file (nothing was written)")
    assert victim.read_bytes() == b"precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.bin", "out.bin", "victim"]


def test_write_atomically_creates_files_with_the_umask_permissions(tmp_path):
    old = os.umask(0o027)
    try:
        write_atomically(tmp_path / "f", b"x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "f").st_mode) == 0o640


@pytest.mark.parametrize("when", ["as the temporary file is created", "before the caller's with is entered"])
def test_an_interrupt_just_after_the_temporary_file_is_created_leaves_no_file(tmp_path, monkeypatch, when):
    """Ctrl-C landing right after os.open made the temporary file (before AtomicTarget noted it), or after
    open_target returned but before the caller's ``with`` was entered, left ``.NAME.<random>.tmp`` behind:
    `sealbox export -o` interrupted then (a process descheduled just after creating it, on a loaded
    machine) made test_ctrl_c_during_an_export_is_one_line_exit_130_and_leaves_no_file fail at random."""
    import gc

    from sealbox.interop import bundle

    if when.startswith("as"):
        real_open = os.open

        def interrupted_open(path, *args, **kwargs):
            real_open(path, *args, **kwargs)
            if str(path).endswith(".tmp"):
                raise KeyboardInterrupt  # what the SIGINT handler raises once os.open has returned
            raise AssertionError(path)

        monkeypatch.setattr(bundle.os, "open", interrupted_open)
    else:
        real_init = bundle.AtomicTarget.__init__

        def interrupted_init(self, *args, **kwargs):
            real_init(self, *args, **kwargs)
            raise KeyboardInterrupt

        monkeypatch.setattr(bundle.AtomicTarget, "__init__", interrupted_init)
    folder = tmp_path / "out"
    folder.mkdir()
    with pytest.raises(KeyboardInterrupt):
        write_atomically(folder / "x.sbx", b"data")
    gc.collect()
    assert list(folder.iterdir()) == []


def test_report_to_a_fifo_or_through_a_planted_tmp_symlink(case, tmp_path):
    folder, store_path, run_id = case
    fifo = tmp_path / "r.md"
    os.mkfifo(fifo)
    code, out, err = cli("report", run_id, "-s", store_path, "-o", fifo, "--no-verify", cwd=tmp_path)
    assert (code, out) == (2, "")  # before the fix: blocked forever, opening the FIFO for writing
    assert err == f"error: cannot write {fifo}: it exists and is a FIFO (named pipe), not a regular file " \
                  "(nothing was written)\n"
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious content\n")
    (tmp_path / "r.html.tmp").symlink_to(victim)
    code, out, err = cli("report", run_id, "-s", store_path, "-o", tmp_path / "r.html", "--no-verify", cwd=tmp_path)
    assert (code, err) == (0, "")
    assert victim.read_bytes() == b"precious content\n"
    assert (tmp_path / "r.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html", "r.html.tmp", "r.md", "victim"]


def test_report_into_a_missing_folder_is_one_error_line(case, tmp_path):
    folder, store_path, run_id = case
    code, out, err = cli("report", run_id, "-s", store_path, "-o", tmp_path / "nodir" / "r.md", cwd=tmp_path)
    assert (code, out) == (2, "")
    assert err == f"error: cannot write {tmp_path / 'nodir' / 'r.md'}: the folder {tmp_path / 'nodir'} does not exist\n"


def test_parquet_into_a_missing_folder_a_fifo_or_through_a_planted_symlink(case, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    folder, store_path, run_id = case
    code, out, err = cli("export", run_id, "-s", store_path, "--parquet", tmp_path / "nodir" / "x.parquet",
                         cwd=tmp_path)
    assert (code, out) == (2, "")
    assert err == (f"error: cannot write {tmp_path / 'nodir' / 'x.parquet'}: the folder {tmp_path / 'nodir'} "
                   "does not exist\n")
    fifo = tmp_path / "p.parquet"
    os.mkfifo(fifo)
    code, out, err = cli("export", run_id, "-s", store_path, "--parquet", fifo, cwd=tmp_path)
    assert (code, out) == (2, "")
    assert err == (f"error: cannot write {fifo}: it exists and is a FIFO (named pipe), not a regular file "
                   "(nothing was written)\n")
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    (tmp_path / "calls.parquet.tmp").symlink_to(victim)
    code, out, err = cli("export", run_id, "-s", store_path, "--parquet", tmp_path / "calls.parquet", cwd=tmp_path)
    assert (code, err) == (0, "")
    assert out == f"Wrote {tmp_path / 'calls.parquet'}: 2 tool calls of 1 run.\n"
    assert victim.read_bytes() == b"precious"
    assert pq.read_table(tmp_path / "calls.parquet").column("tool").to_pylist() == ["read_query", "dump"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calls.parquet", "calls.parquet.tmp", "p.parquet", "victim"]


_PR_CAPBSET_DROP, _CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH = 24, 1, 2


def _without_dac_override() -> None:
    """preexec_fn: as root, drop the capabilities that ignore file modes (from the bounding set,
    so the exec'd interpreter runs without them); as anyone else, nothing to drop."""
    import ctypes

    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def test_parquet_into_a_read_only_folder_is_one_error_line(case, tmp_path):
    import subprocess
    import sys

    pytest.importorskip("pyarrow.parquet")
    folder, store_path, run_id = case
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        probe = subprocess.run([sys.executable, "-c", f"open({str(ro / 'probe')!r}, 'w')"], capture_output=True,
                               preexec_fn=_without_dac_override)
        if probe.returncode == 0:
            pytest.skip("this process cannot run a subprocess that file modes stop")
        env = {k: v for k, v in os.environ.items() if k != "SEALBOX_STORE"}
        p = subprocess.run([sys.executable, "-m", "sealbox.cli.main", "export", run_id, "-s", str(store_path),
                            "--parquet", str(ro / "x.parquet")], capture_output=True, text=True, env=env,
                           cwd=tmp_path, preexec_fn=_without_dac_override, timeout=120)
    finally:
        ro.chmod(0o700)
    assert (p.returncode, p.stdout) == (2, "")
    assert p.stderr == f"error: cannot write {ro / 'x.parquet'}: Permission denied\n"
    assert list(ro.iterdir()) == []


# ----------------------------------------------------------------------------- hostile bundles


def _verified(path, **kw):
    report = verify_bundle(path, **kw)  # must not raise
    return [(p.code, p.member) for p in report.problems], report


def test_a_proof_element_that_is_a_number_is_a_malformed_line(case, tmp_path):
    m = members(case[0] / "base.sbx")
    first, rest = m["events.jsonl"].split(b"\n", 1)
    m["events.jsonl"] = first[:first.rfind(b',"proof":[')] + b',"proof":[1]}\n' + rest
    rezip(tmp_path / "p.sbx", m)
    problems, report = _verified(tmp_path / "p.sbx")
    assert problems[0] == ("bundle_line_malformed", "events.jsonl line 1")
    assert report.problems[0].message == "the line cannot be read: the proof must be a list of base64 strings"
    code, out, err = cli("verify", tmp_path / "p.sbx", cwd=tmp_path)
    assert (code, err) == (1, "")
    assert out.startswith("bundle_line_malformed [events.jsonl line 1]: the line cannot be read: the proof must be "
                          "a list of base64 strings\n")


def test_a_deeply_nested_event_line_is_a_problem(case, tmp_path):
    m = members(case[0] / "base.sbx")
    lines = m["events.jsonl"].count(b"\n")
    m["events.jsonl"] += b'{"event":' + _nested(DEEP) + b',"leaf_index":999,"proof":[]}\n'
    rezip(tmp_path / "e.sbx", m)
    problems, report = _verified(tmp_path / "e.sbx")
    assert problems == [("bundle_line_malformed", f"events.jsonl line {lines + 1}"),
                        ("bundle_manifest", "manifest.json"), ("export_digest_mismatch", "events.jsonl")]
    assert report.problems[0].message == ("the line cannot be read: its JSON nests deeper than 129 levels, deeper "
                                          "than Sealbox ever writes")
    assert cli("verify", tmp_path / "e.sbx", cwd=tmp_path)[0] == 1


def test_a_deeply_nested_manifest_is_a_problem(case, tmp_path):
    m = members(case[0] / "base.sbx")
    m["manifest.json"] = _nested(DEEP) + b"\n"
    rezip(tmp_path / "m.sbx", m)
    problems, report = _verified(tmp_path / "m.sbx")
    assert problems == [("bundle_manifest", "manifest.json")]
    assert report.problems[0].message == ("manifest.json cannot be read: its JSON nests deeper than 128 levels, "
                                          "deeper than Sealbox ever writes")


def test_a_deeply_nested_manifest_with_changed_content_still_names_the_members(case, tmp_path):
    m = members(case[0] / "base.sbx")
    m["manifest.json"] = _nested(DEEP) + b"\n"
    m["snapshots.jsonl"] = b'{"content":{},"fingerprint":"sha256:00"}\n'
    rezip(tmp_path / "m2.sbx", m)
    problems, report = _verified(tmp_path / "m2.sbx")
    assert ("bundle_manifest", "manifest.json") in problems
    digest = [p for p in report.problems if p.code == "export_digest_mismatch"]
    assert [p.member for p in digest] == ["log.vkey, events.jsonl, blobs.jsonl, snapshots.jsonl"]


def test_a_blob_with_deeply_nested_content_is_a_problem(case, tmp_path):
    m = members(case[0] / "base.sbx")
    lines = m["blobs.jsonl"].split(b"\n")
    # a blob that references no other (blobs are in ref order, which the random salts decide: the
    # first line may be a chain's head, and replacing it would leave its tail unreferenced too)
    n = next(i for i, line in enumerate(lines) if b'"$blob"' not in line)
    ref = json.loads(lines[n])["ref"]
    lines[n] = b'{"content":' + _nested(DEEP) + lines[n][lines[n].rfind(b',"ref":'):]
    m["blobs.jsonl"] = b"\n".join(lines)
    rezip(tmp_path / "b.sbx", m)
    problems, report = _verified(tmp_path / "b.sbx")
    assert problems == [("bundle_line_malformed", f"blobs.jsonl line {n + 1}"), ("blob_missing", "blobs.jsonl"),
                        ("bundle_manifest", "manifest.json"), ("export_digest_mismatch", "blobs.jsonl")]
    assert report.problems[1].message == f"blob {ref} is referenced but not stored"


def test_a_kind_that_is_not_a_string_is_a_malformed_event(case, tmp_path):
    m = members(case[0] / "base.sbx")
    lines = m["events.jsonl"].split(b"\n")
    doc = json.loads(lines[1])
    lines[1] = lines[1].replace(b'"kind":"' + doc["event"]["kind"].encode() + b'"', b'"kind":[]', 1)
    m["events.jsonl"] = b"\n".join(lines)
    rezip(tmp_path / "k.sbx", m)
    problems, report = _verified(tmp_path / "k.sbx")
    assert problems[0] == ("event_malformed", "events.jsonl line 2")
    assert report.problems[0].message == "the event's bytes are not a valid event: kind must be a string, not list"
    assert report.problems[0].leaf_index == doc["leaf_index"]


def test_a_leaf_index_beyond_i_json_is_a_malformed_line(case, tmp_path):
    m = members(case[0] / "base.sbx")
    first, rest = m["events.jsonl"].split(b"\n", 1)
    doc = json.loads(first)
    big = 10 ** 30
    m["events.jsonl"] = first.replace(b'"leaf_index":%d,' % doc["leaf_index"], b'"leaf_index":%d,' % big) + b"\n" + rest
    rezip(tmp_path / "l.sbx", m)
    problems, report = _verified(tmp_path / "l.sbx")
    assert problems[0] == ("bundle_line_malformed", "events.jsonl line 1")
    assert report.problems[0].message == (f"the line cannot be read: leaf_index {big} is above 2**53 - 1, the largest "
                                          "a log can hold")


def test_a_checkpoint_size_beyond_i_json_signed_by_the_bundles_own_key(case, tmp_path):
    m = members(case[0] / "base.sbx")
    cp = Checkpoint.parse(parse_note(m["checkpoint"].decode()).text)
    skey, vkey = generate_key(cp.origin)
    m["log.vkey"] = (vkey + "\n").encode()
    m["checkpoint"] = sign_checkpoint(Checkpoint(cp.origin, 2**60, cp.root, cp.extensions),
                                      Signer.from_key(skey)).encode()
    rezip(tmp_path / "c.sbx", m)
    problems, report = _verified(tmp_path / "c.sbx")
    manifest = [p for p in report.problems if p.code == "bundle_manifest"]
    assert [p.message for p in manifest] == [
        "no manifest can describe this bundle's checkpoint: integer outside ±(2**53 - 1) (I-JSON, RFC 7493 §2.2): "
        f"{2**60}"]
    assert report.checkpoint_size == 2**60 and not report.ok


def test_the_deepest_content_sealbox_records_still_verifies(tmp_path):
    store = sealbox.init_store(tmp_path / "store")
    deep_list, deep_dict = [], {}
    for _ in range(300):  # the encoder keeps MAX_DEPTH levels and marks the rest lossy
        deep_list, deep_dict = [deep_list], {"k": deep_dict}
    with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
        run.call_tool("api", "deep", {"q": deep_list}, lambda **_: deep_dict)
    export_bundle(store, [run.run_id], tmp_path / "deep.sbx")
    store.close()
    m = members(tmp_path / "deep.sbx")
    lines = [line for name in ("events.jsonl", "blobs.jsonl") for line in m[name].splitlines()]
    assert max(next(d for d in range(1, LINE_DEPTH + 1) if not nested_deeper(line, d)) for line in lines) == 128
    problems, _ = _verified(tmp_path / "deep.sbx")
    assert problems == []


@pytest.mark.parametrize("lists", [118, 119, 120, 121, 122])
def test_escaping_tag_like_dicts_cannot_take_a_record_past_the_depth_limit(tmp_path, lists):
    """A user's own ``{"$blob": ...}`` dicts are escaped as ``{"$esc": ...}``, a level each:
    arguments that encode() left at the limit would be stored deeper than a bundle line may
    be. Such a call is refused before the tool runs (RecordingError), never stored too deep."""
    value = "x"
    for _ in range(3):
        value = {"$blob": value}
    for _ in range(lists):
        value = [value]
    arguments = Tagged("$blob", value)
    store = sealbox.init_store(tmp_path / "store")
    ran = []
    with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
        if lists in (119, 120, 121):  # 128 levels once escaped: one too many for a stored line
            with pytest.raises(RecordingError, match="^could not record: tool.call: the value is nested deeper than 128 levels$"):
                run.call_tool("api", "deep", arguments, lambda arg: ran.append(arg))
            assert ran == []
        else:  # within the limit, or cut (lossy) by encode() before any escape
            run.call_tool("api", "deep", arguments, lambda arg: ran.append(arg))
            assert len(ran) == 1
    assert sealbox.verify_store(store).ok
    kinds = [e.kind for e in store.read_run(run.run_id)]
    assert kinds == (["run.started", "run.ended"] if lists in (119, 120, 121)
                     else ["run.started", "tool.call", "policy.decision", "tool.result", "run.ended"])
    export_bundle(store, [run.run_id], tmp_path / "d.sbx")
    store.close()
    problems, _ = _verified(tmp_path / "d.sbx")
    assert problems == []


def test_nesting_is_measured_outside_strings():
    assert nested_deeper(b'{"a":"[[[[{{{{\\"[[["}', 1) is False
    assert nested_deeper(b'{"a":[[]]}', 2) is True
    assert nested_deeper(b'{"a":[[]]}', 3) is False
    assert nested_deeper(b'[' * 200 + b'"' + b']' * 200, 150) is True  # unterminated: counted, so refused


def test_a_deeply_nested_consistency_file_is_one_error_line(case, tmp_path):
    (tmp_path / "deep.json").write_bytes(_nested(DEEP))
    code, out, err = cli("verify", "--consistency", tmp_path / "deep.json", case[0] / "base.sbx", cwd=tmp_path)
    assert (code, out) == (2, "")
    assert err == (f"error: cannot read the consistency proof {tmp_path / 'deep.json'}: its JSON is nested too "
                   "deeply (`sealbox log prove` writes a flat object)\n")


def test_a_consistency_proof_with_a_non_ascii_hash_is_a_config_error(case):
    from sealbox.errors import ConfigError

    note = members(case[0] / "base.sbx")["checkpoint"].decode()
    with pytest.raises(ConfigError) as exc:
        verify_bundle(case[0] / "base.sbx", consistency={"size1": 1, "size2": 2, "checkpoint": note, "proof": ["é"]})
    assert str(exc.value) == ("the consistency proof holds invalid base64: string argument should contain only "
                              "ASCII characters")


def test_a_malformed_bundle_key_says_no_key_was_used(case, tmp_path):
    m = members(case[0] / "base.sbx")
    m["log.vkey"] = b"garbage\n"
    rezip(tmp_path / "k.sbx", m)
    problems, report = _verified(tmp_path / "k.sbx")
    assert problems[0] == ("bundle_key", "log.vkey")
    assert report.trusted_key is None and report.checkpoint_size is None
    assert report.trust() == ("No key was used: the bundle's own verifier key (log.vkey) is malformed, so nothing "
                              "was checked against it. Pass the log's key with --key.")
    code, out, _ = cli("verify", tmp_path / "k.sbx", cwd=tmp_path)
    assert code == 1 and "(None)" not in out
    assert out.splitlines()[-1] == report.trust()


# ----------------------------------------------------------------------------- the store's own files

STORE_FILES = {"sealbox.db": "database", "sealbox.db-wal": "write-ahead log",
               "sealbox.db-shm": "shared-memory index", "sealbox.db-journal": "rollback journal",
               "log.key": "signing key", "log.vkey": "pinned verifier key", "checkpoint": "checkpoint file",
               "resume.lock": "resume lock file", "runs.lock": "run liveness lock file"}


def _one_run_store(path):
    store = sealbox.init_store(path)
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot", principal="agent:bot") as run:
        run.call_tool("db", "q", {}, lambda: 1)
    store.close()
    return run.run_id


def _folder_state(folder):
    """Every file of a folder with its bytes (a store's, when no process has it open)."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _checkpoint_rows(store_path):
    store = sealbox.open_store(store_path, readonly=True)
    try:
        return [(c.tree_size, bytes(c.root_hash), c.note, c.created_at) for c in store.checkpoints()]
    finally:
        store.close()


def _refusal(target, store_dir, name):
    return (f"cannot write {target}: it is the store's own {STORE_FILES[name]} ({os.path.join(store_dir, name)}), "
            "which is never replaced (nothing was written)")


def test_export_to_any_of_the_stores_own_files_is_refused_and_nothing_is_signed(tmp_path):
    run_id = _one_run_store(tmp_path / "st")
    before, rows = _folder_state(tmp_path / "st"), _checkpoint_rows(tmp_path / "st")
    assert sorted(before) == ["checkpoint", "log.key", "log.vkey", "runs.lock", "sealbox.db"]
    for name in STORE_FILES:  # relative paths, as typed: `-s st -o st/log.key`
        code, out, err = cli("export", "-s", "st", "--agent", "bot", "-o", f"st/{name}", cwd=tmp_path)
        assert (code, out, err) == (2, "", f"error: {_refusal(f'st/{name}', 'st', name)}\n"), name
        # before the fix: "Wrote st/sealbox.db ...", exit 0, and the log (or its signing key) was gone
        assert _folder_state(tmp_path / "st") == before, name
    assert _checkpoint_rows(tmp_path / "st") == rows  # no export checkpoint was signed
    assert [p.name for p in tmp_path.iterdir()] == ["st"]
    code, out, _ = cli("verify", "-s", "st", cwd=tmp_path)
    assert code == 0 and out.startswith("Verified: the log is intact. 6 events in 2 runs")
    store = sealbox.open_store(tmp_path / "st")
    try:
        for name in ("sealbox.db", "log.key"):  # the library refuses too
            with pytest.raises(BundleError) as exc:
                export_bundle(store, [run_id], tmp_path / "st" / name)
            assert str(exc.value) == _refusal(tmp_path / "st" / name, tmp_path / "st", name)
    finally:
        store.close()
    assert _checkpoint_rows(tmp_path / "st") == rows


def test_export_to_another_path_or_a_hard_link_of_a_store_file_is_refused(tmp_path):
    _one_run_store(tmp_path / "st")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "st")
    os.link(tmp_path / "st" / "log.key", tmp_path / "elsewhere" / "backup.key")
    key = (tmp_path / "st" / "log.key").read_bytes()
    rows = _checkpoint_rows(tmp_path / "st")
    cases = [(tmp_path / "linked" / "sealbox.db", "sealbox.db"),  # through a symbolic link to the folder
             (tmp_path / "elsewhere" / ".." / "st" / "checkpoint", "checkpoint"),
             (tmp_path / "linked" / "sealbox.db-wal", "sealbox.db-wal"),  # does not exist: compared resolved
             (tmp_path / "elsewhere" / "backup.key", "log.key")]  # a hard link: the same file (samefile)
    for target, name in cases:
        code, out, err = cli("export", "-s", tmp_path / "st", "--agent", "bot", "-o", target, cwd=tmp_path)
        assert (code, out, err) == (2, "", f"error: {_refusal(target, tmp_path / 'st', name)}\n"), target
    assert (tmp_path / "st" / "log.key").read_bytes() == key
    assert os.stat(tmp_path / "st" / "log.key").st_nlink == 2  # the hard link was not replaced either
    assert sorted(p.name for p in (tmp_path / "st").iterdir()) == ["checkpoint", "log.key", "log.vkey", "runs.lock", "sealbox.db"]
    assert [p.name for p in (tmp_path / "elsewhere").iterdir()] == ["backup.key"]
    assert _checkpoint_rows(tmp_path / "st") == rows
    # a file of the same name in another folder is not the store's
    code, out, err = cli("export", "-s", tmp_path / "st", "--agent", "bot", "-o", tmp_path / "elsewhere" / "log.key",
                         cwd=tmp_path)
    assert (code, err) == (0, "")
    assert out.startswith(f"Wrote {tmp_path / 'elsewhere' / 'log.key'}: 5 events of 1 run, ")
    assert verify_bundle(tmp_path / "elsewhere" / "log.key",
                         trusted_vkey=(tmp_path / "st" / "log.vkey").read_text().strip()).ok


def test_parquet_to_the_stores_own_files_is_refused(tmp_path):
    pytest.importorskip("pyarrow.parquet")
    _one_run_store(tmp_path / "st")
    before = _folder_state(tmp_path / "st")
    for name in ("sealbox.db", "log.key", "log.vkey", "sealbox.db-shm"):
        code, out, err = cli("export", "-s", "st", "--parquet", f"st/{name}", cwd=tmp_path)
        assert (code, out, err) == (2, "", f"error: {_refusal(f'st/{name}', 'st', name)}\n"), name
    assert _folder_state(tmp_path / "st") == before


def _log_checkpoint(store_path, cwd):
    code, out, err = cli("log", "checkpoint", "-s", store_path, cwd=cwd)
    assert (code, err) == (0, "")
    return out


def test_an_export_that_cannot_create_its_file_signs_no_checkpoint(tmp_path):
    run_id = _one_run_store(tmp_path / "st")
    rows, note = _checkpoint_rows(tmp_path / "st"), (tmp_path / "st" / "checkpoint").read_bytes()
    printed = _log_checkpoint(tmp_path / "st", tmp_path)
    assert [r[0] for r in rows] == [1, 6] and "sealbox-export/v1" not in printed
    # /proc/self is a folder, but no file can be created in it
    code, out, err = cli("export", run_id, "-s", tmp_path / "st", "-o", "/proc/self/case.sbx", cwd=tmp_path)
    assert (code, out, err) == (2, "", "error: cannot write /proc/self/case.sbx: No such file or directory\n")
    # before the fix: a sealbox-export/v1 checkpoint for a bundle that does not exist was signed,
    # stored and became the newest (what `sealbox log checkpoint` printed)
    assert _checkpoint_rows(tmp_path / "st") == rows
    assert (tmp_path / "st" / "checkpoint").read_bytes() == note
    assert _log_checkpoint(tmp_path / "st", tmp_path) == printed
    store = sealbox.open_store(tmp_path / "st")
    try:
        with pytest.raises(BundleError) as exc:
            export_bundle(store, [run_id], "/proc/self/lib.sbx")
        assert str(exc.value) == "cannot write /proc/self/lib.sbx: No such file or directory"
        assert len(store.checkpoints()) == 2
    finally:
        store.close()
    assert _checkpoint_rows(tmp_path / "st") == rows


def test_an_export_into_a_read_only_folder_signs_no_checkpoint(tmp_path):
    import subprocess
    import sys

    run_id = _one_run_store(tmp_path / "st")
    rows, printed = _checkpoint_rows(tmp_path / "st"), _log_checkpoint(tmp_path / "st", tmp_path)
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        probe = subprocess.run([sys.executable, "-c", f"open({str(ro / 'probe')!r}, 'w')"], capture_output=True,
                               preexec_fn=_without_dac_override)
        if probe.returncode == 0:
            pytest.skip("this process cannot run a subprocess that file modes stop")
        env = {k: v for k, v in os.environ.items() if k != "SEALBOX_STORE"}
        p = subprocess.run([sys.executable, "-m", "sealbox.cli.main", "export", run_id, "-s", str(tmp_path / "st"),
                            "-o", str(ro / "case.sbx")], capture_output=True, text=True, env=env,
                           cwd=tmp_path, preexec_fn=_without_dac_override, timeout=120)
    finally:
        ro.chmod(0o700)
    assert (p.returncode, p.stdout, p.stderr) == (2, "", f"error: cannot write {ro / 'case.sbx'}: Permission denied\n")
    assert list(ro.iterdir()) == []
    assert _checkpoint_rows(tmp_path / "st") == rows
    assert _log_checkpoint(tmp_path / "st", tmp_path) == printed


def test_a_failed_export_leaves_no_temporary_file(tmp_path):
    _one_run_store(tmp_path / "st")
    store = sealbox.open_store(tmp_path / "st")
    try:
        with pytest.raises(BundleError) as exc:
            export_bundle(store, [], tmp_path / "out.sbx")  # fails after the temporary file was created
        assert str(exc.value) == "nothing to export"
    finally:
        store.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["st"]


def test_an_endless_consistency_file_is_read_no_further_than_a_proof_can_be(case, tmp_path):
    # `sealbox verify case.sbx --consistency /dev/zero` read until memory ran out (MemoryError, "internal
    # error", exit 70). A pipe that delivers more than 1 MiB and stays open shows it safely.
    import threading

    fifo = tmp_path / "proof.json"
    os.mkfifo(fifo)
    closed, answered = threading.Event(), threading.Event()

    def writer():
        with open(fifo, "wb") as fh:
            fh.write(b" " * (1024 * 1024 + 4096))
            fh.flush()
            answered.wait(60)  # an endless source: still open until the test has its answer (a load
            # that reads to the end waits the 60 s for EOF, then `closed` fails the test)
        closed.set()

    t = threading.Thread(target=writer)
    t.start()
    try:
        code, out, err = cli("verify", "--consistency", fifo, case[0] / "base.sbx", cwd=tmp_path)
        assert not closed.is_set(), "the whole input was read"
        assert (code, out) == (2, "")
        assert err == (f"error: cannot read the consistency proof {fifo}: it is larger than 1 MiB "
                       "(`sealbox log prove` writes a few KiB)\n")
    finally:
        answered.set()
        t.join()
