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
    share_inline_copies()
    return numba.njit(cache=CACHED, nogil=True)(fn)


def step(fn):
    """A kernel's step: compiled on its own (once: one caller, argument types that do not vary), then inlined
    by LLVM into the compiled kernel that calls it (``forceinline``), so that a call costs nothing, not the
    moving of its arrays in and out. It has no entry from Python (no wrappers to compile): a kernel calls it.
    Plain Python where numba is missing or disabled."""
    if numba is None:
        return fn
    share_inline_copies()
    return numba.njit(cache=CACHED, nogil=True, forceinline=True, no_cpython_wrapper=True, no_cfunc_wrapper=True)(fn)


def share_inline_copies() -> None:
    """Make numba's inlining of ``inline="always"`` helpers copy a helper's IR in linear time, not quadratic.

    numba inlines a helper by deep-copying its IR (twice) one block at a time, each block with a memo of its
    own, so each copies the helper's whole scope again (every variable of it and of the helpers inlined in
    it): the time grows with blocks x variables, and made up half of the fluid model's compile. Within one
    inlining, this copies the blocks of one scope with one memo, as a deep copy of the whole IR at once
    would: the same IR (the same compiled code), several times faster. Applied once; nothing where numba's
    inliner is not as expected (another numba version): its own copying then, slower, the same code."""
    import copy

    from numba.core import inline_closurecall
    worker = getattr(inline_closurecall, "InlineWorker", None)
    if getattr(inline_closurecall, "copy", None) is not copy or not hasattr(worker, "inline_ir"):
        return
    if getattr(worker.inline_ir, "shares_copies", False):
        return
    shared = _OneMemoPerScope()
    inline_closurecall.copy = shared
    inline_ir = worker.inline_ir

    def inline_ir_sharing(self, *args, **kwargs):
        shared.memos.append({})   # (one inlining's: its two copies are of two different scopes)
        try:
            return inline_ir(self, *args, **kwargs)
        finally:
            shared.memos.pop()
    inline_ir_sharing.shares_copies = True
    worker.inline_ir = inline_ir_sharing


class _OneMemoPerScope:
    """The ``copy`` module as numba's inliner sees it: during an inlining (``memos`` not empty), a block is
    deep-copied with the memo of its scope, shared by the other blocks of that scope; else as ``copy`` does."""

    def __init__(self):
        self.memos: list[dict] = []   # a stack: {id(scope): memo} per inlining under way

    def deepcopy(self, x, memo=None):
        import copy

        from numba.core import ir
        if memo is None and self.memos and isinstance(x, ir.Block):
            memo = self.memos[-1].setdefault(id(x.scope), {})
        return copy.deepcopy(x, memo)

    def __getattr__(self, name):   # copy.copy and the rest
        import copy
        return getattr(copy, name)


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
    say_once(f"compiling {what} (first run after install only; 15-25 s)")


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
