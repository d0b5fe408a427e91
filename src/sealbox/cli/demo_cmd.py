"""``sealbox demo``: record a small sample run into a fresh store, print it, verify it."""

from __future__ import annotations

import os
import tempfile

import click


@click.command("demo")
@click.option("--dir", "workdir", default=None, type=click.Path(), help="Workspace folder (default: a new temporary folder).")
def demo_cmd(workdir: str | None) -> None:
    """Record a sample run into a fresh store, show it, and verify it."""
    from sealbox.demo_sample import record_sample_run
    from sealbox.store import init_store
    from sealbox.verify import verify_store

    workdir = workdir or tempfile.mkdtemp(prefix="sealbox-demo-")
    store_dir = os.path.join(workdir, "store")
    store = init_store(store_dir)
    click.echo(f"$ sealbox init {store_dir}")
    click.echo(f"  verifier key: {store.pinned_vkey()}")
    run_id = record_sample_run(store)
    store.close()
    click.echo("")
    from sealbox.cli.main import main as sealbox

    for argv in (["runs", "list", "-s", store_dir], ["runs", "show", run_id, "-s", store_dir],
                 ["log", "checkpoint", "-s", store_dir]):
        click.echo("$ sealbox " + " ".join(argv))
        _run(sealbox, argv)
        click.echo("")
    from sealbox.store import open_store

    reader = open_store(store_dir, readonly=True)
    report = verify_store(reader)
    reader.close()
    click.echo(f"$ sealbox verify -s {store_dir}")
    click.echo(report.summary())
    click.echo("")
    click.echo(f"Workspace: {workdir}")
    click.echo(f"Explore it: export SEALBOX_STORE={store_dir}; sealbox runs show {run_id}; sealbox verify")
    if not report.ok:
        raise SystemExit(1)


def _run(entry, argv: list[str]) -> None:
    try:
        entry(argv)
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise
