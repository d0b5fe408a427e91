"""A bundle checkpoint that is not a well-formed signed note (CRLF line ends, a space after the signature,
its signature line removed) is reported as such, saying what is wrong with it.

Regression (found auditing ``sealbox verify`` with tampered bundles): each was reported as
``checkpoint_signature … it carries no signature by that key (key id …), only signatures by nobody: it
is another log's checkpoint, or the key is not this log's``: the wrong diagnosis (the key was right,
the note was broken), pointing the auditor at the key they had checked."""

from __future__ import annotations

import pytest
from bundle_helpers import cli, members, record_runs, rezip

from sealbox.interop.bundle_verify import verify_bundle


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    folder = tmp_path_factory.mktemp("note")
    store_path, runs, _ = record_runs(folder)
    path = folder / "case.sbx"
    assert cli("export", "-s", store_path, runs[0], "-o", path, cwd=folder)[0] == 0
    return path, (store_path / "log.vkey").read_text().strip()


@pytest.mark.parametrize("change, why", [
    (lambda n: n.replace(b"\n", b"\r\n"), "malformed note (control character)"),
    (lambda n: n[:-1] + b" \n", "malformed note (signature line 1 is not `\u2014 NAME BASE64`)"),
    (lambda n: n.split(b"\n\n")[0] + b"\n", "malformed note (no blank line before the signature lines)"),
    (lambda n: n.split(b"\n\n")[0] + b"\n\n", "malformed note (no signature line)"),
])
def test_a_malformed_checkpoint_note_is_named_as_such(case, tmp_path, change, why):
    path, vkey = case
    m = members(path)
    m["checkpoint"] = change(m["checkpoint"])
    rezip(tmp_path / "n.sbx", m)
    report = verify_bundle(tmp_path / "n.sbx", trusted_vkey=vkey)
    [problem] = [p for p in report.problems if p.code == "checkpoint_signature"]
    assert problem.member == "checkpoint"
    name = vkey.split("+")[0]
    assert problem.message == (f"the bundle's checkpoint is not validly signed by the trusted key {name}: it is "
                               f"not a well-formed signed note: {why} (C2SP signed-note: the text, a blank line, "
                               "then one signature line `\u2014 NAME BASE64` each, every line ending in a newline)")
    assert "another log" not in problem.line()
