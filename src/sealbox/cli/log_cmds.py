"""``sealbox log``: checkpoints, the verifier key, proofs."""

from __future__ import annotations

import base64

import click

from sealbox.cli.common import BadInput, echo_json, not_empty, open_for_reading, store_option


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


@log_group.command("prove-inclusion")
@store_option
@click.option("--index", "index", type=int, required=True, help="The event's leaf index (0-based).")
@click.option("--to-size", "to_size", type=int, default=None, help="Size of the tree (default: newest checkpoint).")
def prove_inclusion_cmd(store_path: str, index: int, to_size: int | None) -> None:
    """Print an RFC 9162 inclusion proof of one event in a checkpoint's tree.

    JSON: leaf_index, tree_size, checkpoint (the signed note of tree_size, or null), event
    (base64 of the hashed bytes), leaf_hash (sha256:HEX), proof (base64 hashes, RFC 9162
    §2.1.3.1 order). `sealbox log verify-inclusion` checks it offline.
    """
    store = open_for_reading(store_path)
    try:
        cp = store.latest_checkpoint()
        size = store.size()
        if size == 0:
            raise BadInput("the log is empty: there is no event to prove")
        if to_size is not None and not 0 < to_size <= size:
            raise BadInput(f"--to-size must be between 1 and {size} (the log's size)")
        tree_size = to_size if to_size is not None else (cp.tree_size if cp else size)
        if not 0 <= index < tree_size:
            bound = "--to-size" if to_size is not None else "the newest checkpoint's size"
            raise BadInput(f"--index must be between 0 and {tree_size - 1} (below {bound}, {tree_size})")
        proof = store.inclusion_proof(index, tree_size)
        event, = store.read_range(index, index + 1)
        signed = next((c.note for c in reversed(store.checkpoints()) if c.tree_size == tree_size), None)
    finally:
        store.close()
    echo_json({"leaf_index": index, "tree_size": tree_size, "checkpoint": signed,
               "event": base64.b64encode(event.raw).decode(), "leaf_hash": event.leaf_hash,
               "proof": [base64.b64encode(h).decode() for h in proof]})


# ------------------------------------------------------------------ offline checks (no store)


class _NotVerified(click.ClickException):
    """A check that failed (a signature, a fork): one ``error:`` line and exit status 1.
    A file that cannot be read or is not what it should be is :class:`BadInput` (exit 2)."""

    exit_code = 1


def _key_option(fn):
    return click.option("--key", "vkey", required=True,
                        help="The log's verifier key, kept apart from the log: the key string `sealbox init` and "
                             "`sealbox log key` print, or a file holding it (a store's log.vkey).")(fn)


def _parse_checkpoint(path: str, note: str):
    """The checkpoint a saved note carries, not yet verified: BadInput naming ``path`` if it has none."""
    from sealbox.errors import NoteError
    from sealbox.ledger.checkpoint import Checkpoint, parse_note

    try:
        return Checkpoint.parse(parse_note(note).text)
    except NoteError as exc:
        raise BadInput(f"{path} is not a signed checkpoint: {exc}") from None


def _check_signed(path: str, note: str, body, vkey: str) -> None:
    """The log's key must have signed ``note`` (whose checkpoint is ``body``); each way it fails is one
    line naming ``path``."""
    from sealbox.errors import NoteError
    from sealbox.ledger.checkpoint import Verifier, open_note, parse_note

    verifier = Verifier.from_vkey(vkey)
    key = f"{verifier.name}+{verifier.key_id.hex()}"
    signatures = parse_note(note).signatures
    if not any(s.name == verifier.name and s.key_id == verifier.key_id for s in signatures):
        signers = ", ".join(sorted({f"{s.name}+{s.key_id.hex()}" for s in signatures}))
        raise _NotVerified(f"{path} is not signed by the given key {key} (it is signed by {signers}): the wrong "
                           "key, or a checkpoint of another log")
    try:
        open_note(note, [verifier])
    except NoteError as exc:
        raise _NotVerified(f"{path}: the signature by {key} does not verify ({exc}): the checkpoint was changed "
                           "after it was signed, or forged") from None
    if body.origin != verifier.name:
        raise _NotVerified(f"{path}: the checkpoint's origin {body.origin!r} is not the key's name {verifier.name!r}")


def _read_checkpoint_file(path: str) -> str:
    import os

    from sealbox.cli.store_cmds import _read_checkpoint

    if not os.path.exists(path):
        raise BadInput(f"{path} does not exist (give a checkpoint saved from `sealbox log checkpoint`)")
    return _read_checkpoint(path)


