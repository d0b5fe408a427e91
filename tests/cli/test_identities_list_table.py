"""``sealbox identities list``'s readable table showed an identity's groups as JSON (``["dev", "ops"]``, ``[]``) and
``shared`` / ``disabled`` as Python writes a bool (``True`` / ``False``). The table now says ``dev, ops`` (``-`` for
none, as its ``compromised`` column and the approvals table's ``decided_by`` say nothing) and ``yes`` / ``no``;
``--json`` and ``--csv`` are unchanged (a list, ``true`` / ``false``)."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys

import pytest


def sb(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}  # a pipe, no COLUMNS: the table at its full width
    out = subprocess.run([sys.executable, "-m", "sealbox.cli.main", *args], capture_output=True, text=True,
                         stdin=subprocess.DEVNULL, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    return out


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("idlist")
    path = str(root / "store")
    sb("init", path)
    sb("identities", "add", "root", "--role", "admin", "--key-out", str(root / "root.key"), "-s", path)
    admin = ("--admin-key", str(root / "root.key"), "-s", path)
    sb("identities", "add", "alice", "--role", "approver", "--group", "ops", "--group", "dev",
       "--key-out", str(root / "alice.key"), *admin)
    sb("identities", "add", "bot", "--role", "approver", "--shared", "--key-out", str(root / "bot.key"), *admin)
    sb("identities", "disable", "bot", "--reason", "left", *admin)
    return path


def test_the_table_shows_groups_and_flags_as_text(store):
    table = sb("identities", "list", "-s", store).stdout
    rows = {cells[0]: cells for cells in ([c.strip() for c in line.split("│")[1:-1]] for line in table.splitlines()
                                          if line.startswith("│"))}
    assert [rows[n][1:5] for n in ("alice", "bot", "root")] == [
        ["approver", "dev, ops", "no", "no"], ["approver", "-", "yes", "yes"], ["admin", "-", "no", "no"]]
    assert "True" not in table and "False" not in table and "[" not in table


def test_json_and_csv_keep_the_list_and_the_booleans(store):
    listed = json.loads(sb("identities", "list", "-s", store, "--json").stdout)
    assert [(i["name"], i["groups"], i["shared"], i["disabled"]) for i in listed] == [
        ("alice", ["dev", "ops"], False, False), ("bot", [], True, True), ("root", [], False, False)]
    text = sb("identities", "list", "-s", store, "--csv").stdout
    assert text.startswith("name,role,groups,shared,disabled,key_id,compromised,public_key\n")
    assert '"[""dev"",""ops""]",false,false,' in text
    assert [(r["name"], r["groups"], r["shared"], r["disabled"], r["compromised"]) for r in csv.DictReader(io.StringIO(text))] == [
        ("alice", '["dev","ops"]', "false", "false", "[]"), ("bot", "[]", "true", "true", "[]"),
        ("root", "[]", "false", "false", "[]")]
