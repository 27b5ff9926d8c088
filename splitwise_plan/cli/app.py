"""The typer ``app`` every command hangs off, and how a run ends (:data:`EXIT_CODES`, in every command's
help): 0 an answer; 1 no design meets the goal, or the gate fails; a user error is one line
``error: <message>`` on stderr with exit status 2 (its fields named by their options); an internal error
one line with status 3; a stop (Ctrl-C, SIGTERM) 130; a closed reader of standard output status 141.

:class:`ReportCommand` gives a command an optional ``--json`` FILE and one-line option errors.
"""

from __future__ import annotations

import os
import signal
import sys

import typer
from rich.console import Console
from typer.core import TyperCommand, TyperGroup

from splitwise_plan import __version__
from splitwise_plan.cli.options import optional_values
from splitwise_plan.errors import SplitwisePlanError
from splitwise_plan.planning.options import option_name

EXIT_OK = 0
EXIT_NO_ANSWER = 1        # no design meets the goal (plan, capacity), or the gate fails (check)
EXIT_USER_ERROR = 2
EXIT_INTERNAL_ERROR = 3   # a bug: never 1, which check and capacity keep for "the SLOs fail"
EXIT_INTERRUPTED = 130    # Ctrl-C, SIGTERM or SIGHUP (128 + SIGINT, as a shell reports it)

#: The exit statuses, the same for every command: the epilog of each command's help.
EXIT_CODES = ("Exit status: 0 an answer; 1 no design meets the goal, or the gate fails (check, capacity, "
              "the plan); 2 bad input; 3 internal error (a bug); 130 interrupted (Ctrl-C, SIGTERM).")


def _click_class(name: str) -> type:
    """Click's exception class ``name`` as typer uses it: typer >= 0.26 vendors click (its own classes,
    and no longer installs the click package), older typer raises click's own."""
    return next(c for c in typer.BadParameter.__mro__ if c.__name__ == name)


USAGE_ERROR = _click_class("UsageError")           # NoSuchOption, BadParameter, ...
CLICK_EXCEPTION = _click_class("ClickException")


def report_error(exc: SplitwisePlanError) -> None:
    """Print a user error as the one line ``error: <message>`` on stderr, naming the fields it names by
    their options (the API's ``rps`` is the command line's ``--rps``)."""
    message = " ".join(exc.render(option_name).split())
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()


def report_internal_error(exc: BaseException) -> int:
    """Print an unexpected exception (a bug) as one line and return its exit status; the traceback
    when SPLITWISE_PLAN_TRACEBACK is set (to report it)."""
    if os.environ.get("SPLITWISE_PLAN_TRACEBACK"):
        import traceback
        traceback.print_exception(exc)
    message = " ".join(f"{type(exc).__name__}: {exc}".split())
    sys.stderr.write(f"error: internal error of splitwise-plan {__version__} (a bug; please report it, with the "
                     f"traceback that SPLITWISE_PLAN_TRACEBACK=1 prints): {message}\n")
    sys.stderr.flush()
    return EXIT_INTERNAL_ERROR


EXIT_PIPE_CLOSED = 128 + getattr(signal, "SIGPIPE", 13)   # what a shell reports of a program SIGPIPE ended


