"""``sealbox access``: grants, provider credentials, revocation at the provider.

A credential is read from a JSON file (``--credential-file``), and a rotation's new
tokens from standard input or a JSON file (``--tokens-file``), never from the command
line, where they would end up in shell history and process listings.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import click

from sealbox.cli.common import (echo_json, not_empty, emit_rows, format_options, open_for_reading, open_for_writing, store_option,
                                visible)

#: The largest credential file read, in bytes.
_MAX_CREDENTIAL_FILE = 1 << 20

#: Exit code of ``revoke`` / ``retry`` when the grant is revoked locally but not confirmed at its provider.
EXIT_PENDING = 3


def _checked_reason(ctx: click.Context, param: click.Parameter, reason: str) -> str:
    """``--reason`` as ``approvals approve --reason`` takes it: at most REASON_MAX_CHARS characters of UTF-8
    text (it is signed and kept forever): one ``error:`` line, exit 2, before the store is opened."""
    from sealbox.approvals import REASON_MAX_CHARS
    from sealbox.query import not_utf8

    if len(reason) > REASON_MAX_CHARS:
        raise click.UsageError(f"--reason is {len(reason)} characters long: at most {REASON_MAX_CHARS} are "
                               "recorded (say why in short; link to the details)")
    if not_utf8(reason):
        raise click.UsageError("--reason is not UTF-8 text (it holds a byte that is not UTF-8): write it again "
                               "in UTF-8 (check the terminal's or the script's encoding)")
    return reason


def _key_options(fn: Any) -> Any:
    fn = click.option("--identity", default=None,
                      help="Only a check: refuse unless the key file is this identity's.")(fn)
    return click.option("--key-file", required=True, callback=not_empty, type=click.Path(dir_okay=False),
                        help="Your identity's private key file (an enabled admin or approver): "
                             "each step recorded is signed with it.")(fn)


def _parse_json(raw: bytes, what: str) -> Any:
    from sealbox.access import AccessError

    if len(raw) > _MAX_CREDENTIAL_FILE:
        raise AccessError(f"{what} is larger than 1 MiB: not a credential")
    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, value in pairs:
            if name in out:  # json.loads would keep the last one without a word (RFC 8259 §4: unpredictable)
                raise AccessError(f"{what} names {name[:64]!r} twice: give each key once")
            out[name] = value
        return out

    try:
        return json.loads(raw.decode("utf-8"), object_pairs_hook=unique)
    except UnicodeDecodeError as exc:  # never echo the content
        raise AccessError(f"{what} is not valid JSON: not UTF-8 text (byte {exc.start})") from None
    except ValueError as exc:  # never echo the content
        raise AccessError(f"{what} is not valid JSON (line {getattr(exc, 'lineno', '?')})") from None
    except RecursionError:
        raise AccessError(f"{what} is not a credential: its JSON is nested too deeply") from None


def _read_tokens(path: str | None) -> Any:
    """A rotation's new tokens: the JSON object in file ``path``, or on standard input (``-`` or None)."""
    from sealbox.access import AccessError

    if path is not None and path != "-":
        return _read_credential(path, "tokens file")
    stream = click.get_binary_stream("stdin")
    if stream.isatty():
        raise AccessError("give the new tokens as JSON on standard input (e.g. the provider's refresh answer) or "
                          "with --tokens-file FILE; never on the command line")
    raw = stream.read(_MAX_CREDENTIAL_FILE + 1)
    if not raw.strip():  # `< /dev/null`, or `echo "$NEW" |` with NEW unset: nothing given, not bad JSON
        raise AccessError("no tokens on standard input (it was empty): pipe the new tokens in as a JSON object "
                          "(the provider's refresh answer), or give --tokens-file FILE")
    return _parse_json(raw, "the tokens on standard input")


