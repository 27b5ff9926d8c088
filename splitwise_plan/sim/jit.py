"""Compiled kernels: numba's ``njit`` where numba imports, else the same functions as plain Python.

:func:`njit` compiles a kernel with numba's cache where a cache folder can be written: beside the
installed package when it is writable, else ``~/.cache/splitwise-plan/numba`` (or
``$XDG_CACHE_HOME/splitwise-plan/numba``); where neither is, it compiles at each run, uncached. It never
fails at import. Without numba, or with ``NUMBA_DISABLE_JIT=1``, a kernel runs as the plain Python it is
written in: the same answers, slower (without numba, one line on stderr says so).
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from pathlib import Path

try:
    import numba
except ImportError:   # (the package declares numba: only a broken install lands here)
    numba = None

PACKAGE_DIR = Path(__file__).resolve().parents[1]
_said: set[str] = set()


def cache_dir() -> Path | None:
    """Where compiled kernels are kept: None for numba's own place beside the package (writable), a
    per-user folder otherwise, or None with caching off (:func:`caching`) where nothing is writable."""
    if os.access(PACKAGE_DIR, os.W_OK):
        return None
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    folder = base / "splitwise-plan" / "numba"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return folder if os.access(folder, os.W_OK) else None


def caching() -> bool:
    """Whether compiled kernels can be kept between runs (a writable package or per-user folder)."""
    return os.access(PACKAGE_DIR, os.W_OK) or cache_dir() is not None


def _configure() -> bool:
    """Point numba's cache at a writable folder; whether kernels are cached at all."""
    if numba is None:
        return False
    if os.access(PACKAGE_DIR, os.W_OK):   # numba's own place, beside the package
        return True
    folder = cache_dir()
    if folder is None:
        return False
    if not os.environ.get("NUMBA_CACHE_DIR"):
        numba.config.CACHE_DIR = str(folder)
    return True


CACHED = _configure()


def say_once(message: str) -> None:
    """One line on stderr, once per process."""
    if message not in _said:
        _said.add(message)
        sys.stderr.write(message + "\n")
        sys.stderr.flush()


def njit(fn):
    """Compile ``fn`` (cached where possible); plain Python where numba is missing or disabled."""
    if numba is None:
        return fn
    return numba.njit(cache=CACHED, nogil=True)(fn)


def compiled(kernel) -> bool:
    """Whether ``kernel`` runs compiled (numba present and not disabled)."""
    return hasattr(kernel, "py_func")


def before_first_call(kernel, what: str) -> None:
    """Say once, before a kernel is first compiled in this install, that it is being compiled (a cached
    kernel loads in a fraction of a second and says nothing); warn once where numba is missing."""
    if numba is None:
        say_once("warning: numba is not installed: the simulators run as plain Python (same answers, slower)")
        return
    if not compiled(kernel) or kernel.signatures or multiprocessing.parent_process() is not None:
        return   # (a worker process says nothing: the run's own process speaks for it)
    if in_cache(kernel):
        return
    say_once(f"compiling {what} (first run after install only; up to half a minute)")


def in_cache(kernel) -> bool:
    """Whether numba's cache holds ``kernel`` compiled (a run loads it in a fraction of a second)."""
    cache = getattr(kernel, "_cache", None)
    index = getattr(getattr(cache, "_cache_file", None), "_index_path", None)
    return CACHED and index is not None and os.path.exists(index)


def unowned(array):
    """``array`` as a compiled kernel hands it to its steps: plain Python, ``array`` itself; compiled, a view
    of it whose references numba does not count. A compiled call counts (atomically) a reference to every
    array it is handed, on entry and again on exit, which took half the time of a simulator's run; a view
    without a count (a null meminfo) makes that a test. Safe while the caller holds ``array``: a kernel
    takes views of its arguments, which its Python caller holds throughout, and keeps none beyond the run."""
    return array


if numba is not None and not numba.config.DISABLE_JIT:
    from numba.core import cgutils, types
    from numba.extending import intrinsic

    @intrinsic
    def unowned(typingctx, array):   # noqa: F811 (compiled: the same array, its meminfo null)
        if not isinstance(array, types.Array):
            return None

        def codegen(context, builder, signature, args):
            view = context.make_array(signature.args[0])(context, builder, value=args[0])
            view.meminfo = cgutils.get_null_value(view.meminfo.type)
            return view._getvalue()
        return array(array), codegen
