"""The search strategies find the exhaustive grid's optimum in far fewer simulations."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from splitwise_plan.errors import SplitwisePlanError
from splitwise_plan.inputs.workloads import load_workload
from splitwise_plan.search.bound import capacity_model
from splitwise_plan.search.evaluator import Lockstep
from splitwise_plan.search.strategies import Evaluator, Space, exhaustive_search, frontier_search, optuna_search, search
from splitwise_plan.sim.simulator import Simulator


def oracle(passes):
    """A fake simulator: pass/fail from a function, tightest ratio 0.5 or 2."""
    def run(points):
        return [SimpleNamespace(slo_met=bool(passes(p, t)), tightest={"ratio": 0.5 if passes(p, t) else 2.0})
                for p, t in points]
    return run


def cost_key(cp, ct):
    return lambda p, t: (round(cp * p + ct * t, 9), p + t, p)


SHAPES = {
    "HH-like": (lambda p, t: p >= 24 and t >= max(1, 29 - p), (1, 39), (1, 39), 4.76, 4.76),
    "steep": (lambda p, t: p >= 20 and t >= 3 + max(0, 30 - p) * 2, (1, 39), (1, 39), 4.76, 4.76),
    "HA-like": (lambda p, t: p >= 25 and t >= max(4, 35 - p), (1, 39), (1, 69), 4.76, 2.21),
    "none": (lambda p, t: False, (1, 12), (1, 9), 1.0, 1.0),
    "all": (lambda p, t: True, (1, 12), (1, 9), 1.0, 1.0),
    "baseline": (lambda p, t: p >= 120, (1, 139), (0, 0), 2.21, 0.0),
}


@pytest.mark.parametrize("name", sorted(SHAPES))
@pytest.mark.parametrize("batch", [1, 8, 128])
def test_frontier_equals_exhaustive(name, batch):
    passes, pr, tr, cp, ct = SHAPES[name]
    space = Space(pr, tr, cost_key(cp, ct))
    full = exhaustive_search(Evaluator(run=oracle(passes)), space)
    ev = Evaluator(run=oracle(passes))
    fr = frontier_search(ev, space, batch=batch)
    assert fr.best == full.best
    if name != "none" and batch <= 8:
        assert fr.evaluations < space.size / 4
    assert fr.evaluations == ev.evaluations == len(ev.cache)


def test_frontier_on_random_monotone_sets():
    rng = np.random.default_rng(1)
    for trial in range(40):
        P, T = int(rng.integers(3, 25)), int(rng.integers(1, 25))
        # a random staircase: t*(p) non-increasing, inf below some p
        steps = np.sort(rng.integers(1, T + 3, size=P))[::-1]
        pmin = int(rng.integers(1, P + 1))
        passes = lambda p, t, s=steps, m=pmin: p >= m and t >= s[p - 1]  # noqa: E731
        cp, ct = float(rng.uniform(1, 5)), float(rng.uniform(1, 5))
        space = Space((1, P), (1, T), cost_key(cp, ct))
        want = exhaustive_search(Evaluator(run=oracle(passes)), space).best
        for batch in (1, 3, 64):
            assert frontier_search(Evaluator(run=oracle(passes)), space, batch=batch).best == want


def test_capacity_bound_prunes_without_losing_the_optimum():
    passes, pr, tr, cp, ct = SHAPES["HH-like"]
    tmin = np.array([max(1, 21 - p) for p in range(pr[0], pr[1] + 1)])
    pruned = Space(pr, tr, cost_key(cp, ct), t_min=tmin)
    plain = Space(pr, tr, cost_key(cp, ct))
    a = frontier_search(Evaluator(run=oracle(passes)), pruned, batch=8)
    b = frontier_search(Evaluator(run=oracle(passes)), plain, batch=8)
    assert a.best == b.best == (24, 5)
    assert pruned.candidates() < plain.size
    assert a.evaluations <= b.evaluations


def test_cheaper_than_bisects_what_the_sorted_grid_says():
    """Per column, the token counts whose key is below a point's: as ranking the whole grid tells."""
    for key in (cost_key(4.76, 2.21), cost_key(4.76, 4.76), cost_key(1.0, 0.0)):
        space = Space((1, 12), (1, 9), key)
        pts = sorted(((p, t) for p in range(1, 13) for t in range(1, 10)), key=lambda pt: key(*pt))
        for best in pts[::7]:
            below = set(pts[:pts.index(best)])
            want = [max([t for q, t in below if q == p], default=0) for p in range(1, 13)]
            assert space.cheaper_than(best).tolist() == want


def test_a_grid_of_millions_of_points_is_searched_without_listing_it():
    """At thousands of requests a second the planner's grid has millions of points: the walk must not
    list them (a sorted list of 9 million points once took gigabytes and minutes)."""
    space = Space((1, 3000), (1, 3000), cost_key(4.76, 2.21))
    fr = frontier_search(Evaluator(run=oracle(lambda p, t: p >= 1500 and t >= 3100 - p)), space, batch=16)
    assert fr.best == (1500, 1600) and fr.evaluations < 2000


def test_excluded_points_count_as_failures():
    passes, pr, tr, cp, ct = SHAPES["HH-like"]
    space = Space(pr, tr, cost_key(cp, ct))
    ev = Evaluator(run=oracle(passes))
    first = frontier_search(ev, space, batch=8)
    again = frontier_search(ev, space, batch=8, exclude=[first.best])
    assert first.best == (24, 5)
    assert again.best == (25, 4)      # the next point at the same cost


