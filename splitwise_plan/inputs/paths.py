"""Find the data files that ship with splitwise-plan (profiles, SLOs, workloads, model architectures).

An installed wheel carries them as package data under ``splitwise_plan/_data``;
a source checkout has them at the repository root. The installed copy wins.
"""

from __future__ import annotations

import hashlib
import os
import tomllib
from pathlib import Path

from splitwise_plan.errors import SplitwisePlanError

PACKAGE_DIR = Path(__file__).resolve().parent.parent   # splitwise_plan/
INSTALLED_DATA_DIR = PACKAGE_DIR / "_data"
SOURCE_ROOT = PACKAGE_DIR.parent
DATA_KINDS = ("profiles", "slos", "workloads", "models")


def data_dir(kind: str) -> Path:
    """Folder holding the shipped data of one kind (``profiles``, ``slos``, ``workloads`` or ``models``)."""
    if kind not in DATA_KINDS:
        raise SplitwisePlanError(f"unknown data kind {kind!r}; valid: {', '.join(DATA_KINDS)}")
    for base in (INSTALLED_DATA_DIR, SOURCE_ROOT):
        candidate = base / kind
        if candidate.is_dir():
            return candidate
    raise SplitwisePlanError(
        f"shipped data folder {kind!r} not found in {INSTALLED_DATA_DIR} or {SOURCE_ROOT}; "
        "reinstall splitwise-plan")


def shipped_files() -> dict:
    """{real path: 'kind/name'} of every shipped data file (what no report may overwrite)."""
    out = {}
    for kind in DATA_KINDS:
        try:
            folder = data_dir(kind)
        except SplitwisePlanError:
            continue
        for f in folder.rglob("*"):   # (subfolders too: profiles/stacks/paper-2023.toml)
            if f.is_file():
                out[os.path.realpath(f)] = f"{kind}/{f.relative_to(folder).as_posix()}"
    return out


def data_file(kind: str, name: str) -> Path:
    """Path of one shipped data file, e.g. ``data_file('slos', 'paper.toml')``."""
    path = data_dir(kind) / name
    if not path.is_file():
        raise SplitwisePlanError(f"shipped data file {kind}/{name} is missing ({path}); reinstall splitwise-plan")
    return path


def user_file(path, what: str) -> Path:
    """Check that a user-given ``path`` is a readable file; ``what`` names it in the error."""
    if not isinstance(path, (str, os.PathLike)):
        raise SplitwisePlanError(f"a {what} file is given as a path, got {path!r}")
    if not os.fspath(path).strip():   # Path("") is ".", the current folder
        raise SplitwisePlanError(f"the {what} file's path is empty")
    p = Path(path).expanduser()
    if not p.exists():
        raise SplitwisePlanError(f"{what} file not found: {p}")
    if not p.is_file():
        empty = " (an empty path reads as the current folder)" if os.fspath(path) == "." else ""
        raise SplitwisePlanError(f"{what} path is not a file: {p}{empty}")
    return p


def read_text(p: Path, where: str) -> str:
    """The text of user file ``p`` (``where`` names it in errors: "SLO file slo.toml"), or a one-line user
    error when it is not UTF-8 or cannot be read. A UTF-8 byte-order mark (Windows Notepad writes one) is
    read past, as the CSV readers do."""
    try:
        return p.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError:
        raise SplitwisePlanError(f"{where} is not UTF-8 text") from None
    except OSError as exc:
        raise SplitwisePlanError(f"{where} cannot be read: {exc.strerror or exc}") from None


def read_toml(path: str | Path, what: str) -> dict:
    """Parse a TOML file, turning a missing file or a syntax error into a one-line user error."""
    p = user_file(path, what)
    text = read_text(p, f"{what} file {p}")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SplitwisePlanError(f"{what} file {p} is not valid TOML: {exc}") from None


def file_sha256(path: str | os.PathLike) -> str:
    """The SHA-256 of a file's contents, hex (read in 1 MiB chunks): how a stored study or a checkpoint
    knows an input file, whatever path it is given by."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
