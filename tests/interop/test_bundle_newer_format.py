"""A bundle whose format member names a newer version (``sealbox-bundle/3``) is reported as such.

Found handing a bundle to an older verifier (format member edited to ``sealbox-bundle/3``): the problem
said only ``the format member is not `sealbox-bundle/2` (nor the older `sealbox-bundle/1`)``, which an SRE
reads as tampering; it now names the version and says to verify with a current Sealbox. The bundle is
still not verified (exit 1): this Sealbox cannot check what a newer format adds."""

from __future__ import annotations

import pytest
from bundle_helpers import cli, members, record_runs, rezip

from sealbox.interop.bundle_verify import verify_bundle


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    folder = tmp_path_factory.mktemp("newer")
    store_path, runs, _ = record_runs(folder)
    path = folder / "case.sbx"
    assert cli("export", "-s", store_path, runs[0], "-o", path, cwd=folder)[0] == 0
    return path, (store_path / "log.vkey").read_text().strip()


@pytest.mark.parametrize("text, message", [
    (b"sealbox-bundle/3\n", "the format member is `sealbox-bundle/3`, written by a newer Sealbox than this one, "
                            "which reads `sealbox-bundle/2` and the older `sealbox-bundle/1`: verify it with a "
                            "current Sealbox"),
    (b"sealbox-bundle/0\n", "the format member is not `sealbox-bundle/2` (nor the older `sealbox-bundle/1`)"),
    (b"sealbox-bundle/03\n", "the format member is not `sealbox-bundle/2` (nor the older `sealbox-bundle/1`)"),
    (b"other\n", "the format member is not `sealbox-bundle/2` (nor the older `sealbox-bundle/1`)"),
])
def test_the_format_problem_names_a_newer_version(case, tmp_path, text, message):
    path, vkey = case
    m = members(path)
    m["format"] = text
    rezip(tmp_path / "n.sbx", m)
    report = verify_bundle(tmp_path / "n.sbx", trusted_vkey=vkey)
    assert not report.ok
    assert [(p.member, p.message) for p in report.problems if p.code == "bundle_format"] == [("format", message)]
