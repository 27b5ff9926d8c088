"""The ``splitwise-plan`` command and ``python -m splitwise_plan``: the CLI, loaded under a stop guard."""

from __future__ import annotations

import signal
import sys


def main() -> int:
    """Load the CLI and run it. A Ctrl-C (or SIGTERM, SIGHUP) while numpy, pandas and the CLI load
    (about 0.3 s) is held until they are loaded, then stops the command with one line and exit 130,
    as a stop does later: an import cut short printed Python's traceback (numpy's even says to
    reinstall it)."""
    stopped = []
    defaults = {signal.SIGINT: signal.default_int_handler,
                **{s: signal.SIG_DFL for s in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)) if s}}
    held = [s for s, default in defaults.items() if signal.getsignal(s) is default]
    for s in held:
        signal.signal(s, lambda signum, frame: stopped.append(signum))
    try:
        from splitwise_plan.cli import main as run
    finally:
        for s in held:
            signal.signal(s, defaults[s])
    if stopped:
        name = "Ctrl-C" if stopped[0] == signal.SIGINT else signal.Signals(stopped[0]).name
        sys.stderr.write(f"stopped ({name}) before it started\n")
        return 130
    return run()


if __name__ == "__main__":
    raise SystemExit(main())
