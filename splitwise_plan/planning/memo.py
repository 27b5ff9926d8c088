"""The simulations a plan ran, kept as they finish, so that the same plan stopped and run again asks none
of them twice: a design it was planning when stopped resumes its search where it was.

A search's point is kept as its worst result over the seeds' streams (``("search", design, prompt,
token)``, with the streams it took); a confirmation as its result on one stream (``("confirm", design,
prompt, token, rate, seed)``). The simulators are deterministic, so a resumed design takes the same
steps to the same answer, and counts the same simulations.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, Iterable

from splitwise_plan.sim.simulator import SimulationResult


@dataclass(frozen=True)
class Kept:
    """One simulation's answer and what it answers (``key``); ``runs``: the simulations it took."""

    key: tuple
    result: SimulationResult
    runs: int = 1

    def to_record(self) -> dict:
        return {"type": "Kept", "key": list(self.key), "runs": self.runs, "result": self.result.to_record()}

    @classmethod
    def from_record(cls, record: dict) -> "Kept":
        """The inverse of :meth:`to_record` (a ``TypeError`` for a record of something else)."""
        if record.get("type") != "Kept" or not isinstance(record.get("key"), list):
            raise TypeError("not a kept simulation's record")
        runs = record["runs"]
        if type(runs) is not int or runs < 0:
            raise TypeError("not a kept simulation's record")
        return cls(tuple(record["key"]), SimulationResult.from_record(record["result"]), runs)


def search_key(design: str, pt) -> tuple:
    return ("search", design, int(pt[0]), int(pt[1]))


def confirm_key(design: str, pt, rate, seed) -> tuple:
    return ("confirm", design, int(pt[0]), int(pt[1]), None if rate is None else float(rate), seed)


class Memo:
    """Simulations known from a stopped run (``kept``), and ``keep(list of Kept)`` told of each new
    one as it finishes (to write them down). Safe to share between the search threads."""

    def __init__(self, kept: Iterable[Kept] = (), keep: Callable[[list], None] | None = None) -> None:
        self.known = {k.key: k for k in kept}
        self.keep = keep
        self._lock = threading.Lock()

    def get(self, key: tuple) -> Kept | None:
        with self._lock:
            return self.known.get(key)

    def put(self, entries: list) -> None:
        if not entries:
            return
        with self._lock:
            for e in entries:
                self.known[e.key] = e
            if self.keep is not None:
                self.keep(entries)
