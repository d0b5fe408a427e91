"""A bundle's ``log.vkey`` that is not ASCII, or ends its line in CRLF, is one ``bundle_key`` problem
saying so in words.

Regression (found auditing ``sealbox verify`` with hostile bundles): a member of bytes that are not ASCII
(a compressed member read as stored) printed Python's exception, ``'ascii' codec can't decode byte 0xcc
in position 3: ordinal not in range(128)``, and a key saved with a CRLF line end ``malformed verifier
key: invalid base64``, though its base64 was right."""

from __future__ import annotations

import pytest
from bundle_helpers import cli, members, record_runs, rezip

from sealbox.interop.bundle_verify import verify_bundle


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    folder = tmp_path_factory.mktemp("vkey")
    store_path, runs, _ = record_runs(folder)
    path = folder / "case.sbx"
    assert cli("export", "-s", store_path, runs[0], "-o", path, cwd=folder)[0] == 0
    return path


@pytest.mark.parametrize("change, why", [
    (lambda k: k[:3] + b"\xcc" + k[4:], "it is not ASCII text (byte 4 is 0xcc)"),
    (lambda k: k.replace(b"\n", b"\r\n"), "its line ends in CRLF (\\r\\n); a verifier key is one line ending in \\n"),
])
def test_a_key_member_that_is_not_one_ascii_line_is_said_in_words(case, tmp_path, change, why):
    m = members(case)
    m["log.vkey"] = change(m["log.vkey"])
    rezip(tmp_path / "k.sbx", m)
    [problem] = [p for p in verify_bundle(tmp_path / "k.sbx").problems if p.code == "bundle_key"]
    assert (problem.member, problem.message) == ("log.vkey", f"the bundle's verifier key is malformed: {why}")
