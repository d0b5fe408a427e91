"""``sealbox demo``: the incident drill (:mod:`sealbox.demo.drill`), end to end on real parts.

If the drill cannot run here — the upstream MCP servers' venvs cannot be built
(no PyPI) or the OpenAI Agents SDK is not installed — it says why and falls back to
recording a small sample run into a fresh store, showing and verifying it.
"""

from __future__ import annotations

import os
import tempfile

import click

from sealbox.cli.common import not_empty


@click.command("demo")
@click.option("--dir", "workdir", default=None, callback=not_empty, type=click.Path(file_okay=False),
              help="Workspace folder (default: a new temporary folder). Must not hold a drill, nor a file "
                   "the drill writes (policy.yaml, fixed.yaml, gateway.yaml, keys/, incident.*): those are "
                   "refused, not overwritten.")
@click.option("--sample", is_flag=True, help="Skip the drill: record the small sample run only.")
def demo_cmd(workdir: str | None, sample: bool) -> None:
    """Reconstruct a production incident end to end: agent, gateway, approval, the DELETE, the investigation."""
    if not sample:
        why = _drill_unavailable()
        if why is None:
            from sealbox.demo.drill import DrillError, run_drill
            from sealbox.demo.upstreams import UpstreamBuildError

            try:
                result = run_drill(workdir, echo=click.echo)
            except UpstreamBuildError as exc:
                why = str(exc)
            except DrillError as exc:  # the drill failed (exit 1): one line, the gateway's own error above it
                click.echo(f"error: {exc}", err=True)
                raise SystemExit(1) from None
            except FileExistsError as exc:  # a user mistake (exit 2), not a failed drill (exit 1)
                from sealbox.cli.common import BadInput

                raise BadInput(str(exc)) from None
            else:
                if not result.verified:
                    raise SystemExit(1)
                return
        click.echo(f"The incident drill cannot run here ({why}); recording the sample run instead.", err=True)
    _sample(workdir)


def _drill_unavailable() -> str | None:
    try:
        import agents  # noqa: F401
    except ImportError:
        return "the OpenAI Agents SDK (openai-agents) is not installed"
    return None


def _sample(workdir: str | None) -> None:
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
    from sealbox.cli.common import explore_path_prefix

    click.echo(f"Explore it: {explore_path_prefix('; ')}export SEALBOX_STORE={store_dir}; sealbox runs show {run_id}; "
               "sealbox verify")
    if not report.ok:
        raise SystemExit(1)


def _run(entry, argv: list[str]) -> None:
    try:
        entry(argv)
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise
