"""The ``splitwise-plan`` command and ``python -m splitwise_plan``: the CLI, loaded under a Ctrl-C guard."""

from __future__ import annotations

import signal
import sys


def main() -> int:
    """Load the CLI and run it. A Ctrl-C while numpy, pandas and the CLI load (the first ~0.3 s) is
    held until they are loaded, then stops the command with one line and exit 130: an import cut
    short would print Python's traceback (numpy's even says to reinstall it)."""
    stopped = []
    guard = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    if guard:
        signal.signal(signal.SIGINT, lambda signum, frame: stopped.append(signum))
    try:
        from .cli import main as run
    finally:
        if guard:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    if stopped:
        sys.stderr.write("stopped (Ctrl-C) before it started\n")
        return 130
    return run()


if __name__ == "__main__":
    raise SystemExit(main())
