"""The console entry point: runs the app under its signal handlers.

A first Ctrl-C stops a run and keeps its finished work; a second one, during that cleanup, ends the
worker processes and exits at once (130). SIGTERM and SIGHUP stop a run as Ctrl-C does, ending the
worker processes first. A closed standard stream is replaced by /dev/null so the run goes on.
"""

from __future__ import annotations

import io
import os
import signal
import sys
import threading
import time
from pathlib import Path

from splitwise_plan.cli.app import EXIT_USER_ERROR, app, reader_gone, report_error, report_internal_error
from splitwise_plan.errors import SplitwisePlanError, Stopped


def _writable(stream) -> bool:
    """Whether a standard stream can be written: not closed by the caller (``2>&-`` leaves Python None
    there, or, when a launcher such as a pyenv shim opened a file of its own at that descriptor first,
    a descriptor open for reading only). A stream with no descriptor (a test's capture) counts."""
    if stream is None:
        return False
    try:
        import fcntl
        return fcntl.fcntl(stream.fileno(), fcntl.F_GETFL) & os.O_ACCMODE != os.O_RDONLY
    except (ImportError, AttributeError, ValueError, io.UnsupportedOperation):   # no fcntl, or no descriptor
        return True
    except OSError:   # a descriptor not open at all
        return False


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: run the app; a user error becomes one stderr line and exit 2.

    A first Ctrl-C stops the run as usual (partial work kept, worker processes shut down); a
    second one, while that cleanup runs, ends the worker processes and exits at once (130).
    """
    import warnings
    # a stopped run cancels the workers' tasks on purpose: joblib's note of it is noise here
    warnings.filterwarnings("ignore", message=r".*tasks which were still being processed by the workers")
    main_thread = threading.current_thread() is threading.main_thread()
    own = main_thread and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    ends = [sig for sig in _END_SIGNALS if main_thread and signal.getsignal(sig) == signal.SIG_DFL]
    if own:
        signal.signal(signal.SIGINT, _first_interrupt)
    for sig in ends:
        signal.signal(sig, _terminated)
    closed = [name for name in ("stdout", "stderr") if not _writable(getattr(sys, name))]
    for name in closed:   # closed by the caller (>&-): what would go there goes nowhere, the run goes on
        setattr(sys, name, open(os.devnull, "w"))
    try:
        app(args=argv, prog_name="splitwise-plan")
    except BrokenPipeError:   # outside a command (its help, say)
        return reader_gone()
    except SplitwisePlanError as exc:  # raised outside a command (e.g. during option parsing)
        report_error(exc)
        return EXIT_USER_ERROR
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except Exception as exc:   # a bug outside a command's run
        return report_internal_error(exc)
    finally:
        for name in closed:
            getattr(sys, name).close()
            setattr(sys, name, None)
        if own:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        for sig in ends:   # after a stop by one of them, the same stop sent again to the group finds it ended
            stopped = signal.getsignal(sig) not in (_terminated, signal.SIG_DFL)
            signal.signal(sig, signal.SIG_IGN if stopped else signal.SIG_DFL)
    return 0


def _first_interrupt(signum, frame) -> None:
    """Ctrl-C: stop the run, keeping what it has finished. ``timeout -s INT`` and CI runners signal the
    process and then its group, so the same SIGINT can arrive twice at once: only one that comes
    later than a hand could press it (``_ECHO_S``) is a second Ctrl-C."""
    first = time.monotonic()
    signal.signal(signal.SIGINT, _second_after(first, _ECHO_S))
    _wait_out_echo(first)
    raise KeyboardInterrupt


def _second_after(first: float, window_s: float):
    """A handler that ends the run at once (:func:`_second_interrupt`) for a signal that comes more than
    ``window_s`` after the ``first`` one; one sooner is that one's echo, the same stop."""
    def again(signum, frame) -> None:
        if time.monotonic() - first >= window_s:
            _second_interrupt(signum, frame)
    return again


_ECHO_S = 0.1   # a SIGINT this soon after the first is its echo through the process group, not a second Ctrl-C


def _wait_out_echo(first: float) -> None:
    """Let a stop signal's echo through the process group arrive before the cleanup starts: the echo
    kills what the cleanup starts meanwhile (joblib's worker shutdown runs ``pgrep``, and, its
    SIGINT-killed, leaves a traceback and may hang)."""
    time.sleep(max(0.0, first + _ECHO_S - time.monotonic()))


# SIGTERM (kill, a cancelled CI job) and SIGHUP (its terminal closed, where there is one) stop a run as Ctrl-C does
_END_SIGNALS = tuple(s for s in (signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None)


_REPEAT_S = 2.0   # one of them this soon after the first is the same stop, not a second one


def _terminated(signum, frame) -> None:
    """SIGTERM (a cancelled CI job, kill) or SIGHUP (the terminal closed): end the worker processes now
    (none is left running on its own), then stop as Ctrl-C does, keeping what the run has finished.

    ``timeout`` and some CI runners signal the process and then its whole group, so the same stop
    arrives twice at once: only one that comes later ends the run at once, as a second Ctrl-C does."""
    if _in_library_callback(frame):   # raised here, the stop would be printed and dropped: send it again
        threading.Timer(0.05, os.kill, (os.getpid(), signum)).start()
        return
    first = time.monotonic()
    signal.signal(signal.SIGINT, _second_interrupt)
    for sig in _END_SIGNALS:
        signal.signal(sig, _second_after(first, _REPEAT_S))
    _wait_out_echo(first)
    _end_descendants()
    raise Stopped(signal.Signals(signum).name)


def _in_library_callback(frame) -> bool:
    """Whether Python runs a C library's callback (numba's compiler calls llvmlite's object-cache hooks
    through ctypes), where an exception is printed and dropped instead of stopping the run."""
    return frame is not None and frame.f_code.co_filename.endswith(os.path.join("llvmlite", "binding",
                                                                                "executionengine.py"))


def _end_descendants() -> None:
    for pid in _descendants(os.getpid()):
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass


def _second_interrupt(signum, frame) -> None:
    """Ctrl-C again while the first one's cleanup runs: end the worker processes and exit now."""
    _end_descendants()
    sys.stderr.write("stopped (Ctrl-C twice)\n")
    sys.stderr.flush()
    os._exit(130)


def _descendants(pid: int) -> list[int]:
    """The processes started by ``pid`` and by them (Linux's /proc; none where it is absent)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for f in Path(f"/proc/{p}/task").glob("*/children"):
            try:
                kids = [int(x) for x in f.read_text().split()]
            except (OSError, ValueError):
                continue
            out += kids
            todo += kids
    return out
