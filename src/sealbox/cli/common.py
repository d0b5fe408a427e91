"""Helpers shared by the command modules: the store option, output formats."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import sys
from typing import Any, Callable, Iterable, Sequence

import click

from sealbox.errors import ConfigError
from sealbox.input_files import not_utf8_text  # noqa: F401 - the command modules import it from here

DEFAULT_STORE = ".sealbox"


class PortNumber(click.ParamType):
    """A TCP port for ``--http``: 1-65535, or 0 for a free one. Click's ``IntRange`` said "'abc' is not a
    valid integer range" for a word and "0<=x<=65535" for a number out of range."""

    name = "port"

    def convert(self, value: Any, param: Any, ctx: Any) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            text = str(value).strip()
            number = int(text) if text.isascii() and text.isdigit() else -1
        if not 0 <= number <= 65535:
            self.fail(f"{value!r} is not a port number: give 1–65535 (or 0 for a free port)", param, ctx)
        return number


class BadInput(click.ClickException):
    """A user mistake: one ``error:`` line and exit status 2 (1 is kept for "problems found")."""

    exit_code = 2


def not_empty(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """A click callback: a path given as ``""`` (a quoted, unset shell variable) is a
    :class:`BadInput` naming the option, not the current folder or a puzzling later error."""
    if (isinstance(value, str) and not value.strip()) or (
            isinstance(value, tuple) and any(isinstance(v, str) and not v.strip() for v in value)):  # multiple=True
        name = param.opts[-1] if isinstance(param, click.Option) else (param.human_readable_name or "").upper()
        raise BadInput(f"{name} is empty: give a path")
    return value


def filter_not_empty(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """A click callback for a filter option (``--tool``, ``--agent``, ...): ``""`` (a quoted, unset
    shell variable) would match nothing, silently; it is a :class:`BadInput` naming the option."""
    if isinstance(value, str) and not value.strip():
        name = param.opts[-1] if isinstance(param, click.Option) else (param.human_readable_name or "").upper()
        raise BadInput(f"{name} is empty: give a value (an empty filter matches nothing; is a shell variable unset?)")
    return value


def store_option(fn: Callable) -> Callable:
    """``-s/--store DIR`` (env ``SEALBOX_STORE``, default ``./.sealbox``); empty is a :class:`BadInput`."""
    return click.option(
        "-s", "--store", "store_path", envvar="SEALBOX_STORE", default=DEFAULT_STORE, show_default=True,
        type=click.Path(file_okay=True, dir_okay=True), help="The store's data folder.", callback=not_empty,
    )(fn)


def open_for_reading(path: str):
    """Open a store read-only (no signing key needed)."""
    from sealbox.store import open_store

    return open_store(path, readonly=True)


#: How long a command waits for the store's write lock (seconds) when another process holds it,
#: before it fails with one error line; ``SEALBOX_LOCK_TIMEOUT`` overrides it. (A recorder or
#: gateway opening the store through the API waits ``lock_timeout``, 300 s by default.)
CLI_LOCK_TIMEOUT = 15.0


def cli_lock_timeout() -> float:
    """:data:`CLI_LOCK_TIMEOUT`, or ``$SEALBOX_LOCK_TIMEOUT`` (seconds, finite, >= 0).

    Raises:
        BadInput: the variable is not such a number.
    """
    text = os.environ.get("SEALBOX_LOCK_TIMEOUT")
    if text is None or not text.strip():
        return CLI_LOCK_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 <= value < float("inf"):
        raise BadInput(f"SEALBOX_LOCK_TIMEOUT must be a number of seconds >= 0, not {text!r}")
    return value


def open_for_writing(path: str):
    """Open a store for appending; a write waits at most :func:`cli_lock_timeout` seconds for the
    lock another process holds (then StoreError "... stayed busy for too long")."""
    from sealbox.store import open_store

    return open_store(path, lock_timeout=cli_lock_timeout())


def refuse_to_replace(path: str, *, ours: Callable[[str], bool], what: str, force: bool) -> None:
    """Before any work: an existing, non-empty ``path`` that ``ours`` does not recognise as this
    command's own earlier output (a user's source file, notes, evidence) is never replaced without
    ``--force``.

    Raises:
        BadInput: ``cannot write PATH: it exists and is not WHAT (give --force to replace it; nothing
            was written)``.
    """
    if force or not os.path.lexists(path):
        return
    try:
        empty = os.path.getsize(path) == 0
    except OSError:
        empty = False
    if not empty and not ours(path):
        raise BadInput(f"cannot write {path}: it exists and is not {what} (give --force to replace it; "
                       "nothing was written)")


def check_key_file(path: str | None) -> None:
    """Read an identity key file (``--key-file``, ``--admin-key``) before the store is opened, so
    that a wrong one fails with nothing opened or touched (closing a writer refreshes statistics).

    Raises:
        IdentityError: missing, unreadable, readable by others, or not a Sealbox identity key.
    """
    if path is not None:
        from sealbox.identities import load_key

        load_key(path)


#: The shortest prefix of an id that the commands taking a run or approval id accept.
MIN_ID_PREFIX = 4  # sealbox.query.MIN_RUN_PREFIX


#: What every approval request id starts with; a prefix counts the characters after it.
_APPROVAL_TAG = "apr_"

#: An id as Sealbox generates them (a UUID, an approval's ``apr_<hex>``), or a prefix of one.
_GENERATED_ID = re.compile(r"[0-9a-f][0-9a-f-]*|apr_[0-9a-f]*")


def shown_id(text: object) -> str:
    """An id as an error message echoes it: cut to its first 40 characters and ``…`` (sealbox.approvals.shown_id)."""
    from sealbox.approvals import shown_id as cut

    return cut(text)


def resolve_id(store: Any, what: str, text: str) -> str:
    """The run or approval request id that ``text`` names: the id itself, or a prefix of exactly
    one id (at least :data:`MIN_ID_PREFIX` characters, as ``git`` takes commit ids; for an approval id,
    that many after its ``apr_``). A text that
    starts no id is returned as given, for the command to report as unknown.

    Raises:
        BadInput: ``text`` starts several ids (they are listed), or is too short to be a prefix (said so
            whether or not it starts an id).
    """
    from sealbox.query import not_utf8

    if not_utf8(text):  # a non-UTF-8 byte in the argument: no id holds one (nor can the driver encode it)
        raise BadInput(f"no {what} {shown_id(text)} in this store")
    given = text
    found = store.ids_with_prefix(what, text)
    if not found and what == "approval":
        text, found = _with_approval_tag(store, text)
    folded = text.strip().lower()
    if not found and folded != text and _GENERATED_ID.fullmatch(folded):
        # an id as it was pasted: upper case (a GUID tool), or with the newline of a copied line; the
        # ids Sealbox makes (UUIDs, apr_<hex>) are lower case
        found = store.ids_with_prefix(what, folded)
        if found:
            text = folded
    cut_for_display = False
    if not found and folded.endswith(("…", "...")):
        # an id as the tables and the README show it cut short (`01a24305-f521…`): what precedes the
        # ellipsis is a prefix (of MIN_ID_PREFIX characters at least, or it names nothing); an id equal
        # to it is no exact match (`run-x…` may be `run-x2` cut): several ids are ambiguous
        cut_for_display = True
        cut = text.strip().rstrip(".…")
        shortest = MIN_ID_PREFIX + (len(_APPROVAL_TAG) if cut.lower().startswith(_APPROVAL_TAG) else 0)
        for candidate in dict.fromkeys((cut, cut.lower())) if len(cut) >= shortest else ():
            found = store.ids_with_prefix(what, candidate)
            if found:
                text = candidate
                break
    if not found:
        _refuse_too_short(what, given)
        return text
    if found[0] == text and not (cut_for_display and len(found) > 1):
        return text
    if len(text) < MIN_ID_PREFIX:
        raise BadInput(f"no {what} {shown_id(text)}; an id prefix needs at least {MIN_ID_PREFIX} characters")
    if what == "approval" and text.startswith(_APPROVAL_TAG) and len(text) < len(_APPROVAL_TAG) + MIN_ID_PREFIX:
        # every approval id starts `apr_`: `apr_` alone, or with fewer characters of the id, named whichever
        # request was the only one, and `approvals approve apr_` signed an approval of it
        raise BadInput(f"no {what} {shown_id(text)}; an approval id prefix needs at least {MIN_ID_PREFIX} characters "
                       f"after {_APPROVAL_TAG}")
    if len(found) > 1:
        shown = ", ".join(found[:5]) + (", …" if len(found) > 5 else "")
        raise BadInput(f"{what} id prefix {shown_id(text)} is ambiguous: it starts {shown} (give more characters)")
    return found[0]


def _refuse_too_short(what: str, given: str) -> None:
    """``given`` named no id: when it is shorter than a prefix may be (:data:`MIN_ID_PREFIX`
    characters, after ``apr_`` for an approval id; an ellipsis and surrounding blanks not counted),
    say so, as for a short prefix that starts ids, rather than "no … in this store".

    Raises:
        BadInput: ``given`` is too short to be a prefix.
    """
    core = given.strip().rstrip(".…")
    if what == "approval" and core.lower().startswith(_APPROVAL_TAG):
        if len(core) < len(_APPROVAL_TAG) + MIN_ID_PREFIX:
            raise BadInput(f"no {what} {shown_id(core.lower())}; an approval id prefix needs at least {MIN_ID_PREFIX} "
                           f"characters after {_APPROVAL_TAG}")
    elif len(core) < MIN_ID_PREFIX:
        raise BadInput(f"no {what} {shown_id(given)}; an id prefix needs at least {MIN_ID_PREFIX} characters")


def _with_approval_tag(store: Any, text: str) -> tuple[str, list[str]]:
    """An approval id's hex copied without its ``apr_`` tag (every approval id has it): the tagged
    text and the ids it starts when there are any (at least :data:`MIN_ID_PREFIX` hex characters),
    else ``text`` as given and no id."""
    bare = text.strip().lower().rstrip(".…")
    if bare.startswith(_APPROVAL_TAG) or len(bare) < MIN_ID_PREFIX or not _GENERATED_ID.fullmatch(bare):
        return text, []
    found = store.ids_with_prefix("approval", _APPROVAL_TAG + bare)
    return (_APPROVAL_TAG + bare, found) if found else (text, [])


#: The shortest snapshot fingerprint prefix accepted, in hex digits (as ``Store.query_runs(snapshot=...)`` takes).
MIN_SNAPSHOT_PREFIX = 8  # sealbox.query.MIN_SNAPSHOT_PREFIX


def snapshot_ref(text: str, option: str = "FINGERPRINT") -> str:
    """A snapshot fingerprint or prefix as the store matches it (``sha256:`` optional, kept as
    given): hex in lower case, as fingerprints are, at least :data:`MIN_SNAPSHOT_PREFIX` digits
    (:func:`sealbox.query.snapshot_prefix`, the rule of ``query_runs(snapshot=...)``).

    Raises:
        BadInput: not hex, or a prefix too short to name one snapshot reliably.
    """
    from sealbox.query import snapshot_prefix

    try:
        return snapshot_prefix(text, option)
    except ConfigError as exc:
        raise BadInput(str(exc)) from None


def format_options(fn: Callable) -> Callable:
    """``--json`` and ``--csv`` for listings (one or the other: both is a :class:`BadInput`)."""
    import functools

    @functools.wraps(fn)
    def one_format(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("as_json") and kwargs.get("as_csv"):
            raise BadInput("--json and --csv exclude each other: give one")
        return fn(*args, **kwargs)

    one_format = click.option("--csv", "as_csv", is_flag=True, help="Print CSV (a text cell that a spreadsheet would run as a formula gets a leading ').")(one_format)
    return click.option("--json", "as_json", is_flag=True, help="Print JSON.")(one_format)


def emit_rows(rows: Sequence[dict[str, Any]], columns: Sequence[str], *, as_json: bool, as_csv: bool,
              title: str | None = None, json_columns: Sequence[str] = ()) -> None:
    """Print rows as JSON, CSV or a readable table. In CSV, the cells of ``json_columns`` (recorded
    values of any JSON type) are written as :func:`csv_json_cell`."""
    if as_json:
        click.echo(pretty_json(list(rows)))
        return
    if as_csv:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=list(columns), extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: csv_json_cell(row.get(k)) if k in json_columns else _csv_cell(row.get(k))
                             for k in columns})
        click.echo(buf.getvalue(), nl=False)
        return
    from rich.table import Table
    from rich.text import Text

    Console = _console_class()
    # Text, not str: rich reads a str as console markup, so a recorded value holding '[x]' lost
    # it and one holding '[/x]' stopped the listing (MarkupError); every cell is shown as recorded
    table = Table(title=None if title is None else Text(visible(title)), show_lines=False)
    cells = [[visible(_cell(row.get(c))) for c in columns] for row in rows]
    width = _width()
    console = Console(width=width or _UNBOUNDED)
    if width != 0 and console.width < (3 + NARROW_COLUMN_MIN) * len(columns) + 1:
        click.echo(_records_text(title, columns, cells), nl=False)  # no room for the columns: a field a line
        return
    keys = _key_widths(columns, cells, console.width)
    for i, col in enumerate(columns):
        if i in keys:  # an id a person copies into the next command: never cut with an ellipsis
            table.add_column(col, no_wrap=keys[i] is not None, min_width=keys[i], overflow="fold")
        elif col in FOLD_COLUMNS:  # a name the listing is read for: folded onto more lines, never cut
            table.add_column(col, overflow="fold")
        else:
            table.add_column(col)
    if len(cells) > FAST_TABLE_ROWS:
        console.file.write(_table_text(console, table, cells))
        console.file.flush()
        return
    for row in cells:
        table.add_row(*(Text(c) for c in row))
    if width == 0:  # not a terminal, no COLUMNS: as wide as the content, every cell whole on its line
        console = Console(width=max(1, console.measure(table).maximum))
    console.print(table)


def _console_class() -> type:
    """rich's ``Console`` whose output closed early by its reader (``sealbox runs show RUN | head``) raises
    ``BrokenPipeError``, which the CLI ends quietly with exit 0 as it does for every other output; rich's own
    handler exits 1 (silently: a ``set -o pipefail`` script failed on ``| head``). Later writes (the exit's
    flush) go to ``/dev/null``, as rich does."""
    global _QuietPipeConsole
    if _QuietPipeConsole is None:
        import os

        from rich.console import Console

        class _Console(Console):
            def on_broken_pipe(self) -> None:
                self.quiet = True
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())
                raise BrokenPipeError()

        _QuietPipeConsole = _Console
    return _QuietPipeConsole


