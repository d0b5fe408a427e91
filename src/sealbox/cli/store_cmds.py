"""``sealbox init``, ``sealbox upgrade`` and ``sealbox verify``."""

from __future__ import annotations

import re
import shlex
import sys

import click

from sealbox.cli.common import (DEFAULT_STORE, BadInput, cli_lock_timeout, echo_json, not_empty, open_for_reading,
                                 open_for_writing)


@click.command("init")
@click.argument("path", required=False, default=None, type=click.Path())
@click.option("--origin", default=None, help="The log's origin (its checkpoint key's name). Default: sealbox.local/<random id>.")
@click.option("--content-mode", type=click.Choice(["full", "redacted", "hashes-only"]), default="redacted",
              show_default=True, help="What the store keeps of arguments, results, model requests and state "
                                      "(docs/content-modes.md). Fixed for the store's life.")
@click.option("--redact-key", "redact_keys", multiple=True, metavar="NAME",
              help="Also redact values under this key name (case-insensitive; added to the defaults). Repeatable.")
@click.option("--redact-path", "redact_paths", multiple=True, metavar="PATH",
              help="Also redact the value at this dotted path (arguments.user.ssn; * matches any key). Repeatable.")
@click.option("--redact-pattern", "redact_patterns", multiple=True, metavar="REGEX",
              help="Also redact text matching this regular expression (added to the defaults; it may not match the "
                   "empty string). Repeatable.")
@click.option("--postgres", "postgres_url", default=None, metavar="URL",
              help="Keep the log in PostgreSQL (postgresql://user@host/db) instead of SQLite; PATH still holds the "
                   "signing key, the store secret and the URL (docs/storage.md, \"PostgreSQL\").")
@click.option("--schema", default=None, metavar="NAME",
              help="With --postgres: the schema the store's tables go in (default: sealbox). It must hold no store yet.")
@click.option("--allow-public-schema", is_flag=True,
              help="With --schema public: put the store's tables in the database's default schema, beside "
                   "whatever else uses it (refused without this flag).")
