"""``sealbox identities add | list | disable | enable | rotate``."""

from __future__ import annotations

import click

from sealbox.cli.common import check_key_file, not_empty, emit_rows, format_options, open_for_reading, open_for_writing, store_option

_ROLES = ("approver", "agent", "auditor", "admin")  # sealbox.identities.ROLES


_ADMIN_HELP = ("Key file of an enabled admin identity, who signs the change (docs/approvals.md). "
               "Not needed for the store's first admin, which signs its own addition.")


def admin_key_option(required: bool, help_text: str = _ADMIN_HELP):  # noqa: ANN201 - a click decorator
    return click.option("--admin-key", "admin_key", required=required, callback=not_empty, type=click.Path(dir_okay=False),
                        metavar="FILE", help=help_text)


_COMPROMISED_HELP = ("The key leaked at WHEN: an RFC 3339 time (2026-12-03T09:00:00Z) or a leaf index (leaf:N). "
                     "Everything the identity signed from the first leaf at or after it no longer counts: grants, "
                     "revocation steps, tool re-approvals, approval answers (docs/approvals.md, \"A leaked key\").")


def compromised_option(help_text: str = _COMPROMISED_HELP):  # noqa: ANN201 - a click decorator
    return click.option("--compromised-since", "compromised_since", default=None, metavar="WHEN", help=help_text)


@click.group("identities")
def identities_group() -> None:
    """People and services known to the store: roles, groups, Ed25519 keys."""


@identities_group.command("add")
@click.argument("name")
@click.option("--role", required=True, type=click.Choice(_ROLES), help="What the identity may do.")
@click.option("--group", "groups", multiple=True, metavar="G", help="A group it belongs to. Repeatable.")
@click.option("--shared", is_flag=True, help="Mark it as a shared account (its answers are flagged).")
@click.option("--key-out", callback=not_empty, type=click.Path(dir_okay=False), help="Where to write the private key (default ./NAME.key).")
@admin_key_option(False)
@store_option
def add_cmd(name: str, role: str, groups: tuple[str, ...], shared: bool, key_out: str | None, admin_key: str | None,
            store_path: str) -> None:
    """Add an identity: its public key goes into the log, its private key into a file (mode 0600).

    The store's first admin signs its own addition; every later change is signed with an
    admin's key (--admin-key), so that a process that can write the store cannot add an approver."""
    from sealbox.identities import add_identity, identity_book

    check_key_file(admin_key)
    store = open_for_writing(store_path)
    try:
        root = admin_key is None and role == "admin" and not identity_book(store).has_admin()
        new = add_identity(store, name, role, groups, shared, key_out, admin_key=admin_key)
    finally:
        store.close()
    click.echo(f"identity {name} added (role {role}, key {new.identity.key_id})")
    click.echo(f"private key written to {new.key_path} (mode 0600); Sealbox keeps no copy: give it to {name} only")
    if root:
        click.echo(f"{name} is this store's first admin: every later identity change must be signed with its key "
                   f"(--admin-key {new.key_path}); keep it away from the machines that run agents")


@identities_group.command("list")
@store_option
@format_options
def list_cmd(store_path: str, as_json: bool, as_csv: bool) -> None:
    """List identities as the log says they are now.

    ``compromised``: the leaves whose signatures by the identity no longer count (``disable|rotate
    --compromised-since``); ``--json`` gives ``[{from_leaf, until_leaf, change_leaf}]``, ``until_leaf``
    null while the leaked key is still the identity's."""
    from sealbox.identities import identity_book

    store = open_for_reading(store_path)
    try:
        book = identity_book(store)
        windows = book.compromise_records()
        rows = [{**i.to_dict(), "compromised": [{"from_leaf": f, "until_leaf": u, "change_leaf": r}
                                                for r, f, u in windows.get(i.name, ())]} for i in book.all()]
    finally:
        store.close()
    if not rows and not (as_json or as_csv):
        click.echo("no identities", err=True)
        return
    if not (as_json or as_csv):  # a window as the table shows it: leaves F..U (or F.. while the key is unchanged)
        for r in rows:
            r["groups"] = ", ".join(r["groups"]) or "-"  # names, not a JSON list (shared, disabled: yes / no)
            r["compromised"] = ", ".join(f"leaves {w['from_leaf']}..{'' if w['until_leaf'] is None else w['until_leaf'] - 1}"
                                         for w in r["compromised"]) or "-"
    emit_rows(rows, ["name", "role", "groups", "shared", "disabled", "key_id", "compromised", "public_key"],
              as_json=as_json, as_csv=as_csv, title="Identities")


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


