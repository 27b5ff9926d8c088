"""Storage URLs: checked, normalized and opened once per process as Optuna ``RDBStorage`` objects.

``sqlite:///FILE`` (an absolute path; a file that is not Optuna's is refused before Optuna adds its
tables) and ``postgresql://USER@HOST/DB`` (the psycopg 3 driver). Every failure is one line.
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from pathlib import Path

from splitwise_plan.errors import SplitwisePlanError, input_name
from splitwise_plan.search.storage.heartbeat import GRACE_PERIOD, HEARTBEAT_INTERVAL

MEMORY_NAMES = ("memory", "inmemory", "in-memory", ":memory:")


def redact(url: str | None) -> str:
    """The URL with its password hidden (for messages)."""
    if url is None:
        return "memory"
    try:
        from sqlalchemy.engine import make_url
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - not a URL: show it as given
        return str(url)


def normalize_storage(url: str | None) -> str | None:
    """A checked storage URL: None for in-memory; ``sqlite:///`` with an absolute path;
    ``postgresql+psycopg://`` for a bare ``postgresql://`` (the psycopg 3 driver)."""
    if url is None:
        return None
    text = str(url).strip()
    if not text or text.lower() in MEMORY_NAMES:
        return None
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    hint = "use sqlite:///FILE or postgresql://USER@HOST[:PORT]/DATABASE"
    try:
        u = make_url(text)
    except (ArgumentError, ValueError):
        raise SplitwisePlanError(f"{input_name('storage')} {text!r} is not a storage URL; {hint}") from None
    backend = u.get_backend_name()
    if backend == "sqlite":
        db = u.database
        if not db or db == ":memory:":
            raise SplitwisePlanError(f"{input_name('storage')} {text!r} names no SQLite file (leave --storage out for an "
                                     f"in-memory study); use sqlite:///FILE")
        path = Path(db).expanduser()
        if not path.is_absolute():
            path = Path.cwd() / path
        if path.is_dir():
            raise SplitwisePlanError(f"{input_name('storage')} {text!r}: {path} is a folder, not a SQLite file")
        if not path.parent.is_dir():
            raise SplitwisePlanError(f"{input_name('storage')} {text!r}: folder {path.parent} does not exist")
        return u.set(database=str(path)).render_as_string(hide_password=False)
    if backend == "postgresql":
        if not u.database:
            raise SplitwisePlanError(f"{input_name('storage')} {redact(text)!r} names no database; "
                                     f"use postgresql://USER@HOST[:PORT]/DATABASE")
        if u.drivername == "postgresql":
            u = u.set(drivername="postgresql+psycopg")
        return u.render_as_string(hide_password=False)
    raise SplitwisePlanError(f"{input_name('storage')} {redact(text)!r}: unsupported database {backend!r}; {hint}")


_STORAGES: dict[str, object] = {}


_LOCK = threading.Lock()


def _engine_kwargs(url: str) -> dict:
    if url.startswith("sqlite"):
        return {"connect_args": {"timeout": 120}}      # wait on another process's write lock
    if url.startswith("postgresql"):
        return {"connect_args": {"connect_timeout": 10}, "pool_pre_ping": True}
    return {}


# what opening a new storage says while another process creates its tables (SQLite, PostgreSQL)
_CREATING = ("already exists", "UNIQUE constraint failed", "duplicate key", "database is locked")


_CREATE_TRIES = 8


def sqlite_tables(path: str) -> dict[str, set[str]]:
    """The tables (and views) of an existing SQLite file with their columns, read only: what
    it holds is looked at before Optuna opens it, since Optuna adds its tables to any database.

    A file that is not an SQLite database is a one-line SplitwisePlanError.
    """
    import sqlite3

    try:
        con = sqlite3.connect(f"{Path(path).as_uri()}?mode=ro", uri=True, timeout=120)
    except sqlite3.Error as exc:
        raise SplitwisePlanError(f"{input_name('storage')} {path}: cannot open the database: {first_line(exc)}") from None
    try:
        names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view') "
                                           "AND name NOT LIKE 'sqlite!_%' ESCAPE '!'")]
        return {n: {r[1] for r in con.execute("SELECT * FROM pragma_table_info(?)", (n,))} for n in names}
    except sqlite3.DatabaseError as exc:
        if "not a database" in str(exc):
            raise SplitwisePlanError(f"{input_name('storage')} {path} is not an SQLite database") from None
        raise SplitwisePlanError(f"{input_name('storage')} {path}: cannot read the database: {first_line(exc)}") from None
    finally:
        con.close()