def reader_gone() -> int:
    """Standard output's reader went away (``| head``): stop quietly, as a program that SIGPIPE ends
    does, with its exit status; nothing more is written there (nor flushed at exit, which would fail)."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError, AttributeError):   # no file descriptor (a test's captured output)
        pass
    return EXIT_PIPE_CLOSED


def plain_flags(params: list) -> list:
    """``params`` with no ``<bool>`` placeholder in the help of their flags (``--quiet``, ``--help``):
    a flag takes no value, so its help shows none."""
    for p in params:
        if getattr(p, "is_flag", False) and p.metavar is None:
            p.metavar = ""
    return params


class HelpCommand(TyperCommand):
    """A command whose help shows no ``<bool>`` after its flags (the class of every command, see
    :mod:`splitwise_plan.cli`)."""

    def get_params(self, ctx):  # noqa: D102 - see plain_flags
        return plain_flags(super().get_params(ctx))


class _Group(TyperGroup):
    """Typer group that turns SplitwisePlanError from any command into exit status 2."""

    def get_params(self, ctx):  # noqa: D102 - the root's flags: no <bool> in its help
        return plain_flags(super().get_params(ctx))

    def parse_args(self, ctx, args):  # noqa: D102 - the root (planner) options: one line, exit 2
        try:
            upto = next((i for i, a in enumerate(args) if a in self.commands), len(args))
            if 0 < upto < len(args) and not set(args[:upto]) <= {"--help", "-h", "--version"}:   # the planner's options would be ignored
                raise SplitwisePlanError(
                    f"{' '.join(args[:upto])} comes before the command {args[upto]!r}, where it is a planner "
                    f"option that {args[upto]!r} ignores: put the command first (splitwise-plan {args[upto]} "
                    f"--help lists its options)")
            rest = super().parse_args(ctx, optional_values(args[:upto]) + list(args[upto:]))
            reject_stream_options(ctx)
            return rest
        except USAGE_ERROR as exc:
            if not args and self.no_args_is_help:   # click's "no arguments: show the help"
                raise
            report_error(SplitwisePlanError(exc.format_message()))
            raise typer.Exit(code=EXIT_USER_ERROR) from None
        except SplitwisePlanError as exc:
            report_error(exc)
            raise typer.Exit(code=EXIT_USER_ERROR) from None

    def invoke(self, ctx):  # noqa: D102 - see class docstring; a command's usage errors are one line too
        try:
            out = super().invoke(ctx)
            sys.stdout.flush()   # a reader gone (| head) shows here, not as click's bare exit 1 at exit
            return out
        except BrokenPipeError:
            raise typer.Exit(code=reader_gone()) from None
        except USAGE_ERROR as exc:
            report_error(SplitwisePlanError(_usage_line(exc)))
            raise typer.Exit(code=EXIT_USER_ERROR) from None
        except SplitwisePlanError as exc:
            report_error(exc)
            raise typer.Exit(code=EXIT_USER_ERROR) from None
        except (typer.Exit, typer.Abort, CLICK_EXCEPTION):
            raise
        except Exception as exc:   # a bug: one line, exit 3
            raise typer.Exit(code=report_internal_error(exc)) from None


def reject_stream_options(ctx) -> None:
    """With ``--trace`` the file is the stream: options that shape a generated one, given on the
    command line, would be silently ignored, so they are an error."""
    if ctx.params.get("trace") is None:
        return
    given = [f"--{n}" for n in ("workload", "duration", "seed", "seeds") if n in ctx.params
             and getattr(ctx.get_parameter_source(n), "name", "DEFAULT") in ("COMMANDLINE", "ENVIRONMENT")]
    if given:
        raise SplitwisePlanError(f"--trace replays the file as it is; {', '.join(given)} "
                                 f"{'shapes' if len(given) == 1 else 'shape'} a generated stream only: drop "
                                 f"{'it' if len(given) == 1 else 'them'} or --trace")


def _usage_line(exc) -> str:
    """A click usage error as one line, naming the command and pointing to its help."""
    ctx = getattr(exc, "ctx", None)
    where = f"{ctx.command_path}: " if ctx is not None and ctx.command_path else ""
    return f"{where}{exc.format_message()} (see --help)"


app = typer.Typer(
    cls=_Group,
    name="splitwise-plan",
    help="Plan LLM inference clusters with split prompt and token machine pools (Splitwise, ISCA 2024).\n\n"
         "With no command, the options below plan one: splitwise-plan --goal min-cost --rps 70. "
         "The commands simulate, sweep, check and capacity study one cluster design.\n\n"
         "e.g. `splitwise-plan --goal min-cost --rps 50,70 --designs HH,A100` (one plan per rate), "
         "`splitwise-plan --budget-power 40xH100`.",
    epilog=EXIT_CODES,
    no_args_is_help=False,
    invoke_without_command=True,
    subcommand_metavar="[COMMAND [ARGS]...]",   # none: the planner
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


class _Console(Console):
    """A rich console whose closed pipe ends the command as any other write to it does (see
    ``reader_gone``), not with rich's exit status 1, which ``check`` keeps for "the SLOs fail"."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def console(stderr: bool = False) -> Console:
    """Rich console for stdout (``stderr``: for stderr, when a report takes stdout); no colour and no
    80-column squeeze when it is not a terminal."""
    c = _Console(highlight=False, stderr=stderr)
    if not c.is_terminal:
        c = _Console(highlight=False, stderr=stderr, width=max(c.width, 180))
    return c


class ReportCommand(HelpCommand):
    """A command whose ``--json`` takes an optional FILE (bare ``--json`` = stdout) and whose
    option-parsing errors become one-line user errors (exit 2) instead of a usage box."""

    def parse_args(self, ctx, args):
        try:
            rest = super().parse_args(ctx, optional_values(args))
        except USAGE_ERROR as exc:
            raise SplitwisePlanError(exc.format_message()) from None
        reject_stream_options(ctx)
        return rest
