"""Where the recipient of a bundle gets the log's key: `sealbox init` and `sealbox export -o` print it
and say to send it apart from the bundle, and `sealbox verify --key` takes it in the forms users have:
the printed string (also pasted with init's indentation) and the store's log.vkey file."""

from __future__ import annotations

import json

import pytest
from bundle_helpers import cli, record_runs


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    folder = tmp_path_factory.mktemp("keyforms")
    store_path, runs, _ = record_runs(folder)
    path = folder / "case.sbx"
    code, out, err = cli("export", "-s", store_path, runs[0], "-o", path, "--json", cwd=folder)
    assert code == 0, err
    vkey = (store_path / "log.vkey").read_text().strip()
    assert json.loads(out)["vkey"] == vkey  # the export names the key to send apart from the bundle
    return folder, store_path, path, vkey


def test_a_genuine_bundle_with_the_key_verifies_in_each_form_the_key_comes_in(case):
    folder, store_path, path, real_vkey = case
    code, printed, _ = cli("log", "key", "-s", store_path, cwd=folder)
    assert (code, printed) == (0, real_vkey + "\n")
    for key in (real_vkey, f"  {real_vkey} ", str(store_path / "log.vkey")):
        code, out, err = cli("verify", path, "--key", key, cwd=folder)
        assert (code, err) == (0, ""), out
        assert out.splitlines()[0].startswith("Verified: the bundle is intact. 14 events in 1 run")
        assert out.splitlines()[-1] == f"Checkpoint signature checked against the key you gave (--key): {real_vkey}."


def test_a_folder_as_key_names_the_key_file_in_it(case):
    folder, store_path, path, _ = case
    assert cli("verify", path, "--key", store_path, cwd=folder) == (
        2, "", f"error: --key {store_path} is a folder: give the key file in it ({store_path / 'log.vkey'}, for a "
               "store) or the key string `sealbox log key` prints\n")


def test_init_prints_the_key_and_says_to_send_it_apart_from_a_bundle(tmp_path):
    code, out, err = cli("init", tmp_path / "s", cwd=tmp_path)
    assert (code, err) == (0, "")
    vkey = (tmp_path / "s" / "log.vkey").read_text().strip()
    lines = out.splitlines()
    assert f"  {vkey}" in lines
    assert lines[-2:] == ["Whoever receives a bundle of this log (`sealbox export -o FILE`) needs it too, sent apart from the",
                          "bundle: `sealbox verify FILE --key KEY` (`sealbox log key` prints the key again)."]