def _read_proof_file(path: str, what: str) -> dict:
    """The JSON object of a proof file; BadInput naming the file otherwise."""
    import json
    import os

    from sealbox.cli.store_cmds import read_small

    if not os.path.exists(path):
        raise BadInput(f"{path} does not exist (give the JSON `sealbox log {what}` printed)")
    from sealbox.input_files import misplaced_file

    wrong = misplaced_file(path, f"a proof (the JSON `sealbox log {what}` printed)")
    if wrong:
        raise BadInput(wrong)
    try:
        text = read_small(path)
    except (OSError, UnicodeDecodeError) as exc:
        from sealbox.cli.common import not_utf8_text

        raise BadInput(f"cannot read the proof file {path}: "
                       f"{not_utf8_text(path, exc) or getattr(exc, 'strerror', None) or exc}") from None
    if text is None:
        raise BadInput(f"{path} is larger than 1 MiB: not a `sealbox log {what}` proof (a few KiB)")
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise BadInput(f"{path} is not a `sealbox log {what}` proof: not JSON ({exc})") from None
    except RecursionError:
        raise BadInput(f"{path} is not a `sealbox log {what}` proof: its JSON is nested too deeply") from None
    if not isinstance(doc, dict):
        raise BadInput(f"{path} is not a `sealbox log {what}` proof: not a JSON object")
    return doc


def _proof_hashes(path: str, doc: dict) -> list[bytes]:
    proof = doc.get("proof")
    if not isinstance(proof, list) or not all(isinstance(h, str) for h in proof):
        raise BadInput(f"{path}: \"proof\" must be a list of base64 hashes")
    hashes = []
    for i, text in enumerate(proof):
        try:
            raw = base64.b64decode(text, validate=True)
        except ValueError:
            raise BadInput(f"{path}: proof[{i}] is not base64") from None
        if len(raw) != 32:
            raise BadInput(f"{path}: proof[{i}] is {len(raw)} bytes, not a 32-byte SHA-256 hash")
        hashes.append(raw)
    return hashes


def _size_field(path: str, doc: dict, name: str, least: int) -> int:
    value = doc.get(name)
    if type(value) is not int or not least <= value < 2**64:
        raise BadInput(f"{path}: \"{name}\" must be an integer of {least} or more")
    return value


@log_group.command("verify-consistency")
@_key_option
@click.argument("old", callback=not_empty, type=click.Path(dir_okay=False))
@click.argument("new", callback=not_empty, type=click.Path(dir_okay=False))
@click.argument("proof", callback=not_empty, type=click.Path(dir_okay=False))
def verify_consistency_cmd(vkey: str, old: str, new: str, proof: str) -> None:
    """Check offline that the log of checkpoint NEW extends the log of checkpoint OLD.

    No store, no bundle: the log's verifier key (--key), two checkpoints you saved
    (`sealbox log checkpoint`, the older first) and PROOF, the JSON of `sealbox log prove
    --from-size SIZE_OF_OLD --to-size SIZE_OF_NEW`. The proof is untrusted: it must lead
    to both signed roots (RFC 9162 §2.1.4.2). Prints "consistent: size A -> size B" (exit 0);
    exit 1 when a signature, the key or the proof fails (a forked or rewritten log),
    2 when a file is missing or is not what it should be.
    """
    from sealbox.cli.store_cmds import _read_key
    from sealbox.errors import ProofError
    from sealbox.ledger import merkle

    vkey = _read_key(vkey)
    notes = [_read_checkpoint_file(path) for path in (old, new)]
    doc = _read_proof_file(proof, "prove")
    size1, size2 = _size_field(proof, doc, "size1", 1), _size_field(proof, doc, "size2", 1)
    hashes = _proof_hashes(proof, doc)
    older, newer = (_parse_checkpoint(path, note) for path, note in zip((old, new), notes))
    if older.origin != newer.origin:
        raise _NotVerified(f"{old} and {new} are checkpoints of two logs: origin {older.origin!r} and "
                           f"origin {newer.origin!r}")
    for path, note, body in ((old, notes[0], older), (new, notes[1], newer)):
        _check_signed(path, note, body, vkey)
    if newer.size < older.size:
        raise _NotVerified(f"{new} (size {newer.size}) is smaller than {old} (size {older.size}): give the older "
                           "checkpoint first; a log that shrank was rolled back")
    if older.size == 0:
        raise BadInput(f"{old} is the empty log (size 0): every log extends it, there is nothing to prove")
    if (size1, size2) != (older.size, newer.size):
        raise BadInput(f"{proof} is a proof from size {size1} to {size2}, but {old} has size {older.size} and "
                       f"{new} size {newer.size}: run `sealbox log prove --from-size {older.size} "
                       f"--to-size {newer.size}`")
    try:
        merkle.verify_consistency(older.size, newer.size, hashes, older.root, newer.root)
    except ProofError as exc:
        raise _NotVerified(f"not consistent: the log of {new} (size {newer.size}) does not extend the log of "
                           f"{old} (size {older.size}): {exc}; a forked or rewritten log, or a proof of "
                           "another log") from None
    click.echo(f"consistent: size {older.size} -> size {newer.size}")