def _read_credential(path: str, what: str = "credential file") -> dict[str, Any]:
    from sealbox.access import AccessError

    import stat

    try:
        # opened without blocking (a FIFO would wait for a writer), then checked on what was opened
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO, a device (/dev/zero never ends)
                raise AccessError(f"{what} {path} is not a regular file")
            raw = b""
            while len(raw) <= _MAX_CREDENTIAL_FILE:
                chunk = os.read(fd, _MAX_CREDENTIAL_FILE + 1 - len(raw))
                if not chunk:
                    break
                raw += chunk
        finally:
            os.close(fd)
    except OSError as exc:
        raise AccessError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if not raw.strip():
        raise AccessError(f"{what} {path} is empty: it must hold a JSON object")
    return _parse_json(raw, f"{what} {path}")


def _warn_if_shared(path: str) -> None:
    """After a successful grant: a credential file others can read should not stay around."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if mode & 0o077 and sys.platform != "win32":
        click.echo(f"warning: {path} is readable by other users (mode {mode & 0o777:o}); "
                   "delete it now that Sealbox holds the credential", err=True)


@click.group("access")
def access_group() -> None:
    """Grants, provider credentials, and revocation at the provider."""


@access_group.command("grant")
@store_option
@click.option("--principal", required=True, help="Who holds the grant (e.g. agent:deploy-bot).")
@click.option("--server", required=True, help="Upstream server (glob).")
@click.option("--tool", required=True, help="Upstream tool (glob, e.g. 'create_*').")
@click.option("--scope", "scopes", multiple=True, help="Scope (repeatable; recorded, enforced by the provider).")
@click.option("--expires", metavar="TIME", help="RFC 3339 time, a date, or a duration from now (12h, 30d).")
@click.option("--provider", help="The provider's name (default: the revocation endpoint's host).")
@click.option("--credential-file", callback=not_empty, type=click.Path(dir_okay=False),
              help="JSON file with the provider credential (tokens, client, endpoints).")
@click.option("--id", "grant_id", help="A grant id to use (default: a new one).")
@click.option("--key-file", required=True, callback=not_empty, type=click.Path(dir_okay=False),
              help="Your identity's private key file (an enabled admin): the grant is signed with it.")
@click.option("--identity", default=None,
              help="Only a check: refuse unless the key file is this identity's (the key names who grants).")
def grant_cmd(store_path: str, principal: str, server: str, tool: str, scopes: tuple[str, ...], expires: str | None,
              provider: str | None, credential_file: str | None, grant_id: str | None, key_file: str,
              identity: str | None) -> None:
    """Give a principal a grant for a tool, signed with an admin's key; print its id."""
    from sealbox.access import grant_access, parse_expiry

    from sealbox.cli.common import BadInput

    # a quoted, unset shell variable: never read as "no expiry" (a grant for ever) or "a new id"
    if expires is not None and not expires.strip():
        raise BadInput("--expires is empty: give a time (RFC 3339, a date, or 12h, 30d), or leave it out for no expiry")
    if grant_id is not None and not grant_id.strip():
        raise BadInput("--id is empty: give a grant id, or leave it out for a new one")
    expires_at = parse_expiry(expires) if expires else None
    credential = _read_credential(credential_file) if credential_file else None
    scope: Any = None if not scopes else (scopes[0] if len(scopes) == 1 else list(scopes))
    store = open_for_writing(store_path)
    try:
        gid = grant_access(store, principal, server, tool, scope, expires_at=expires_at, credential=credential,
                           provider=provider, key_file=key_file, identity=identity, grant_id=grant_id)
    finally:
        store.close()
    if credential_file:
        _warn_if_shared(credential_file)
    click.echo(gid)


