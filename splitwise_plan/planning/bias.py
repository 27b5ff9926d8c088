"""What confirmation taught the search: the fast model's optimism on each SLO, learned from the points
it passed and the confirm simulator failed, so that the search's next candidate is one it passes by
that much more (a dearer design, not another of the same cost it is as wrong about).
"""

from __future__ import annotations

import math

from splitwise_plan.search import passes

# A rejected point raises an SLO's factor at most this much: a confirm run that never finished (an SLO
# read as infinite) or a miss of several times (a model the fast model reads far off) still leaves the
# search candidates to offer
MAX_STEP = 2.0
# and leaves the least ratio the search read of that SLO this share of the threshold
FLOOR_SHARE = 0.99


class Bias:
    """Per SLO (metric, percentile), the factor by which the confirm simulator read it above the fast
    model on the points it failed; a search result passes when every SLO times its factor stays below
    ``threshold`` (1 - the margin), as a confirmation asks."""

    def __init__(self, slos, threshold: float) -> None:
        self.slos, self.threshold = slos, float(threshold)
        self.factor: dict = {}

    def _ratios(self, r) -> dict:
        return {(row["metric"], row["percentile"]): row["ratio"] for row in self.slos.assess(r.slowdown, r.latency_s)}

    def learn(self, searched, confirmed, seen=()) -> None:
        """The search read ``searched`` where confirmation read ``confirmed`` (which failed): each SLO that
        failed confirmation takes the factor that would have failed it in the search too.

        A factor never fails an SLO at the least the search has read it anywhere (``seen``: its results):
        an SLO that more machines do not lower (a TBT P50 set by the decode step alone) would otherwise
        fail every design, where the miss came from a regime of few machines the search reads wrong."""
        if searched is None or not searched.tightest:
            return
        fast = self._ratios(searched)
        floor = self._floors([searched, *seen])
        for slo, ratio in self._ratios(confirmed).items():
            f = fast.get(slo, math.nan)
            if not ratio >= self.threshold or not 0.0 < f < math.inf:   # (NaN: read as a miss)
                continue
            step = min(ratio / f, MAX_STEP) if ratio < math.inf else MAX_STEP
            step = min(step, FLOOR_SHARE * self.threshold / floor.get(slo, f))
            if step > 1.0:
                self.factor[slo] = max(self.factor.get(slo, 1.0), step)

    def _floors(self, results) -> dict:
        """Per SLO, the least ratio among ``results`` that finished every request."""
        floor: dict = {}
        for r in results:
            if r is None or not r.tightest or r.completed < r.requests:
                continue
            for slo, ratio in self._ratios(r).items():
                if 0.0 < ratio < floor.get(slo, math.inf):
                    floor[slo] = ratio
        return floor

    def passes(self, r) -> bool:
        """Does a search result pass, every SLO read with its factor?"""
        if not passes(r, self.threshold):
            return False
        if not self.factor:
            return True
        ratios = self._ratios(r)
        return all(ratios.get(slo, 0.0) * f < self.threshold for slo, f in self.factor.items())

    def text(self) -> str:
        """The factors, as the notes say them ('' before any): 'TBT P99 x1.15'."""
        return ", ".join(f"{m.upper()} P{p:g} x{f:.2f}" for (m, p), f in sorted(self.factor.items()) if f > 1.0)
