"""The space a search walks: a grid of (prompt, token) machine counts with a key to minimize, and what
a search returns.

A baseline has one pool (``t_range == (0, 0)``). The capacity bound gives each prompt count its
smallest worthwhile token count (``t_min``), so the points it rules out are never simulated.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

Point = tuple[int, int]


@dataclass(frozen=True)
class Space:
    """A grid of (prompt, token) counts with a lexicographic key to minimize.

    ``key(p, t)`` returns a tuple (the objective first, then tie-breakers); a baseline
    has ``t_range == (0, 0)``. ``t_min[i]`` is the smallest token count that the
    capacity model allows for prompt count ``p_range[0] + i`` (``t_max + 1``: none).
    """

    p_range: tuple[int, int]
    t_range: tuple[int, int]
    key: Callable[[int, int], tuple] = field(repr=False)
    t_min: np.ndarray | None = field(default=None, repr=False)
    #: a key the answer must stay below (None: none): points at or above it are never simulated (under
    #: ``--tp auto``, a design's TP pair needs only to beat its design's best answer so far)
    ceiling: tuple | None = None

    @property
    def ps(self) -> np.ndarray:
        return np.arange(self.p_range[0], self.p_range[1] + 1)

    @property
    def ts(self) -> np.ndarray:
        return np.arange(self.t_range[0], self.t_range[1] + 1)

    @property
    def size(self) -> int:
        return len(self.ps) * len(self.ts)

    def lower(self) -> np.ndarray:
        """Smallest token count worth simulating per prompt count."""
        lo = np.full(len(self.ps), self.t_range[0], dtype=np.int64)
        if self.t_min is not None:
            lo = np.maximum(lo, np.asarray(self.t_min, dtype=np.int64))
        return lo

    def candidates(self) -> int:
        """Points left after the capacity pruning."""
        lo = self.lower()
        return int(np.clip(self.t_range[1] - lo + 1, 0, None).sum())

    def cheaper_than(self, pt: Point) -> np.ndarray:
        """Per prompt count, the largest token count whose key is below ``pt``'s (``t_range[0] - 1``: none).

        A key grows with the token count (the objective's units are not negative and more
        machines break its ties), so each column is one bisection: no grid of millions of
        points is ever listed, whatever the rate scales the space to.
        """
        return self.below(self.key(*pt))

    def below(self, key: tuple) -> np.ndarray:
        """Per prompt count, the largest token count whose key is below ``key`` (``t_range[0] - 1``: none)."""
        ts = range(self.t_range[0], self.t_range[1] + 1)
        return np.array([self.t_range[0] - 1 + bisect_left(ts, key, key=lambda t, p=int(p): self.key(p, t))
                         for p in self.ps], dtype=np.int64)


@dataclass(frozen=True)
class SearchResult:
    """The best passing point (None if none in the space) and what it took to find it."""

    best: Point | None
    result: object | None
    evaluations: int
    rounds: int
    grid_size: int
    candidates: int
    seconds: float
    strategy: str
    excluded: tuple = ()
