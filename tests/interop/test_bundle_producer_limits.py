"""What a bundle cannot show (docs/bundle-format.md): a producer who holds the log's signing key can leave
out a run's last events and sign a new export checkpoint of the genuine tree; the bundle then verifies,
with only the note that the run has no ``run.ended``. A middle event left out still shows. The docs said
only that a removed tail "is caught by" the export digest, true of anyone but the key's holder."""

from __future__ import annotations

from bundle_helpers import cli, members, rebuild_manifest, record_runs, rezip

from sealbox.interop.bundle import DIGESTED, export_digest, export_extension
from sealbox.interop.bundle_verify import verify_bundle
from sealbox.ledger.checkpoint import Checkpoint, Signer, parse_note, sign_checkpoint


def _resign(m: dict[str, bytes], log_key: str) -> None:
    cp = Checkpoint.parse(parse_note(m["checkpoint"].decode()).text)
    digest = export_digest([(n, m[n]) for n in DIGESTED])
    m["checkpoint"] = sign_checkpoint(Checkpoint(cp.origin, cp.size, cp.root, (export_extension(digest),)),
                                      Signer.from_key(log_key)).encode()
    rebuild_manifest(m)


def test_the_key_holder_can_cut_a_runs_tail_and_only_a_note_shows_but_not_a_middle_event(tmp_path):
    store_path, runs, _ = record_runs(tmp_path)
    path = tmp_path / "case.sbx"
    assert cli("export", "-s", store_path, runs[1], "-o", path, cwd=tmp_path)[0] == 0
    vkey, log_key = (store_path / "log.vkey").read_text().strip(), (store_path / "log.key").read_text().strip()
    lines = members(path)["events.jsonl"].splitlines(keepends=True)
    [ended] = [i for i, line in enumerate(lines) if b'"kind":"run.ended"' in line]

    cut = members(path)
    cut["events.jsonl"] = b"".join(lines[:ended] + lines[ended + 1:])
    _resign(cut, log_key)
    rezip(tmp_path / "cut.sbx", cut)
    report = verify_bundle(tmp_path / "cut.sbx", trusted_vkey=vkey)
    assert report.ok and list(report.problems) == []
    assert [n for n in report.notes if "run.ended" in n] == [
        f"run {runs[1]} has no run.ended: it was open when exported (last event tool.result), "
        "or its last events were left out"]

    middle = members(path)
    middle["events.jsonl"] = b"".join(lines[:ended - 1] + lines[ended:])  # the tool.result before run.ended
    _resign(middle, log_key)
    rezip(tmp_path / "middle.sbx", middle)
    report = verify_bundle(tmp_path / "middle.sbx", trusted_vkey=vkey)
    assert not report.ok and {p.code for p in report.problems} == {"chain_broken"}
