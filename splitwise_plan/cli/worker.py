"""The ``worker`` command: join a planner's Optuna studies from another process or machine.

It hangs off the ``app`` of :mod:`splitwise_plan.cli.app`. The study
holds its question (see :mod:`splitwise_plan.planning.stored`), so the worker needs only the
storage URL and the study name: it rebuilds the simulator and the search space, then
asks, simulates and tells trials until the study holds its number of trials.
"""

from __future__ import annotations

import json
import sys
from typing import Optional

import typer

from splitwise_plan.cli.app import ReportCommand, app
from splitwise_plan.cli.options import STDOUT
from splitwise_plan.cli.output import json_target
from splitwise_plan.errors import positive_number


@app.command("worker", cls=ReportCommand)
def worker_cmd(
    storage: str = typer.Option(
        ..., "--storage", metavar="URL", help="The planner's storage: sqlite:///plan.db or postgresql://USER@HOST/DB."),
    study: Optional[str] = typer.Option(
        None, "--study", metavar="NAME",
        help="A study, or a planner's --study prefix (its studies NAME/<design>, one after another). "
             "Default: every splitwise-plan study in the storage."),
    trials: Optional[int] = typer.Option(
        None, "--trials", min=1, help="Trials each study should hold (default: the number the planner set)."),
    batch: Optional[int] = typer.Option(
        None, "--batch", min=1, help="Trials asked and simulated together (default: the planner's batch)."),
    wait: float = typer.Option(
        0.0, "--wait", metavar="SECONDS", help="Wait this long for the study to appear (a planner still starting)."),
    json_out: Optional[str] = typer.Option(
        None, "--json", metavar="[FILE]", help="Write a JSON summary to FILE ('-' or no FILE: print it instead)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No per-study lines on stderr."),
) -> None:
    """Join running studies: ask, simulate and tell their trials (see --storage on the planner).

    e.g. `splitwise-plan worker --storage postgresql://plan@db/plans --study sweep70`.
    """
    from splitwise_plan.planning.stored import run_worker
    from splitwise_plan.report.files import is_stdout
    from splitwise_plan.report.formats import atomic_write_text, envelope

    def log(line: str) -> None:
        if not quiet:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()

    json_target(json_out)   # a bad path fails now, not after the trials
    if wait != 0.0:
        positive_number(wait, "--wait")
    out = run_worker(storage, study, trials=trials, batch=batch, wait_s=wait, log=log)
    # with the envelope keys of the other commands' reports, so that a reader can tell them apart
    text = json.dumps({**envelope("worker"), **out}, indent=2)
    if json_out == STDOUT:
        typer.echo(text)
    elif json_out is not None:
        atomic_write_text(json_out, text + "\n", what="JSON summary")
    # the summary line goes where the report does not: stdout, or stderr when the report is there
    report_on_stdout = json_out is not None and (json_out == STDOUT or is_stdout(json_out))
    typer.echo(f"worker: told {out['told']} trials ({out['simulated']} simulated) in "
               f"{len(out['studies'])} stud{'y' if len(out['studies']) == 1 else 'ies'}, {out['seconds']:.1f} s",
               err=report_on_stdout)
