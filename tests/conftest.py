"""Shared fixtures: where the reference data (../shared) is, a helper to write input files, and a cache
folder of the session's own for the plans that keep their progress there."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

from splitwise_plan.report.checkpoint import CACHE_ENV

REPO_ROOT = Path(__file__).resolve().parents[1]
_TESTS = itertools.count()


@pytest.fixture(scope="session", autouse=True)
def _session_plan_cache(tmp_path_factory) -> Path:
    """A plan with no report file keeps its progress in the user cache folder: point it
    (SPLITWISE_PLAN_CACHE_DIR, inherited by the commands tests start) at a folder of the session's own,
    so that no test writes to ~/.cache. XDG_CACHE_HOME is left alone: numba's compiled kernels are
    cached under it where the package's folder is not writable, and the tests rely on that cache."""
    base = tmp_path_factory.mktemp("splitwise-plan-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(CACHE_ENV, str(base / "session"))
        yield base


@pytest.fixture(autouse=True)
def plan_cache(_session_plan_cache: Path, monkeypatch) -> Path:
    """This test's cache folder (SPLITWISE_PLAN_CACHE_DIR; made when a plan first keeps something there),
    so that a plan one test stops is not resumed by another; its plans' checkpoints are in ``plans/``."""
    folder = _session_plan_cache / f"test-{next(_TESTS)}"
    monkeypatch.setenv(CACHE_ENV, str(folder))
    return folder


def shared_root() -> Path:
    """The shared reference-data folder: $SPLITWISE_SHARED, else the folder beside the repository."""
    env = os.environ.get("SPLITWISE_SHARED")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "shared"


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """Path of shared/data; skips the test with the reason when the reference data is absent."""
    data = shared_root() / "data"
    if not (data / "splitwise-sim").is_dir():
        why = f"reference data not found at {data} (set SPLITWISE_SHARED to the shared/ folder)"
        if os.environ.get("SPLITWISE_REQUIRE_SHARED"):   # .ci/run sets it where ../shared is: then a miss is a failure
            pytest.fail(why)
        pytest.skip(why)
    return data


@pytest.fixture(scope="session")
def sim_dir(shared_dir: Path) -> Path:
    """shared/data/splitwise-sim: reference simulator data."""
    return shared_dir / "splitwise-sim"


@pytest.fixture(scope="session")
def azure_dir(shared_dir: Path) -> Path:
    """shared/data/azure-llm-2023: the original Azure traces."""
    d = shared_dir / "azure-llm-2023"
    if not d.is_dir():
        (pytest.fail if os.environ.get("SPLITWISE_REQUIRE_SHARED") else pytest.skip)(f"Azure traces not found at {d}")
    return d


@pytest.fixture
def write(tmp_path: Path):
    """Write ``text`` to ``tmp_path/name`` and return the path."""

    def _write(name: str, text: str) -> Path:
        p = tmp_path / name
        p.write_text(text, encoding="utf-8")
        return p

    return _write
