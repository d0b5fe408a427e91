"""A Sealbox file of another kind given to one of ``sealbox verify``'s file options (an export bundle as
``--checkpoint``, ``--consistency``, ``--proof-from-saved`` or ``--key``; the private ``log.key`` or a store's
``sealbox.db`` as a checkpoint or proof) is one error line saying what the file is and what was expected.

Regression (an auditor's report): ``sealbox verify case.sbx --key K --checkpoint other.sbx`` said
``cannot read the checkpoint file other.sbx: other.sbx is not UTF-8 text (byte 14)``, and ``--consistency
log.key`` Python's ``Expecting value: line 1 column 1 (char 0)``: neither said that the file given was a
bundle, resp. the log's private key."""

from __future__ import annotations

import subprocess
import sys

import pytest

import sealbox
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("misplaced")
    store = sealbox.init_store(root / "store")
    with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
        run.note("one")
    store.close()
    main = [sys.executable, "-m", "sealbox.cli.main"]
    subprocess.run([*main, "export", "-s", str(root / "store"), run.run_id, "-o", str(root / "case.sbx")],
                   capture_output=True, check=True)
    (root / "other.sbx").write_bytes((root / "case.sbx").read_bytes())
    return root


BUNDLE = "OTHER is a Sealbox export bundle (a ZIP archive), not {what}: a bundle is the file to verify, " \
         "`sealbox verify OTHER --key KEY`"
PRIVATE = ("STORE/log.key is the log's private signing key (log.key), not {what}: keep it secret; the log's verifier "
           "key is log.vkey beside it")
DATABASE = "STORE/sealbox.db is a SQLite database (a store's sealbox.db), not {what}"
CHECKPOINT = "a saved checkpoint (what `sealbox log checkpoint` printed)"
PROOF = "a consistency proof (the JSON `sealbox log prove` printed)"
KEY = "a verifier key (NAME+KEYID+BASE64, as `sealbox log key` prints it)"

CASES = [
    (["--checkpoint", "OTHER"], BUNDLE.format(what=CHECKPOINT)),
    (["--checkpoint", "STORE/log.key"], PRIVATE.format(what=CHECKPOINT)),
    (["--checkpoint", "STORE/sealbox.db"], DATABASE.format(what=CHECKPOINT)),
    (["--consistency", "OTHER"], BUNDLE.format(what=PROOF)),
    (["--consistency", "STORE/log.key"], PRIVATE.format(what=PROOF)),
    (["--checkpoint", "STORE/checkpoint", "--proof-from-saved", "OTHER"], BUNDLE.format(what=PROOF)),
    (["--checkpoint", "STORE/checkpoint", "--proof-from-saved", "STORE/log.key"], PRIVATE.format(what=PROOF)),
]


@pytest.mark.parametrize("extra, expected", CASES, ids=[" ".join(c[0]) for c in CASES])
def test_a_bundle_or_private_key_given_as_a_checkpoint_or_proof_says_what_it_is(setup, extra, expected):
    out = _verify(setup, ["--key", "STORE/log.vkey", *extra])
    assert out == (2, "error: " + _fill(setup, expected) + "\n")


def test_a_bundle_or_database_given_as_the_key_says_what_it_is(setup):
    assert _verify(setup, ["--key", "OTHER"]) == (2, "error: --key " + _fill(setup, BUNDLE.format(what=KEY)) + "\n")
    assert _verify(setup, ["--key", "STORE/sealbox.db"]) == (
        2, "error: --key " + _fill(setup, DATABASE.format(what=KEY)) + "\n")


def test_log_verify_consistency_given_a_bundle_says_what_it_is(setup):
    cp = str(setup / "store" / "checkpoint")
    for args, what in (([cp, str(setup / "other.sbx"), cp], CHECKPOINT), ([cp, cp, str(setup / "other.sbx")],
                                                                             "a proof (the JSON `sealbox log prove` printed)")):
        out = subprocess.run([sys.executable, "-m", "sealbox.cli.main", "log", "verify-consistency", "--key",
                              str(setup / "store" / "log.vkey"), *args], capture_output=True, text=True, timeout=120)
        assert (out.returncode, out.stderr) == (2, "error: " + _fill(setup, BUNDLE.format(what=what)) + "\n")


def test_the_bundle_itself_still_verifies_with_a_real_checkpoint(setup):
    out = subprocess.run([sys.executable, "-m", "sealbox.cli.main", "verify", str(setup / "case.sbx"), "--key",
                          str(setup / "store" / "log.vkey"), "--checkpoint", str(setup / "store" / "checkpoint")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def _fill(root, text):
    return text.replace("OTHER", str(root / "other.sbx")).replace("STORE", str(root / "store"))


def _verify(root, args):
    out = subprocess.run([sys.executable, "-m", "sealbox.cli.main", "verify", str(root / "case.sbx"),
                          *[_fill(root, a) for a in args]], capture_output=True, text=True, timeout=120,
                         stdin=subprocess.DEVNULL)
    return out.returncode, out.stderr


def test_a_store_file_given_as_what_to_verify_says_what_it_is_and_what_to_give(setup):
    """``sealbox verify STORE/sealbox.db`` (the database for its folder), ``sealbox verify STORE/log.key`` or
    ``sealbox verify STORE/log.vkey --key …`` (the key for the bundle) said only '… is not a Sealbox bundle (not
    a ZIP archive whose first member is `format`)', not what the file is nor what to give."""
    store = setup / "store"
    main = [sys.executable, "-m", "sealbox.cli.main", "verify"]
    got = [subprocess.run([*main, str(store / name), "--key", str(store / "log.vkey")], capture_output=True, text=True)
           for name in ("sealbox.db", "log.key", "log.vkey")]
    assert [(p.returncode, p.stdout, p.stderr) for p in got] == [
        (2, "", f"error: {store}/sealbox.db is a SQLite database (a store's sealbox.db), not a Sealbox bundle: to "
                f"verify the store, give its folder: `sealbox verify {store} --key KEY`\n"),
        (2, "", f"error: {store}/log.key is the log's private signing key (log.key), not a Sealbox bundle: keep it "
                "secret; the log's verifier key is log.vkey beside it\n"),
        (2, "", f"error: {store}/log.vkey is a verifier key, not a Sealbox bundle: give it as --key, with the bundle "
                f"or the store's folder to verify: `sealbox verify FILE --key {store}/log.vkey`\n"),
    ]