def is_optuna_schema(tables: dict[str, set[str]]) -> bool:
    """True for Optuna's tables: its ``studies`` and ``version_info`` (every Optuna schema has
    both), or ``studies`` alone, the first table of a storage another process is creating now."""
    if not {"study_id", "study_name"} <= tables.get("studies", set()):
        return False
    return {"schema_version", "library_version"} <= tables.get("version_info", set()) or set(tables) == {"studies"}


def check_sqlite_file(path: str) -> bool:
    """Refuse an SQLite file that holds tables but not Optuna's (Optuna would add its own to
    them); True when the file holds an Optuna storage, False when it holds no table yet."""
    tables = sqlite_tables(path)
    if tables and not is_optuna_schema(tables):
        names = sorted(tables)
        shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
        raise SplitwisePlanError(f"{input_name('storage')} {path} is an SQLite database but not an Optuna storage "
                                 f"(its tables: {shown})")
    return bool(tables)


def open_storage(url: str | None):
    """The Optuna ``RDBStorage`` of a URL (created once per process), or None for in-memory.

    A bad URL, a missing driver or an unreachable database is a one-line SplitwisePlanError,
    and so is an SQLite file that is not Optuna's (checked before Optuna adds its tables).
    """
    url = normalize_storage(url)
    if url is None:
        return None
    with _LOCK:
        if url in _STORAGES:
            return _STORAGES[url]
        db = sqlite_file(url)
        if db not in (None, ":memory:") and os.path.isfile(db) and os.path.getsize(db) > 0:
            check_sqlite_file(db)
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        try:
            for attempt in range(_CREATE_TRIES):
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")      # heartbeat_interval is "experimental"
                        rdb = optuna.storages.RDBStorage(url, engine_kwargs=_engine_kwargs(url),
                                                         heartbeat_interval=HEARTBEAT_INTERVAL,
                                                         grace_period=GRACE_PERIOD)
                    break
                except Exception as exc:  # noqa: BLE001 - another process creating the same new schema?
                    if attempt + 1 == _CREATE_TRIES or not any(m in str(exc) for m in _CREATING):
                        raise
                    time.sleep(0.1 * (attempt + 1))   # it has made its tables by now, or soon: open them
        except ImportError:
            raise SplitwisePlanError(
                f"{input_name('storage')} {redact(url)}: the database driver is not installed; "
                f"pip install 'splitwise-plan[postgres]' (psycopg)") from None
        except Exception as exc:  # noqa: BLE001 - SQLAlchemy/driver errors: one line, no traceback
            raise SplitwisePlanError(f"{input_name('storage')} {redact(url)}: cannot open the database: {first_line(exc)}") from None
        if url.startswith("sqlite"):
            _sqlite_wal(rdb)
        # Optuna warns that heartbeats are meant for Study.optimize; explore() beats for its ask/tell trials
        warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")
        _STORAGES[url] = rdb
        return rdb


def _sqlite_wal(rdb) -> None:
    """Write-ahead log and fewer fsyncs for SQLite: readers never block the writer (several
    worker processes), and a commit costs about a millisecond instead of an fsync. A crash
    keeps the file consistent; at worst the last trials are lost and asked again."""
    import sqlalchemy

    def on_connect(dbapi_conn, _record):
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    sqlalchemy.event.listen(rdb.engine, "connect", on_connect)
    rdb.engine.dispose()          # connections opened while creating the tables predate the hook


def check_storage(url: str | None) -> str | None:
    """Validate a URL and connect once (so a bad storage fails before any simulation)."""
    url = normalize_storage(url)
    open_storage(url)
    return url


def first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), type(exc).__name__)
    return line[:300]


def sqlite_file(url: str | None) -> str | None:
    """The database file of an SQLite storage URL (None for another kind of storage, or no URL)."""
    if not url:
        return None
    from sqlalchemy.engine import make_url
    try:
        u = make_url(normalize_storage(url))
    except Exception:  # noqa: BLE001 - no URL, or a malformed one: open_storage says what is wrong
        return None
    if u.get_backend_name() != "sqlite":   # sqlite:// and sqlite+pysqlite:// alike
        return None
    return u.database or ":memory:"