_QuietPipeConsole: type | None = None


#: A table whose width leaves a column fewer characters than this (after its borders: "│ " before each cell,
#: " " after, "│" at the end) is printed one field per line (:func:`_records_text`): rich laid it out as columns
#: of one or two characters, or, narrower, as a frame of empty columns (``COLUMNS=5 sealbox runs list``).
NARROW_COLUMN_MIN = 3


def _records_text(title: str | None, columns: Sequence[str], cells: list[list[str]]) -> str:
    """The rows of a table too narrow for its columns: ``column: value`` lines (a value's further lines
    indented by two spaces; an empty value as ``column:``), rows apart by an empty line, the title above."""
    out = [] if title is None else [visible(title)]
    for n, row in enumerate(cells):
        if n:
            out.append("")
        for col, value in zip(columns, row):
            first, *rest = value.splitlines() or [""]
            out.append(f"{col}: {first}" if first else f"{col}:")
            out += ["  " + line for line in rest]
    return "".join(line + "\n" for line in out)


#: A table of more rows than this is written by :func:`_table_text` (the same bytes as rich's layout,
#: about fifteen times faster: rich measured and rendered every cell through its whole renderable
#: machinery, 5 s of CPU for a 10,001-event `runs show`).
FAST_TABLE_ROWS = 200


