"""Verify an export bundle offline: only the file and this package, no store.

:func:`verify_bundle` checks the container byte for byte against its canonical
form, every member, every event's leaf hash and inclusion proof against the
signed checkpoint, each run's chain (the runs are whole), every blob against its
commitment, every snapshot against its fingerprint, every approval answer's
signature (with the identities replayed from the included ``identity.changed``
events), every included grant, revocation step and tool re-approval as ``sealbox
verify`` checks them in a store, that each call that was not denied has its grant
in the bundle (``sealbox-bundle/2``), that the manifest is what the content says, and that the content members
are exactly those the export's checkpoint commits to (its ``sealbox-export/v1``
extension line: removing events or runs consistently is detected). Optionally it checks an
RFC 9162 consistency proof from the bundle's checkpoint to a newer one, and that the bundle's log
extends checkpoints saved earlier (by the consistency proofs of its optional ``consistency.jsonl``
member, written by ``sealbox export --prove-from``: a forked, rewritten or rolled-back log fails). Store and
bundle are checked by the same code (:mod:`sealbox.verify`). Tampering is
reported, each problem naming its member, line, event or blob; it never raises.

The signature is checked against the log's key the caller gives (``trusted_vkey``,
obtained from the log's owner apart from the bundle). Without one, the bundle's own
key is used, which anyone who rewrites a bundle can replace with a key of their own:
the report is then consistent at best, never ``ok``, unless the caller accepts that
key explicitly (``trust_bundle_key``).
"""

from __future__ import annotations

import base64
import binascii
import collections
import dataclasses
import gc
import hashlib
import json
import os
import re
import shlex
import stat
import struct
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from sealbox.canonical import MAX_DEPTH
from sealbox.errors import CanonicalizationError, ConfigError, NoteError, ProofError
from sealbox.events import SYSTEM_RUN_ID
from sealbox.interop.bundle import (
    DIGESTED,
    compressed_members,
    method_name,
    EXPORT_EXTENSION,
    FORMAT_TEXT,
    FORMATS,
    MAX_MEMBERS,
    MEMBERS,
    PROOFS,
    BundleFormatError,
    blob_line,
    event_line,
    export_digest,
    proof_line,
    manifest_bytes,
    archive_extent,
    read_members,
    shown_name,
    unreadable_reason,
    snapshot_line,
    zip_bytes,
    zip_directory,
    zip_local_header,
    zip_regions,
)
from sealbox.ledger import merkle
from sealbox.ledger.checkpoint import Checkpoint, Verifier, parse_note, verify_checkpoint
from sealbox.verify import (
    CALL_GRANT_KINDS,
    CALL_STEP_KINDS,
    CallGrantCheck,
    CallStepCheck,
    EventVerifier,
    Problem,
    check_approval_answers,
    check_blobs,
    check_grants,
    compromised_answer_notes,
    compromised_call_notes,
    compromised_grants,
    check_reapprovals,
    check_revocations,
    check_rotations,
    check_snapshots,
    lets_through,
    open_checkpoints,
)

__all__ = ["BundleReport", "verify_bundle", "parse_consistency"]

_REF = re.compile(r"sha256:[0-9a-f]{64}")
#: Deepest nesting of a line of events.jsonl, blobs.jsonl or snapshots.jsonl: the line's own
#: object around a value Sealbox wrote (canonical JSON, at most MAX_DEPTH ``{``/``[`` deep).
LINE_DEPTH = MAX_DEPTH + 1
#: The largest archive ``verify_bundle`` holds in memory (``max_bytes``; ``sealbox verify --max-bundle-bytes``):
#: a canonical container (what ``sealbox export`` writes) is checked a chunk at a time from the file whatever
#: its size (its headers are checked first without reading member data, and a hole of a sparse file is
#: refused at the first chunk of NULs); one that is not is held in memory, several times over, to name
#: what differs, so a larger one is refused from its headers before it is read.
MAX_BUNDLE_BYTES = 256 << 20
#: how many member names a container problem lists (a hostile file may hold 65,535 members)
_LISTED = 20
#: a ZIP local file header (APPNOTE 4.3.7), as the container's reader unpacks it
_LOCAL_HEADER = struct.Struct("<IHHHHHIIIHH")
#: Deepest nesting of manifest.json (it is a few levels deep; anything near MAX_DEPTH is not a manifest).
_MANIFEST_DEPTH = MAX_DEPTH
#: Largest leaf index (and tree size) a bundle can name: its manifest is I-JSON (RFC 7493 §2.2).
_MAX_LEAF = 2**53 - 1
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_BRACKET = re.compile(rb"[\[\]{}]")
_B64_HASH = rb'"[A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]="'  # a 32-byte hash in canonical base64
#: the end of a line of events.jsonl as an export writes it (:func:`event_line`), from its last ``,"leaf_index":``
_EVENT_TAIL = re.compile(rb',"leaf_index":(0|[1-9][0-9]{0,15}),"proof":\[((?:' + _B64_HASH + rb',)*'
                         + _B64_HASH + rb')?\]\}')
#: the end of a line of blobs.jsonl as an export writes it (:func:`blob_line`), from its last ``,"ref":``
_BLOB_TAIL = re.compile(rb',"ref":"(sha256:[0-9a-f]{64})","salt":(?:"((?:[0-9a-f]{2})*)"|null)\}')
#: the kinds whose envelopes the checks after the events read (:meth:`_Check._keep`): the calls, their
#: decisions and steps (CallGrantCheck, CallStepCheck, the grants and re-approvals calls need)
_ENV_KINDS = CALL_GRANT_KINDS | CALL_STEP_KINDS | {"tools.changed", "tool.reapproved"}
#: the payload fields kept of the calls and their decisions (the call, grant, step and re-approval checks read
#: these and the envelope's run_id, run_seq, step, principal and ts; lets_through reads effect, reason_code, replayed)
_SLIM = {"tool.call": frozenset({"call_id", "grant", "server", "tool"}),
         "policy.decision": frozenset({"call_id", "effect", "reason_code", "replayed"})}
_EXPORT_LINE = re.compile(re.escape(EXPORT_EXTENSION) + r" sha256:([0-9a-f]{64})")


