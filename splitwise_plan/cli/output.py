"""What the commands print and where: JSON on standard output, notes on stderr, output paths checked
before a run.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

from splitwise_plan.cli.options import STDOUT
from splitwise_plan.errors import SplitwisePlanError


def json_target(json_out: Optional[str]) -> Optional[str]:
    if json_out is None or json_out == STDOUT:
        return json_out
    from splitwise_plan.report.files import check_writable
    check_writable(json_out, "JSON report")
    return json_out


def stdout_taken(*outputs) -> bool:
    """Does a report go to standard output (``--json -``, or a path that is stdout, /dev/stdout)? Then the
    tables and lines for people go to stderr: stdout carries the report alone, for the tool that reads it."""
    from splitwise_plan.report.files import is_stdout
    return any(o is not None and (str(o) == STDOUT or is_stdout(o)) for o in outputs)


def check_output_options(json_out: Optional[str], csv_out: Optional[Path], plot: Optional[Path] = None,
                   requests: Optional[Path] = None, inputs: Optional[dict] = None,
                   cluster: Optional[Path] = None) -> None:
    """Fail now, with one line, on an output path that could not be written, that two outputs share,
    that is standard output twice, or that names one of the command's ``inputs`` ({option: path})."""
    from splitwise_plan.report.files import check_outputs, is_stdout
    files = {"--json": None if json_out == STDOUT else json_out, "--csv": csv_out, "--plot": plot,
             "--requests": requests, "--cluster-out": cluster}
    to_stdout = ["--json -"] if json_out == STDOUT else []
    for flag, p in files.items():
        if p is not None and str(p) == STDOUT:
            raise SplitwisePlanError(f"{flag} needs a file name: '-' (standard output) is for --json only")
        if p is not None and is_stdout(p):
            to_stdout.append(f"{flag} {p}")
    if len(to_stdout) > 1:
        *first, last = to_stdout
        raise SplitwisePlanError(f"{', '.join(first)} and {last} {'both' if len(first) == 1 else 'all'} write to "
                                 f"standard output: give {last.split()[0]} a file")
    check_outputs(files, inputs)


def input_files(**options) -> dict:
    """The files a command reads, by option (``machines_file`` is --machines-file): what no output may overwrite."""
    names = {"cluster": "CLUSTER_FILE", "workload": "--workload"}
    return {names.get(k, "--" + k.replace("_", "-")): v for k, v in options.items() if v is not None}


def print_json(doc) -> None:
    """The report on standard output, written to its file descriptor until all of it is taken: a
    buffered write of more than a pipe holds ends silently (exit 0) when the reader goes away, where
    the rest of the run must see BrokenPipeError (exit 141)."""
    from splitwise_plan.report.formats import dumps
    text = dumps(doc)
    sys.stdout.flush()
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):   # not a file (a test's captured output)
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    data = memoryview(text.encode(sys.stdout.encoding or "utf-8"))
    while data:
        data = data[os.write(fd, data):]


def note(msg: str, quiet: bool) -> None:
    if not quiet:
        sys.stderr.write(msg + "\n")