@access_group.command("list")
@store_option
@format_options
def list_cmd(store_path: str, as_json: bool, as_csv: bool) -> None:
    """List grants, oldest first, with their status."""
    from sealbox.access import list_grants

    store = open_for_reading(store_path)
    try:
        rows = list_grants(store)
    finally:
        store.close()
    columns = ["grant_id", "principal", "server", "tool", "scope", "expires_at", "provider", "credential", "status",
               "signature", "granted_at", "granted_by", "damaged"]
    flagged = [r for r in rows if r["damaged"]]
    if flagged:  # as `runs list` / `calls` warn of an altered event: one line on stderr, the rows flagged, exit 0
        leaves = sorted({leaf for r in flagged for leaf in r["damaged"]})
        click.echo(f"warning: {len(flagged)} grant(s) listed may have a step in an access event changed below "
                   f"Sealbox that cannot be read ({_leaves_text(leaves)}; marked damaged): their status leaves it "
                   "out, and calls naming them are denied; `sealbox verify` names the events", err=True)
    if not rows and not (as_json or as_csv):
        click.echo("no grants", err=True)
        return
    if not (as_json or as_csv):
        rows = [{**r, "damaged": _leaves_text(r["damaged"]) if r["damaged"] else ""} for r in rows]
    emit_rows(rows, columns, as_json=as_json, as_csv=as_csv, title=None if (as_json or as_csv) else "Grants")


def _leaves_text(leaves: list[int]) -> str:
    return ("leaf " if len(leaves) == 1 else "leaves ") + ", ".join(map(str, leaves))


def _print_show(row: dict[str, Any]) -> None:
    # a provider's error text never drives the terminal, and a newline in a recorded value (a tool
    # glob, a reason) is printed as \n: each line of the listing is one field
    echo = lambda text: click.echo(visible(text).replace("\n", "\\n"))  # noqa: E731
    echo(f"grant      {row['grant_id']}")
    echo(f"status     {row['status']}")
    echo(f"principal  {row['principal']}")
    echo(f"tool       {row['server']}/{row['tool']}")
    echo(f"scope      {json.dumps(row['scope']) if row['scope'] is not None else '(none)'}")
    echo(f"expires    {row['expires_at'] or '(never)'}")
    echo(f"provider   {row['provider'] or '(none)'}  credential {row['credential']}")
    echo(f"granted    {row['granted_at']} by {row['granted_by']}")
    if row.get("signature") != "valid":
        from sealbox.access import GRANT_PROBLEMS

        echo(f"signature  {row.get('signature')}: {GRANT_PROBLEMS.get(row.get('signature'), '')}; "
             "calls naming this grant are denied")
    else:
        echo("signature  valid")
    if row.get("damaged"):
        echo(f"damaged    {_leaves_text(row['damaged'])}: an access event changed below Sealbox that cannot be "
             "read, maybe a step of this grant (left out of the status); calls naming this grant are denied")
    for r in row.get("rotations") or []:
        fps = r.get("fingerprints") if isinstance(r.get("fingerprints"), dict) else {}
        line = f"rotation {r.get('seq')}  {r.get('ts')}  by {r.get('by')}  " + (_fingerprints_text(fps) or "(no fingerprint)")
        mark = r.get("signature", "valid")
        if mark != "valid":
            from sealbox.access import ROTATION_PROBLEMS

            line += f"  NOT COUNTED ({mark}: {ROTATION_PROBLEMS.get(mark, '')})"
        echo(line)
    for s in row["steps"]:
        line = f"  {s['ts']}  {s['step']:<9} by {s['by']}"
        mark = s.get("signature", "valid")
        if mark != "valid":
            from sealbox.access import REVOCATION_PROBLEMS

            line += f"  NOT COUNTED ({mark}: {REVOCATION_PROBLEMS.get(mark, '')})"
        if s.get("reason"):
            line += f"  reason: {s['reason']}"
        detail = s.get("detail") or {}
        if isinstance(detail, dict):
            if detail.get("tokens"):
                tokens = detail["tokens"] if isinstance(detail["tokens"], list) else [detail["tokens"]]
                line += "  " + ", ".join(_token_text(t) for t in tokens)
            if detail.get("error"):
                line += f"  error: {detail['error']}"
        echo(line)


