"""The ``splitwise-plan`` command line: a thin layer over the Python API.

Every command reports a ``SplitwisePlanError`` as one line ``error: <message>`` on stderr and exits
with status 2; the exit statuses (:data:`.app.EXIT_CODES`) end every command's help. :mod:`.app` holds the ``app`` and its error handling; :mod:`.options`, :mod:`.output`
and :mod:`.inputs` what the commands share; one module per command group registers its commands on
``app`` when imported here: :mod:`.plan` (the root planner), :mod:`.catalog`, :mod:`.simulate`
(simulate, sweep), :mod:`.check` (check, capacity), :mod:`.calibrate` and :mod:`.worker`. :func:`main` is the entry point.
"""

import importlib

from splitwise_plan.cli.app import app
from splitwise_plan.cli.main import main

#: The command modules, in the order ``--help`` lists their commands; importing one registers them on ``app``.
COMMAND_MODULES = ("plan", "catalog", "simulate", "check", "calibrate", "worker")
for _module in COMMAND_MODULES:
    importlib.import_module(f"{__name__}.{_module}")


def _shared_help() -> None:
    """Every command's help ends with the exit statuses (the same policy everywhere) and shows no
    ``<bool>`` after a flag; a command that names its own class or epilog keeps it."""
    from typer.core import TyperCommand

    from splitwise_plan.cli.app import EXIT_CODES, HelpCommand
    for info in app.registered_commands:
        if info.cls in (None, TyperCommand):
            info.cls = HelpCommand
        if info.epilog is None:
            info.epilog = EXIT_CODES


_shared_help()

__all__ = ["COMMAND_MODULES", "app", "main"]