def _table_text(console: Any, table: Any, cells: list[list[str]]) -> str:
    """What ``console.print(table)`` prints once ``cells`` (rows of plain text) are added to ``table``
    (a rich ``Table`` with its columns and no rows, the default box and padding), written without rich
    laying out every cell: the column widths are rich's own, computed from two rows holding, for each
    column, the cell with the longest word and the one with the longest line (what rich's measurement of
    a column keeps of its cells); the title, top border and header are rich's, printed over one empty row;
    a cell on one line within its column is padded here, one that wraps or folds is rendered by rich.
    Pinned byte for byte against rich's layout in tests/cli/test_fast_table_layout.py."""
    from rich.cells import cell_len
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    ncols = len(table.columns)
    longest_word: list[tuple[int, str]] = [(-1, "")] * ncols
    longest_line: list[tuple[int, str]] = [(-1, "")] * ncols
    for row in cells:
        for i, c in enumerate(row):
            if c.isprintable():  # no whitespace but " ", no line break
                line = cell_len(c)
                word = max(map(cell_len, c.split()), default=line) if " " in c else line
            else:
                line = max(map(cell_len, c.splitlines()), default=0)
                word = max(map(cell_len, c.split()), default=line)
            if word > longest_word[i][0]:
                longest_word[i] = (word, c)
            if line > longest_line[i][0]:
                longest_line[i] = (line, c)
    for pick in (longest_word, longest_line):
        table.add_row(*(Text(c) for _, c in pick))
    options = console.options
    widths = table._calculate_column_widths(console, options.update_width(options.max_width - table._extra_width))

    head = Table(title=table.title, show_lines=False)
    for w, col in zip(widths, table.columns):
        head.add_column(col.header, width=w - 2, no_wrap=col.no_wrap, overflow=col.overflow)
    head.add_row(*("" for _ in widths))
    with console.capture() as captured:
        console.print(head)
    top = captured.get().splitlines(keepends=True)[:-2]  # the empty row and the bottom border dropped

    box = table.box.substitute(options, safe=console.safe_box)
    out = ["".join(top)]
    last = len(cells) - 1
    for n, row in enumerate(cells):
        left, right, divider = ((box.foot_left, box.foot_right, box.foot_vertical) if n == last
                                else (box.mid_left, box.mid_right, box.mid_vertical))
        shown: list[list[str]] = []
        for c, w, col in zip(row, widths, table.columns):
            width = cell_len(c)
            if width <= w - 2 and c.isprintable():
                shown.append([" " + c + " " * (w - 2 - width) + " "])
            else:  # wrapped or folded: as rich renders a cell
                rendered = console.render_lines(
                    Padding(Text(c), (0, 1)),
                    options.update(width=w, justify=col.justify, no_wrap=col.no_wrap, overflow=col.overflow,
                                   height=None, highlight=col.highlight))
                shown.append(["".join(s.text for s in line) for line in rendered])
        height = max(map(len, shown))
        for line_no in range(height):
            out.append(left + divider.join(lines[line_no] if line_no < len(lines) else " " * w
                                           for lines, w in zip(shown, widths)) + right + "\n")
    out.append(box.get_bottom(widths) + "\n")
    return "".join(out)