def _fingerprints_text(fps: dict[str, Any]) -> str:
    """A rotation's fingerprints, refresh token first (the long-lived one), as ``TYPE FINGERPRINT, ...``."""
    order = {"refresh_token": 0, "access_token": 1}
    return ", ".join(f"{k} {v}" for k, v in sorted(fps.items(), key=lambda kv: (order.get(kv[0], 2), str(kv[0]))))


def _token_text(t: Any) -> str:
    """One token of a step's ``detail.tokens`` (anything else than an object, as written below
    revoke(), is shown as it is)."""
    if not isinstance(t, dict):
        return str(t)
    return f"{t.get('token_type_hint')}: " + (
        f"active={str(t['active']).lower()}" if "active" in t else
        f"HTTP {t['http_status']}" + (f" {t['error']}" if t.get("error") else "")
        if "http_status" in t else str(t.get("error")))


@access_group.command("show")
@click.argument("grant_id")
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def show_cmd(grant_id: str, store_path: str, as_json: bool) -> None:
    """Show a grant: its status and each revocation step."""
    from sealbox.access import show_grant

    store = open_for_reading(store_path)
    try:
        row = show_grant(store, grant_id)
    finally:
        store.close()
    if row.get("damaged"):
        click.echo(f"warning: grant {grant_id} may have a step in an access event changed below Sealbox that cannot "
                   f"be read ({_leaves_text(row['damaged'])}): its status leaves it out, and calls naming it are "
                   "denied; `sealbox verify` names the events", err=True)
    if as_json:
        echo_json(row)
    else:
        _print_show(row)


def _credential_lost(store: Any, grant_id: str, status: str) -> str | None:
    """The error of the grant's last valid step when it is ``failed`` at stage ``credential``
    (the credential was deleted, or does not decrypt): no retry can then reach the provider."""
    from sealbox.access import STATUS_PENDING, show_grant

    if status != STATUS_PENDING:
        return None
    valid = [st for st in show_grant(store, grant_id)["steps"] if st.get("signature") == "valid"]
    detail = valid[-1].get("detail") if valid else None
    if valid and valid[-1].get("step") == "failed" and isinstance(detail, dict) and detail.get("stage") == "credential":
        return str(detail.get("error") or "")
    return None


def _finish(grant_id: str, status: str, lost: str | None = None) -> None:
    from sealbox.access import STATUS_PENDING, STATUS_UNCONFIRMED

    click.echo(f"{grant_id}: {status}")
    if lost is not None:
        click.echo(f"warning: Sealbox cannot use the credential of {grant_id} ({lost}); calls under {grant_id} "
                   "are denied here, but its tokens stay valid at the provider until they are revoked there "
                   "(`sealbox access retry` cannot do it)", err=True)
        sys.exit(EXIT_PENDING)
    if status == STATUS_PENDING:
        click.echo(f"warning: not confirmed at the provider; calls under {grant_id} are denied here. "
                   f"See `sealbox access show {grant_id}`, then `sealbox access retry {grant_id}`", err=True)
        sys.exit(EXIT_PENDING)
    if status == STATUS_UNCONFIRMED:
        click.echo("warning: the provider has no introspection endpoint, so nothing confirms that its tokens "
                   "are inactive; a self-contained access token stays valid until it expires", err=True)


@access_group.command("revoke")
@click.argument("grant_id")
@store_option
@click.option("--reason", required=True, callback=_checked_reason, help="Why (recorded and signed).")
@click.option("--retries", type=click.IntRange(min=1, max=20), default=3, show_default=True,
              help="Attempts per request when the provider is unreachable or answers 5xx/429.")