def init_cmd(path: str | None, origin: str | None, content_mode: str, redact_keys: tuple[str, ...],
             redact_paths: tuple[str, ...], redact_patterns: tuple[str, ...], postgres_url: str | None,
             schema: str | None, allow_public_schema: bool) -> None:
    """Create a store in PATH (default: $SEALBOX_STORE or ./.sealbox) and its log signing key;
    with --postgres URL its log lives in that PostgreSQL database."""
    import os

    from sealbox.redaction import DEFAULT_KEYS, DEFAULT_PATTERNS, ContentPolicy, path_problem, pattern_problem
    from sealbox.store import init_store

    for option, values in (("--redact-key", redact_keys), ("--redact-path", redact_paths),
                           ("--redact-pattern", redact_patterns)):
        if any(not v.strip() for v in values):
            raise BadInput(f"{option} is empty: give a name, path or pattern")
    for redact_pattern in redact_patterns:  # a bad regex, or one matching "" (a marker between every character)
        if problem := pattern_problem(redact_pattern):
            raise BadInput(f"--redact-pattern: {problem}")
    for redact_path in redact_paths:  # a path that names no content field would silently redact nothing
        if problem := path_problem(redact_path):
            raise BadInput(f"--redact-path: {problem}")
    if content_mode != "redacted" and (redact_keys or redact_paths or redact_patterns):
        raise BadInput(f"--redact-key/--redact-path/--redact-pattern apply to --content-mode redacted, "
                       f"not {content_mode}")
    content = ContentPolicy(content_mode, tuple(dict.fromkeys((*DEFAULT_KEYS, *redact_keys))), tuple(redact_paths),
                            tuple(dict.fromkeys((*DEFAULT_PATTERNS, *redact_patterns))))  # ConfigError: a bad regex

    if path is not None and not path.strip():
        raise BadInput("PATH is empty: give the folder to create the store in (or leave it out for "
                       f"$SEALBOX_STORE or ./{DEFAULT_STORE})")
    if origin is not None and not origin.strip():
        raise BadInput("--origin is empty: give the log's origin (e.g. example.com/agents), or leave it out")
    path = path or os.environ.get("SEALBOX_STORE") or DEFAULT_STORE
    if os.path.exists(path) and not os.path.isdir(path):
        raise BadInput(f"{path} is a file: `sealbox init` creates a folder (give a new or empty folder's path)")
    from sealbox.errors import NoteError

    if postgres_url is not None and not re.match(r"postgres(ql)?://", postgres_url):
        raise BadInput(f"--postgres takes a postgresql:// URL, not {postgres_url!r}")
    if schema is not None and postgres_url is None:
        raise BadInput("--schema applies to a PostgreSQL store: give --postgres URL too")
    if allow_public_schema and postgres_url is None:
        raise BadInput("--allow-public-schema applies to a PostgreSQL store: give --postgres URL too")
    if schema == "public" and not allow_public_schema:
        raise BadInput("schema 'public' is the database's default schema, shared with whatever else uses the "
                       "database: give the store a schema of its own (--schema NAME; the default is sealbox), or "
                       "--allow-public-schema to put its tables there anyway")
    where = {} if postgres_url is None else {"postgres_url": postgres_url, "schema": "sealbox" if schema is None else schema}
    if allow_public_schema:
        where["allow_public_schema"] = True
    try:
        store = init_store(path, origin=origin, content=content, lock_timeout=cli_lock_timeout(), **where)
    except NoteError:  # checked before anything is created
        raise BadInput(f"--origin {origin!r} cannot name the log's key: it may not hold '+', spaces or control "
                       "characters (e.g. example.com/agents)") from None
    vkey = store.pinned_vkey()
    store.close()
    click.echo(f"Created a Sealbox store in {path}")
    click.echo(f"  log origin:   {store.origin}")
    click.echo(f"  signing key:  {path}/log.key (mode 0600; keep it private)")
    click.echo(f"  content mode: {content_mode}")
    if postgres_url is not None:  # the URL's password, if any, is not printed
        click.echo(f"  database:     PostgreSQL {re.sub(r'//[^@/]*@', '//…@', postgres_url)}, schema {schema or 'sealbox'} "
                   f"(settings in {path}/postgres.json, mode 0600)")
    click.echo("")
    click.echo("The log's verifier key is:")
    click.echo("")
    click.echo(f"  {vkey}")
    click.echo("")
    click.echo("Keep a copy of this key somewhere the owner of this store cannot rewrite (a ticket, a wiki page,")
    click.echo("another machine): `sealbox verify --key KEY` checks the log against it, so a rewritten store is caught.")
    click.echo("Whoever receives a bundle of this log (`sealbox export -o FILE`) needs it too, sent apart from the")
    click.echo("bundle: `sealbox verify FILE --key KEY` (`sealbox log key` prints the key again).")


@click.command("upgrade")
@click.option("-s", "--store", "store_path", envvar="SEALBOX_STORE", default=DEFAULT_STORE, show_default=True,
              callback=not_empty, help="The store's data folder.")