#: Columns holding what a person copies into the next command (run ids, call ids, times given to
#: ``--since``), most wanted first: a table gives them their whole width while every other column
#: keeps :data:`OTHER_COLUMN_MIN` characters, and folds the rest onto more lines, never cutting
#: one with an ellipsis.
KEY_COLUMNS = ("run_id", "call_id", "approval_id", "grant_id", "key_id", "ts", "started", "started_at", "step",
               "run_seq", "expires_at", "parent", "parent_run_id", "replay of", "replay_of")
OTHER_COLUMN_MIN = 8

#: Columns holding a short name the listing is read for (a tool, a decision, the rule, who approved), and
#: the text saying why (a decision's reason, which quotes the rule and its CEL condition):
#: one word longer than its column is folded onto more lines, not cut with an ellipsis (`db/write…`).
FOLD_COLUMNS = ("tool", "server", "decision", "rule", "approvers", "decided_by", "flags", "status", "agent",
                "principal", "change", "name", "role", "reason", "why")


def _key_widths(columns: Sequence[str], cells: list[list[str]], width: int) -> dict[int, int | None]:
    """For each key column (:data:`KEY_COLUMNS`) among ``columns``, in that order: its whole width
    (the longest of its cells and its header) while the columns given theirs leave every other
    column :data:`OTHER_COLUMN_MIN` characters of a ``width``-character table; None (folded) for the
    first that does not fit and every one after it (a time never takes the room a run id could not have)."""
    out: dict[int, int | None] = {}
    left = width - (3 * len(columns) + 1)  # the borders: "│ " before each cell, " " after, "│" at the end
    others = len(columns)
    for name in KEY_COLUMNS:
        if name not in columns:
            continue
        i = list(columns).index(name)
        need = max([len(name)] + [len(row[i]) for row in cells])
        if left is not None and need + OTHER_COLUMN_MIN * (others - 1) <= left:
            out[i], left, others = need, left - need, others - 1
        else:
            out[i], left = None, None
    return out


