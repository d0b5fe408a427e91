"""``sealbox replay RUN --agent module:function`` and ``sealbox whatif``."""

from __future__ import annotations

import importlib
import json
import os
import sys
from typing import Any, Callable

import click

from sealbox.cli.common import BadInput, not_empty, echo_json, emit_rows, open_for_reading, open_for_writing, resolve_id, store_option, visible


def load_agent(spec: str) -> Callable[[Any], Any]:
    """The callable named by ``module:function`` (the current directory is importable, as with ``python -m``)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise click.BadParameter(f"expected module:function, got {spec!r}", param_hint="--agent")
    if module_name.endswith(".py") or "/" in module_name or os.sep in module_name:
        raise click.BadParameter(f"{spec!r} names a file; give a module, as Python imports it from the current "
                                 f"folder: {_module_for_path(module_name, attr)}", param_hint="--agent")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(f"cannot import {module_name!r}: {exc}", param_hint="--agent") from exc
    except Exception as exc:  # noqa: BLE001 - the user's module failed while imported (SyntaxError, its own code)
        raise click.BadParameter(f"cannot import {module_name!r}: it raised {_where_raised(exc)}",
                                 param_hint="--agent") from exc
    except SystemExit as exc:  # a script's top level ended the process (sys.exit, argparse): say so, not exit silently
        raise click.BadParameter(f"cannot import {module_name!r}: its top-level code called "
                                 f"sys.exit({exc.code!r}){_raised_at(exc)}; keep a script's main code under "
                                 f"`if __name__ == \"__main__\":`", param_hint="--agent") from None
    fn = module
    for part in attr.split("."):
        fn = getattr(fn, part, None)
        if fn is None:
            raise click.BadParameter(f"{module_name!r} has no {attr!r}", param_hint="--agent")
    if not callable(fn):
        raise click.BadParameter(f"{spec} is not callable", param_hint="--agent")
    return fn


def _module_for_path(path: str, attr: str) -> str:
    """What to give ``--agent`` for a file path: ``pkg.mod:attr for pkg/mod.py``, or, for a file outside
    the current folder, its module name and the folder to run from."""
    import posixpath

    norm = posixpath.normpath(path.replace(os.sep, "/"))
    stem = norm[:-3] if norm.endswith(".py") else norm
    if norm.startswith(("/", "../")) or norm == "..":
        folder, _, name = stem.rpartition("/")
        return f"{name}:{attr}, run from the folder {folder or '/'}"
    return f"{stem.replace('/', '.')}:{attr} for {path}"


def _raised_at(exc: BaseException) -> str:
    """`` (FILE, line N)`` of the innermost frame of the user's code an exception was raised in (not
    Python's own library: argparse's ``exit``), or nothing."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    library = tuple({sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix})
    own = [f for f in frames if not f.filename.startswith(library) and not f.filename.startswith("<")]
    frame = (own or frames or [None])[-1]
    return f" ({frame.filename}, line {frame.lineno})" if frame else ""


def _where_raised(exc: Exception) -> str:
    """``Type: message`` of an exception raised by the user's code, with the file and line it was
    raised at (a SyntaxError names them itself)."""
    import traceback

    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, SyntaxError):
        return text
    frames = traceback.extract_tb(exc.__traceback__)
    return f"{text} ({frames[-1].filename}, line {frames[-1].lineno})" if frames else text


def _load_policy(path: str | None) -> Any:
    if path is None:
        return None
    from sealbox.policy import Policy

    return Policy.load(path)