def upgrade_cmd(store_path: str) -> None:
    """Apply the schema migrations a newer Sealbox brings to the store in --store, once, after
    upgrading Sealbox (read-only commands refuse an older store until then; writers upgrade it
    on their first open). Each migration is one transaction, recorded in the store, all of them
    under one lock (two upgrades at once: the first applies them all); the log's events and their
    hashes are not changed. Prints the migrations this command applied, or that nothing was pending
    (also when another process applied them while it ran)."""
    from sealbox.errors import SchemaVersionError, StoreUpgradeNeededError

    pending: list[int] | None
    try:
        open_for_reading(store_path).close()
        pending = []
    except StoreUpgradeNeededError as exc:
        pending = exc.pending
    except SchemaVersionError as exc:  # a PostgreSQL store's older schema (it carries the list too)
        if "older Sealbox" not in str(exc):
            raise  # a newer Sealbox's store, or an edited migration: the writer would refuse it too
        pending = getattr(exc, "pending", None)
    if pending == []:
        click.echo(f"{store_path} is up to date: no migration to apply")
        return
    from sealbox.errors import StoreError

    try:
        store = open_for_writing(store_path)
        applied = list(store.migrated)  # what this open committed, not what was pending when read above
        store.close()
    except StoreError as exc:
        # a writer's open applies the migrations, then loads the signing key, which an upgrade does not
        # use: a folder without log.key was upgraded all the same; any other failure is said as it is
        from sealbox.errors import SealboxError

        try:
            open_for_reading(store_path).close()  # opens now: nothing is pending any more
        except SealboxError:
            raise exc from None
        applied = list(getattr(exc, "migrated", []))
    if not applied:  # another process (an upgrade, a writer) applied them between the check above and now
        click.echo(f"{store_path} is up to date: no migration to apply (another process applied the pending "
                   "migrations meanwhile)")
        return
    click.echo(f"Upgraded {store_path}: applied migrations {applied}")


def _check_key(vkey: str, where: str) -> None:
    """A verifier key that does not parse is one error naming where it came from."""
    from sealbox.errors import NoteError
    from sealbox.ledger.checkpoint import Verifier

    try:
        Verifier.from_vkey(vkey)
    except NoteError as exc:
        hint = "" if "NAME+KEYID+BASE64" in str(exc) else " (a verifier key is NAME+KEYID+BASE64, as `sealbox init` printed it)"
        raise BadInput(f"{where}: {exc}{hint}") from None


@click.command("verify")
@click.argument("target", required=False, default=None, type=click.Path(), callback=not_empty)
@click.option("-s", "--store", "store_path", envvar="SEALBOX_STORE", default=DEFAULT_STORE, show_default=True,
              callback=not_empty, help="The store's data folder (when TARGET is not given).")
@click.option("--key", "vkey", default=None,
              help="Trusted verifier key: the key string `sealbox init` and `sealbox log key` print, or a file "
                   "holding it (a store's log.vkey). Default for a store: the key pinned at init. A bundle needs it "
                   "(without it: exit 3, NO TRUSTED KEY), or --trust-bundle-key.")
@click.option("--trust-bundle-key", "trust_bundle_key", is_flag=True,
              help="Bundles only, instead of --key: accept the key inside the bundle, an integrity check only "
                   "(exit 0 with a WARNING: whoever rewrites a bundle can sign it again with a key of their own).")
@click.option("--consistency", "proof_path", callback=not_empty, type=click.Path(dir_okay=False), default=None,
              help="Bundles only: a `sealbox log prove --from-size N` JSON file proving the log grew from the "
                   "bundle's checkpoint to a newer signed one.")
@click.option("--canonical", is_flag=True,
              help="Stores only (refused for a bundle): also check that every event's hashed bytes are exactly "
                   "RFC 8785 (JCS), with the reference writer (slower).")
@click.option("--checkpoint", "checkpoint_files", multiple=True, callback=not_empty, type=click.Path(dir_okay=False),
              help="A signed checkpoint saved earlier, outside the log (what `sealbox log checkpoint` printed, "
                   "or its --json). Store: the events must reproduce its root. Bundle: the bundle's log must "
                   "extend it (a fork or rollback fails). Repeatable.")
@click.option("--proof-from-saved", "saved_proof_paths", multiple=True, callback=not_empty, type=click.Path(dir_okay=False),
              help="Bundles only, with --checkpoint: a `sealbox log prove --from-size N --to-size M` JSON file, "
                   "N a saved checkpoint's size and M the bundle's checkpoint size, for a bundle exported "
                   "without --prove-from. Untrusted: it must verify against both signed roots. Repeatable.")