def test_optuna_strategy_certifies_the_same_optimum():
    passes, pr, tr, cp, ct = SHAPES["HA-like"]
    space = Space(pr, tr, cost_key(cp, ct))
    want = exhaustive_search(Evaluator(run=oracle(passes)), space).best
    res = optuna_search(Evaluator(run=oracle(passes)), space, n_trials=16, batch=8, seed=0)
    assert res.best == want
    assert res.evaluations < space.size / 4
    assert res.strategy.startswith("optuna")


def test_unknown_strategy():
    with pytest.raises(SplitwisePlanError):
        search(Evaluator(run=oracle(lambda p, t: True)), Space((1, 2), (1, 2), cost_key(1, 1)), "annealing")


@pytest.mark.parametrize("design", ["HH", "H100"])
def test_real_simulator_small_grid(design):
    """With the simulator itself: the frontier walk returns the exhaustive optimum."""
    stream = load_workload("coding").generate(12, 20, 0)
    sim = Simulator(stream, method="fluid")
    if design == "H100":
        space = Space((1, 16), (0, 0), cost_key(4.76, 0))
    else:
        cm = capacity_model(sim, design)
        ps = np.arange(1, 9)
        space = Space((1, 8), (1, 5), cost_key(4.76, 4.76), t_min=cm.min_token(ps, 5))
    full = exhaustive_search(Evaluator(sim, design, "fluid"), space)
    ev = Evaluator(sim, design, "fluid")
    fr = frontier_search(ev, space, batch=8)
    assert full.best is not None
    assert fr.best == full.best
    assert fr.evaluations < full.evaluations


def test_lockstep_searches_share_rounds_and_find_each_optimum():
    # Several designs searched at once, one thread each: every round is one call that
    # carries all the designs still searching, and each answer equals its own search's.
    import threading

    calls = []

    def run_points(items):
        calls.append({d for d, _, _ in items})
        return [oracle(SHAPES[d][0])([(p, t)])[0] for d, p, t in items]

    names = ["HH-like", "steep", "HA-like", "baseline"]
    lock = Lockstep(run_points)
    found, threads = {}, []

    def work(name):
        try:
            passes, pr, tr, cp, ct = SHAPES[name]
            found[name] = frontier_search(Evaluator(run=lock.client(name)), Space(pr, tr, cost_key(cp, ct)),
                                          batch=8).best
        finally:
            lock.leave()

    for name in names:
        lock.enter()
        threads.append(threading.Thread(target=work, args=(name,)))
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=60)
    alone = {}
    for name in names:
        passes, pr, tr, cp, ct = SHAPES[name]
        ev = Evaluator(run=oracle(passes))
        alone[name] = (frontier_search(ev, Space(pr, tr, cost_key(cp, ct)), batch=8).best, ev.calls)
    assert found == {n: alone[n][0] for n in names}
    assert len(calls) == lock.rounds == max(c for _, c in alone.values())
    assert len(calls[0]) == len(names)       # the first round carries every design


def test_a_stop_does_not_wait_for_the_round_in_progress():
    """Ctrl-C during a plan: the main thread stops the searches while one of them runs a round,
    holding the lock for seconds. The stop returned only after that round (2-4 s on the defaults);
    now it returns at once, and the search raises at its next round."""
    import threading
    started, release = threading.Event(), threading.Event()

    def run_points(items):
        started.set()
        release.wait(30)
        return [None] * len(items)

    lock = Lockstep(run_points)
    lock.enter()
    ask = lock.client("HH")
    outcome = []

    def search():
        outcome.append(ask([(1, 1)]))
        try:
            ask([(2, 1)])
        except KeyboardInterrupt:
            outcome.append("stopped")

    th = threading.Thread(target=search, daemon=True)
    th.start()
    assert started.wait(30)
    stopper = threading.Thread(target=lock.stop, daemon=True)
    stopper.start()
    stopper.join(5)
    stopped_at_once = not stopper.is_alive()
    release.set()
    th.join(30)
    assert stopped_at_once, "stop() waited for the round in progress"
    assert outcome == [[None], "stopped"]


@pytest.mark.parametrize("name", ["HH-like", "HA-like", "baseline"])
def test_a_ceiling_finds_what_is_below_it_and_simulates_nothing_above_it(name):
    """Under --tp auto a TP pair needs only to beat its design's best answer: with the exhaustive optimum's key as
    the ceiling nothing is found and no point at or above it is simulated; a ceiling above it finds it."""
    import dataclasses

    passes, pr, tr, cp, ct = SHAPES[name]
    space = Space(pr, tr, cost_key(cp, ct))
    want = exhaustive_search(Evaluator(run=oracle(passes)), space).best
    at = dataclasses.replace(space, ceiling=space.key(*want)[:1])
    ev = Evaluator(run=oracle(passes))
    assert frontier_search(ev, at, batch=8).best is None
    assert all(space.key(*pt)[0] < space.key(*want)[0] for pt in ev.cache)
    above = dataclasses.replace(space, ceiling=(space.key(*want)[0] + 0.01,))
    assert frontier_search(Evaluator(run=oracle(passes)), above, batch=8).best == want
