"""Who owns a trial, and the heartbeat that keeps it: a dead worker's RUNNING trials are failed.

A worker is ``host|boot|pid|token``. Its in-flight trials beat every :data:`HEARTBEAT_INTERVAL`
seconds; a trial of a process gone from this machine is failed at once, one elsewhere after
:data:`GRACE_PERIOD` seconds without a beat (Optuna's ``fail_stale_trials``).
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
import warnings
from datetime import datetime
from pathlib import Path
from typing import Sequence

from splitwise_plan.search.storage.trials import WORKER_ATTR

HEARTBEAT_INTERVAL = 5           # seconds between heartbeats of in-flight trials (Optuna's, an int)


GRACE_PERIOD = 60                # seconds without a heartbeat after which a RUNNING trial is failed


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
    except OSError:
        return "-"


_HOST = f"{socket.gethostname()}|{_boot_id()}"


def worker_id() -> str:
    """``host|boot|pid|token``: who owns a trial (the process part is checked for liveness)."""
    return f"{_HOST}|{os.getpid()}|{uuid.uuid4().hex[:6]}"


def _dead_here(worker: str) -> bool:
    """True when ``worker`` ran on this machine (since its last boot) and its process is gone."""
    parts = str(worker).split("|")
    if len(parts) != 4 or "|".join(parts[:2]) != _HOST:
        return False
    try:
        pid = int(parts[2])
    except ValueError:
        return False
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


class Heartbeat:
    """One thread recording Optuna heartbeats for this process's in-flight trials."""

    def __init__(self, rdb) -> None:
        self.rdb = rdb
        self.ids: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="splitwise-heartbeat", daemon=True)
        self._thread.start()

    def add(self, trial_id: int) -> None:
        with self._lock:
            self.ids.add(trial_id)
        self._beat(trial_id)

    def discard(self, trial_id: int) -> None:
        with self._lock:
            self.ids.discard(trial_id)

    def _beat(self, trial_id: int) -> None:
        try:
            self.rdb.record_heartbeat(trial_id)
        except Exception:  # noqa: BLE001 - a missed beat is retried next period
            pass

    def _loop(self) -> None:
        while not self._stop.wait(HEARTBEAT_INTERVAL):
            with self._lock:
                ids = list(self.ids)
            for tid in ids:
                self._beat(tid)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def fail_stale(study, rdb, mine: Sequence[int] = ()) -> int:
    """Fail RUNNING trials of dead workers; returns how many this call failed."""
    import optuna
    from optuna.trial import TrialState

    mine = set(mine)
    before = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))} - mine
    if not before:
        return 0
    rdb.heartbeat_interval, rdb.grace_period = HEARTBEAT_INTERVAL, GRACE_PERIOD
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        optuna.storages.fail_stale_trials(study)     # no heartbeat for GRACE_PERIOD seconds
    now = datetime.now()
    for tr in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if tr.number in mine:
            continue
        owner = tr.user_attrs.get(WORKER_ATTR)
        age = (now - tr.datetime_start).total_seconds() if tr.datetime_start else 0.0
        orphan = "prompt" not in tr.params and age > GRACE_PERIOD    # died between ask and its first heartbeat
        if (owner is not None and _dead_here(owner)) or orphan:
            study.tell(tr.number, state=TrialState.FAIL, skip_if_finished=True)
    failed = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,))}
    return len(before & failed)