@click.option("--max-bundle-bytes", "max_bundle_bytes", type=click.IntRange(min=1), default=None,
              help="Bundles only: the largest bundle to check in memory, in bytes (default 256 MiB). A bundle "
                   "exactly as `sealbox export` writes it is checked a chunk at a time from the file, whatever its "
                   "size; one whose ZIP container differs is held in memory, so a larger one is refused from its "
                   "headers, before it is read.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def verify_cmd(target: str | None, store_path: str, vkey: str | None, trust_bundle_key: bool, proof_path: str | None,
               canonical: bool, checkpoint_files: tuple[str, ...], saved_proof_paths: tuple[str, ...],
               max_bundle_bytes: int | None, as_json: bool) -> None:
    """Verify a store (a folder), or an export bundle (a file) with no store at all.

    Checks every hash, chain, checkpoint signature, inclusion proof, blob commitment,
    snapshot, approval, grant and revocation signature, and each call that ran against
    the grant it names (call_grant_invalid). A bundle is checked against the log's key given
    with --key (from the log's owner, not from the bundle). Exit status: 0 when
    verified, 1 when any problem was found (each names where: run, run_seq, kind,
    bundle member and line), 2 on bad input, 3 when a bundle is consistent but no
    trusted key was given (neither --key nor --trust-bundle-key).
    """
    import os

    if vkey is not None and trust_bundle_key:
        raise BadInput("--key and --trust-bundle-key exclude each other: give the log's key with --key, or accept "
                       "the bundle's own key with --trust-bundle-key (an integrity check only)")
    vkey = _read_key(vkey)
    if target is not None and not os.path.exists(target):
        from sealbox.store import _refuse_url

        _refuse_url(target)  # postgresql://…: one line saying stores are folders
        raise BadInput(f"{target} does not exist (give a store's folder or a bundle file)")
    if target is not None and not os.path.isfile(target) and not os.path.isdir(target):
        from sealbox.interop.bundle_verify import file_kind

        raise BadInput(f"{target} is {file_kind(os.stat(target).st_mode)}, not a bundle file nor a store's folder")
    if target is not None and os.path.isfile(target):
        if (vkey is None and not trust_bundle_key
                and click.get_current_context().get_parameter_source("store_path") is click.core.ParameterSource.COMMANDLINE):
            # was ignored silently (then NO TRUSTED KEY): the user meant that store's key (with a key given,
            # -s is not what decides the answer: a script passing -s to every command verifies as before)
            raise BadInput(f"-s/--store is not used for a bundle file: check {target} against that store's key "
                           f"with --key {os.path.join(store_path, 'log.vkey')}")
        if canonical:  # was ignored silently: a bundle is verified from its own bytes, without that check
            raise BadInput("--canonical applies to a store (a folder); a bundle's events are checked by their "
                           "hashes and proofs: verify the store it came from with --canonical")
        saved = [(f"the checkpoint given in {path}", _read_checkpoint(path)) for path in checkpoint_files]
        if saved_proof_paths and not saved:
            raise BadInput("--proof-from-saved proves a saved checkpoint: give that checkpoint with --checkpoint")
        _verify_bundle(target, vkey, trust_bundle_key, proof_path, as_json, saved, saved_proof_paths,
                       max_bundle_bytes)
        return
    if max_bundle_bytes is not None:
        raise BadInput("--max-bundle-bytes applies to a bundle (a file); a store is verified from its database")
    if trust_bundle_key:
        raise BadInput("--trust-bundle-key applies to a bundle (a file); a store is checked against the key pinned "
                       "at init, or --key")
    external = [(f"the checkpoint given in {path}", _read_checkpoint(path)) for path in checkpoint_files]
    if saved_proof_paths:
        raise BadInput("--proof-from-saved applies to a bundle (a file); a store's events reproduce a saved "
                       "checkpoint's root with --checkpoint alone")
    if proof_path is not None:
        raise click.UsageError("--consistency applies to a bundle file (verify a store's growth with `sealbox verify`)")
    import contextlib
    import dataclasses
    import tempfile

    from sealbox.errors import StoreUpgradeNeededError
    from sealbox.verify import verify_store

    path = target or store_path
    notes: tuple[str, ...] = ()
    with contextlib.ExitStack() as stack:
        try:
            store = open_for_reading(path)
        except StoreUpgradeNeededError as exc:  # an older store: verified as it is, through a private copy
            from sealbox.store.sqlite import upgraded_copy

            copy = stack.enter_context(tempfile.TemporaryDirectory(prefix="sealbox-verify-"))
            store = upgraded_copy(path, copy)
            notes = (f"{path} was written by an older Sealbox (pending migrations {exc.pending}): verified through "
                     "an upgraded private copy, removed afterwards; the store itself was not changed",)
        stack.callback(store.close)
        if vkey is None and not store.pinned_vkey():
            raise BadInput(f"{path}/log.vkey is missing: pass the log's verifier key with --key "
                           "(the one `sealbox init` printed)")
        if vkey is None:
            _check_key(store.pinned_vkey(), f"{path}/log.vkey")
        report = verify_store(store, trusted_vkey=vkey, canonical=canonical, checkpoints=external)
    if notes and any(p.code == "schema_migration_missing" for p in report.problems):
        notes = (f"{path} lacks schema_migrations rows for changes it already has (schema_migration_missing "
                 "above), so it was verified through an upgraded private copy, removed afterwards; the store "
                 "itself was not changed",)
    _print(dataclasses.replace(report, notes=report.notes + notes), as_json, notes=True)


