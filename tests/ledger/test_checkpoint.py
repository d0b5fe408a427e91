"""C2SP signed notes, keys, checkpoints and cosignatures: every public vector, then round trips."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from sealbox.errors import NoteError
from sealbox.ledger.checkpoint import (
    KEY_TYPE_COSIGNATURE_V1,
    KEY_TYPE_ED25519,
    Checkpoint,
    Signer,
    Verifier,
    cosignature_message,
    generate_key,
    open_note,
    parse_cosignature,
    parse_note,
    sign_checkpoint,
    sign_note,
    verify_checkpoint,
)
from sealbox.ledger.merkle import MemoryTree, leaf_hash

VECTORS = json.loads((Path(__file__).parents[1] / "data" / "vectors" / "signed_note_vectors.json").read_text())
ORIGIN = "example.com/sealbox-test"
ROOT = MemoryTree([leaf_hash(b"a"), leaf_hash(b"b"), leaf_hash(b"c")]).root()


# --- vectors ---------------------------------------------------------------------------


@pytest.mark.parametrize("case", VECTORS["verify_cases"], ids=lambda c: c["id"])
def test_verify_case(case: dict) -> None:
    want = case["want"]
    if want["error"]:
        with pytest.raises(NoteError) as exc:
            open_note(case["note"], case["vkeys"])
        assert str(exc.value).startswith(want["reason"].split(" (")[0])
    else:
        opened = open_note(case["note"], [Verifier.from_vkey(v) for v in case["vkeys"]])
        assert (opened.text, opened.verified, opened.unverified) == (
            want["text"],
            want["verified"],
            want["unverified"],
        )


@pytest.mark.parametrize("case", VECTORS["sign_cases"], ids=lambda c: c["id"])
def test_sign_case_is_byte_for_byte(case: dict) -> None:
    signer = Signer.from_key(case["skey"])
    assert sign_note(case["text"], signer) == case["want_note"]
    assert signer.verifier.vkey == VECTORS["verify_cases"][1]["vkeys"][0]


@pytest.mark.parametrize("case", VECTORS["vkey_cases"], ids=lambda c: c["vkey"][:40])
def test_vkey_case(case: dict) -> None:
    if case["want_error"]:
        with pytest.raises(NoteError):
            Verifier.from_vkey(case["vkey"])
        return
    verifier = Verifier.from_vkey(case["vkey"])
    assert verifier.vkey == case["vkey"]
    assert verifier.key_id.hex() == case["vkey"].split("+")[1]
    want_type = KEY_TYPE_COSIGNATURE_V1 if case.get("type", "").startswith("0x04") else KEY_TYPE_ED25519
    assert verifier.key_type == want_type


@pytest.mark.parametrize("case", VECTORS["cosignature_cases"], ids=lambda c: c["id"])
def test_cosignature_case(case: dict) -> None:
    raw = base64.b64decode(case["signature_b64"])
    if case.get("want_error"):
        with pytest.raises(NoteError):
            parse_cosignature(raw)
        return
    kid, timestamp = parse_cosignature(raw)
    assert (kid.hex(), timestamp) == (case["want_key_id"], case["want_timestamp"])


@pytest.mark.parametrize("example", VECTORS["format_examples_unverifiable"], ids=lambda e: e["source"][:30])
def test_format_example_parses(example: dict) -> None:
    parsed = parse_note(example["checkpoint"])
    cp = Checkpoint.parse(parsed.text)
    want = example["want_parse"]
    assert (cp.origin, cp.size, base64.b64encode(cp.root).decode(), list(cp.extensions)) == (
        want["origin"],
        want["tree_size"],
        want["root_b64"],
        want["extensions"],
    )
    assert len(parsed.signatures) == want["signature_lines"]
    assert cp.body() == parsed.text
    # The witness line is a cosignature/v1 whose timestamp is the one in the cosigned example.
    witness = parsed.signatures[1]
    _, timestamp = parse_cosignature(witness.key_id + witness.signature)
    assert cosignature_message(cp.body(), timestamp) == example["cosigned_message_example"]


# --- keys ------------------------------------------------------------------------------


def test_generate_key_round_trips_both_key_strings() -> None:
    skey, vkey = generate_key(ORIGIN)
    signer, verifier = Signer.from_key(skey), Verifier.from_vkey(vkey)
    assert signer.verifier == verifier
    assert skey.startswith(f"PRIVATE+KEY+{ORIGIN}+{verifier.key_id.hex()}+")
    assert verifier.type_name == "ed25519"


@pytest.mark.parametrize("name", ["", "a+b", "a b", "a\tb", "a\u00a0b", "a\u2003b", "a\nb"])
def test_invalid_key_names_are_refused(name: str) -> None:
    with pytest.raises(NoteError):
        generate_key(name)


def test_signer_key_with_mismatched_key_id_is_refused() -> None:
    skey, _ = generate_key(ORIGIN)
    parts = skey.split("+")
    parts[3] = "00000000" if parts[3] != "00000000" else "00000001"
    with pytest.raises(NoteError):
        Signer.from_key("+".join(parts))


def test_verifier_key_with_mismatched_key_id_is_refused() -> None:
    _, vkey = generate_key(ORIGIN)
    other_name = vkey.replace(ORIGIN, ORIGIN + "x", 1)
    with pytest.raises(NoteError):
        Verifier.from_vkey(other_name)


@pytest.mark.parametrize("skey", ["KEY+PRIVATE+a+00000000+AQ==", "PRIVATE+KEY+a+0x000000+AQ==", "garbage"])
def test_malformed_signer_keys_are_refused(skey: str) -> None:
    with pytest.raises(NoteError):
        Signer.from_key(skey)


# --- notes -----------------------------------------------------------------------------


def test_sign_note_refuses_text_without_final_newline_or_with_control_characters() -> None:
    signer = Signer.from_key(generate_key(ORIGIN)[0])
    for text in ["no newline", "bell\a\n", ""]:
        with pytest.raises(NoteError):
            sign_note(text, signer)
    with pytest.raises(NoteError):
        sign_note("text\n")
    with pytest.raises(NoteError):
        sign_note("text\n", signer, signer)


def test_repeated_signature_by_a_known_key_is_counted_once() -> None:
    signer = Signer.from_key(generate_key(ORIGIN)[0])
    note = sign_note("hello\n", signer)
    line = note.split("\n\n", 1)[1]
    opened = open_note(note + line, [signer.verifier])
    assert opened.verified == [ORIGIN]


# --- checkpoints -----------------------------------------------------------------------


@pytest.fixture()
def log_key() -> tuple[Signer, Verifier]:
    skey, vkey = generate_key(ORIGIN)
    return Signer.from_key(skey), Verifier.from_vkey(vkey)


def test_checkpoint_body_is_origin_size_root_then_extensions() -> None:
    cp = Checkpoint(ORIGIN, 3, ROOT, ("ext one", "ext two"))
    root_b64 = base64.b64encode(ROOT).decode()
    assert cp.body() == f"{ORIGIN}\n3\n{root_b64}\next one\next two\n"
    assert Checkpoint.parse(cp.body()) == cp


def test_checkpoint_round_trip(log_key: tuple[Signer, Verifier]) -> None:
    signer, verifier = log_key
    cp = Checkpoint(ORIGIN, 3, ROOT)
    note = sign_checkpoint(cp, signer)
    assert note.startswith(cp.body() + "\n\u2014 " + ORIGIN + " ")
    assert verify_checkpoint(note, verifier) == cp
    assert verify_checkpoint(note, verifier.vkey) == cp


def _replace_line(note: str, index: int, new: str) -> str:
    lines = note.split("\n")
    lines[index] = new
    return "\n".join(lines)


@pytest.mark.parametrize(
    "tamper",
    [
        lambda n: _replace_line(n, 0, ORIGIN + "x"),
        lambda n: _replace_line(n, 1, "4"),
        lambda n: _replace_line(n, 2, base64.b64encode(bytes(32)).decode()),
        lambda n: n.replace("\n\n", "\nextension\n\n", 1),
        lambda n: n[:-6] + ("A" if n[-6] != "A" else "B") + n[-5:],
        lambda n: n.replace("\n\n", "\n", 1),
        lambda n: n[:-1],
    ],
    ids=["origin", "size", "root", "added-extension", "signature", "no-blank-line", "no-final-newline"],
)
def test_tampered_checkpoint_is_refused(log_key: tuple[Signer, Verifier], tamper) -> None:
    signer, verifier = log_key
    note = sign_checkpoint(Checkpoint(ORIGIN, 3, ROOT), signer)
    with pytest.raises(NoteError):
        verify_checkpoint(tamper(note), verifier)


def test_checkpoint_resigned_by_another_key_with_the_same_name_is_refused(log_key: tuple[Signer, Verifier]) -> None:
    _, verifier = log_key
    impostor = Signer.from_key(generate_key(ORIGIN)[0])
    note = sign_checkpoint(Checkpoint(ORIGIN, 3, ROOT), impostor)
    with pytest.raises(NoteError, match="no verifiable signatures"):
        verify_checkpoint(note, verifier)


def test_checkpoint_whose_origin_is_not_the_key_name_is_refused() -> None:
    signer = Signer.from_key(generate_key("other.example/log")[0])
    with pytest.raises(NoteError):
        sign_checkpoint(Checkpoint(ORIGIN, 3, ROOT), signer)
    note = sign_note(Checkpoint(ORIGIN, 3, ROOT).body(), signer)
    with pytest.raises(NoteError, match="origin"):
        verify_checkpoint(note, signer.verifier)


@pytest.mark.parametrize(
    "body",
    ["o\n3\n", "o\n03\n{r}\n", "o\n-1\n{r}\n", "o\n3\nAAAA\n", "o\n3\n{r}", "o\n3\n{r}\n\n", "\n3\n{r}\n"],
)
def test_malformed_checkpoint_bodies_are_refused(body: str) -> None:
    with pytest.raises(NoteError):
        Checkpoint.parse(body.format(r=base64.b64encode(ROOT).decode()))


# --- cosignatures ----------------------------------------------------------------------


def test_cosignature_over_a_checkpoint_verifies_and_its_timestamp_is_signed(log_key: tuple[Signer, Verifier]) -> None:
    signer, verifier = log_key
    wskey, wvkey = generate_key("witness.example/w1", KEY_TYPE_COSIGNATURE_V1)
    witness = Signer.from_key(wskey, clock=lambda: 1_679_315_147)
    note = sign_note(Checkpoint(ORIGIN, 3, ROOT).body(), signer, witness)
    opened = open_note(note, [verifier, wvkey])
    assert opened.verified == [ORIGIN, "witness.example/w1"]
    assert verify_checkpoint(note, verifier).size == 3  # the witness line is just unverified there
    sig = parse_note(note).signatures[1]
    assert parse_cosignature(sig.key_id + sig.signature) == (witness.key_id, 1_679_315_147)
    forged = bytearray(sig.key_id + sig.signature)
    forged[11] ^= 1  # a different timestamp
    lines = note.split("\n")
    lines[-2] = f"\u2014 witness.example/w1 {base64.b64encode(bytes(forged)).decode()}"
    with pytest.raises(NoteError, match="invalid signature"):
        open_note("\n".join(lines), [verifier, wvkey])
