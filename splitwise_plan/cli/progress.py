"""Progress bars for long runs: on stderr, only once a run has lasted about a second.

``with progress(total, "sweep", quiet=quiet) as bar: ... bar.advance(n)``. The bar
appears after ``delay_s`` (so quick runs print nothing) and never when ``quiet``. On a
terminal it is a live rich bar that disappears when done; when stderr is not a terminal
(a CI log, a pipe) there is no colour and no animation, just one line at the end
(``sweep splitwise-hh (fluid): 66/66 done in 2.1 s``), with a line every ``HEARTBEAT_S`` meanwhile
(``plan min-cost: splitwise-aa ok in 41.0 s: 1/6 after 60 s``) so that a long run's log shows it is alive.
Stdout stays clean for tables and JSON.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

DEFAULT_DELAY_S = 1.0
HEARTBEAT_S = 30.0      # seconds between two lines of a run's progress in a plain log


def stderr_console() -> Console:
    """A rich console on stderr; plain text (no colour, no animation) when not a terminal."""
    c = Console(stderr=True, highlight=False)
    if not c.is_terminal:
        c = Console(stderr=True, highlight=False, no_color=True, color_system=None)
    return c


class ProgressBar:
    """A progress bar that shows itself only when the run lasts longer than ``delay_s``."""

    def __init__(self, total: float | None, description: str, *, quiet: bool = False,
                 delay_s: float = DEFAULT_DELAY_S, console: Console | None = None,
                 heartbeat_s: float = HEARTBEAT_S) -> None:
        self.total = total
        self.description = description
        self._base_description = description
        self.quiet = quiet
        self.delay_s = delay_s
        self.completed = 0.0
        self.shown = False
        self._t0 = time.monotonic()
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._progress: Progress | None = None
        self._plain: Console | None = None
        self._task = None
        self._console = console
        self._heartbeat_s = heartbeat_s
        self._stopped = threading.Event()

    # -- lifecycle ------------------------------------------------------------------
    def start(self) -> "ProgressBar":
        self._t0 = time.monotonic()
        if not self.quiet:
            self._timer = threading.Timer(self.delay_s, self._show)
            self._timer.daemon = True
            self._timer.start()
        return self

    def _show(self) -> None:
        with self._lock:
            if self.shown or self._timer is None:
                return
            console = self._console or stderr_console()
            if not console.is_terminal:  # a log file or pipe: no animation, one summary line at the end
                self._plain = console
                self.shown = True
                threading.Thread(target=self._heartbeat, name="progress-heartbeat", daemon=True).start()
                return
            columns = [SpinnerColumn(), TextColumn("{task.description}")]
            if self.total is not None:
                columns += [BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            TextColumn("eta"), TimeRemainingColumn()]
            else:
                columns += [TimeElapsedColumn()]
            self._progress = Progress(*columns, console=console, transient=True)
            self._task = self._progress.add_task(self.description, total=self.total,
                                                 completed=self.completed)
            self._progress.start()
            self.shown = True

    def _heartbeat(self) -> None:
        """In a plain log: every ``heartbeat_s``, the run's latest description and how far it got."""
        while not self._stopped.wait(self._heartbeat_s):
            with self._lock:
                if self._plain is None:
                    return
                self._plain.print(f"{self.description}: {self._done()}after {self.elapsed_s:.0f} s",
                                  markup=False, highlight=False, soft_wrap=True)

    def _done(self) -> str:
        return f"{_count(self.completed)}/{_count(self.total)} " if self.total is not None else ""

    def stop(self, outcome: str = "done") -> None:
        """End the bar with one line saying how far the run got and its ``outcome``: always in a plain
        log, on a terminal (where the live bar vanishes) only when the run did not finish."""
        self._stopped.set()
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            t = self.elapsed_s
            line = f"{self._base_description}: {self._done()}" + (
                f"done in {t:.1f} s" if outcome == "done" else f"{outcome} after {t:.1f} s")
            out = self._plain
            if self._progress is not None:
                self._progress.stop()
                out = self._progress.console if outcome != "done" else None
                self._progress = None
            if out is None and outcome.startswith("stopped") and not self.shown:   # before it showed, or quiet:
                out = self._console or stderr_console()   # a stop is always said (a cancelled CI job's log says why)
            if out is not None:
                out.print(line, markup=False, highlight=False, soft_wrap=True)
            self._plain = None

    # -- updates ---------------------------------------------------------------------
    def advance(self, n: float = 1) -> None:
        with self._lock:
            self.completed += n
            if self._progress is not None:
                self._progress.update(self._task, completed=self.completed)

    def update(self, *, description: str | None = None, completed: float | None = None) -> None:
        with self._lock:
            if completed is not None:
                self.completed = completed
            if description is not None:
                self.description = description
            if self._progress is not None:
                self._progress.update(self._task, completed=self.completed, description=self.description)

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self._t0


def _count(x: float) -> str:
    """A count as a person reads it: 1,199,710 (not 1.19971e+06), a fraction with its decimals."""
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:,.3g}"


@contextmanager
def progress(total: float | None, description: str, *, quiet: bool = False,
             delay_s: float = DEFAULT_DELAY_S, console: Console | None = None,
             heartbeat_s: float = HEARTBEAT_S) -> Iterator[ProgressBar]:
    """Context manager yielding a :class:`ProgressBar` (``total=None``: a spinner without a bar)."""
    bar = ProgressBar(total, description, quiet=quiet, delay_s=delay_s, console=console,
                      heartbeat_s=heartbeat_s).start()
    try:
        yield bar
    except KeyboardInterrupt as exc:   # Ctrl-C, or a SIGTERM or SIGHUP (errors.Stopped) handled as one
        bar.stop(f"stopped ({getattr(exc, 'signal_name', 'Ctrl-C')})")
        raise
    except BaseException:
        bar.stop("failed")
        raise
    bar.stop()