#: ``sealbox verify``'s exit status for a bundle that is consistent but was checked against no
#: trusted key (no --key, no --trust-bundle-key). 1 is "problems found", 2 bad input.
EXIT_UNTRUSTED_KEY = 3


def _verify_bundle(path: str, vkey: str | None, trust_bundle_key: bool, proof_path: str | None,
                   as_json: bool, saved: list[tuple[str, str]] | None = None,
                   saved_proof_paths: tuple[str, ...] = (), max_bytes: int | None = None) -> None:
    from sealbox.errors import ConfigError
    from sealbox.interop.bundle_verify import MAX_BUNDLE_BYTES, parse_consistency, parse_saved_proof, verify_bundle

    proof = _read_proof(proof_path) if proof_path is not None else None
    if proof is not None:
        try:
            parse_consistency(proof)
        except ConfigError as exc:  # the shape, named by file, as for --proof-from-saved
            raise ConfigError(f"{proof_path}: {exc}") from None
    given = []
    for file in saved_proof_paths:
        doc = _read_proof(file)
        try:
            parse_saved_proof(doc)
        except ConfigError as exc:  # the shape, named by file; the sizes and hashes are verify's
            raise ConfigError(f"{file}: {exc}") from None
        given.append((f"the proof given in {file}", doc))
    report = verify_bundle(path, trusted_vkey=vkey, consistency=proof, trust_bundle_key=trust_bundle_key,
                           checkpoints=saved or (), saved_proofs=given,
                           max_bytes=MAX_BUNDLE_BYTES if max_bytes is None else max_bytes)
    _print(report, as_json, notes=True,
           code=0 if report.ok else 1 if report.problems else EXIT_UNTRUSTED_KEY)


def _read_proof(proof_path: str) -> object:
    """The parsed JSON of a ``sealbox log prove`` file. Raises ConfigError naming the file."""
    import json

    from sealbox.errors import ConfigError
    from sealbox.input_files import misplaced_file

    wrong = misplaced_file(proof_path, "a consistency proof (the JSON `sealbox log prove` printed)")
    if wrong:
        raise ConfigError(wrong)
    try:
        text = read_small(proof_path)
        if text is None:
            raise ConfigError(f"cannot read the consistency proof {proof_path}: it is larger than 1 MiB "
                              "(`sealbox log prove` writes a few KiB)")
        return json.loads(text)
    except (OSError, ValueError) as exc:
        from sealbox.cli.common import not_utf8_text

        raise ConfigError(f"cannot read the consistency proof {proof_path}: "
                          f"{not_utf8_text(proof_path, exc) or exc}") from exc
    except RecursionError:
        raise ConfigError(f"cannot read the consistency proof {proof_path}: its JSON is nested too deeply "
                          "(`sealbox log prove` writes a flat object)") from None


