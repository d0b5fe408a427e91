"""A bundle cut short (a partial download or copy) is reported as exactly that, once.

Regression (found by ``head -c 20000 incident.sbx > b.sbx; sealbox verify b.sbx --key KEY``):
besides ``bundle_container: the ZIP structure cannot be read`` the report claimed things about
members it never read: "the format member is not `sealbox-bundle/2`", "the bundle's verifier key
is malformed", "the checkpoint ... carries no signature by that key, only signatures by nobody:
it is another log's checkpoint", "manifest.json is not valid JSON" — each false of the file (its
``format`` member, at its start, was intact) and pointing the investigator at forgery.
"""

from __future__ import annotations

import pytest
from bundle_helpers import cli, record_runs

from sealbox.interop.bundle_verify import verify_bundle


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    folder = tmp_path_factory.mktemp("truncated")
    store_path, runs, _ = record_runs(folder)
    path = folder / "case.sbx"
    assert cli("export", "-s", store_path, runs[0], "-o", path, cwd=folder)[0] == 0
    return path, (store_path / "log.vkey").read_text().strip(), folder


def test_a_truncated_bundle_is_one_container_problem_that_says_where_it_ends(bundle, tmp_path):
    path, vkey, folder = bundle
    data = path.read_bytes()
    cut = len(data) // 2
    target = tmp_path / "cut.sbx"
    target.write_bytes(data[:cut])
    report = verify_bundle(target)
    assert not report.ok
    assert [(p.code, p.member) for p in report.problems] == [("bundle_container", "the ZIP container")]
    message = report.problems[0].message
    assert message.startswith(f"the ZIP structure cannot be read: the file ends at byte {cut}, inside member ")
    assert "(it was truncated)" in message
    # the command: one problem line, the verdict, exit 1, no traceback
    (folder / "k.vkey").write_text(vkey + "\n")
    code, out = cli("verify", target, "--key", folder / "k.vkey", cwd=folder)[:2]
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == f"bundle_container [the ZIP container]: {message}"
    assert lines[1].startswith("NOT VERIFIED: 1 problem(s) found.")
    # no checkpoint was read, so no signature was checked against the key given
    assert lines[2:] == ["The key you gave (--key) was not used: no member of the bundle could be read, its "
                         "checkpoint included."]
    assert "Traceback" not in out and "another log" not in out and "not valid JSON" not in out


def test_without_a_key_a_truncated_bundle_does_not_call_its_unread_key_malformed(bundle, tmp_path):
    path, _, folder = bundle
    target = tmp_path / "cut.sbx"
    target.write_bytes(path.read_bytes()[:1000])
    code, out = cli("verify", target, cwd=folder)[:2]
    assert code == 1
    assert out.splitlines()[-1] == ("No key was used: no member of the bundle could be read, its verifier key "
                                    "(log.vkey) included. Pass the log's key with --key.")
    assert "malformed" not in out