@identities_group.command("disable")
@click.argument("name")
@click.option("--reason", default="", callback=_checked_reason, help="Why (recorded and signed).")
@admin_key_option(True, "Key file of an enabled admin, or of the identity itself, who signs the change.")
@compromised_option()
@store_option
def disable_cmd(name: str, reason: str, admin_key: str, compromised_since: str | None, store_path: str) -> None:
    """Disable an identity: it can no longer answer approvals, and its pending approvals are withdrawn.

    With --compromised-since WHEN, everything it signed from WHEN on stops counting too."""
    from sealbox.identities import disable_identity, identity_book, parse_compromised_since

    if compromised_since is not None:
        parse_compromised_since(compromised_since)  # a bad WHEN: one line, before the store is opened
    check_key_file(admin_key)
    store = open_for_writing(store_path)
    try:
        disable_identity(store, name, reason, admin_key=admin_key, compromised_since=compromised_since)
        since = _since_text(identity_book(store), name) if compromised_since is not None else ""
    finally:
        store.close()
    click.echo(f"identity {name} disabled{since}")


@identities_group.command("enable")
@click.argument("name")
@click.option("--reason", default="", callback=_checked_reason, help="Why (recorded and signed).")
@admin_key_option(True, "Key file of an enabled admin, who signs the change.")
@store_option
def enable_cmd(name: str, reason: str, admin_key: str, store_path: str) -> None:
    """Re-enable a disabled identity (recorded like every change)."""
    from sealbox.identities import enable_identity

    check_key_file(admin_key)
    store = open_for_writing(store_path)
    try:
        enable_identity(store, name, reason, admin_key=admin_key)
    finally:
        store.close()
    click.echo(f"identity {name} enabled")


@identities_group.command("rotate")
@click.argument("name")
@click.option("--key-out", required=True, callback=not_empty, type=click.Path(dir_okay=False), help="Where to write the new private key.")
@click.option("--reason", default="", callback=_checked_reason, help="Why (recorded and signed).")
@admin_key_option(True, "Key file of an enabled admin, or the identity's own current key, which signs the change.")
@compromised_option()
@store_option
def rotate_cmd(name: str, key_out: str, reason: str, admin_key: str, compromised_since: str | None,
               store_path: str) -> None:
    """Give an identity a new key; the old one stops being accepted and its pending approvals are withdrawn.

    With --compromised-since WHEN, everything the old key signed from WHEN on stops counting too."""
    from sealbox.identities import identity_book, parse_compromised_since, rotate_key

    if compromised_since is not None:
        parse_compromised_since(compromised_since)
    check_key_file(admin_key)
    store = open_for_writing(store_path)
    try:
        new = rotate_key(store, name, key_out, reason, admin_key=admin_key, compromised_since=compromised_since)
        since = _since_text(identity_book(store), name, "old key") if compromised_since is not None else ""
    finally:
        store.close()
    click.echo(f"identity {name} has a new key {new.identity.key_id}{since}")
    click.echo(f"private key written to {new.key_path} (mode 0600); Sealbox keeps no copy")


def _since_text(book, name: str, what: str = "key") -> str:  # noqa: ANN001
    """``; its key counts as compromised from leaf N (recorded at leaf M)`` for the newest record."""
    records = book.compromise_records().get(name)
    if not records:
        return ""
    record, since, _until = records[-1]
    return (f"; everything its {what} signed from leaf {since} on no longer counts (compromise recorded at leaf "
            f"{record})")