def _print(report, as_json: bool, notes: bool = False, code: int | None = None) -> None:
    if as_json:
        echo_json(report.to_dict())
    else:
        wrong_key = next((p for p in report.problems if p.code == "key_mismatch"), None)
        from sealbox.verify import CHECKPOINT_FILE, checkpoints_phrase

        same: list[str] = []
        for problem in report.problems:
            own = problem.message.startswith(CHECKPOINT_FILE) or re.match(r"checkpoint \d+ \(size ", problem.message)
            if (wrong_key is not None and problem.code == "checkpoint_signature" and problem.found == wrong_key.found
                    and own):  # each of the log's checkpoints fails because of that key: counted, listed with --json
                same.append(CHECKPOINT_FILE if problem.message.startswith(CHECKPOINT_FILE) else "checkpoint")
                continue
            click.echo(problem.line())
        if same:
            one = len(same) == 1
            click.echo(f"note: so {checkpoints_phrase(same)} fail{'s its' if one else ' their'} signature check: "
                       f"{len(same)} checkpoint_signature problem{'' if one else 's'}, listed with --json")
        for note in report.notes if notes else ():
            click.echo(f"note: {note}")
        click.echo(report.summary())
    sys.exit((0 if report.ok else 1) if code is None else code)


#: The most ``read_small`` reads: a checkpoint note or a consistency proof is a few KiB.
SMALL_FILE_BYTES = 1024 * 1024


def read_small(path: str) -> str | None:
    """The UTF-8 text of a small input file, or None when it holds more than ``SMALL_FILE_BYTES``: read
    no further than that, since a device (``/dev/zero``) or a pipe may never end. A leading UTF-8 byte
    order mark (written by some editors) is not part of the text.

    Raises:
        OSError, UnicodeDecodeError: as ``open`` and decoding raise them.
    """
    from sealbox.input_files import open_input

    with open_input(path) as fh:  # a named pipe nothing writes to: waited on for a bounded time
        data = fh.read(SMALL_FILE_BYTES + 1)
    return None if len(data) > SMALL_FILE_BYTES else data.decode("utf-8-sig")


def _read_checkpoint(path: str) -> str:
    """A signed checkpoint note from a file: the note itself (``sealbox log checkpoint``) or
    ``sealbox log checkpoint --json`` output (its ``note``). Only its shape is checked here:
    verify checks its signature and root and reports what is wrong."""
    import json

    from sealbox.input_files import misplaced_file

    wrong = misplaced_file(path, "a saved checkpoint (what `sealbox log checkpoint` printed)")
    if wrong:  # a bundle, a store's database or log.key: said as such, not as the first byte that is not text
        raise BadInput(wrong)
    try:
        text = read_small(path)
    except (OSError, UnicodeDecodeError) as exc:
        from sealbox.cli.common import not_utf8_text

        raise BadInput(f"cannot read the checkpoint file {path}: "
                       f"{not_utf8_text(path, exc) or getattr(exc, 'strerror', None) or exc}") from exc
    if text is None:
        raise BadInput(f"{path} is larger than 1 MiB: neither a signed checkpoint nor `sealbox log checkpoint "
                       "--json` output")
    doc = None
    if text.lstrip().startswith("{"):
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise BadInput(f"{path} is neither a signed checkpoint nor `sealbox log checkpoint --json` output: {exc}") from exc
        except RecursionError:
            raise BadInput(f"{path} is neither a signed checkpoint nor `sealbox log checkpoint --json` output: "
                           "its JSON is nested too deeply") from None
        text = doc.get("note") if isinstance(doc, dict) else None
        if not isinstance(text, str):
            raise BadInput(f"{path}: JSON without a \"note\" string (expected `sealbox log checkpoint --json` output)")
    if "\n\n\u2014 " not in text:
        raise BadInput(f"{path} is not a signed checkpoint (C2SP signed note: body, blank line, signature lines)")
    if isinstance(doc, dict):
        _check_json_fields(path, doc, text)
    return text


