"""Entry point of the ``sealbox`` command.

Command groups live in their own modules and are imported only when used, so
that ``sealbox --help`` and quick commands answer without importing
``cryptography`` or ``rich``. A user mistake ends with one line on stderr
(``error: ...``) and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import importlib
import re
import sys

import click

# name -> (module, attribute, one-line help). Help is given here so listing the
# commands does not import them.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "init": ("sealbox.cli.store_cmds", "init_cmd", "Create a store and its log signing key."),
    "upgrade": ("sealbox.cli.store_cmds", "upgrade_cmd", "Apply a newer Sealbox's schema changes to a store, once."),
    "verify": ("sealbox.cli.store_cmds", "verify_cmd", "Verify a store, or an export bundle offline: every hash, chain, proof and signature."),
    "export": ("sealbox.cli.export_cmds", "export_cmd", "Export whole runs: a bundle verifiable offline, Parquet, or OTLP traces and logs."),
    "log": ("sealbox.cli.log_cmds", "log_group", "The Merkle log: checkpoints, keys and proofs."),
    "runs": ("sealbox.cli.runs_cmds", "runs_group", "List and show recorded runs."),
    "calls": ("sealbox.cli.calls_cmd", "calls_cmd", "Every tool call across runs, filtered (tool, decision, error, match…)."),
    "snapshot": ("sealbox.cli.snapshot_cmds", "snapshot_group", "Show and diff configuration snapshots."),
    "demo": ("sealbox.cli.demo_cmd", "demo_cmd", "The incident drill: agent, gateway, approval, a bad DELETE, the investigation."),
    "policy": ("sealbox.cli.policy_cmds", "policy_group", "Check, test and explain policy files."),
    "identities": ("sealbox.cli.identities_cmds", "identities_group", "Add, list, disable and re-key identities."),
    "approvals": ("sealbox.cli.approvals_cmds", "approvals_group", "List, show, approve and deny approval requests."),
    "access": ("sealbox.cli.access_cmds", "access_group", "Grants, provider credentials, revocation at the provider."),
    "gateway": ("sealbox.cli.gateway_cmds", "gateway_group", "The MCP gateway: serve, replay a recorded session, check config, list pins, re-approve or revoke tools."),
    "replay": ("sealbox.cli.replay_cmds", "replay_cmd", "Re-run an agent against a recorded run; report the first divergence."),
    "whatif": ("sealbox.cli.replay_cmds", "whatif_cmd", "Evaluate a new policy or snapshot value against recorded runs."),
    "import": ("sealbox.cli.import_cmd", "import_cmd", "Import runs recorded elsewhere (OTLP, Jaeger, Langfuse, SWE-agent, …)."),
    "report": ("sealbox.cli.report_cmd", "report_cmd", "Write a self-contained incident report of a run (HTML or Markdown)."),
}


class _Interrupted(BaseException):
    """A KeyboardInterrupt (Ctrl-C) carried past click, which would print a blank line and raise
    ``Abort`` for it; :func:`main` prints it as one line, ``error: interrupted``, and exits 130,
    as an interrupt while the CLI loads does (``_sealbox_cli``)."""


class _OutputClosed(BaseException):
    """The reader of the output went away (``sealbox runs show RUN | head``): a ``BrokenPipeError`` carried
    past click, which takes it as exit 1, silently (a ``set -o pipefail`` script failed on ``| head``);
    :func:`main` ends the command quietly with exit 0."""


class _Terminated(KeyboardInterrupt):
    """SIGTERM (`kill PID`, a CI job's timeout, a service manager stopping it), raised where the command
    is, as Ctrl-C raises KeyboardInterrupt: the same cleanup runs on the way out (a replay's run ended
    "cancelled", an export's temporary file removed, an import's transaction rolled back), then
    :func:`main` prints ``error: terminated`` and exits 143 (128 + SIGTERM)."""


#: Whether SIGTERM came (set by :func:`_on_sigterm`).
_terminated = False


def _on_sigterm(signum: int, frame: object) -> None:
    global _terminated
    import signal

    _terminated = True
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second one ends the process at once, as it used to
    raise _Terminated()


def _take_sigterm() -> bool:
    """Handle SIGTERM as :class:`_Terminated` while a command runs, unless the caller chose otherwise (a
    handler or SIG_IGN of its own) or this is not the main thread (only it may set handlers); whether it
    was taken. A command may set its own (``gateway serve``: a clean shutdown, exit 0)."""
    import signal

    try:
        current = signal.getsignal(signal.SIGTERM)
        # the console script's guard while the CLI loaded (_sealbox_cli) is replaced, as the default is
        if current is signal.SIG_DFL or getattr(current, "sealbox_loading_guard", False):
            signal.signal(signal.SIGTERM, _on_sigterm)
            return True
    except ValueError:
        pass
    return False


def _give_back_sigterm() -> None:
    """SIGTERM's default again once :func:`main` is done (a caller that runs it in its own process)."""
    import signal

    try:
        if signal.getsignal(signal.SIGTERM) is _on_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
    except ValueError:
        pass


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: object) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except KeyboardInterrupt as exc:
            raise _Interrupted() from exc

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as exc:  # the command ran its own cleanup (a run ended "cancelled"…) on the way
            raise _Interrupted() from exc
        except BrokenPipeError as exc:
            raise _OutputClosed() from exc

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        spec = COMMANDS.get(name)
        if spec is None:
            return None
        module = importlib.import_module(spec[0])
        return getattr(module, spec[1])

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="sealbox")
def cli() -> None:
    """Sealbox: a tamper-evident flight recorder for AI agents."""


