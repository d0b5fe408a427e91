"""Importers: runs recorded elsewhere, brought into a store as imported runs.

``import_file(store, path, format="auto")`` reads one file, detects (or checks)
its format, converts every run in it, and appends all of them in **one store
transaction**: a file comes in whole or not at all. Each run starts with
``run.started`` whose ``imported`` field names the source file, its SHA-256, the
format and the original ids; oddities of the source are ``anomaly`` events of
the run; it ends with ``run.ended``. See ``docs/import.md``.

Formats: ``tau-bench`` (OpenAI chat-completions message lists), ``swe-agent``,
``otlp-json``, ``jaeger``, ``langfuse``, ``openai-agents-runstate``.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Any

from sealbox.errors import SealboxError
from sealbox.input_files import open_input
from sealbox.interop.importers.common import (
    IMPORTED_POLICY,
    IMPORTED_POLICY_FINGERPRINT,
    ImportContext,
    ImportFormatError,
    ImportSummary,
    Progress,
    content_digest,
    load_json_bytes,
    never_part,
    source_digest,
    without_passed_on_secrets,
)
from sealbox.interop.importers.detect import FORMATS, detect_format, module_for

__all__ = [
    "FORMATS",
    "IMPORTED_POLICY",
    "IMPORTED_POLICY_FINGERPRINT",
    "ImportFormatError",
    "ImportSummary",
    "MAX_IMPORT_BYTES",
    "detect_format",
    "import_file",
    "parse_file",
]

_CHUNK = 1 << 20
#: The largest file ``import`` reads (``max_bytes``; ``sealbox import --max-file-bytes``): it holds the
#: file, its text and its parsed JSON in memory, so a larger one (a sparse file of gigabytes costs no
#: disk; a pipe may never end) is refused, by its size before it is read, or once a pipe gave more.
MAX_IMPORT_BYTES = 256 << 20

#: What converting a structurally valid file whose fields have unexpected types can
#: still raise past the importers' own checks: the file's fault, not Sealbox's.
_MALFORMED = (TypeError, LookupError, AttributeError, ValueError)


def _malformed(name: str, fmt: str, exc: BaseException) -> ImportFormatError:
    # Only the exception's type: its message may quote the file's content (a refused file may hold secrets).
    return ImportFormatError(f"{name} is not a valid {fmt} file: a field has an unexpected type or shape "
                             f"({type(exc).__name__}); nothing was imported")


def _refuse_nul(name: str, drafts: list[Any]) -> None:
    """ImportFormatError for a NUL character in an identifier the file gives (a tool name, a call id, an
    agent name), which the store would refuse (``sealbox.store.base._refuse_nul``) with a message quoting
    the value: this one names the event kind and the field, never the value (a refused file may hold
    secrets). Nothing is written."""
    from sealbox.store.base import _IDENTIFIER_FIELDS

    for draft in drafts:
        found = ("run_id" if "\x00" in draft.run_id else "principal" if "\x00" in draft.principal else
                 next((f for f in _IDENTIFIER_FIELDS if type(v := draft.payload.get(f)) is str and "\x00" in v), None))
        if found is not None:
            raise ImportFormatError(f"{name} cannot be imported: a {draft.kind} {found} holds a NUL character (\\x00), "
                                    "which an identifier in the record cannot hold; nothing was imported")


def _too_large(what: str, max_bytes: int) -> ImportFormatError:
    return ImportFormatError(f"{what} more than the {max_bytes} bytes import reads (it holds the file and its parsed "
                             "JSON in memory; give --max-file-bytes to allow more); nothing was imported")


def _read(path: Path, progress: Progress | None, max_bytes: int = MAX_IMPORT_BYTES) -> bytes:
    try:
        st = path.stat()
        if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):  # /dev/zero never ends: refuse before reading
            raise ImportFormatError(f"{path} is a device, not a file; give one file to import")
        total = st.st_size
        if total > max_bytes:
            raise _too_large(f"{path} is {total} bytes,", max_bytes)
        chunks, done = [], 0
        with open_input(path) as fh:  # a named pipe nothing writes to: waited on for a bounded time
            while True:
                chunk = fh.read(min(_CHUNK, max_bytes + 1 - done))
                if not chunk:
                    break
                chunks.append(chunk)
                done += len(chunk)
                if done > max_bytes:  # a pipe, or a file that grew since: what it gave so far is dropped
                    chunks.clear()
                    raise _too_large(f"{path} is", max_bytes)
                if progress:
                    progress("read", done, total)
    except IsADirectoryError:
        raise ImportFormatError(f"{path} is a folder; give one file to import") from None
    except FileNotFoundError:
        raise ImportFormatError(f"{path} does not exist") from None
    except PermissionError:
        raise ImportFormatError(f"{path} cannot be read (permission denied)") from None
    except OSError as exc:
        raise ImportFormatError(f"{path} cannot be read ({exc.strerror or exc})") from None
    return b"".join(chunks)


def parse_file(path: str | os.PathLike, format: str = "auto", *,
               progress: Progress | None = None, max_bytes: int = MAX_IMPORT_BYTES) -> tuple[str, str, list[Any]]:
    """Read, detect and convert a file without writing anything.

    Returns:
        (format, source sha256, list of :class:`~sealbox.interop.importers.common.RunBuilder`).

    Raises:
        ImportFormatError: unreadable, larger than ``max_bytes``, not JSON, in no known format, or not
            the format asked for.
    """
    p = Path(path)
    data = _read(p, progress, max_bytes)
    return _parse(p, data, "sha256:" + hashlib.sha256(data).hexdigest(), format, progress)


def _parse(p: Path, data: bytes, sha: str, format: str, progress: Progress | None) -> tuple[str, str, list[Any]]:
    try:
        return _parse_in_memory(p, data, sha, format, progress)
    except MemoryError:  # JSON such as [{},{},...] takes ~20x its size once parsed: said, never a crash
        raise ImportFormatError(f"{p.name} could not be imported in the memory available (it ran out while parsing "
                                f"its {len(data)} bytes: JSON can take far more memory than its size); nothing was "
                                "imported") from None


def _parse_in_memory(p: Path, data: bytes, sha: str, format: str,
                     progress: Progress | None) -> tuple[str, str, list[Any]]:
    name = p.name
    doc, non_finite = load_json_bytes(data, name)
    fmt = detect_format(doc, name) if format in (None, "auto") else format
    module = module_for(fmt)
    ctx = ImportContext(name=name, source_sha256=sha, on_progress=progress, non_finite=non_finite)
    try:
        runs = module.parse(doc, ctx)
    except SealboxError:
        raise
    except RecursionError:
        raise ImportFormatError(f"{name} nests too deeply to import as {fmt}") from None
    except _MALFORMED as exc:
        raise _malformed(name, fmt, exc) from exc
    if not runs:
        raise ImportFormatError(f"{name} holds no run to import as {fmt}")
    runs[0].duplicates += ctx.duplicates  # repeats skipped before the runs were built: counted once
    if len(runs) == 1 and not runs[0].source_parts:  # a one-run file (SWE-agent, RunState): its whole document
        runs[0].source_parts.append(source_digest(doc) or never_part())
    return fmt, sha, runs


def import_file(store: Any, path: str | os.PathLike, format: str = "auto", *,
                progress: Progress | None = None, max_bytes: int = MAX_IMPORT_BYTES) -> ImportSummary:
    """Import every run of a file into ``store``, all in one transaction.

    Args:
        store: an open, writable store.
        path: the file.
        format: ``auto`` (detect) or one of :data:`FORMATS`.
        progress: optional ``progress(stage, done, total)`` callback (stages
            ``read``, ``parse``, ``build``, ``write``).
        max_bytes: the largest file to read (:data:`MAX_IMPORT_BYTES`); a larger one is refused.

    A file whose bytes (their SHA-256) were imported into ``store`` already is not imported again:
    the summary then has ``already_imported=True``, the runs imported from it then (in log order),
    ``events=0``, and nothing is written. The check is made again inside the write transaction, so
    two processes importing the same file at once write it once.

    A span, observation or log record the file gives again with the same id and the same content
    is skipped (``duplicates_skipped`` counts them); one whose id repeats with other content is
    kept and flagged (a ``duplicate_span_id`` anomaly). A run whose source content (its
    ``imported.content_sha256``, :func:`~sealbox.interop.importers.common.content_digest`) was
    imported into ``store`` before, from any file, is not written again (``skipped_runs`` names the
    stored runs; when every run of the file was skipped so, ``already_imported=True`` and ``runs``
    are those runs); a run whose trace id was, with other content, is written and flagged (a
    ``trace_imported_before`` anomaly naming the earlier runs).

    Returns:
        An :class:`ImportSummary` (run ids, event and anomaly counts, format, source hash,
        duplicates skipped, runs skipped as in the store already).

    Raises:
        ImportFormatError: the file is larger than ``max_bytes``, in no known format, or not in the
            one asked for, or gives an identifier holding a NUL character; nothing is written.
        InvalidEventError, StoreError: the store refused the events; nothing is written.
    """
    if format is not None and format != "auto" and (not isinstance(format, str) or format not in FORMATS):
        # before the file is read: a typo is refused whether or not the file was imported already
        raise ImportFormatError(f"unknown import format {format!r} (choose from auto, {', '.join(FORMATS)})")
    p = Path(path)
    data = _read(p, progress, max_bytes)
    sha = "sha256:" + hashlib.sha256(data).hexdigest()
    reader = getattr(store, "reader", None)
    if reader is not None:  # before converting the file: a large one is not converted for nothing
        found = reader().imported_runs(sha)
        if found:
            return _already(found, sha)
    fmt, sha, runs = _parse(p, data, sha, format, progress)
    del data
    name = Path(path).name
    per_run: list[list[Any]] = []
    for i, run in enumerate(runs):
        if progress:
            progress("build", i + 1, len(runs))
        per_run.append(_drafts(run, name, fmt))
    # runs imported before from other bytes: the same content is not imported again; the same trace id
    # with other content is imported beside it, flagged (trace_imported_before)
    skipped: dict[int, str] = {}
    if reader is not None:
        matches = reader().imported_content([r.content_sha256 for r in runs if r.content_sha256],
                                            [t for r in runs if (t := _trace_id(r))])
        skipped = _same_content(runs, matches)
        for i, run in enumerate(runs):
            tid = _trace_id(run)
            earlier = [m[0] for m in matches if tid and m[2] == tid]
            if i not in skipped and earlier:
                run.anomaly("trace_imported_before", {
                    "trace_id": tid, "runs": earlier[:20], "count": len(earlier),
                    "message": "runs imported before hold this trace id with other content; this run was "
                               "imported beside them"})
                per_run[i] = _drafts(run, name, fmt)
    for i, draft_list in enumerate(per_run):
        _refuse_nul(name, draft_list)
        per_run[i] = without_passed_on_secrets(store, draft_list)  # a value redacted in one event, in clear in another
    if progress:
        progress("write", 0, sum(map(len, per_run)))
    found: list[tuple[str, Any]] = []
    written: list[int] = []

    def build(txn_reader: Any) -> list[Any]:
        found[:] = txn_reader.imported_runs(sha)  # imported meanwhile by another process: nothing is written
        if found:
            return []
        again = getattr(txn_reader, "imported_content", None)
        if again is not None:  # the same runs imported meanwhile from other bytes
            skipped.update(_same_content(runs, again([r.content_sha256 for i, r in enumerate(runs)
                                                      if r.content_sha256 and i not in skipped])))
        written[:] = [i for i in range(len(runs)) if i not in skipped]
        drafts = [d for i in written for d in per_run[i]]
        return drafts

    events = store.append_with(build)
    if found:
        return _already(found, sha)
    duplicates = sum(r.duplicates for r in runs)
    existing = tuple(skipped[i] for i in sorted(skipped))
    if not written:  # every run of the file was in the store already
        return ImportSummary(runs=existing, events=0, anomalies=0, format=fmt, source_sha256=sha,
                             already_imported=True, duplicates_skipped=duplicates, skipped_runs=existing)
    if progress:
        progress("write", len(events), len(events))
    anomalies = sum(1 for e in events if e.kind == "anomaly")
    return ImportSummary(runs=tuple(runs[i].run_id for i in written), events=len(events), anomalies=anomalies,
                         format=fmt, source_sha256=sha, duplicates_skipped=duplicates, skipped_runs=existing)


def _drafts(run: Any, name: str, fmt: str) -> list[Any]:
    """The run's drafts, its ``run.started`` recording the run's content digest."""
    try:
        run.content_sha256 = None
        drafts = run.drafts()
        run.content_sha256 = content_digest(run, drafts)
        if run.content_sha256 is not None:  # a dict drafts() made for this list alone
            drafts[0].payload["imported"]["content_sha256"] = run.content_sha256
        return drafts
    except SealboxError:
        raise
    except _MALFORMED as exc:  # nothing is written yet: the events go to the store below, in one append
        raise _malformed(name, fmt, exc) from exc


def _trace_id(run: Any) -> str | None:
    tid = run.original_ids.get("trace_id")
    return tid if isinstance(tid, str) and tid else None


def _same_content(runs: list[Any], matches: list[tuple[str, Any, Any]]) -> dict[int, str]:
    """run index -> the earliest stored run with the same content digest, for the runs that have one."""
    by_digest: dict[str, str] = {}
    for run_id, digest, _ in matches:
        if isinstance(digest, str):
            by_digest.setdefault(digest, run_id)
    return {i: by_digest[r.content_sha256] for i, r in enumerate(runs) if r.content_sha256 in by_digest}


def _already(found: list[tuple[str, Any]], sha: str) -> ImportSummary:
    """The summary of an import that found the file's runs in the store already (nothing written)."""
    fmt = found[0][1]
    return ImportSummary(runs=tuple(run_id for run_id, _ in found), events=0, anomalies=0,
                         format=fmt if isinstance(fmt, str) else "unknown", source_sha256=sha, already_imported=True)
