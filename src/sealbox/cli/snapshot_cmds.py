"""``sealbox snapshot show FP`` and ``sealbox snapshot diff A B``."""

from __future__ import annotations

import json

import click

from sealbox.cli.common import echo_json, emit_rows, format_options, open_for_reading, snapshot_ref, store_option


@click.group("snapshot")
def snapshot_group() -> None:
    """Show and compare the configuration snapshots runs ran under."""


@snapshot_group.command("show")
@click.argument("fingerprint")
@store_option
@click.option("--json", "as_json", is_flag=True,
              help="Print the exact RFC 8785 canonical bytes as one line (their SHA-256, without the line's "
                   "newline, is the fingerprint).")
def show_cmd(fingerprint: str, store_path: str, as_json: bool) -> None:
    """Print a snapshot (FINGERPRINT, or a unique prefix of at least 8 hex digits) as indented JSON."""
    store = open_for_reading(store_path)
    try:
        content = _get_snapshot(store, _ref(store, fingerprint, "FINGERPRINT"), fingerprint, "FINGERPRINT")
    finally:
        store.close()
    if as_json:
        from sealbox.canonical import canonical_bytes
        from sealbox.replay.keys import as_doubles

        # a bare int beyond 2**53 read back is a whole-number float's digits: written as the same digits
        click.echo(canonical_bytes(as_doubles(content)).decode("utf-8"))
        return
    click.echo(json.dumps(content, indent=2, sort_keys=True, ensure_ascii=False))


@snapshot_group.command("diff")
@click.argument("a")
@click.argument("b")
@store_option
@format_options
def diff_cmd(a: str, b: str, store_path: str, as_json: bool, as_csv: bool) -> None:
    """Field-level differences between snapshots A and B (fingerprints or unique prefixes)."""
    from sealbox.snapshot import diff_snapshots

    store = open_for_reading(store_path)
    try:
        ref_a, ref_b = _ref(store, a, "A"), _ref(store, b, "B")
        first, second = _get_snapshot(store, ref_a, a, "A"), _get_snapshot(store, ref_b, b, "B")
    finally:
        store.close()
    diffs = [d.to_dict() for d in diff_snapshots(first, second)]
    if as_json:
        echo_json(diffs)
        return
    if as_csv:
        # a and b hold values of any JSON type: canonical JSON, so a string and the object it spells differ
        emit_rows(diffs, ["path", "change", "a", "b"], as_json=False, as_csv=True, json_columns=("a", "b"))
        return
    if not diffs:
        click.echo("no differences: both snapshots hold the same configuration")
        return
    rows = [{**d, **_cells(d)} for d in diffs]
    emit_rows(rows, ["path", "change", "a", "b"], as_json=False, as_csv=False, title=f"{len(diffs)} differences")


def _ref(store, text: str, option: str) -> str:
    """``text`` as a snapshot reference (:func:`snapshot_ref`); when it is not one but names a run, the
    error says which snapshot that run ran under (no table shows it, and the runs are what an
    investigator has in hand)."""
    from sealbox.cli.common import BadInput

    try:
        return snapshot_ref(text, option)
    except BadInput:
        _run_hint(store, text, option)
        raise


def _get_snapshot(store, ref: str, text: str, option: str) -> dict:
    from sealbox.errors import StoreError

    try:
        return store.get_snapshot(ref)
    except StoreError:
        _run_hint(store, text, option)
        raise


def _run_hint(store, text: str, option: str) -> None:
    from sealbox.cli.common import BadInput, resolve_id

    try:
        run = store.get_run(resolve_id(store, "run", text))
    except BadInput:
        return
    if run is not None and run.get("snapshot"):
        raise BadInput(f"{option} {text!r} is a run, not a snapshot: run {run['run_id']} ran under snapshot "
                       f"{run['snapshot']}") from None
    if run is not None:
        raise BadInput(f"{option} {text!r} is a run, not a snapshot: run {run['run_id']} was recorded without a "
                       "snapshot (recorder.run(snapshot=...) pins one)") from None


def _show(value, absent: bool, limit: int = 70) -> str:
    if absent:
        return "(absent)"
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _cells(d: dict, limit: int = 70) -> dict[str, str]:
    """The table's ``a`` and ``b`` cells of one difference. A ``changed`` row never shows two equal
    cells: a string and the JSON value that prints like it (``"5"`` and ``5``) are both shown as JSON,
    and two long values alike up to the cut are both shown from a little before their first difference."""
    a, b = _show(d["a"], d["change"] == "added", limit), _show(d["b"], d["change"] == "removed", limit)
    if d["change"] != "changed" or a != b:
        return {"a": a, "b": b}
    ta, tb = (v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, sort_keys=True) for v in (d["a"], d["b"]))
    if ta == tb:  # same text, different types
        ta, tb = (json.dumps(v, ensure_ascii=False, sort_keys=True) for v in (d["a"], d["b"]))
    first = next((i for i, (x, y) in enumerate(zip(ta, tb)) if x != y), min(len(ta), len(tb)))
    start = max(0, first - 20)

    def window(text: str) -> str:
        part = ("…" if start else "") + text[start:]
        return part if len(part) <= limit else part[: limit - 1] + "…"
    return {"a": window(ta), "b": window(tb)}