# visible(): in sealbox.query, shared with the incident reports
from sealbox.query import visible  # noqa: E402


def _cell(value: Any) -> str:
    """A cell of a readable table: ``None`` empty, a bool ``yes`` / ``no`` (not Python's ``True`` / ``False``), a dict or
    list its JSON (a recorded value shown as recorded; a command joins a list of names itself, ``dev, ops``), else
    ``str``. ``--csv`` and ``--json`` do not use it for these (:func:`_csv_cell`: ``true`` / ``false``, canonical JSON)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


#: What a spreadsheet takes for the start of a formula (OWASP, "CSV Injection"): a text cell
#: starting with one of these is written with a ``'`` in front.
CSV_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _csv_cell(value: Any) -> str:
    """A cell of ``--csv`` output: :func:`_cell`, with a text that a spreadsheet would run as a
    formula (``=HYPERLINK(…)``, ``@SUM(…)``, ``-1+cmd|…``; see :data:`CSV_FORMULA_STARTS`)
    prefixed by a single quote, so that it is shown, not evaluated. Agent names, principals,
    tool names and arguments are chosen by whoever drives the agent. Numbers (``int``,
    ``float``: ``-3``, ``-0.5``) are written as they are, booleans as JSON's ``true`` / ``false``,
    and a dict or list (a run's ``labels``, a call's ``error`` and ``flags``) as its canonical JSON
    (:func:`canonical_json_text`: compact, keys sorted, as ``--json`` holds the same value), in every
    ``--csv`` listing."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, (dict, list)):
        return canonical_json_text(value)  # starts with { or [: no spreadsheet formula
    text = _cell(value)
    return "'" + text if text.startswith(CSV_FORMULA_STARTS) else text