@_key_options
def revoke_cmd(grant_id: str, store_path: str, reason: str, retries: int, key_file: str, identity: str | None) -> None:
    """Revoke a grant: denied here at once, then revoked and confirmed at its provider.
    Each step is signed with --key-file (an enabled admin or approver).

    Exits 3 when the grant is revoked here but not (yet) confirmed at the provider.
    """
    from sealbox.access import revoke

    store = open_for_writing(store_path)
    try:
        status = revoke(store, grant_id, reason, retries=retries, key_file=key_file, identity=identity)
        lost = _credential_lost(store, grant_id, status)
    finally:
        store.close()
    _finish(grant_id, status, lost)


@access_group.command("retry")
@click.argument("grant_id")
@store_option
@click.option("--retries", type=click.IntRange(min=1, max=20), default=3, show_default=True,
              help="Attempts per request when the provider is unreachable or answers 5xx/429.")
@_key_options
def retry_cmd(grant_id: str, store_path: str, retries: int, key_file: str, identity: str | None) -> None:
    """Retry a revocation that is pending at its provider (each step signed with --key-file).
    Exits 3 if it is still pending."""
    from sealbox.access import retry

    store = open_for_writing(store_path)
    try:
        status = retry(store, grant_id, retries=retries, key_file=key_file, identity=identity)
        lost = _credential_lost(store, grant_id, status)
    finally:
        store.close()
    _finish(grant_id, status, lost)


@access_group.command("rotate")
@click.argument("grant_id")
@store_option
@click.option("--tokens-file", callback=not_empty, type=click.Path(dir_okay=False, allow_dash=True),
              help="JSON file with the new token(s) (default: standard input; '-' too). Never on the command line.")
@click.option("--key-file", required=True, callback=not_empty, type=click.Path(dir_okay=False),
              help="Your identity's private key file (an enabled admin): the rotation is signed with it.")
@click.option("--identity", default=None, help="Only a check: refuse unless the key file is this identity's.")
def rotate_cmd(grant_id: str, store_path: str, tokens_file: str | None, key_file: str, identity: str | None) -> None:
    """Record that the provider rotated a grant's tokens (a refresh returned a new refresh token).

    Reads a JSON object from standard input or --tokens-file: the provider's answer to the
    refresh (access_token, refresh_token, expires_in, token_type, scope) or access_token /
    refresh_token / access_token_expires_at. Stores the new credential (encrypted) and records
    a signed access.credential_rotated event carrying only fingerprints of the new tokens; from
    then on revoke / retry revoke and confirm the new tokens.
    """
    from sealbox.access import STATUS_PENDING, access_status, rotate_credential, show_grant

    tokens = _read_tokens(tokens_file)
    store = open_for_writing(store_path)
    try:
        seq = rotate_credential(store, grant_id, tokens, key_file=key_file, identity=identity)
        row = show_grant(store, grant_id)
        status = access_status(store, grant_id)
    finally:
        store.close()
    fps = next((r["fingerprints"] for r in row["rotations"] if r["seq"] == seq), {})
    click.echo(f"{grant_id}: credential rotated (rotation {seq}; {_fingerprints_text(fps)})")
    if tokens_file and tokens_file != "-":
        _warn_if_shared(tokens_file)
    if status == STATUS_PENDING:
        click.echo(f"warning: {grant_id} is revoked but the new tokens are not confirmed revoked at the provider: "
                   f"run `sealbox access retry {grant_id}`", err=True)


@access_group.command("delete-credential")
@click.argument("grant_id")
@store_option
@click.option("--force", is_flag=True, help="Delete even though the grant is not revoked at its provider.")
def delete_credential_cmd(grant_id: str, store_path: str, force: bool) -> None:
    """Delete a grant's stored provider credential (credentials are not evidence)."""
    from sealbox.access import delete_credential

    store = open_for_writing(store_path)
    try:
        deleted = delete_credential(store, grant_id, force=force)
    finally:
        store.close()
    click.echo(f"{grant_id}: credential deleted" if deleted else f"{grant_id}: no credential held")