def _check_json_fields(path: str, doc: dict, note: str) -> None:
    """``tree_size`` and ``root_hash`` beside the note in ``log checkpoint --json`` output must
    say what the note signs: a file whose fields were edited (or pasted from another
    checkpoint) is refused rather than half believed. The signature is verify's to check."""
    from sealbox.errors import NoteError
    from sealbox.ledger.checkpoint import Checkpoint, parse_note

    try:
        body = Checkpoint.parse(parse_note(note).text)
    except NoteError:
        return  # verify reports a note it cannot read
    size, root = doc.get("tree_size"), doc.get("root_hash")
    if size is not None and (type(size) is not int or size != body.size):
        raise BadInput(f"{path}: \"tree_size\" is {size!r} but its note signs size {body.size}")
    if root is not None and root != "sha256:" + body.root.hex():
        raise BadInput(f"{path}: \"root_hash\" is {root!r} but its note signs sha256:{body.root.hex()}")


def _read_key(value: str | None) -> str | None:
    """The --key value: a vkey string, or a file holding one. An empty value is a
    mistake (e.g. ``--key "$(cat missing-file)"``), never "use the default key"."""
    import os

    if value is None:
        return None
    if not value.strip():
        raise BadInput("--key is empty: give a verifier key, or a file holding one")
    if os.path.isdir(value):
        raise BadInput(f"--key {value} is a folder: give the key file in it ({os.path.join(value, 'log.vkey')}, "
                       "for a store) or the key string `sealbox log key` prints")
    import stat

    try:
        piped = stat.S_ISFIFO(os.stat(value).st_mode)  # `--key <(cat log.vkey)`: read with the bounded wait
    except (OSError, ValueError):
        piped = False
    if os.path.isfile(value) or piped:
        try:
            text = read_small(value)  # no further than 1 MiB; a byte order mark (Notepad) is not part of the key
        except (OSError, UnicodeDecodeError) as exc:
            from sealbox.cli.common import not_utf8_text
            from sealbox.input_files import misplaced_file

            wrong = misplaced_file(value, "a verifier key (NAME+KEYID+BASE64, as `sealbox log key` prints it)")
            if wrong:  # a bundle or a store's database (log.key is text: _check_key names it)
                raise BadInput(f"--key {wrong}") from None
            raise BadInput(f"cannot read the key file {value}: "
                           f"{not_utf8_text(value, exc) or getattr(exc, 'strerror', None) or exc}") from exc
        if text is None:
            raise BadInput(f"the key file {value} is larger than 1 MiB: a verifier key is one line "
                           "(NAME+KEYID+BASE64, as `sealbox log key` prints it)")
        text = text.strip()
        if not text:
            raise BadInput(f"the key file {value} is empty")
        _check_key(text, f"the key file {value}")
        return text
    if os.path.exists(value):  # a device, a socket: not a key file, and it does exist
        raise BadInput(f"--key {value} is not a regular file: give the key file (a store's log.vkey) or the "
                       "key string `sealbox log key` prints")
    if ("/" in value or value.endswith(".vkey")) and value.count("+") < 2:
        raise BadInput(f"no such key file: {value} (the log's verifier key: a store keeps it as log.vkey in its "
                       f"folder, e.g. .sealbox/log.vkey; `sealbox log key > {shlex.quote(value)}` writes a copy)")
    if "+" not in value:  # a verifier key always holds NAME+KEYID+BASE64: this was meant as a file name
        raise BadInput(f"--key {value}: no such key file, and not a verifier key either "
                       "(NAME+KEYID+BASE64, as `sealbox init` and `sealbox log key` print it)")
    value = value.strip()  # pasted from `sealbox init`'s indented output
    _check_key(value, "--key")
    return value