def _load_snapshot(path: str | None) -> Any:
    if path is None:
        return None
    from sealbox.errors import ConfigError

    import os
    import stat

    try:
        if stat.S_ISCHR(mode := os.stat(path).st_mode) or stat.S_ISBLK(mode):  # /dev/zero never ends
            raise ConfigError(f"cannot read the snapshot {path}: it is a device, not a file")
        from sealbox.input_files import open_input

        with open_input(path) as fh:  # a named pipe nothing writes to: waited on for a bounded time
            data = json.loads(fh.read().decode("utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read the snapshot {path}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        from sealbox.cli.common import not_utf8_text

        raise ConfigError(f"cannot read the snapshot {path}: {not_utf8_text(path, exc) or exc}") from exc
    except RecursionError:
        raise ConfigError(f"cannot read the snapshot {path}: its JSON is nested too deeply") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a snapshot is a JSON object")
    return data


def _check_snapshot_file(store: Any, run_id: str, path: str, data: Any) -> None:
    """``--snapshot``'s content, compared field by field with the recorded snapshot, must be a complete
    snapshot: a field left out or of the wrong type would be reported as drift, not as a mistake."""
    from sealbox.errors import ConfigError, StoreError
    from sealbox.snapshot import snapshot_form_problems

    recorded = None
    try:  # a field the recorded snapshot lacks too (a run may pin a dict leaving fields out) is no mistake
        fp = store.read_run(run_id)[0].payload.get("snapshot")
        recorded = store.get_snapshot(fp) if isinstance(fp, str) else {}  # none recorded: compared with {}
    except (StoreError, IndexError):
        pass  # the replay itself says what is wrong with the record
    problems = snapshot_form_problems(data, like=recorded)
    if problems:
        raise ConfigError(f"{path} is not a complete snapshot: {'; '.join(problems)} "
                          "(`sealbox snapshot show --json FP` prints one)")


@click.command("replay")
@store_option
@click.argument("run_id", metavar="RUN")
@click.option("--agent", "agent_spec", required=True, metavar="MODULE:FUNCTION",
              help="The agent to re-run: a function taking the replay's run (sync or async).")
@click.option("--model", type=click.Choice(["record", "live"]), default="record", show_default=True,
              help="Where model answers come from: the record, or the model itself.")
@click.option("--tools", type=click.Choice(["record", "live"]), default="record", show_default=True,
              help="Where tool results come from: the record, or running the tools (needs --side-effects).")
@click.option("--side-effects", is_flag=True,
              help="Consent to running tools for real with --tools live (refused without it: exit 2).")
@click.option("--policy", "policy_path", callback=not_empty, type=click.Path(dir_okay=False),
              help="The replay run's policy. With --tools live it decides each tool call (required then); with "
                   "tools from the record it decides nothing (the recorded decisions are served): it is only "
                   "named as the replay run's policy and its prices price the model calls (usage cost).")
@click.option("--snapshot", "snapshot_path", callback=not_empty, type=click.Path(dir_okay=False),
              help="The configuration the agent runs under now (snapshot JSON); default: the recorded one.")
@click.option("--allow-config-drift", is_flag=True, help="Replay even if the configuration differs from the record.")
@click.option("--fail-on-knowledge-change", is_flag=True,
              help="Without --snapshot: do not replay when a local knowledge file of the recorded snapshot changed "
                   "or is gone since (default: a warning).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def replay_cmd(store_path: str, run_id: str, agent_spec: str, model: str, tools: str, side_effects: bool,
               policy_path: str | None, snapshot_path: str | None, allow_config_drift: bool,
               fail_on_knowledge_change: bool, as_json: bool) -> None:
    """Re-run an agent against a recorded run; report the first divergence.

    Model answers, tool results and approvals come from the record (nothing is
    executed unless --tools live --side-effects). The replay is recorded as a new
    run. Exit status: 0 reproduced, 1 diverged.
    """
    from sealbox.replay import Replayer, render_divergence

    if side_effects and tools != "live":  # consent to nothing: with tools from the record no tool runs
        raise BadInput("--side-effects applies with --tools live (it consents to running tools for real); "
                       "with tools from the record no tool runs: drop it, or add --tools live")
    agent = load_agent(agent_spec)
    policy, snapshot = _load_policy(policy_path), _load_snapshot(snapshot_path)
    store = open_for_writing(store_path)
    try:
        run_id = resolve_id(store, "run", run_id)
        if snapshot is not None:
            _check_snapshot_file(store, run_id, snapshot_path, snapshot)
        try:
            result = Replayer(store, policy=policy).replay(run_id, agent, model=model, tools=tools,
                                                           side_effects=side_effects,
                                                           allow_config_drift=allow_config_drift, snapshot=snapshot,
                                                           fail_on_knowledge_change=fail_on_knowledge_change)
        except SystemExit as exc:  # the agent called sys.exit(): its replay run is recorded as ended error
            replayed = _newest_replay_of(store, run_id)
            message = f"NOT reproduced: the agent exited (SystemExit({exc.code!r})) during the replay; replay run " \
                      f"{replayed or '(not started)'} was recorded as ended error"
            if as_json:
                echo_json({"reproduced": False, "replay_run_id": replayed, "recorded_run_id": run_id,
                           "agent_error": {"type": "SystemExit", "message": str(exc.code)}})
            else:
                click.echo(message)
            sys.exit(1)
    finally:
        store.close()
    if as_json:
        echo_json(result.to_dict())
    else:
        _print_result(result, render_divergence)
    if not result.reproduced:
        sys.exit(1)


def _newest_replay_of(store: Any, run_id: str) -> str | None:
    """The id of the newest run replaying ``run_id`` (the one just recorded), or None."""
    return next((r["run_id"] for r in store.runs() if r["replay_of"] == run_id), None)  # runs(): newest first


#: The longest agent error message printed whole; --json always carries all of it.
_SHOWN_MESSAGE = 500


def _shown(message: str) -> str:
    if len(message) <= _SHOWN_MESSAGE:
        return message
    return f"{message[:_SHOWN_MESSAGE]}… ({len(message) - _SHOWN_MESSAGE:,} more characters; --json has it whole)"


def _print_result(result: Any, render: Callable[[Any], str]) -> None:
    echo = lambda text: click.echo(visible(text))  # noqa: E731 - recorded and agent text never drives the terminal
    echo(f"{result.head()}; replay run {result.new_run_id or '(not started)'}")
    for sub in result.sub_runs:
        state = "reproduced" if sub["reproduced"] else "NOT reproduced"
        echo(f"  sub-agent run {sub['agent']} (recorded {sub['replay_of']}): {state}, {sub['steps_compared']} "
             f"step(s) matched; replay run {sub['new_run_id'] or '(not started)'}")
    if result.agent_error:
        echo(f"the agent raised {result.agent_error['type']}: {_shown(result.agent_error['message'])}")
    for k in result.knowledge_changed:
        echo(f"warning: knowledge file {k['uri']} " + (
            f"changed since the run was recorded (recorded {k['recorded']}, now {k['now']})" if k["change"] == "changed"
            else f"is gone or cannot be read (recorded {k['recorded']})"))
    if result.config_drift:
        echo(f"configuration differs from the record in {len(result.config_drift)} field(s):")
        for d in result.config_drift:
            echo(f"  {d.path}: {json.dumps(d.a, default=str)} -> {json.dumps(d.b, default=str)}")
    if result.unreplayable:
        echo("steps that cannot be replayed from the record:")
        for u in result.unreplayable:
            echo(f"  step {u.step} ({u.kind} {u.name}): {u.reason}")
    if result.divergence is not None:
        echo(render(result.divergence))


@click.command("whatif")
@store_option
@click.argument("run_ids", metavar="[RUN]...", nargs=-1)
@click.option("--policy", "policy_path", callback=not_empty, type=click.Path(dir_okay=False),
              help="Evaluate this policy against every recorded tool call of the runs.")
@click.option("--since", metavar="TIME", help="All runs started since: RFC 3339, a date, or 30d / 2h ago.")
@click.option("--snapshot", "snapshot_query", metavar="FIELD=VALUE",
              help="List the runs whose configuration had this value (e.g. model.version=2024-05-13).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def whatif_cmd(store_path: str, run_ids: tuple[str, ...], policy_path: str | None, since: str | None,
               snapshot_query: str | None, as_json: bool) -> None:
    """Ask the record a different question, without re-running anything.

    With --policy: which recorded decisions would change (allow -> deny,
    allow -> require_approval, and back), and by which rule. With --snapshot:
    which runs ran under a configuration with that value.
    """
    from sealbox.errors import ConfigError

    if (policy_path is None) == (snapshot_query is None):
        raise ConfigError("give exactly one of --policy FILE or --snapshot FIELD=VALUE")
    # each of these was silently ignored: the runs named with --since, the runs named with --snapshot
    if run_ids and since is not None:
        raise ConfigError("give RUNs or --since, not both (--since selects every run started since then)")
    if run_ids and snapshot_query is not None:
        raise ConfigError("--snapshot looks through every recorded run (or those of --since): it takes no RUN")
    if since is not None:
        from sealbox.query import parse_time

        parse_time(since, name="--since")  # a bad time fails before the store is opened, naming the option
    store = open_for_reading(store_path)
    try:
        if snapshot_query is not None:
            _whatif_snapshot(store, snapshot_query, since, as_json)
        else:
            _whatif_policy(store, _load_policy(policy_path), tuple(resolve_id(store, "run", r) for r in run_ids),
                           since, as_json)
    finally:
        store.close()


def _whatif_snapshot(store: Any, query: str, since: str | None, as_json: bool) -> None:
    from sealbox.errors import ConfigError
    from sealbox.replay.whatif import whatif_snapshot

    field, sep, value = query.partition("=")
    if not sep or not field:
        raise ConfigError(f"--snapshot wants FIELD=VALUE, got {query!r}")
    rows = whatif_snapshot(store, field.strip(), value.strip(), since=since)
    replays = len(whatif_snapshot(store, field.strip(), value.strip(), since=since, replays=True)) - len(rows)
    if replays:
        click.echo(f"({replays} replay run(s) with {field}={value} left out: they re-ran recorded runs from the "
                   "record)", err=True)
    if as_json:
        emit_rows(rows, [], as_json=True, as_csv=False)
        return
    if not rows:
        click.echo(f"no recorded run ran with {field}={value}", err=True)
        return
    shown = [{**r, "started": r["started_at"][:19].replace("T", " "), "snapshot": (r["snapshot"] or "")[:19] + "…",
              "status": r["ending"] or r["status"]} for r in rows]
    emit_rows(shown, ["run_id", "agent", "status", "started", "snapshot"], as_json=False, as_csv=False,
              title=f"Runs with {field}={value}")


def _whatif_policy(store: Any, policy: Any, run_ids: tuple[str, ...], since: str | None, as_json: bool) -> None:
    from sealbox.replay.whatif import select_runs, whatif_policy

    report = whatif_policy(store, policy, select_runs(store, run_ids, since))
    if as_json:
        echo_json(report.to_dict())
        return
    click.echo(f"{report.evaluated} decision(s) in {len(report.runs)} run(s) evaluated again under "
               f"{policy.name or 'the policy'} ({report.policy[:19]}…); {len(report.changed)} would change"
               + (f"; the policy could not decide {len(report.errors)} (guardrail_error)" if report.errors else ""))
    if report.changed:
        emit_rows([c.to_dict() for c in report.changed], ["run_id", "step", "server", "tool", "change", "rule", "reason"],
                  as_json=False, as_csv=False, title="Decisions that would change")
    if report.errors:  # a recorded deny denied again only because a condition raised is no change, but is news
        emit_rows([e.to_dict() for e in report.errors], ["run_id", "step", "server", "tool", "before", "rule", "reason"],
                  as_json=False, as_csv=False, title="Calls the policy could not decide (denied guardrail_error)")
    if report.not_re_evaluable:
        emit_rows([n.to_dict() for n in report.not_re_evaluable], ["run_id", "step", "server", "tool", "why"],
                  as_json=False, as_csv=False, title="Not re-evaluable")