@log_group.command("verify-inclusion")
@_key_option
@click.argument("checkpoint", callback=not_empty, type=click.Path(dir_okay=False))
@click.argument("proof", callback=not_empty, type=click.Path(dir_okay=False))
@click.option("--event", "event_path", callback=not_empty, type=click.Path(dir_okay=False), default=None,
              help="A file holding the event's hashed bytes (its canonical JSON, exactly).")
@click.option("--leaf-hash", "leaf_hash", default=None, help="The event's leaf hash, sha256:HEX.")
def verify_inclusion_cmd(vkey: str, checkpoint: str, proof: str, event_path: str | None,
                         leaf_hash: str | None) -> None:
    """Check offline that an event is in the log of CHECKPOINT.

    No store, no bundle: the log's verifier key (--key), a checkpoint you saved (`sealbox log
    checkpoint`), PROOF, the JSON of `sealbox log prove-inclusion --index I --to-size SIZE`,
    and the event you hold: --event FILE (its hashed bytes) or --leaf-hash sha256:HEX. The
    proof is untrusted (its event, leaf_hash and checkpoint are not read): it must lead from
    your event to the signed root (RFC 9162 §2.1.3.2). Prints "included: leaf I in size N"
    (exit 0); exit 1 when the signature, the key or the proof fails, 2 when a file is missing
    or is not what it should be.
    """
    import os

    from sealbox.cli.store_cmds import _read_key
    from sealbox.errors import ProofError
    from sealbox.ledger import merkle

    if (event_path is None) == (leaf_hash is None):
        raise BadInput("give the event to look for: --event FILE (its hashed bytes) or --leaf-hash sha256:HEX, one "
                       "of them (the proof's own copy is not trusted)")
    vkey = _read_key(vkey)
    note = _read_checkpoint_file(checkpoint)
    doc = _read_proof_file(proof, "prove-inclusion")
    index, size = _size_field(proof, doc, "leaf_index", 0), _size_field(proof, doc, "tree_size", 1)
    hashes = _proof_hashes(proof, doc)
    if event_path is not None:
        import stat

        from sealbox.input_files import open_input

        try:
            mode = os.stat(event_path).st_mode
        except OSError:
            mode = None
        if mode is None or not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):  # a FIFO: `--event <(jq ...)`
            what = "is not a regular file" if mode is not None else "does not exist"
            raise BadInput(f"{event_path} {what} (give a file holding the event's hashed bytes)")
        try:
            with open_input(event_path) as fh:  # a named pipe nothing writes to: waited on for a bounded time
                data = fh.read()
        except OSError as exc:
            raise BadInput(f"cannot read the event file {event_path}: {exc.strerror or exc}") from None
        if not data:  # no event's bytes are empty: a redirect that failed, not "another event"
            raise BadInput(f"{event_path} is empty (give a file holding the event's hashed bytes)")
        leaf = merkle.leaf_hash(data)
    else:
        text = leaf_hash.strip().removeprefix("sha256:")
        try:
            leaf = bytes.fromhex(text)
        except ValueError:
            leaf = b""
        if len(leaf) != 32:
            raise BadInput(f"--leaf-hash {leaf_hash!r} is not a SHA-256 leaf hash (sha256: and 64 hex digits)")
    body = _parse_checkpoint(checkpoint, note)
    _check_signed(checkpoint, note, body, vkey)
    if size != body.size and index >= body.size:
        raise BadInput(f"{proof} proves leaf {index}, which the log of {checkpoint} (size {body.size}) does not hold "
                       f"yet: check it against a checkpoint saved after the event was appended (size {index + 1} "
                       "or more)")
    if size != body.size:
        raise BadInput(f"{proof} is a proof in the tree of size {size}, but {checkpoint} has size {body.size}: run "
                       f"`sealbox log prove-inclusion --index {index} --to-size {body.size}`")
    if index >= size:
        raise BadInput(f"{proof}: leaf_index {index} is not below tree_size {size}")
    try:
        merkle.verify_inclusion(leaf, index, size, hashes, body.root)
    except ProofError as exc:
        raise _NotVerified(f"not included: the event is not leaf {index} of the log of {checkpoint} (size {size}): "
                           f"{exc}; another event, a changed event, or a proof of another log") from None
    click.echo(f"included: leaf {index} in size {size}")