#: What click 8.2+ raises for a group called without a command (click 8.1 printed the help and exited 0).
_NO_ARGS_IS_HELP: tuple[type[BaseException], ...] = tuple(
    filter(None, [getattr(click.exceptions, "NoArgsIsHelpError", None)]))


def _stdout_to_devnull() -> None:
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no real stdout (captured in a test, closed)
        pass


def _output_unwritable(exc: BaseException) -> bool:
    """Whether ``exc`` is standard output failing to take what was written to it: a full disk or device
    (ENOSPC, EDQUOT, EFBIG) or an I/O error raised by a write to standard output (click's ``echo``, rich's
    console), not by another file the command wrote (its message is the command's own)."""
    import errno

    if not isinstance(exc, OSError) or exc.errno not in {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO}:
        return False
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    local = tb.tb_frame.f_locals  # the frame that wrote: click.echo's ``file``, rich Console's ``self.file``
    candidates = [*local.values(), getattr(local.get("self"), "file", None)]
    try:
        out = sys.__stdout__.fileno() if sys.__stdout__ is not None else 1
    except (OSError, ValueError):
        out = 1
    for value in candidates:
        if value is None or not (hasattr(value, "write") and hasattr(value, "fileno")):
            continue
        try:
            if value.fileno() == out:
                return True
        except Exception:  # noqa: BLE001 - a wrapper without a descriptor (StringIO): not standard output
            continue
    return False


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; turn Sealbox errors into one line on stderr and exit code 2; SIGTERM as Ctrl-C
    (its cleanup), then ``error: terminated`` and exit 143."""
    taken = _take_sigterm()
    try:
        _main(argv)
    finally:
        if taken:
            _give_back_sigterm()


def _main(argv: list[str] | None) -> None:
    from sealbox.errors import SealboxError

    if sys.stdout is None:  # fd 1 closed (`>&-`): the command's output would be lost (uvicorn's logging fails)
        click.echo("error: standard output is closed: give the command somewhere to write (> FILE, or > /dev/null "
                   "to discard it)", err=True)
        sys.exit(74)  # EX_IOERR, as output that cannot be written
    try:
        # Without standalone mode click does not exit: a command's ``raise Exit(n)``
        # or ``ctx.exit(n)`` comes back as the return value, which is the exit status.
        code = cli.main(args=argv, prog_name="sealbox", standalone_mode=False)
    except click.exceptions.Abort:
        if _terminated:  # click turns a KeyboardInterrupt met in a prompt into Abort
            click.echo("error: terminated", err=True)
            sys.exit(143)
        click.echo("error: aborted", err=True)
        sys.exit(130)
    except _NO_ARGS_IS_HELP as exc:  # `sealbox`, `sealbox runs`: the help, as click prints it, not "error: Usage: …"
        click.echo(exc.format_message(), err=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:  # one line: click 8.2 lists a Choice's values one per line
        click.echo("error: " + re.sub(r"[ \t]*\n\s*", " ", exc.format_message().strip()), err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except SealboxError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except (KeyboardInterrupt, _Interrupted):
        if _terminated:
            click.echo("error: terminated", err=True)
            sys.exit(143)
        click.echo("error: interrupted", err=True)
        sys.exit(130)
    except (BrokenPipeError, _OutputClosed):
        _stdout_to_devnull()  # what is still buffered must not fail again as Python exits (exit 120)
        sys.exit(0)
    except Exception as exc:  # top of the CLI: the only place a bare catch is allowed
        if _output_unwritable(exc):  # `> /dev/full`, a full disk: the output's fault, not Sealbox's
            _stdout_to_devnull()  # what is still buffered must not fail again as Python exits
            click.echo(f"error: cannot write to standard output: {exc.strerror} (is the disk it goes to full?)",
                       err=True)
            sys.exit(74)  # EX_IOERR
        if "SEALBOX_DEBUG" in __import__("os").environ:
            raise
        if type(exc).__module__ == "sqlite3" and "malformed" in str(exc):  # a damaged page met after the open
            from sealbox.store.sqlite import damaged_database_message

            click.echo(f"error: {damaged_database_message('the store database (sealbox.db)', exc)}", err=True)
            sys.exit(2)
        # one line, as every error: a driver's message may span several (psycopg's LINE / HINT / caret lines)
        text = " ".join(str(exc).split())
        click.echo(f"error: internal error: {type(exc).__name__}: {text} (set SEALBOX_DEBUG=1 for a traceback)", err=True)
        sys.exit(70)
    if isinstance(code, int) and not isinstance(code, bool) and code != 0:
        sys.exit(code)


if __name__ == "__main__":
    main()