def csv_json_cell(value: Any) -> str:
    """A ``--csv`` cell holding a recorded value of any JSON type (``calls``' ``arguments``, ``snapshot
    diff``'s ``a`` and ``b``): its
    RFC 8785 canonical JSON, so that every value reads back with ``json.loads`` and a string shows
    with its quotes (the string ``{"a":1}`` is ``"{\\"a\\":1}"``, the object ``{"a":1}``), as does
    the empty string (``""``); an empty cell is null. No such text starts a spreadsheet formula
    (a string starts with ``"``, an object or array with ``{`` / ``[``) but a negative number, which
    is written as it is, as numbers are in every ``--csv`` column (:func:`_csv_cell`)."""
    return "" if value is None else canonical_json_text(value)


def canonical_json_text(value: Any) -> str:
    """``value``'s RFC 8785 canonical JSON as text (``null`` for None): how ``--csv`` writes a recorded
    value of any JSON type (:func:`csv_json_cell`, and the ``args=`` of ``runs show --csv``'s detail)."""
    from sealbox.canonical import CanonicalizationError, canonical_bytes

    try:
        return canonical_bytes(value).decode("utf-8")
    except (CanonicalizationError, UnicodeDecodeError):  # outside I-JSON (e.g. an integer beyond 2**53): sorted, compact
        return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)


