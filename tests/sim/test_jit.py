"""Compiled kernels load safely: a cache where one can be written, none where nothing is writable, and
plain Python (with one warning) where numba is missing."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from splitwise_plan.sim import jit

REPO = Path(__file__).resolve().parents[2]


def test_a_package_folder_that_cannot_be_written_caches_per_user(tmp_path, monkeypatch):
    monkeypatch.setattr(jit, "PACKAGE_DIR", tmp_path / "site-packages" / "splitwise_plan")   # absent: not writable
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert jit.cache_dir() == tmp_path / "cache" / "splitwise-plan" / "numba" and jit.caching()


def test_nothing_writable_means_no_cache_and_no_failure(tmp_path, monkeypatch):
    monkeypatch.setattr(jit, "PACKAGE_DIR", tmp_path / "absent")
    monkeypatch.setenv("XDG_CACHE_HOME", "/proc/no-such-folder")   # cannot be made
    assert jit.cache_dir() is None and not jit.caching()


def _run(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=300, cwd=REPO, env={**os.environ, **env})


def test_without_numba_a_kernel_runs_as_python_with_one_warning():
    code = """
        import sys
        sys.modules["numba"] = None          # as if numba were not installed
        from splitwise_plan.sim.jit import before_first_call, compiled, njit
        @njit
        def total(xs):
            s = 0
            for x in xs:
                s += x
            return s
        before_first_call(total, "a kernel"); before_first_call(total, "a kernel")
        print(total([1, 2, 3]), compiled(total))
    """
    proc = _run(code)
    assert proc.stdout.split() == ["6", "False"], proc.stderr
    assert proc.stderr.count("numba is not installed") == 1


def test_numba_disabled_runs_the_same_source_uncompiled():
    proc = _run("""
        from splitwise_plan.sim.jit import compiled, njit
        @njit
        def twice(x):
            return 2 * x
        print(twice(21), compiled(twice))
    """, NUMBA_DISABLE_JIT="1")
    assert proc.stdout.split()[0] == "42", proc.stderr