@dataclass(frozen=True)
class BundleReport:
    """Result of :func:`verify_bundle`.

    ``ok`` (the bundle verified) needs both: nothing found wrong (``consistent``) and a
    trusted key (``key_trusted``): one the caller gave, or the bundle's own key accepted
    explicitly (``trust_bundle_key=True``). The bundle's own key alone proves only that the
    bundle is consistent with itself: whoever rewrites a bundle can sign it again with a key
    of their own and put that key in it.

    Attributes:
        runs: per run ``{run_id, agent, events, status}`` (status: the last event's kind,
            ``run.ended`` meaning the run is provably complete).
        trusted_key: the key the checkpoint's signature was checked against (C2SP vkey), or
            None when there was none (no key given and the bundle's own key is malformed).
        key_source: ``"given"`` (``trusted_vkey``, ``--key``) or ``"bundle"`` (the bundle's own key).
        consistency: ``{size1, size2, root2}`` when a consistency proof verified.
        extends: per saved checkpoint the bundle's log was proven to extend (``checkpoints``),
            ``{checkpoint, size, root, by}``: ``checkpoint`` where it came from, ``by``
            ``"checkpoint"`` (the same size and root as the bundle's), ``"proof"`` (a consistency
            proof carried by the bundle, RFC 9162 §2.1.4.2), ``"given_proof"`` (one given beside
            the bundle, ``saved_proofs``) or ``"empty"`` (a checkpoint of size 0).
        bundle_key: the bundle's own ``log.vkey`` (C2SP vkey), or None when it is malformed:
            what to compare with the log's key obtained from its owner.
        bundle_key_accepted: the bundle's own key was trusted on request (``trust_bundle_key``).
        path: the bundle file, as given (for the command printed when no key was given).
    """

    problems: tuple[Problem, ...]
    events: int
    system_events: int
    runs: tuple[dict[str, Any], ...]
    blobs: int
    snapshots: int
    checkpoint_size: int | None
    root: str | None
    trusted_key: str | None
    key_source: str
    seconds: float
    consistency: dict[str, Any] | None = None
    notes: tuple[str, ...] = field(default=())
    bundle_key: str | None = None
    bundle_key_accepted: bool = False
    path: str | None = None
    extends: tuple[dict[str, Any], ...] = ()
    unreadable: bool = False  # the ZIP container could not be read: no member was checked
    #: why no member was checked when ``unreadable``: none ``could be read`` (the ZIP structure), or ``was
    #: checked (they are compressed)`` (a bundle re-zipped: its members' bytes in the file are not their content)
    unchecked: str = "could be read"

    @property
    def consistent(self) -> bool:
        """True when nothing was found wrong (the bundle is consistent with the key checked against)."""
        return not self.problems

    @property
    def key_trusted(self) -> bool:
        """True when the signature was checked against a trusted key: one given, or the
        bundle's own key accepted explicitly."""
        return self.key_source == "given" or (self.bundle_key_accepted and self.trusted_key is not None)

    @property
    def ok(self) -> bool:
        """True when the bundle verified: nothing found wrong, against a trusted key."""
        return self.consistent and self.key_trusted

    @property
    def status(self) -> str:
        """``"verified"`` (ok), ``"problems"`` (something found wrong) or ``"untrusted_key"``
        (consistent, but checked only against the key the bundle carries, not accepted)."""
        if self.problems:
            return "problems"
        return "verified" if self.key_trusted else "untrusted_key"

    def trust(self) -> str:
        """Which key was trusted, and what that proves: one line."""
        if self.unreadable and self.key_source == "given":
            return (f"The key you gave (--key) was not used: no member of the bundle {self.unchecked}, its "
                    "checkpoint included.")
        if self.key_source == "given":
            return f"Checkpoint signature checked against the key you gave (--key): {self.trusted_key}."
        if self.trusted_key is None and self.unreadable:
            return (f"No key was used: no member of the bundle {self.unchecked}, its verifier key (log.vkey) "
                    "included. Pass the log's key with --key.")
        if self.trusted_key is None:
            return ("No key was used: the bundle's own verifier key (log.vkey) is malformed, so nothing was checked "
                    "against it. Pass the log's key with --key.")
        if self.bundle_key_accepted:
            return (f"WARNING: checked only against the key inside the bundle ({self.trusted_key}), accepted because "
                    "of --trust-bundle-key: this proves that the bundle is consistent with itself, not that the log's "
                    "owner signed it (whoever rewrites a bundle can sign it again with a key of their own).")
        verifier = Verifier.from_vkey(self.trusted_key)
        target = shlex.quote(self.path) if self.path is not None else "FILE"
        return (f"NO TRUSTED KEY: no --key was given, so nothing shows who signed this bundle (whoever rewrites a "
                f"bundle can sign it again with a key of their own). The bundle's key is {self.trusted_key} (name "
                f"{verifier.name}, key ID {verifier.key_id.hex()}): compare it with the log's verifier key obtained "
                "from the log's owner separately (what `sealbox init` and `sealbox log key` print), then run: "
                f"sealbox verify {target} --key KEY")

    def summary(self) -> str:
        """A short paragraph for a terminal: the checks' result, then one line on the key (:meth:`trust`)."""
        if self.problems:
            head = f"NOT VERIFIED: {len(self.problems)} problem(s) found."
        elif self.key_source == "given":
            head = "Verified: the bundle is intact."
        elif self.bundle_key_accepted:
            head = "Consistent: the bundle is intact, checked against the key it carries."
        else:
            head = "NOT VERIFIED (no trusted key): the bundle is consistent with the key it carries."
        if self.checkpoint_size is None:
            proven = "no checkpoint verified, so no event is proven to be in the log"
        elif self.consistent:
            proven = f"each event proven against the checkpoint of size {self.checkpoint_size} (root {self.root})"
        else:
            proven = f"checked against the checkpoint of size {self.checkpoint_size} (root {self.root})"
        text = (f"{head} {_n(self.events, 'event')} in {_n(len(self.runs), 'run')} "
                f"(+{_n(self.system_events, 'system event')}), {_n(self.blobs, 'blob')}, "
                f"{_n(self.snapshots, 'snapshot')}, {proven}; took {self.seconds:.2f} s.\n{self.trust()}")
        if self.consistency:
            text += (f"\nThe log grew consistently from size {self.consistency['size1']} to the signed size "
                     f"{self.consistency['size2']} (root {self.consistency['root2']}).")
        how = {"checkpoint": "it is the bundle's own tree", "proof": "an RFC 9162 consistency proof",
               "given_proof": "an RFC 9162 consistency proof given with --proof-from-saved",
               "empty": "every log extends the empty tree"}
        for e in self.extends:
            if e["by"] == "newer":
                text += (f"\n{e['checkpoint'][:1].upper()}{e['checkpoint'][1:]} (size {e['size']}, root {e['root']}) "
                         "extends the bundle's log: it "
                         "was saved after the export, and the --consistency proof shows the log grew from the "
                         "bundle's checkpoint to it.")
                continue
            text += (f"\nThe bundle's log extends {e['checkpoint']} (size {e['size']}, root {e['root']}): "
                     f"{how[e['by']]}.")
        return text

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: ``ok`` as :attr:`ok` (False without a trusted key), with
        ``status``, ``consistent``, ``key_trusted``, ``key_source``, ``bundle_key`` and
        ``bundle_key_accepted`` saying why."""
        return {"ok": self.ok, "status": self.status, "consistent": self.consistent, "key_trusted": self.key_trusted,
                "events": self.events, "system_events": self.system_events, "runs": list(self.runs),
                "blobs": self.blobs, "snapshots": self.snapshots, "checkpoint_size": self.checkpoint_size,
                "root": self.root, "trusted_key": self.trusted_key, "key_source": self.key_source,
                "bundle_key": self.bundle_key, "bundle_key_accepted": self.bundle_key_accepted,
                "trust": self.trust(), "consistency": self.consistency, "extends": list(self.extends),
                "notes": list(self.notes),
                "seconds": round(self.seconds, 4), "problems": [p.to_dict() for p in self.problems]}


def parse_consistency(doc: Any) -> tuple[int, int, str, list[bytes]]:
    """(size1, size2, signed note of size2, proof hashes) from ``sealbox log prove`` JSON.

    Raises:
        ConfigError: not the shape ``sealbox log prove`` writes, or no signed checkpoint in it.
    """
    if not isinstance(doc, dict):
        raise ConfigError("the consistency proof is not a JSON object as written by `sealbox log prove`")
    size1, size2, note, proof = doc.get("size1"), doc.get("size2"), doc.get("checkpoint"), doc.get("proof")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (size1, size2)):
        raise ConfigError("the consistency proof needs integer size1 and size2")
    if not isinstance(note, str):
        raise ConfigError("the consistency proof carries no signed checkpoint of size2 "
                          "(run `sealbox log prove --from-size N` without --to-size)")
    if not isinstance(proof, list) or not all(isinstance(h, str) for h in proof):
        raise ConfigError("the consistency proof's `proof` must be a list of base64 hashes")
    try:
        hashes = [base64.b64decode(h, validate=True) for h in proof]
    except ValueError as exc:  # binascii.Error, or a character outside ASCII
        raise ConfigError(f"the consistency proof holds invalid base64: {exc}") from exc
    return size1, size2, note, hashes


def parse_saved_proof(doc: Any) -> tuple[int, int, list[bytes]]:
    """(size1, size2, proof hashes) from ``sealbox log prove --from-size N --to-size M`` JSON, a proof
    from a saved checkpoint's size ``N`` to a bundle's checkpoint size ``M``. Its ``checkpoint`` (may be
    null) is not used: the roots come from the saved checkpoint and the bundle's signed checkpoint.

    Raises:
        ConfigError: not the shape ``sealbox log prove`` writes.
    """
    if not isinstance(doc, dict):
        raise ConfigError("the consistency proof is not a JSON object as written by `sealbox log prove`")
    size1, size2, proof = doc.get("size1"), doc.get("size2"), doc.get("proof")
    if not all(isinstance(v, int) and not isinstance(v, bool) and 0 < v <= _MAX_LEAF for v in (size1, size2)):
        raise ConfigError("the consistency proof needs integer size1 and size2 (1 or more)")
    if not isinstance(proof, list) or not all(isinstance(h, str) for h in proof):
        raise ConfigError("the consistency proof's `proof` must be a list of base64 hashes")
    try:
        hashes = [base64.b64decode(h, validate=True) for h in proof]
    except ValueError as exc:  # binascii.Error, or a character outside ASCII
        raise ConfigError(f"the consistency proof holds invalid base64: {exc}") from exc
    return size1, size2, hashes


def verify_bundle(path: str | Path, *, trusted_vkey: str | None = None, consistency: Any = None,
                  trust_bundle_key: bool = False, checkpoints: Iterable[tuple[str, str]] = (),
                  saved_proofs: Iterable[tuple[str, Any]] = (), max_bytes: int = MAX_BUNDLE_BYTES) -> BundleReport:
    """Verify the bundle at ``path`` from its bytes alone.

    Args:
        path: the bundle file.
        trusted_vkey: the verifier key to trust (C2SP vkey), obtained from the log's owner
            separately from the bundle. Without it the checks run against the bundle's own key,
            which proves only self-consistency: the report is then not ``ok``
            (``status == "untrusted_key"``) unless ``trust_bundle_key``.
        consistency: a ``sealbox log prove`` document (already parsed JSON) proving
            that a newer signed checkpoint extends the bundle's (RFC 9162 §2.1.4.2).
        trust_bundle_key: accept the bundle's own key when no ``trusted_vkey`` is given (an
            integrity check only; :meth:`BundleReport.trust` says so).
        checkpoints: (where, signed note) of checkpoints saved earlier, outside the log (what
            ``sealbox log checkpoint`` printed); the bundle's log must extend each: signed by the
            same key, a size at most the bundle's, and the root at that size proven to be the saved
            one (the bundle's own checkpoint, or a consistency proof the bundle carries:
            ``sealbox export --prove-from``).
            A fork, a rollback or an unprovable one is a problem naming ``where``.
        saved_proofs: (where, ``sealbox log prove --from-size N --to-size M`` document, parsed JSON)
            proving a checkpoint of ``checkpoints`` (size ``N``) extended to the bundle's checkpoint
            (size ``M``), for a bundle that carries no such proof. Untrusted: each is verified
            against the saved root and the bundle's signed root (a proof of another size pair, one
            that fails, or one matching no saved checkpoint is a problem naming ``where``).
        max_bytes: the largest archive to hold in memory (:data:`MAX_BUNDLE_BYTES`). A canonical
            container (what ``sealbox export`` writes) is checked a chunk at a time from the file whatever
            its size (memory grows with its events, not its bytes; its members other than the line
            members, kept in memory, may total at most ``max_bytes``); another is held in memory, so one
            whose own headers describe more than ``max_bytes`` is refused before it is read.

    Returns:
        A :class:`BundleReport`; tampering is reported, never raised. The cyclic garbage collector
        is paused while the check runs (it keeps every event's envelope) and resumed after it.

    Raises:
        BundleFormatError: the file cannot be read, is not a Sealbox bundle at all, its headers
            describe an archive larger than ``max_bytes`` and it is not a canonical container, the
            memory ran out while checking it, or the
            file changed while it was being checked (its members are read twice when streamed).
        NoteError: ``trusted_vkey`` is not a valid verifier key.
        ConfigError: ``consistency`` or a ``saved_proofs`` document is not shaped like ``sealbox log
            prove`` output, two ``saved_proofs`` start at the same size, or both
            ``trusted_vkey`` and ``trust_bundle_key`` were given.
    """
    started = time.perf_counter()
    if trusted_vkey and trust_bundle_key:
        raise ConfigError("give a trusted key or trust the bundle's own key, not both")
    data, size, streamed = _read(Path(path), max_bytes)
    try:
        verifier = Verifier.from_vkey(trusted_vkey) if trusted_vkey else None
        proof_doc = parse_consistency(consistency) if consistency is not None else None
        given: dict[int, tuple[str, int, list[bytes]]] = {}
        for where, doc in saved_proofs:
            size1, size2, hashes = parse_saved_proof(doc)
            if size1 in given:
                raise ConfigError(f"{given[size1][0]} and {where} are both consistency proofs from size {size1}: "
                                  "give one")
            given[size1] = (where, size2, hashes)
    except BaseException:
        if streamed is not None:
            streamed[1].close()
        raise
    check = _Check(data, verifier, started, size, streamed)
    check.given_proofs = given
    # The check keeps every event's envelope (the run, call and grant checks need them): millions of
    # small dicts and lists, which the cyclic garbage collector would traverse again and again while
    # they are made (measured: ~40 % of the check's time at 100,000 events). They hold no cycles, so
    # it is paused for the check and resumed after it, as it was (then collecting any cycle it made).
    collecting = gc.isenabled()
    gc.disable()
    try:
        report = check.run(proof_doc, list(checkpoints))
    except MemoryError:  # content that parses into far more than its size (``[{},{},...]``): said, never a crash
        del check, data
        raise BundleFormatError(f"{path}: the memory available ran out while checking its {size} bytes (a line may "
                                "parse into far more memory than its size; give the check more memory to verify "
                                "it): not verified") from None
    finally:
        if collecting:
            gc.enable()
        if streamed is not None:
            streamed[1].close()
    return dataclasses.replace(report, path=str(path), bundle_key_accepted=trust_bundle_key and verifier is None)


def _not_a_bundle(path: Path, head: bytes, size: int) -> str:
    """The error line for a regular file given as the bundle to verify that is no ZIP archive: what it is when it is
    a store's file (its SQLite database, the private log.key, a verifier key) and what to give instead."""
    expected = "a Sealbox bundle"
    if head.startswith(b"SQLite format 3\x00"):
        return (f"{path} is a SQLite database (a store's sealbox.db), not {expected}: to verify the store, give its "
                f"folder: `sealbox verify {Path(path).parent} --key KEY`")
    text = head.lstrip(b"\xef\xbb\xbf")
    if text.startswith(b"PRIVATE+KEY+"):
        return (f"{path} is the log's private signing key (log.key), not {expected}: keep it secret; the log's "
                "verifier key is log.vkey beside it")
    if size <= 1024:  # a verifier key is one short line
        try:
            with open(path, "rb") as fh:
                Verifier.from_vkey(fh.read(1024).lstrip(b"\xef\xbb\xbf").decode("ascii").strip())
        except (OSError, UnicodeDecodeError, NoteError, ValueError):
            pass
        else:
            return (f"{path} is a verifier key, not {expected}: give it as --key, with the bundle or the store's "
                    f"folder to verify: `sealbox verify FILE --key {path}`")
    return f"{path} is not a Sealbox bundle (not a ZIP archive whose first member is `format`)"


def _read(path: Path, max_bytes: int = MAX_BUNDLE_BYTES) -> tuple[bytes, int, tuple[list, Any] | None]:
    """(the bytes of the ZIP archive in ``path``, the file's size, None), or, when the file is exactly a
    canonical bundle container (:func:`_stream_container`, read a chunk at a time), (``b""``, the file's
    size, (its members, the open file)): the members ``events.jsonl``, ``blobs.jsonl`` and
    ``snapshots.jsonl`` are then :class:`_FileMember` (read again, a chunk at a time, as they are
    checked), the others bytes. Otherwise only the archive its own headers
    describe is read (:func:`archive_extent`), plus one byte when more follows it: bytes after
    the archive's end record are reported by their count, never read, so a bundle padded with
    gigabytes is checked in the memory of the bundle. An archive that is not a canonical container and
    whose headers describe more than ``max_bytes`` is refused before any of it is read into memory
    (BundleFormatError)."""
    try:
        # without blocking: opening a FIFO that has no writer would wait for ever
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise BundleFormatError(f"{path} is not a regular file ({file_kind(st.st_mode)}): give the bundle "
                                    "file itself")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb") as f:
            size = st.st_size
            head = f.read(64)
            if head[:4] != b"PK\x03\x04" and head[30:36] != b"format":
                raise BundleFormatError(_not_a_bundle(path, head, size))
            n, exact = archive_extent(f, size)
            # A canonical container is checked a chunk at a time, whatever its size; only what the
            # in-memory path would hold is bounded by max_bytes.
            why = "its ZIP container is not exactly the one `sealbox export` writes"
            if exact and n == size:
                members = _stream_container(f, size, max_bytes)
                if not isinstance(members, str):
                    keep = os.fdopen(os.dup(f.fileno()), "rb")  # the members are read again from it
                    return b"", size, (members, keep)
                why = members
            if n > max_bytes:
                largest, many = _largest_member(f, n)
                raise BundleFormatError(
                    f"{path}: {why}, so `sealbox verify` would check it in memory (several times its size), and "
                    f"its ZIP headers describe an archive of {n} bytes"
                    + (f" in more than {MAX_MEMBERS} members (a bundle, a ZIP archive without ZIP64, holds at most "
                       f"{MAX_MEMBERS})" if many else f" (member {largest[0]!r}: {largest[1]} bytes)" if largest else "")
                    + f", more than the {max_bytes} bytes it holds (give --max-bundle-bytes to allow more): "
                    "not checked")
            f.seek(0)
            data = f.read(n + 1 if exact and n < size else n)
    except OSError as exc:
        raise BundleFormatError(f"cannot read {path}: {exc.strerror}") from exc
    return data, size, None


#: the members read a line at a time from the file when the container is canonical (:class:`_FileMember`)
_LINE_MEMBERS = ("events.jsonl", "blobs.jsonl", "snapshots.jsonl")
_CHUNK = 1 << 20


class _FileMember:
    """A member of a bundle file whose container is canonical, left in the file: ``offset`` and
    ``size`` of its data, ``hex`` (the SHA-256 of its bytes as the container check read them) and
    ``newline`` (whether it ends with one). :meth:`lines` reads it again a chunk at a time."""

    __slots__ = ("file", "offset", "size", "hex", "newline")

    def __init__(self, offset: int, size: int, hexdigest: str, newline: bool) -> None:
        self.file: Any = None
        self.offset, self.size, self.hex, self.newline = offset, size, hexdigest, newline

    def __len__(self) -> int:
        return self.size

    def __bool__(self) -> bool:
        return self.size > 0

    def endswith(self, suffix: bytes) -> bool:
        assert suffix == b"\n"
        return self.newline

    def lines(self) -> Any:
        """Its lines, without their newlines, as ``bytes.split(b"\n")`` gives them (the last one only
        when the member does not end with a newline). Raises BundleFormatError when the bytes read now
        are not those the container check read (the file changed meanwhile)."""
        f, left, digest = self.file, self.size, hashlib.sha256()
        f.seek(self.offset)
        pieces: list[bytes] = []  # a line begun in earlier chunks
        while left:
            chunk = f.read(min(_CHUNK, left))
            if not chunk:
                break
            left -= len(chunk)
            digest.update(chunk)
            parts = chunk.split(b"\n")
            if len(parts) == 1:
                pieces.append(chunk)
                continue
            if pieces:
                pieces.append(parts[0])
                parts[0] = b"".join(pieces)
                pieces = []
            pieces.append(parts.pop())
            yield from parts
        if left or digest.hexdigest() != self.hex:
            raise BundleFormatError("the bundle file changed while it was being checked: not verified")
        if self.size and not self.newline:
            yield b"".join(pieces)


def _canonical_layout(f: Any, size: int) -> list[tuple[str, int, int, int]] | None:
    """The members ``(name, CRC-32 its header declares, size, local header offset)`` of ``f`` (``size``
    bytes) when its headers alone are exactly those :func:`zip_bytes` writes for them (every local
    header, the central directory and the end record, nothing after it), found by seeking past member
    data (none of it is read); else None."""
    pos, entries = 0, []
    while True:
        f.seek(pos)
        head = f.read(_LOCAL_HEADER.size)
        if len(head) < _LOCAL_HEADER.size or head[:4] != b"PK\x03\x04":
            break
        fl = _LOCAL_HEADER.unpack(head)
        try:
            name = f.read(fl[9]).decode("ascii")
        except UnicodeDecodeError:
            return None
        n = fl[7]
        start = pos + _LOCAL_HEADER.size + fl[9]
        if (fl[10] or len(name) != fl[9] or start + n > size or len(entries) == MAX_MEMBERS
                or head + name.encode("ascii") != zip_local_header(name, fl[6], n)):
            return None
        entries.append((name, fl[6], n, pos))
        pos = start + n
    if not entries:
        return None
    directory = zip_directory(entries)
    if pos + len(directory) != size:
        return None
    f.seek(pos)
    if f.read(len(directory)) != directory:
        return None
    return entries


def _stream_container(f: Any, size: int, max_held: int) -> list[tuple[str, bytes | _FileMember]] | str:
    """The members of ``f`` (``size`` bytes) when it is exactly the canonical container of them
    (:func:`zip_bytes`: every local header, the central directory and the end record as it writes them,
    each CRC-32 that of the data, nothing after the end record), read a chunk at a time; else why not
    (the check then reads the archive into memory, to name what differs). The headers are checked first
    (:func:`_canonical_layout`, no member data read); then each member is read once: a line member
    (:data:`_LINE_MEMBERS`, a :class:`_FileMember`) holding a NUL byte, which no line of canonical JSON
    holds (a hole of a sparse file reads as NULs), is refused at the chunk that holds it, and the other
    members, kept as bytes, may total at most ``max_held`` bytes."""
    entries = _canonical_layout(f, size)
    if entries is None:
        return "its ZIP container is not exactly the one `sealbox export` writes"
    members: list[tuple[str, bytes | _FileMember]] = []
    held = 0
    for name, declared, n, pos in entries:
        start = pos + _LOCAL_HEADER.size + len(name)
        line_member = name in _LINE_MEMBERS
        if not line_member:
            held += n
            if held > max_held:
                return (f"its members other than {', '.join(_LINE_MEMBERS)} (held in memory) total more than "
                        f"{max_held} bytes")
        f.seek(start)
        crc, digest, kept, left, last = 0, hashlib.sha256(), [], n, b""
        while left:
            chunk = f.read(min(_CHUNK, left))
            if not chunk:
                return "the file ended inside a member"
            left -= len(chunk)
            crc = zlib.crc32(chunk, crc)
            if line_member:
                if b"\0" in chunk:
                    return f"its member {name!r} holds a NUL byte (no line of canonical JSON does)"
                digest.update(chunk)
                last = chunk[-1:]
            else:
                kept.append(chunk)
        if crc != declared:
            return f"the CRC-32 of its member {name!r} is not the one its headers declare"
        members.append((name, _FileMember(start, n, digest.hexdigest(), last == b"\n") if line_member
                        else b"".join(kept)))
    return members


def file_kind(mode: int) -> str:
    """What a path that is not a regular file is, for a message (``a FIFO``, ``a character device``…)."""
    for test, what in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return what
    return "not a regular file"


def _largest_member(f: Any, size: int) -> tuple[tuple[str, int] | None, bool]:
    """(name, size) of the largest member the local headers of ``f`` describe within ``size`` bytes
    (seeking past member data), or None when there is no local header; and whether there are more
    than :data:`MAX_MEMBERS` (the walk stops there: no bundle holds more)."""
    best, pos, count = None, 0, 0
    while pos + _LOCAL_HEADER.size <= size:
        if count == MAX_MEMBERS:
            f.seek(pos)
            return best, f.read(4) == b"PK\x03\x04"
        count += 1
        f.seek(pos)
        head = f.read(_LOCAL_HEADER.size)
        if len(head) < _LOCAL_HEADER.size or head[:4] != b"PK\x03\x04":
            break
        fl = _LOCAL_HEADER.unpack(head)
        name = f.read(fl[9]).decode("ascii", "replace")
        if best is None or fl[7] > best[1]:
            best = (name, fl[7])
        pos += _LOCAL_HEADER.size + fl[9] + fl[10] + fl[7]
    return best, False


def _lines(member: str, data: bytes | _FileMember, problems: list[Problem]) -> Iterable[bytes]:
    if data and not data.endswith(b"\n"):
        problems.append(Problem("bundle_line_malformed", "the member does not end with a newline", member=member))
    if isinstance(data, _FileMember):
        return data.lines()
    return data.split(b"\n")[:-1] if data.endswith(b"\n") else data.split(b"\n") if data else []


def nested_deeper(data: bytes, limit: int) -> bool:
    """Whether the JSON text ``data`` nests more than ``limit`` ``{``/``[`` deep (brackets
    inside strings do not count). Checked before parsing what a bundle holds, so that
    hostile nesting is reported as a problem instead of exhausting the parser's recursion."""
    if data.count(b"{") + data.count(b"[") <= limit:
        return False
    depth = 0
    for m in _BRACKET.finditer(_JSON_STRING.sub(b'""', data)):
        if m.group() in (b"{", b"["):
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def _splice(line: bytes, prefix: bytes, key: bytes) -> tuple[bytes, dict]:
    """Split ``{"<first>":RAW,"<key>":...}`` into RAW (verbatim) and the parsed rest."""
    cut = line.rfind(b',"' + key + b'":')
    if not line.startswith(prefix) or cut < 0:
        raise ValueError("not a line of this member")
    return line[len(prefix):cut], json.loads(b"{" + line[cut + 1:])


def _event_fields(line: bytes) -> tuple[bytes, int, list[bytes]]:
    raw, rest = _splice(line, b'{"event":', b"leaf_index")
    leaf, proof = rest.get("leaf_index"), rest.get("proof")
    if not isinstance(leaf, int) or isinstance(leaf, bool) or leaf < 0 or not isinstance(proof, list):
        raise ValueError("leaf_index or proof is missing or of the wrong type")
    if leaf > _MAX_LEAF:
        raise ValueError(f"leaf_index {leaf} is above 2**53 - 1, the largest a log can hold")
    if not all(isinstance(h, str) for h in proof):
        raise ValueError("the proof must be a list of base64 strings")
    hashes = [base64.b64decode(h, validate=True) for h in proof]
    if event_line(raw, leaf, hashes) != line + b"\n":
        raise ValueError("the line is not in canonical form")
    return raw, leaf, hashes


def _event_fields_fast(line: bytes) -> tuple[bytes, int, bytes] | None:
    """:func:`_event_fields` for a line whose proof is a list of canonical base64 32-byte hashes (what
    an export writes): the same result, the proof as its text between the brackets (:func:`_hashes`
    decodes it), or None for :func:`_event_fields` to read the line (and say what is wrong with it)."""
    cut = line.rfind(b',"leaf_index":')
    if cut < 0 or not line.startswith(b'{"event":'):
        return None
    m = _EVENT_TAIL.fullmatch(line, cut)
    if m is None:
        return None
    leaf = int(m.group(1))
    if leaf > _MAX_LEAF:
        return None
    return line[9:cut], leaf, m.group(2) or b""


def _hashes(body: bytes) -> list[bytes]:
    """The hashes of a proof's text as :func:`_event_fields_fast` gives it: ``"<44 base64>",`` per hash
    (47 bytes), less the last comma."""
    a2b = binascii.a2b_base64
    return [a2b(body[k:k + 44]) for k in range(1, len(body), 47)]


class _Inclusion:
    """Inclusion proofs of leaves in increasing order against one tree (``size``, ``root``), each
    proven by what the previous proven leaf's proof showed: above where the two leaves' paths meet,
    a proof must repeat the previous one, and below it, fold to the node the previous proof gave
    there. Exactly what folding the whole proof to the root checks (:func:`merkle.verify_inclusion`),
    with O(1) hashes per leaf on average for neighbouring leaves instead of O(log n). ``check`` says
    only True (proven); False leaves the verdict, and the message, to :func:`merkle.verify_inclusion`."""

    def __init__(self, size: int, root: bytes) -> None:
        self.size, self.root = size, root
        #: the last proven leaf: (index, proof, per tree level the step of its fold there: (hashes of the
        #: proof left above it, the node before the step, whether the proof's hash was the left child))
        self.prev: tuple[int, bytes, list[tuple[int, bytes, bool] | None]] | None = None

    def check(self, leaf: bytes, index: int, proof: bytes) -> bool:
        """Whether ``proof`` (32-byte hashes, leaf level first, as the text :func:`_hashes` reads: each hash
        decoded only when a step needs it, the rest compared as text, which is canonical) proves ``leaf``
        at ``index``: the steps
        of :func:`merkle.root_from_inclusion_proof`, up to the level where the previous proven leaf's
        path joins (its fold's node there is this leaf's left sibling)."""
        size = self.size
        if not 0 <= index < size or len(leaf) != merkle.HASH_SIZE:
            return False
        inner = (index ^ (size - 1)).bit_length()
        depth = inner + bin(index >> inner).count("1")  # merkle._inclusion_proof_length
        if (len(proof) + 1) // 47 != depth:
            return False
        prev = self.prev
        join = (index ^ prev[0]).bit_length() - 1 if prev is not None and prev[0] < index else -1
        steps: list[tuple[int, bytes, bool] | None] = [None] * ((size - 1).bit_length() + 1)  # per level
        sha, a2b = hashlib.sha256, binascii.a2b_base64
        fn, sn, r, level = index, size - 1, leaf, 0
        for s in range(depth):
            p = a2b(proof[47 * s + 1:47 * s + 45])
            if sn == 0:
                return False
            if fn & 1 or fn == sn:
                while not fn & 1:  # the last node of its level (fn == sn, fn > 0): it moves up unchanged
                    fn, sn, level = fn >> 1, sn >> 1, level + 1
                if level == join:  # the previous leaf's path joins here: the rest is what its proof showed
                    _, pproof, psteps = prev  # type: ignore[misc]
                    mine = psteps[level]
                    if mine is None or mine[2]:
                        return False
                    above, node, _ = mine
                    at = (len(pproof) + 1) // 47 - above  # the previous proof's hash at this level: this leaf's node
                    if (p != node or a2b(pproof[47 * at + 1:47 * at + 45]) != r
                            or proof[47 * s + 47:] != pproof[47 * at + 47:]):
                        return False
                    steps[level] = (depth - s, r, True)
                    steps[level + 1:] = psteps[level + 1:]  # the same nodes above
                    self.prev = (index, proof, steps)
                    return True
                steps[level] = (depth - s, r, True)
                r = sha(b"\x01" + p + r).digest()
            else:
                steps[level] = (depth - s, r, False)
                r = sha(b"\x01" + r + p).digest()
            fn, sn, level = fn >> 1, sn >> 1, level + 1
        if sn != 0 or r != self.root:
            return False
        self.prev = (index, proof, steps)
        return True


def _blob_fields(line: bytes) -> tuple[str, bytes | None, bytes | None]:
    cut = line.rfind(b',"ref":')
    m = _BLOB_TAIL.fullmatch(line, cut) if cut > 0 and line.startswith(b'{"content":') else None
    if m is not None:  # as an export writes it (blob_line): nothing to re-encode
        content, salt = line[11:cut], m.group(2)
        return (m.group(1).decode("ascii"), None if salt is None else bytes.fromhex(salt.decode("ascii")),
                None if content == b"null" else content)
    content, rest = _splice(line, b'{"content":', b"ref")
    ref, salt = rest.get("ref"), rest.get("salt")
    if not isinstance(ref, str) or not (salt is None or isinstance(salt, str)):
        raise ValueError("ref or salt is missing or of the wrong type")
    row = (ref, None if salt is None else bytes.fromhex(salt), None if content == b"null" else content)
    if blob_line(*row) != line + b"\n":
        raise ValueError("the line is not in canonical form")
    return row


def _snapshot_fields(line: bytes) -> tuple[str, bytes]:
    content, rest = _splice(line, b'{"content":', b"fingerprint")
    fp = rest.get("fingerprint")
    if not isinstance(fp, str) or snapshot_line(fp, content) != line + b"\n":
        raise ValueError("the line is not in canonical form")
    return fp, content


def _common_prefix(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    lo = 0
    step = 1 << 16
    while lo < n and a[lo:lo + step] == b[lo:lo + step]:
        lo += step
    while lo < n and a[lo] == b[lo]:
        lo += 1
    return min(lo, n)


class _Check:
    """One verification of one bundle's bytes."""

    def __init__(self, data: bytes, verifier: Verifier | None, started: float, size: int | None = None,
                 streamed: tuple[list, Any] | None = None) -> None:
        self.data, self.verifier, self.started = data, verifier, started
        self.size = len(data) if size is None else size  # the file's; ``data`` may be its first bytes only
        self.problems: list[Problem] = []
        self.members: dict[str, Any] = {}  # bytes, or a _FileMember of a canonical container (streamed)
        self.streamed = streamed
        self.cp: Checkpoint | None = None
        self.ev = EventVerifier()
        #: (leaf, envelope) of the events the checks after the events read (:data:`_ENV_KINDS`), in line order
        self.envs: list[tuple[int, dict]] = []
        self.leaf_lines: dict[int, int] = {}  # leaf index -> its line of events.jsonl
        self._runs: list[dict[str, Any]] | None = None  # run_entries of every event, once the events are read
        self._run_rows: dict[str, dict[str, Any]] = {}  # run_entries, one event at a time (_keep)
        self._system_events = 0
        self._strings: dict[str, str] = {}  # one copy of each run id, principal, server, tool… of the kept calls
        self._export: bytes | None = None  # the export digest of the content members
        self._hashed: dict[int, tuple[bytes, str]] = {}  # id(bytes) -> (bytes, hex SHA-256): see _hexdigest
        self._inclusion: _Inclusion | None = None  # proofs checked against the checkpoint, leaf by leaf
        self.bundle_key: str | None = None
        self.version: int | None = None  # FORMATS[format member], None when it is no known format
        self.notes: list[str] = []
        self._proof_rows: dict[int, list[bytes]] | None = None  # the PROOFS member, by size1
        #: proofs given beside the bundle (``--proof-from-saved``), by size1: (where, size2, hashes)
        self.given_proofs: dict[int, tuple[str, int, list[bytes]]] = {}
        self.compressed = False  # members compressed (not stored): none was checked (:meth:`_container`)

    def run(self, proof_doc: tuple | None, saved: list[tuple[str, str]] | None = None) -> BundleReport:
        if not self._container():
            # No member could be read: every member check would report what it did not find as a false
            # statement about the member (its format, key, signature, manifest), so the container's is the one.
            return BundleReport(problems=tuple(self.problems), events=0, system_events=0, runs=(), blobs=0,
                                snapshots=0, checkpoint_size=None, root=None,
                                trusted_key=self.verifier.vkey if self.verifier else None,
                                key_source="given" if self.verifier else "bundle",
                                seconds=time.perf_counter() - self.started, consistency=None, notes=(),
                                bundle_key=None, extends=(), unreadable=True,
                                unchecked="was checked (they are compressed)" if self.compressed else "could be read")
        self.version = FORMATS.get(self.members.get("format", b""))
        if self.version is None:
            newer = re.fullmatch(rb"sealbox-bundle/([1-9][0-9]{0,8})\n", self.members.get("format", b""))
            if newer and int(newer.group(1)) > max(FORMATS.values()):  # not tampering as far as this Sealbox can tell
                self._problem("bundle_format", f"the format member is `sealbox-bundle/{int(newer.group(1))}`, written "
                              "by a newer Sealbox than this one, which reads `sealbox-bundle/2` and the older "
                              "`sealbox-bundle/1`: verify it with a current Sealbox", "format")
            else:
                self._problem("bundle_format", "the format member is not `sealbox-bundle/2` (nor the older "
                              "`sealbox-bundle/1`)", "format")
        key_source = self._key()
        self._checkpoint()
        self._events()
        blobs, erased_blobs = self._blobs()
        snaps = self._snapshots()
        self.problems.extend(self._named(check_approval_answers(self.ev.envelopes_by_kind)))
        self._authorization()
        self._manifest(blobs, erased_blobs, snaps)
        self._export_digest()
        consistency = self._consistency(proof_doc) if proof_doc is not None else None
        self._proofs()  # a malformed proof line is reported even when no checkpoint is compared
        extends = tuple(self._saved(saved or [], consistency))
        runs = tuple({"run_id": r["run_id"], "agent": r["agent"], "events": r["events"], "status": r["last_kind"]}
                     for r in self._run_entries())
        notes = tuple(f"run {r['run_id']} has no run.ended: it was open when exported (last event {r['status']}), "
                      "or its last events were left out" for r in runs if r["status"] != "run.ended") + tuple(self.notes)
        return BundleReport(
            problems=tuple(self.problems), events=sum(r["events"] for r in runs),
            system_events=self._system_events, runs=runs,
            blobs=blobs, snapshots=len(snaps), checkpoint_size=self.cp.size if self.cp else None,
            root="sha256:" + self.cp.root.hex() if self.cp else None,
            trusted_key=self.verifier.vkey if self.verifier else None, key_source=key_source,
            seconds=time.perf_counter() - self.started, consistency=consistency, notes=notes,
            bundle_key=self.bundle_key, extends=extends)

    def _run_entries(self) -> list[dict[str, Any]]:
        """:func:`run_entries` of the bundle's events (computed once, after :meth:`_events`; not to be changed)."""
        if self._runs is None:
            self._runs = list(self._run_rows.values())
        return self._runs

    def _keep(self, leaf: int, env: dict) -> None:
        """Count a readable event for the manifest's runs (:func:`run_entries`, one event at a time) and the
        system events; keep its envelope only when a later check reads it (:data:`_ENV_KINDS`)."""
        run_id, kind = env["run_id"], env["kind"]
        if run_id == SYSTEM_RUN_ID:
            self._system_events += 1
        else:
            r = self._run_rows.get(run_id)
            if r is None:
                r = self._run_rows[run_id] = {"run_id": run_id, "agent": None, "events": 0, "first_leaf": leaf,
                                              "last_leaf": leaf, "last_kind": None}
            if kind == "run.started" and isinstance(env["payload"].get("agent"), str):
                r["agent"] = env["payload"]["agent"]
            r["events"] += 1
            r["last_leaf"], r["last_kind"] = leaf, kind
        if kind in _SLIM:  # most events of a bundle: only the fields the call checks read are kept
            strings, p = self._strings, env["payload"]
            env = {"kind": kind, "payload": {k: strings.setdefault(v, v) if type(v) is str else v
                                             for k, v in p.items() if k in _SLIM[kind]},
                   "principal": strings.setdefault(env["principal"], env["principal"]),
                   "run_id": strings.setdefault(run_id, run_id), "run_seq": env["run_seq"], "step": env["step"],
                   "ts": env["ts"]}
            self.envs.append((leaf, env))
        elif kind in _ENV_KINDS:
            self.envs.append((leaf, env))

    def _digest(self) -> bytes:
        """:func:`export_digest` of the content members (computed once)."""
        if self._export is None:
            self._export = export_digest([(n, self.members.get(n, b"")) for n in DIGESTED], self._hexdigest)
        return self._export

    def _hexdigest(self, data: bytes | _FileMember) -> str:
        """The hex SHA-256 of ``data``, each member hashed once (for the export digest and the manifest)."""
        if isinstance(data, _FileMember):
            return data.hex
        known = self._hashed.get(id(data))
        if known is None or known[0] is not data:
            known = self._hashed[id(data)] = (data, hashlib.sha256(data).hexdigest())
        return known[1]

    def _format_text(self) -> bytes:
        """The bundle's ``format`` member when it is a known format (:data:`FORMATS`), else the current one."""
        text = self.members.get("format", b"")
        return text if text in FORMATS else FORMAT_TEXT

    def _problem(self, code: str, message: str, member: str, **kw: Any) -> None:
        self.problems.append(Problem(code, message, member=member, **kw))

    # -------------------------------------------------------------- container and members

    def _container(self) -> bool:
        """Read the members (False: none could be read, the problem is recorded)."""
        if self.streamed is not None:  # the file is exactly the canonical container of its members
            best = self.streamed[0]
            for _, data in best:
                if isinstance(data, _FileMember):
                    data.file = self.streamed[1]
            self._member_names(best)
            return True
        candidates = read_members(self.data)
        if not candidates:
            self._problem("bundle_container", f"the ZIP structure cannot be read: {unreadable_reason(self.data, self.size)}",
                          "the ZIP container")
            return False
        built: list[tuple[bytes, list[tuple[str, bytes]]]] = []  # (canonical container, members) per candidate
        for m in candidates:
            if not built or m != built[0][1]:  # both readers found the same members: rebuilt once
                built.append((zip_bytes(m), m))
        rebuilt, best = max(built, key=lambda b: (_common_prefix(b[0], self.data), -len(b[1])))
        if rebuilt != self.data:
            at = _common_prefix(rebuilt, self.data)
            if at >= len(rebuilt):
                what = f"{self.size - len(rebuilt)} byte(s) after the end of the ZIP archive"
            elif at >= self.size:
                what = f"the file ends at byte {self.size} (it was truncated)"
            else:
                what = next(w for s, e, w in zip_regions(best) if s <= at < e)
            packed = compressed_members(self.data)
            why = ""
            if packed:  # their bytes are not their content: every member check would only report noise
                names = ", ".join(repr(n) for n, _ in packed[:_LISTED]) + (f", … ({len(packed)} members)"
                                                                          if len(packed) > _LISTED else "")
                methods = sorted({m for _, m in packed})
                why = (f": its member{'s' if len(packed) > 1 else ''} {names} {'are' if len(packed) > 1 else 'is'} "
                       f"compressed (method {'; '.join(map(method_name, methods))}), but a bundle's members are "
                       "stored (method 0), so no member was checked (a bundle re-zipped after export, e.g. by an "
                       "archive or mail tool: verify the file `sealbox export` wrote)")
            self._problem("bundle_container", f"the file differs from the canonical bundle container at byte {at}"
                          + why,
                          what, expected=f"0x{rebuilt[at]:02x}" if at < len(rebuilt) else "end of file",
                          found=f"0x{self.data[at]:02x}" if at < len(self.data) else "end of file")
            if packed:
                self.compressed = True
                return False
        self._member_names(best)
        return True

    def _member_names(self, best: list[tuple[str, Any]]) -> None:
        """The member list's checks (unknown, repeated, missing members, their order); keeps the members."""
        names = [n for n, _ in best]
        known = (*MEMBERS, PROOFS)  # the last one optional
        counts = collections.Counter(names)  # each name counted once: a hostile file may hold 65,535 members
        odd = [n for n in counts if n not in known or counts[n] > 1]
        for name in odd[:_LISTED - 1] if len(odd) > _LISTED else odd:
            shown = shown_name(name)
            what = repr(name) if shown == name else f"{shown} (a name that is not ASCII)"
            self._problem("bundle_member_unknown", f"member {what} is repeated ({counts[name]} times)"
                          if name in known or counts[name] > 1 else f"member {what} is not part of the format",
                          shown)
        if len(odd) > _LISTED:
            self._problem("bundle_member_unknown", f"{len(odd) - _LISTED + 1} more members are not part of the format "
                          "or are repeated",
                          "the ZIP container")
        for name in MEMBERS:
            if name not in names:
                self._problem("bundle_member_missing", f"member {name!r} is missing", name)
        if [n for n in names if n in known] != [n for n in known if n in names]:
            self._problem("bundle_member_order", "the members are not in the format's order",
                          "the ZIP container", expected=", ".join(n for n in known if n in MEMBERS or n in names),
                          found=", ".join(map(shown_name, names)) if len(names) <= _LISTED
                          else ", ".join(map(shown_name, names[:_LISTED])) + f", … ({len(names)} members)")
        for name, data in best:
            self.members.setdefault(name, data)

    def _key(self) -> str:
        text = self.members.get("log.vkey", b"")
        try:
            try:
                bundle_key = text.decode("ascii")
            except UnicodeDecodeError as exc:
                raise ValueError(f"it is not ASCII text (byte {exc.start + 1} is 0x{text[exc.start]:02x})") from None
            if bundle_key.endswith("\r\n") and "\n" not in bundle_key[:-1]:
                raise ValueError("its line ends in CRLF (\\r\\n); a verifier key is one line ending in \\n")
            if not bundle_key.endswith("\n") or "\n" in bundle_key[:-1]:
                raise ValueError("not one line")
            bundle_vkey = Verifier.from_vkey(bundle_key[:-1])
        except (ValueError, NoteError) as exc:
            self._problem("bundle_key", f"the bundle's verifier key is malformed: {exc}", "log.vkey")
            bundle_vkey = None
        self.bundle_key = bundle_vkey.vkey if bundle_vkey is not None else None
        if self.verifier is not None:
            if bundle_vkey is not None and bundle_vkey != self.verifier:
                v, b = self.verifier, bundle_vkey  # C2SP signed note: a key is its name and key id
                whose = (f"it is a key of the log {b.name} (key id {b.key_id.hex()}), the key you trust one of the "
                         f"log {v.name} (key id {v.key_id.hex()}): the bundle is another log's, or the key is"
                         if b.name != v.name else
                         f"both name the log {v.name}, with the key ids {b.key_id.hex()} (the bundle's) and "
                         f"{v.key_id.hex()} (yours): the bundle was signed again with another key, or yours is")
                self._problem("bundle_key_mismatch", f"the bundle's verifier key is not the key you trust: {whose} "
                              "not this log's",
                              "log.vkey", expected=self.verifier.vkey, found=bundle_vkey.vkey)
            return "given"
        self.verifier = bundle_vkey
        return "bundle"

    def _checkpoint(self) -> None:
        try:
            note = self.members.get("checkpoint", b"").decode("utf-8")
        except UnicodeDecodeError:
            self._problem("checkpoint_signature", "the checkpoint is not UTF-8 text", "checkpoint")
            return
        problems, good = open_checkpoints([("the bundle's checkpoint", note)], self.verifier, None)
        self.problems.extend(dataclasses.replace(p, member="checkpoint") for p in problems)
        self.cp = good[0][1] if good else None
        if self.cp is not None:
            # An export signs its checkpoint with the log's key alone: one signature line. A note verifies with
            # other lines beside it (witness cosignatures, unknown keys), so any added after the export
            # (a made-up witness, a line under the log's name, the log's own line again) must be caught here.
            lines = parse_note(note).signatures
            if len(lines) != 1:
                self._problem("checkpoint_signature", f"the checkpoint carries {len(lines)} signature lines "
                              f"(by {', '.join(f'{sig.name}+{sig.key_id.hex()}' for sig in lines)}); an export "
                              "signs it with the log's key alone, so the others were added to the bundle after "
                              "it was written", "checkpoint", expected="1 signature line",
                              found=f"{len(lines)} signature lines")

    # -------------------------------------------------------------- events

    def _events(self) -> None:
        last = -1
        # lines read by _event_fields_fast, in increasing leaf order, not yet checked: (where, raw, leaf, proof text)
        pending: list[tuple[str, bytes, int, bytes]] = []
        for n, line in enumerate(_lines("events.jsonl", self.members.get("events.jsonl", b""), self.problems), 1):
            where = f"events.jsonl line {n}"
            deep = nested_deeper(line, LINE_DEPTH)
            fields = None if deep else _event_fields_fast(line)
            if fields is not None and fields[1] > last:  # nothing to report on the line itself
                last = fields[1]
                self.leaf_lines[last] = n
                pending.append((where, *fields))
                if len(pending) == 4096:
                    self._check_pending(pending)
                continue
            self._check_pending(pending)  # (what is reported on this line follows the events before it)
            if deep:
                self._problem("bundle_line_malformed", _too_deep("the line", LINE_DEPTH), where)
                continue
            try:
                raw, leaf_index, proof = fields if fields is not None else _event_fields(line)  # type: ignore[assignment]
            except (ValueError, binascii.Error) as exc:
                self._problem("bundle_line_malformed", f"the line cannot be read: {exc}", where)
                continue
            if leaf_index <= last:
                self._problem("bundle_order", "events are not in strictly increasing leaf order", where,
                              leaf_index=leaf_index, expected=f"a leaf above {last}", found=str(leaf_index))
            last = max(last, leaf_index)
            self.leaf_lines[leaf_index] = n
            self._event(raw, leaf_index, proof, where)
        self._check_pending(pending)

    def _check_pending(self, pending: list[tuple[str, bytes, int, bytes]]) -> None:
        """:meth:`_event` for each pending line, in order (then none is pending): the events checked by
        :meth:`EventVerifier.try_events` as long as they pass, then one by :meth:`_event`, and so on."""
        if not pending:
            return
        sha = hashlib.sha256
        leaves = [sha(b"\x00" + p[1]).digest() for p in pending]  # merkle.leaf_hash
        rows = [(p[2], p[1], None, None) for p in pending]
        i = 0
        while i < len(pending):
            envs = self.ev.try_events(rows[i:i + 256], leaves[i:i + 256])  # (a bounded copy each time)
            for env in envs:
                where, _, leaf_index, proof = pending[i]
                self._keep(leaf_index, env)
                self._prove(leaves[i], leaf_index, proof, env, where)
                i += 1
            if i < len(pending):
                where, raw, leaf_index, proof = pending[i]
                self._event(raw, leaf_index, proof, where, leaves[i], fast=False)
                i += 1
        pending.clear()

    def _event(self, raw: bytes, leaf_index: int, proof: list[bytes] | bytes, where: str, leaf: bytes | None = None,
               fast: bool = True) -> None:
        if leaf is None:
            leaf = hashlib.sha256(b"\x00" + raw).digest()  # merkle.leaf_hash
        env = self.ev.try_events([(leaf_index, raw, None, None)], [leaf]) if fast else None
        if env:
            env = env[0]
            self._keep(leaf_index, env)
        else:
            checked = self._event_full(raw, leaf_index, leaf, where)
            if checked is False:
                return
            env = checked
        self._prove(leaf, leaf_index, proof, env, where)

    def _prove(self, leaf: bytes, leaf_index: int, proof: list[bytes] | bytes, env: dict | None, where: str) -> None:
        """The event's inclusion proof (its hashes, or their text as :func:`_event_fields_fast` gives it)
        against the checkpoint (when it verified)."""
        if self.cp is None:
            return
        if type(proof) is bytes:
            if self._inclusion is None or self._inclusion.size != self.cp.size:
                self._inclusion = _Inclusion(self.cp.size, self.cp.root)
            if self._inclusion.check(leaf, leaf_index, proof):
                return
            proof = _hashes(proof)
        try:
            merkle.verify_inclusion(leaf, leaf_index, self.cp.size, proof, self.cp.root)
        except ProofError as exc:
            loc = (env["run_id"], env["run_seq"], env["kind"]) if env else (None, None, None)
            self.problems.append(Problem(
                "inclusion_proof", f"the event is not proven to be leaf {leaf_index} of the signed log "
                f"(its bytes, leaf index or proof were changed): {exc}", *loc, leaf_index, member=where))

    def _event_full(self, raw: bytes, leaf_index: int, leaf: bytes, where: str) -> dict | None | bool:
        """The full checks of one event (those :meth:`EventVerifier.try_event` did not pass): its envelope
        (None when unreadable), or False when its kind is not a string (no other check runs on it)."""
        try:
            doc = json.loads(raw)
            run_id, kind = doc.get("run_id"), doc.get("kind")
        except (ValueError, AttributeError):
            run_id = kind = None
        if kind is not None and not isinstance(kind, str):  # (the event checks would need it hashable)
            self.problems.append(Problem("event_malformed", "the event's bytes are not a valid event: "
                                         f"kind must be a string, not {type(kind).__name__}",
                                         leaf_index=leaf_index, member=where))
            return False
        before = len(self.ev.problems)
        env = self.ev.check_event(leaf_index, raw, leaf, contiguous=False, chain=run_id != SYSTEM_RUN_ID)
        self.problems.extend(dataclasses.replace(p, member=where) for p in self.ev.problems[before:])
        if env is not None:
            self._keep(leaf_index, env)
        return env

    def _named(self, problems: Iterable[Problem]) -> list[Problem]:
        lines = self.leaf_lines
        return [dataclasses.replace(p, member=f"events.jsonl line {lines[p.leaf_index]}" if p.leaf_index in lines
                                    else "events.jsonl") for p in problems]

    # -------------------------------------------------------------- authorization evidence

    def _authorization(self) -> None:
        """The store's checks (:mod:`sealbox.verify`) on the grants, revocation steps, tool changes and
        re-approvals the bundle carries, in the order ``sealbox verify`` runs them on a store; then what
        the calls rely on that the bundle lacks."""
        by_kind = self.ev.envelopes_by_kind
        origin = self.cp.origin if self.cp is not None else self.verifier.name if self.verifier is not None else ""
        unproven = self._tool_changes_missing()
        granted = {env["payload"].get("grant_id") for _, env in by_kind.get("access.granted", [])
                   if env.get("run_id") == SYSTEM_RUN_ID and isinstance(env.get("payload"), dict)}
        steps = {leaf: env["payload"].get("grant_id") for leaf, env in by_kind.get("access.revoked", [])
                 if isinstance(env.get("payload"), dict)}
        for check in (check_reapprovals, check_grants, check_revocations, check_rotations):
            problems, notes = check(by_kind, origin)
            for p in problems:
                if p.code in ("reapproval_binding", "tool_revocation_binding") and p.leaf_index in unproven:
                    continue  # reported as bundle_tool_change_missing
                if p.code == "revocation_binding" and steps.get(p.leaf_index) not in granted:
                    # an exporter carries the steps of the grants it carries: this step's grant was left out
                    p = dataclasses.replace(p, code="bundle_grant_missing", message=(
                        f"the revocation step names grant {steps[p.leaf_index]}, which is not in the bundle: its "
                        "access.granted was left out"))
                self.problems.extend(self._named([p]))
            self.notes.extend(notes)
        calls, stopped = self._calls()
        compromised = compromised_grants(by_kind, origin)
        if compromised:
            self.notes.extend(compromised_call_notes(
                [(leaf, env["run_id"], env["payload"].get("call_id"), env["payload"].get("grant"),
                  "deny" if (env["run_id"], env["payload"].get("call_id")) in stopped else None)
                 for leaf, env in calls], compromised))
        self.notes.extend(compromised_answer_notes(by_kind))
        self._grants_missing(granted, calls, stopped)
        self._calls_under_grants(origin)
        self._call_steps()
        if self.version != 1 and by_kind.get("tools.changed"):
            self._reapprovals_missing(origin, stopped)

    def _calls(self) -> tuple[list[tuple[int, dict]], set[tuple]]:
        """The bundle's ``tool.call`` envelopes (leaf, envelope), and the (run, call_id) of the calls a
        ``policy.decision`` of which does not let through (:func:`sealbox.verify.lets_through`)."""
        stopped: set[tuple] = set()
        calls: list[tuple[int, dict]] = []
        for leaf, env in self.envs:
            if env["run_id"] == SYSTEM_RUN_ID:
                continue
            if env["kind"] == "policy.decision":
                if not lets_through(env["payload"]):
                    stopped.add((env["run_id"], env["payload"].get("call_id")))
            elif env["kind"] == "tool.call":
                calls.append((leaf, env))
        return calls, stopped

    @staticmethod
    def _ran(env: dict, stopped: set[tuple]) -> bool:
        """Whether a call ran under a live Sealbox decision: every decision recorded for it lets it
        through (:func:`sealbox.verify.lets_through`: not denied, not imported, not served by a replay)."""
        return (env["run_id"], env["payload"].get("call_id")) not in stopped

    def _call_steps(self) -> None:
        """``call_step_duplicate`` for each ``tool.call`` of a run that has one at its step already: the check
        ``sealbox verify`` runs on a store (:class:`sealbox.verify.CallStepCheck`)."""
        check = CallStepCheck()
        for leaf, env in sorted(self.envs, key=lambda item: item[0]):
            if env["kind"] in CALL_STEP_KINDS:
                check.add(leaf, env)
        self.problems.extend(self._named(check.problems))

    def _calls_under_grants(self, origin: str) -> None:
        """``call_grant_invalid`` for each call that ran although the grant it names, as the bundle holds
        it, did not authorize it at the call's leaf: the check ``sealbox verify`` runs on a store
        (:class:`sealbox.verify.CallGrantCheck`, fed the bundle's events in leaf order). A call whose grant
        the bundle lacks is left to :meth:`_grants_missing` (``bundle_grant_missing``)."""
        check = CallGrantCheck(origin, absent=False)
        for leaf, env in sorted(self.envs, key=lambda item: item[0]):
            if env["kind"] in CALL_GRANT_KINDS:
                check.add(leaf, env)
        self.problems.extend(self._named(check.finish()))

    def _reapprovals_missing(self, origin: str, stopped: set[tuple]) -> None:
        """Note each call that was not denied although, replaying the bundle's tool changes and
        re-approvals as the gateway's pin state does (:class:`sealbox.gateway.pinning.PinState`), its
        tool's latest recorded definition was not approved at the call's leaf. A note, not a problem:
        calls recorded by the SDK are not pinned, and a gateway decides on the listing it saw."""
        from sealbox.gateway.pinning import PIN_KINDS, PinState
        from sealbox.verify import _Kept

        state = PinState(origin=origin)
        for leaf, env in self.envs:
            if env["run_id"] == SYSTEM_RUN_ID:
                if env["kind"] in PIN_KINDS:
                    state.apply([_Kept(leaf, env)])
                continue
            if env["kind"] != "tool.call" or not self._ran(env, stopped):
                continue
            p = env["payload"]
            key = (p.get("server"), p.get("tool"))
            if key not in state.known or state.known[key] in state.approved_hashes.get(key, ()):
                continue
            self.notes.append(
                f"call {p.get('call_id')} of {key[0]}/{key[1]} in run {env['run_id']} (leaf {leaf}) was not denied, "
                f"though the bundle shows that tool changed (tools.changed at leaf {state.known_leaf.get(key)}) and "
                "holds no re-approval of its definition that counts before the call: if the call went through a "
                "Sealbox gateway, the re-approval it relied on is not in the bundle (calls recorded by the SDK are "
                "not pinned)")

    def _tool_changes_missing(self) -> set[int]:
        """Leaves of re-approvals whose ``change_leaf`` (the ``tools.changed`` that recorded the approved
        definition) is not in the bundle, reported as ``bundle_tool_change_missing`` (an exporter carries
        every ``tools.changed`` of a server its runs called, so a re-approval's change comes with it)."""
        out: set[int] = set()
        for leaf, env in sorted(self.ev.envelopes_by_kind.get("tool.reapproved", [])
                                + self.ev.envelopes_by_kind.get("tool.revoked", []), key=lambda x: x[0]):
            p = env.get("payload")
            change = p.get("change_leaf") if isinstance(p, dict) and env.get("run_id") == SYSTEM_RUN_ID else None
            if not isinstance(change, int) or isinstance(change, bool) or change >= leaf or change in self.leaf_lines:
                continue
            out.add(leaf)
            self.problems.extend(self._named([Problem(
                "bundle_tool_change_missing", f"the {'revocation' if env.get('kind') == 'tool.revoked' else 're-approval'} "
                f"of {p.get('server')}/{p.get('tool')} names the "
                f"tools.changed at leaf {change}, which is not in the bundle: what it approved cannot be checked "
                "(that event was left out)", env.get("run_id"), env.get("run_seq"), env.get("kind"), leaf)]))
        return out

    def _grants_missing(self, granted: set, calls: list[tuple[int, dict]], stopped: set[tuple]) -> None:
        """Every call that was not denied and names an explicit grant needs that grant's ``access.granted``
        in a ``sealbox-bundle/2`` bundle (``bundle_grant_missing``); a ``sealbox-bundle/1`` bundle carries
        none, which is a note. A denied call (the grant authorized nothing: it may not even exist) and an
        imported one (decided by no Sealbox policy, reason code ``imported``) need none."""
        from sealbox.access import is_implicit

        named: dict[str, list[tuple[int, dict]]] = {}
        for leaf, env in calls:
            grant = env["payload"].get("grant")
            if isinstance(grant, str) and not is_implicit(grant) and grant not in granted and self._ran(env, stopped):
                named.setdefault(grant, []).append((leaf, env))
        if self.version == 1:
            if calls:
                grants = (f"grant{'s' if len(named) > 1 else ''} {', '.join(sorted(named))} named by its calls, and "
                          "the tool changes and re-approvals of the tools they called," if named else
                          "the tool changes and re-approvals of the tools its calls named")
                self.notes.append("this bundle is sealbox-bundle/1, written before bundles carried the authorization "
                                  f"evidence of their calls: {grants} could not be checked (verify the store, or "
                                  "export again with a current Sealbox)")
            return
        problems = [Problem("bundle_grant_missing", f"the call names grant {grant}, which is not in the bundle: the "
                            "bundle does not carry the evidence that authorized it (its access.granted was left out)",
                            env["run_id"], env["run_seq"], env["kind"], leaf)
                    for grant, items in named.items() for leaf, env in items]
        self.problems.extend(self._named(sorted(problems, key=lambda p: p.leaf_index or 0)))

    # -------------------------------------------------------------- blobs and snapshots

    def _rows(self, member: str, parse: Any) -> tuple[list[tuple], dict[str, str]]:
        where: dict[str, str] = {}
        return list(self._iter_rows(member, parse, where)), where

    def _iter_rows(self, member: str, parse: Any, where: dict[str, str]) -> Iterable[tuple]:
        """The rows of ``member`` parsed by ``parse``, one at a time as its lines are read (a line that cannot
        be read, or out of order, is reported as it comes); ``where`` gets each row's line by its hash."""
        last = None
        for n, line in enumerate(_lines(member, self.members.get(member, b""), self.problems), 1):
            if nested_deeper(line, LINE_DEPTH):
                self._problem("bundle_line_malformed", _too_deep("the line", LINE_DEPTH), f"{member} line {n}")
                continue
            try:
                row = parse(line)
            except (ValueError, binascii.Error) as exc:
                self._problem("bundle_line_malformed", f"the line cannot be read: {exc}", f"{member} line {n}")
                continue
            if last is not None and row[0] <= last:
                self._problem("bundle_order", "lines are not in strictly increasing order of their hash",
                              f"{member} line {n}", expected=f"a hash above {last}", found=row[0])
            last = row[0]
            where[row[0]] = f"{member} line {n}"
            yield row

    def _locate(self, problems: Iterable[Problem], where: dict[str, str], member: str) -> list[Problem]:
        out = []
        for p in problems:
            refs = _REF.findall(p.message)
            out.append(dataclasses.replace(p, member=next((where[r] for r in refs if r in where), member)))
        return out

    def _blobs(self) -> tuple[int, int]:
        """Check the blobs a line at a time (no blob's content is kept); (how many lines were read as
        blobs, how many of those are erased)."""
        where: dict[str, str] = {}
        counts = collections.Counter()  # lines read as blobs per ref
        erased_rows = 0

        refs_of: dict[str, list[str]] = {}
        # the content of each blob check_blobs did not read the references of (refs_of), for the walk below
        contents: dict[str, bytes | None] = {}

        def rows() -> Iterable[tuple]:
            nonlocal erased_rows
            before = None
            for row in self._iter_rows("blobs.jsonl", _blob_fields, where):
                if before is not None and before in refs_of:  # check_blobs read the row before
                    contents.pop(before, None)
                counts[row[0]] += 1
                erased_rows += row[2] is None
                contents[row[0]] = row[2]
                before = row[0]
                yield row
            if before is not None and before in refs_of:
                contents.pop(before, None)

        erased = {env["payload"]["blob"] for _, env in self.ev.envelopes_by_kind.get("content.erased", [])}
        problems, _ = check_blobs(rows(), self.ev.refs, erased, refs_of)
        self.problems.extend(self._locate(problems, where, "blobs.jsonl"))
        repeated = {r for r, n in counts.items() if n > 1}
        if repeated:  # a ref on several lines: its last line's content is followed, as read
            for ref in repeated:
                refs_of.pop(ref, None)
            for line in _lines("blobs.jsonl", self.members.get("blobs.jsonl", b""), []):
                if nested_deeper(line, LINE_DEPTH):
                    continue
                try:
                    ref, _, content = _blob_fields(line)
                except (ValueError, binascii.Error):
                    continue
                if ref in repeated:
                    contents[ref] = content
        reachable, pending = set(), list(self.ev.refs)
        while pending:
            ref = pending.pop()
            if ref in reachable:
                continue
            reachable.add(ref)
            try:
                pending.extend(refs_of[ref] if ref in refs_of else _blob_refs(contents.get(ref)))
            except ValueError:
                continue
        for ref in sorted(set(counts) - reachable):
            self._problem("blob_unreferenced", f"blob {ref} is referenced by no event or blob of the bundle", where[ref])
        return sum(counts.values()), erased_rows

    def _snapshots(self) -> list[tuple]:
        rows, where = self._rows("snapshots.jsonl", _snapshot_fields)
        starts = [(leaf, env) for leaf, env in self.ev.envelopes_by_kind.get("run.started", [])
                  if env["run_id"] != SYSTEM_RUN_ID]
        problems = check_snapshots(rows, starts)
        self.problems.extend(self._locate(problems, where, "snapshots.jsonl"))
        named = {env["payload"].get("snapshot") for _, env in starts}
        for fp, _ in rows:
            if fp not in named:
                self._problem("snapshot_unreferenced", f"snapshot {fp} is named by no run of the bundle", where[fp])
        return rows

    # -------------------------------------------------------------- manifest and consistency

    def _manifest(self, blobs: int, erased: int, snaps: list[tuple]) -> None:
        found = self.members.get("manifest.json", b"")
        if nested_deeper(found, _MANIFEST_DEPTH):
            self._problem("bundle_manifest", _too_deep("manifest.json", _MANIFEST_DEPTH), "manifest.json")
            return
        try:
            claimed = json.loads(found)
        except ValueError:
            self._problem("bundle_manifest", "manifest.json is not valid JSON", "manifest.json")
            return
        cp = self.cp or _claimed_checkpoint(claimed)
        if cp is None:
            return
        try:
            want = manifest_bytes(
                origin=cp.origin, size=cp.size, root=cp.root, runs=self._run_entries(),
                system_events=self._system_events, blobs=blobs,
                erased=erased, snapshots=len(snaps),
                members=[(n, self.members.get(n, b"")) for n in MEMBERS[2:] + ((PROOFS,) if PROOFS in self.members
                                                                                 else ())],
                digest=self._digest(),
                format=self._format_text().decode().rstrip("\n"), hexdigest=self._hexdigest)
        except CanonicalizationError as exc:  # a checkpoint size above 2**53 - 1: no manifest can state it
            self._problem("bundle_manifest", f"no manifest can describe this bundle's checkpoint: {exc}",
                          "manifest.json")
            return
        if want != found:
            expected = json.loads(want)
            fields = sorted(k for k in set(expected) | set(claimed if isinstance(claimed, dict) else {})
                            if not isinstance(claimed, dict) or claimed.get(k) != expected.get(k))
            self._problem("bundle_manifest", "manifest.json is not what the bundle's content says "
                          f"({'fields ' + ', '.join(fields) if fields else 'not in canonical form'})", "manifest.json")

    def _export_digest(self) -> None:
        """The content members must hash to the export digest signed in the checkpoint."""
        if self.cp is None:
            return  # the checkpoint's problem is reported; nothing signed to compare with
        lines = [x for x in self.cp.extensions if x.split(" ", 1)[0] == EXPORT_EXTENSION]
        if not lines:
            self._problem("export_digest_missing", f"the checkpoint carries no `{EXPORT_EXTENSION} sha256:<hex>` "
                          "extension line, so it was not signed for this export: events or whole runs may have "
                          "been removed", "checkpoint", expected=f"{EXPORT_EXTENSION} sha256:<hex>",
                          found=", ".join(self.cp.extensions) or "no extension line")
            return
        match = _EXPORT_LINE.fullmatch(lines[0])
        if len(lines) > 1 or match is None:
            self._problem("export_digest_malformed", f"the checkpoint's `{EXPORT_EXTENSION}` extension is not exactly "
                          f"one line `{EXPORT_EXTENSION} sha256:<64 lowercase hex>`", "checkpoint",
                          found=" | ".join(lines))
            return
        signed = bytes.fromhex(match.group(1))
        content = [(n, self.members.get(n, b"")) for n in DIGESTED]
        actual = self._digest()
        if actual == signed:
            return
        changed = _changed_members(content, signed, self.members.get("manifest.json", b""), self._format_text(),
                                   self._hexdigest)
        self._problem("export_digest_mismatch", f"{', '.join(changed)} {'does' if len(changed) == 1 else 'do'} not "
                      "match the export digest signed in the checkpoint (content was removed, added or changed "
                      "after the export)", ", ".join(changed),
                      expected="sha256:" + signed.hex(), found="sha256:" + actual.hex())

    def _consistency(self, doc: tuple) -> dict[str, Any] | None:
        size1, size2, note, proof = doc
        if self.cp is None:
            self._problem("consistency_unverifiable", "the bundle's checkpoint did not verify, so no proof from it can",
                          "--consistency")
            return None
        if size1 != self.cp.size:
            self._problem("consistency_size", "the proof does not start at the bundle's checkpoint", "--consistency",
                          expected=str(self.cp.size), found=str(size1))
            return None
        try:
            newer = verify_checkpoint(note, self.verifier)
        except NoteError as exc:
            self._problem("consistency_checkpoint", f"the newer checkpoint is not validly signed by the trusted key: {exc}",
                          "--consistency")
            return None
        try:
            if newer.size != size2:
                raise ProofError(f"the proof is for size {size2} but its checkpoint has size {newer.size}")
            merkle.verify_consistency(size1, size2, proof, self.cp.root, newer.root)
        except ProofError as exc:
            self._problem("consistency_proof", f"the newer log does not extend the bundle's checkpoint: {exc}",
                          "--consistency", expected=f"a log extending size {size1}", found=f"size {size2}")
            return None
        return {"size1": size1, "size2": size2, "root2": "sha256:" + newer.root.hex()}

    def _saved(self, saved: list[tuple[str, str]], consistency: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Check that the bundle's log extends each checkpoint saved earlier (``--checkpoint``): signed by
        the trusted key for the bundle's origin, no larger than the bundle's checkpoint, and its root the
        root of the bundle's tree at its size: the bundle's own checkpoint (same size), or by a consistency
        proof of the :data:`PROOFS` member (RFC 9162 §2.1.4.2). A bundle never holds every leaf from 0 (the
        system run's own events are not exported), so the root at an earlier size is never recomputed. Each failure is one problem naming the saved checkpoint.
        A saved checkpoint larger than the bundle's was saved after the export, or the log was rolled back:
        ``consistency`` (the verified ``--consistency`` proof, from the bundle's checkpoint to a newer one)
        ending at its size and root shows the former (``by``: ``newer``)."""
        out: list[dict[str, Any]] = []
        sizes: set[int] = set()  # of the saved checkpoints that opened: a given proof must start at one
        # a saved checkpoint that did not open (checkpoint_signature, checkpoint_origin): the proofs given may be
        # its, and its size cannot be trusted; that problem is the one to report, so a proof given is then not
        # also reported as starting at a size no saved checkpoint has (misleading: the checkpoint is the fault)
        unopened = False
        for where, note in saved:
            if self.cp is None:
                self.problems.append(Problem("checkpoint_unverifiable", f"{where} cannot be compared: the bundle's "
                                             "checkpoint did not verify"))
                continue
            problems, good = open_checkpoints([(where, note)], self.verifier, self.cp.origin)
            self.problems.extend(problems)
            if not good:
                unopened = True
                continue
            cp = good[0][1]
            sizes.add(cp.size)
            root = "sha256:" + cp.root.hex()
            if cp.size > self.cp.size:
                if consistency is not None and consistency["size2"] == cp.size:
                    if consistency["root2"] == root:  # the saved checkpoint extends the bundle's log
                        out.append({"checkpoint": where, "size": cp.size, "root": root, "by": "newer"})
                        continue
                    self.problems.append(Problem(
                        "checkpoint_fork", f"{where}: the log the --consistency proof extends the bundle's checkpoint "
                        f"to has another root at size {cp.size} (the log was rewritten or forked)",
                        expected=f"size {cp.size} with root {root}", found=consistency["root2"]))
                    continue
                self.problems.append(Problem(
                    "log_truncated", f"{where} was signed for {cp.size} events but the bundle's checkpoint covers "
                    f"only {self.cp.size}: either the bundle was exported before that checkpoint was saved (then "
                    f"`sealbox log prove --from-size {self.cp.size} --to-size {cp.size}`, given with --consistency, "
                    "shows that the log grew from the bundle's checkpoint to it) or the log was rolled back or cut "
                    "after it was saved",
                    expected=f"a log of at least {cp.size} events", found=f"{self.cp.size} events"))
                continue
            by = self._extends(where, cp)
            if by is None:
                continue
            if isinstance(by, bytes) or by.startswith("its "):
                why = (f"the bundle's log has another root at size {cp.size}" if isinstance(by, bytes) else
                       f"the bundle's log does not extend it: {by}")
                self.problems.append(Problem(
                    "checkpoint_fork", f"{where}: {why} (the log was rewritten or forked after that checkpoint was "
                    "saved)", expected=f"size {cp.size} with root {root}",
                    found="sha256:" + by.hex() if isinstance(by, bytes) else f"a log of size {self.cp.size}"))
                continue
            out.append({"checkpoint": where, "size": cp.size, "root": root, "by": by})
        if self.cp is not None:
            for size1, (where, size2, _) in sorted(self.given_proofs.items()):
                if size1 not in sizes and not unopened:
                    self.problems.append(Problem(
                        "consistency_size", f"{where} is a proof from size {size1}, but no saved checkpoint given "
                        "(--checkpoint) has that size", expected="a proof from a saved checkpoint's size",
                        found=f"from size {size1} to {size2}"))
        return out

    def _proofs(self) -> dict[int, list[bytes]]:
        """The consistency proofs of the optional :data:`PROOFS` member, by their ``size1`` (read once; a
        malformed line is ``bundle_line_malformed``)."""
        if self._proof_rows is not None:
            return self._proof_rows
        self._proof_rows = {}
        for n, line in enumerate(_lines(PROOFS, self.members.get(PROOFS, b""), self.problems), 1):
            try:
                if nested_deeper(line, 2):
                    raise ValueError("it nests deeper than a proof line")
                doc = json.loads(line)
                size1, proof = doc.get("size1"), doc.get("proof")
                if (not isinstance(size1, int) or isinstance(size1, bool) or not 0 < size1 <= _MAX_LEAF
                        or not isinstance(proof, list) or not all(isinstance(h, str) for h in proof)):
                    raise ValueError("size1 or proof is missing or of the wrong type")
                hashes = [base64.b64decode(h, validate=True) for h in proof]
                if proof_line(size1, hashes) != line + b"\n" or size1 in self._proof_rows:
                    raise ValueError("the line is not in canonical form, or repeats a size")
                if self._proof_rows and size1 < max(self._proof_rows):
                    raise ValueError(f"size1 {size1} follows size1 {max(self._proof_rows)}: the lines go by "
                                     "strictly increasing size1")
                if self.cp is not None and size1 > self.cp.size:
                    raise ValueError(f"size1 {size1} is above the checkpoint's size {self.cp.size}: no proof "
                                     "from it exists")
            except (ValueError, AttributeError, binascii.Error) as exc:
                self._problem("bundle_line_malformed", f"the line cannot be read: {exc}", f"{PROOFS} line {n}")
                continue
            self._proof_rows[size1] = hashes
        return self._proof_rows

    def _extends(self, where: str, saved: Checkpoint) -> str | bytes | None:
        """How the bundle's log is shown to extend ``saved``: ``"checkpoint"`` (the bundle's own, same size
        and root), ``"proof"`` (the bundle's consistency proof from that size verifies against both roots)
        or ``"empty"`` (a checkpoint of the empty tree).
        A fork: the other root (bytes) or why the proof fails (str starting ``its``). None (the problem
        appended) when the bundle cannot show it."""
        assert self.cp is not None
        if saved.size == self.cp.size:
            return "checkpoint" if saved.root == self.cp.root else self.cp.root
        proofs = self._proofs()
        if saved.size in proofs:
            try:
                merkle.verify_consistency(saved.size, self.cp.size, proofs[saved.size], saved.root, self.cp.root)
            except ProofError as exc:
                return f"its consistency proof from size {saved.size} does not verify against both roots ({exc})"
            return "proof"
        given = self.given_proofs.get(saved.size)
        if given is not None:
            file, size2, hashes = given
            if size2 != self.cp.size:
                self.problems.append(Problem(
                    "consistency_size", f"{where}: {file} is a proof from size {saved.size} to {size2}, but the "
                    f"bundle's checkpoint has size {self.cp.size} (run `sealbox log prove --from-size {saved.size} "
                    f"--to-size {self.cp.size}`)", expected=f"a proof from size {saved.size} to {self.cp.size}",
                    found=f"from size {saved.size} to {size2}"))
                return None
            try:
                merkle.verify_consistency(saved.size, size2, hashes, saved.root, self.cp.root)
            except ProofError as exc:
                return f"its root at that size is not proven by {file} ({exc})"
            return "given_proof"
        if saved.size == 0:  # every log extends the empty tree
            return "empty" if saved.root == merkle.EMPTY_ROOT else merkle.EMPTY_ROOT
        self.problems.append(Problem(
            "consistency_missing", f"{where}: the bundle holds no consistency proof from size {saved.size} to its "
            f"checkpoint's size {self.cp.size}, so it cannot show that its log extends that checkpoint (ask for a "
            "bundle exported with `sealbox export ... --prove-from SAVED`, SAVED being that checkpoint, or give "
            f"`sealbox log prove --from-size {saved.size} --to-size {self.cp.size}` output with --proof-from-saved)",
            expected=f"a consistency proof from size {saved.size} to {self.cp.size}", found="none"))
        return None


def _changed_members(content: list[tuple[str, Any]], signed: bytes, manifest: bytes,
                     format_text: bytes = FORMAT_TEXT, hexdigest: Any = None) -> list[str]:
    """The content members that differ from what was signed.

    The signed digest covers per-member hashes. If the manifest's member hashes
    (``format`` is fixed text: the bundle's own, else another known format, so that a
    format changed from one to the other is named) reproduce it, they are the exported
    ones and the members whose bytes differ are named exactly; otherwise (the manifest
    was rebuilt too) every member that may have changed is named. ``format_text`` is the
    bundle's own (known) ``format`` member.
    """
    hexdigest = hexdigest or (lambda d: hashlib.sha256(d).hexdigest())
    hashes = {n: "sha256:" + hexdigest(d) for n, d in content}
    try:
        if nested_deeper(manifest, _MANIFEST_DEPTH):
            raise ValueError("too deep")  # reported by _manifest
        claimed = {m["name"]: m["sha256"] for m in json.loads(manifest)["members"]}
        for fmt in (format_text, *(f for f in FORMATS if f != format_text)):
            claimed["format"] = "sha256:" + hashlib.sha256(fmt).hexdigest()
            text = "".join(f"{claimed[n].removeprefix('sha256:')}  {n}\n" for n, _ in content)
            if hashlib.sha256(text.encode("ascii")).digest() == signed:
                return [n for n, _ in content if hashes[n] != claimed[n]]
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeEncodeError):
        pass
    return [n for n, d in content if not (n == "format" and d == format_text)]


def _too_deep(what: str, limit: int) -> str:
    return f"{what} cannot be read: its JSON nests deeper than {limit} levels, deeper than Sealbox ever writes"


def _blob_refs(content: bytes | None) -> list[str]:
    from sealbox.blobs import blob_refs

    return [] if content is None else blob_refs(json.loads(content))


def _claimed_checkpoint(claimed: Any) -> Checkpoint | None:
    """Origin, size and root as the manifest states them (used only when the checkpoint did not verify)."""
    try:
        c = claimed["checkpoint"]
        return Checkpoint(claimed["origin"], c["size"], bytes.fromhex(c["root"].removeprefix("sha256:")))
    except (KeyError, TypeError, ValueError, AttributeError, NoteError):
        return None


def _n(count: int, noun: str) -> str:
    """``1 run``, ``2 runs``: a count and its noun in the right number."""
    return f"{count} {noun}{'' if count == 1 else 's'}"