def tables_are_unbounded() -> bool:
    """Whether the human tables are as wide as their content (stdout is no terminal, no ``COLUMNS``)."""
    return _width() == 0


#: The width a table is laid out in before it is measured (:func:`_width` 0): wider than any listing.
_UNBOUNDED = 1_000_000


def _width() -> int | None:
    """The width of a human table: None on a terminal (rich reads its size, or ``COLUMNS``); else
    ``COLUMNS`` when it is a positive number, or 0 for "as wide as the content" (a file or a pipe:
    ``> runs.txt``, ``| grep``: no id or name is folded onto two lines or cut)."""
    if sys.stdout.isatty():
        return None
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:  # unset, empty or not a number (COLUMNS=abc was an internal error)
        return 0
    return columns if columns > 0 else 0


def echo_json(value: Any) -> None:
    """Print a JSON document."""
    click.echo(pretty_json(value))


def pretty_json(value: Any) -> str:
    """``value`` as JSON indented by two spaces, the layout of ``json.dumps(value, indent=2,
    ensure_ascii=False, default=str)``, about twenty times faster (a 1M-event ``sealbox calls
    --json`` spent half its time in ``json``): orjson writes it, dataclasses, datetimes and
    subclasses of builtins go through ``str`` as before, and what orjson refuses (non-str keys,
    integers beyond 64 bits, lone surrogates) is left to ``json``. Differences from ``json``:
    floats in their shortest form (``1e-7``, not ``1e-07``); NaN and the infinities, which
    ``json`` writes as the invalid tokens ``NaN``/``Infinity``, as ``null``; an ``Enum``
    member (which a listing holds only if its module was imported) as its value."""
    import orjson

    try:
        return orjson.dumps(value, default=str, option=_PRETTY).decode("utf-8")
    except (TypeError, ValueError):  # a non-str key, an integer beyond 64 bits, a lone surrogate, recursion
        return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def _pretty_options() -> int:
    import orjson

    return (orjson.OPT_INDENT_2 | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
            | orjson.OPT_PASSTHROUGH_SUBCLASS)


_PRETTY = _pretty_options()


def lines(items: Iterable[str]) -> None:
    """Print each item on its own line."""
    for item in items:
        click.echo(item)


def explore_path_prefix(then: str) -> str:
    """``export PATH=<this sealbox's folder>:$PATH`` and ``then`` when ``sealbox`` is not on PATH (installed
    in a virtual environment that is not activated, as `make demo` does), so that the commands the demo
    prints work when pasted into a new shell; else nothing."""
    import os
    import shutil
    import sys

    if shutil.which("sealbox"):
        return ""
    bindir = os.path.dirname(sys.executable)
    return f"export PATH={bindir}:$PATH{then}" if os.path.exists(os.path.join(bindir, "sealbox")) else ""
