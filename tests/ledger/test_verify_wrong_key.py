"""``sealbox verify`` with the verifier key of another log (a second ``sealbox init``): one line first
saying the key is not this log's (its name and key id, C2SP signed note, against the log's origin and
signer), exit 1, instead of one ``checkpoint_signature`` line per checkpoint and a warning that every
event is unsigned. The per-checkpoint problems stay in ``--json``. Also a bundle checked with another
log's key, and a ``--checkpoint`` file of another log. Real stores: SQLite, and PostgreSQL when
SEALBOX_TEST_POSTGRES_URL is set."""

from __future__ import annotations

import importlib.util
import json
import os
import uuid

import pytest

import sealbox
from sealbox.cli.main import main
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder

BACKENDS = ["sqlite"]
if os.environ.get("SEALBOX_TEST_POSTGRES_URL") and importlib.util.find_spec("psycopg") is not None:
    BACKENDS.append("postgres")


def _init(path, backend):
    if backend == "sqlite":
        return sealbox.init_store(path)
    return sealbox.init_store(path, postgres_url=os.environ["SEALBOX_TEST_POSTGRES_URL"],
                              schema=f"sbt_wrongkey_{uuid.uuid4().hex[:16]}")


@pytest.fixture(params=BACKENDS)
def logs(request, tmp_path):
    """Log a with 4 checkpoints (init's and one per closed writer), log b empty; their vkeys; a's run."""
    _init(tmp_path / "a", request.param).close()
    _init(tmp_path / "b", request.param).close()
    for _ in range(3):
        store = sealbox.open_store(tmp_path / "a")
        with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
            run.call_tool("db", "read_query", {"query": "SELECT 1"}, lambda **_: [[1]])
        store.close()
    store = sealbox.open_store(tmp_path / "a")
    assert len(store.checkpoints()) == 4
    store.close()
    a_key = (tmp_path / "a" / "log.vkey").read_text().strip()
    b_key = (tmp_path / "b" / "log.vkey").read_text().strip()
    return tmp_path, a_key, b_key, run.run_id


def _run(capsys, *args):
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as exc:
        code = exc.code or 0
    out, err = capsys.readouterr()
    return code, out, err


def _parts(vkey):
    name, key_id, _ = vkey.split("+", 2)
    return name, key_id


def test_a_store_verified_with_another_logs_key_says_so_in_one_line_first(logs, capsys):
    tmp_path, a_key, b_key, _ = logs
    (a_name, a_id), (b_name, b_id) = _parts(a_key), _parts(b_key)
    store = sealbox.open_store(tmp_path / "a")
    stored, size = len(store.checkpoints()), store.size()
    store.close()
    notes = stored + 1  # and the checkpoint file (a copy of the newest): counted apart, as the summary counts rows
    code, out, err = _run(capsys, "verify", "-s", tmp_path / "a", "--key", tmp_path / "b" / "log.vkey")
    lines = out.splitlines()
    assert (code, err, len(lines)) == (1, "", 3)
    assert lines[0] == (
        f"key_mismatch: the key given is not this log's key: it is a key of the log {b_name} (key id {b_id}), "
        f"this log is {a_name}, signed by {a_name}+{a_id}; none of the log's {stored} signed checkpoints (nor its "
        "checkpoint file) verifies with it (check the key against the log's own: `sealbox log key` on its host) "
        f"(expected signatures by {b_name}+{b_id}, found signatures by {a_name}+{a_id})")
    assert lines[1] == (f"note: so the log's {stored} signed checkpoints and its checkpoint file fail their signature "
                        f"check: {notes} checkpoint_signature problems, listed with --json")
    assert lines[2].startswith(f"NOT VERIFIED: {notes + 1} problem(s) found. {size} events in 4 runs, 3 blobs, "
                               f"{stored} signed checkpoints (none verifies: the key is not this log's), signatures "
                               f"checked against {b_key}; took ")
    assert "Warning" not in lines[2] and "not covered by a signed checkpoint" not in lines[2]

    code, out, err = _run(capsys, "verify", "-s", tmp_path / "a", "--key", b_key, "--json")
    doc = json.loads(out)
    assert (code, err, doc["ok"]) == (1, "", False)
    assert [p["code"] for p in doc["problems"]] == ["key_mismatch"] + ["checkpoint_signature"] * notes
    assert {p["found"] for p in doc["problems"]} == {f"signatures by {a_name}+{a_id}"}

    # the log's own key: verified, as before
    assert _run(capsys, "verify", "-s", tmp_path / "a", "--key", a_key)[0] == 0


def test_a_bundle_verified_with_another_logs_key_names_both_keys_first(logs, capsys):
    tmp_path, a_key, b_key, run_id = logs
    (a_name, a_id), (b_name, b_id) = _parts(a_key), _parts(b_key)
    bundle = tmp_path / "a.sbx"
    assert _run(capsys, "export", "-s", tmp_path / "a", run_id, "-o", bundle)[0] == 0
    code, out, err = _run(capsys, "verify", bundle, "--key", b_key)
    lines = out.splitlines()
    assert (code, err, len(lines)) == (1, "", 4)
    assert lines[0] == (
        f"bundle_key_mismatch [log.vkey]: the bundle's verifier key is not the key you trust: it is a key of the "
        f"log {a_name} (key id {a_id}), the key you trust one of the log {b_name} (key id {b_id}): the bundle is "
        f"another log's, or the key is not this log's (expected {b_key}, found {a_key})")
    assert lines[1] == (
        f"checkpoint_signature [checkpoint]: the bundle's checkpoint is not validly signed by the trusted key "
        f"{b_name}: it carries no signature by that key (key id {b_id}), only signatures by {a_name}+{a_id}: it is "
        f"another log's checkpoint, or the key is not this log's (expected a signature by {b_key}, found "
        f"signatures by {a_name}+{a_id})")
    assert lines[2].startswith("NOT VERIFIED: 2 problem(s) found. ")


def test_a_checkpoint_file_of_another_log_says_whose_it_is(logs, capsys):
    tmp_path, a_key, b_key, _ = logs
    (a_name, a_id), (b_name, b_id) = _parts(a_key), _parts(b_key)
    saved = tmp_path / "b-checkpoint.txt"
    code, out, _ = _run(capsys, "log", "checkpoint", "-s", tmp_path / "b")
    assert code == 0
    saved.write_text(out)
    code, out, err = _run(capsys, "verify", "-s", tmp_path / "a", "--checkpoint", saved)
    lines = out.splitlines()
    assert (code, err, len(lines)) == (1, "", 2)
    assert lines[0] == (
        f"checkpoint_signature: the checkpoint given in {saved} is not validly signed by the trusted key {a_name}: "
        f"it carries no signature by that key (key id {a_id}), only signatures by {b_name}+{b_id}: it is another "
        f"log's checkpoint, or the key is not this log's (expected a signature by {a_key}, found signatures by "
        f"{b_name}+{b_id})")
    assert lines[1].startswith("NOT VERIFIED: 1 problem(s) found. ")
