"""``sealbox log``: checkpoints, the verifier key, proofs."""

from __future__ import annotations

import base64

import click

from sealbox.cli.common import BadInput, echo_json, open_for_reading, store_option


@click.group("log")
def log_group() -> None:
    """The Merkle log: checkpoints, keys and proofs."""


@log_group.command("checkpoint")
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def checkpoint_cmd(store_path: str, as_json: bool) -> None:
    """Print the newest signed checkpoint (C2SP signed note).

    The note is checked first, so that what is printed (and saved elsewhere, for
    ``sealbox verify --checkpoint``) is worth keeping: it must verify with the key
    pinned at init, and the events must reproduce its root. Otherwise this fails
    (exit 1) and names ``sealbox verify``.
    """
    from sealbox.errors import NoteError, SealboxError
    from sealbox.ledger.checkpoint import verify_checkpoint

    store = open_for_reading(store_path)
    try:
        cp = store.latest_checkpoint()
        if cp is None:
            raise click.ClickException("the store has no checkpoint yet")
        vkey = store.pinned_vkey()
        if not vkey:
            raise click.ClickException(f"{store.path}/log.vkey is missing: cannot check the checkpoint's signature")
        try:
            signed = verify_checkpoint(cp.note, vkey) if isinstance(cp.note, str) else None
        except NoteError as exc:
            signed, why = None, str(exc)
        else:
            why = "its note is not text"
        if signed is None:
            _refuse(f"the newest stored checkpoint does not verify with the log's key ({why})")
        if signed.size != cp.tree_size or signed.root != cp.root_hash:
            _refuse("the newest stored checkpoint's columns differ from what its note signs")
        try:
            ok = signed.size <= store.size() and store.root(signed.size) == signed.root
        except SealboxError:
            ok = False
        if not ok:
            _refuse(f"the events do not reproduce the newest checkpoint's root (size {signed.size})")
    finally:
        store.close()
    if as_json:
        echo_json({"tree_size": cp.tree_size, "root_hash": "sha256:" + cp.root_hash.hex(),
                   "created_at": cp.created_at, "note": cp.note})
    else:
        click.echo(cp.note, nl=False)


def _refuse(why: str) -> None:
    click.echo(f"error: {why}: the store was changed below Sealbox; not printing it (run `sealbox verify`)", err=True)
    raise SystemExit(1)


@log_group.command("key")
@store_option
def key_cmd(store_path: str) -> None:
    """Print the log's verifier key (pinned at init)."""
    store = open_for_reading(store_path)
    try:
        vkey = store.pinned_vkey()
    finally:
        store.close()
    if not vkey:
        raise click.ClickException("the store has no pinned verifier key (log.vkey is missing)")
    click.echo(vkey)


@log_group.command("prove")
@store_option
@click.option("--from-size", "from_size", type=int, required=True, help="Size of the older checkpoint you hold.")
@click.option("--to-size", "to_size", type=int, default=None, help="Size of the newer tree (default: newest checkpoint).")
def prove_cmd(store_path: str, from_size: int, to_size: int | None) -> None:
    """Print an RFC 9162 consistency proof from an older tree size to a newer checkpoint.

    JSON: size1, size2, checkpoint (the signed note of size2, or null when none was
    signed at that size), proof (base64 hashes, RFC 9162 §2.1.4.1 order).
    """
    store = open_for_reading(store_path)
    try:
        cp = store.latest_checkpoint()
        size = store.size()
        if size == 0:
            raise BadInput("the log is empty: there is no tree to prove anything about")
        if to_size is not None and not 0 < to_size <= size:
            raise BadInput(f"--to-size must be between 1 and {size} (the log's size)")
        size2 = to_size if to_size is not None else (cp.tree_size if cp else size)
        if not 0 < from_size <= size2:
            bound = "--to-size" if to_size is not None else "the newest checkpoint's size"
            raise BadInput(f"--from-size must be between 1 and {size2} ({bound})")
        proof = store.consistency_proof(from_size, size2)
        signed = next((c.note for c in reversed(store.checkpoints()) if c.tree_size == size2), None)
    finally:
        store.close()
    echo_json({  # `sealbox verify BUNDLE --consistency FILE` reads exactly this
        "size1": from_size, "size2": size2,
        "checkpoint": signed,
        "proof": [base64.b64encode(h).decode() for h in proof],
    })
