"""The compiled event simulator's plumbing: chunks, progress reports, growing lists and ``until``."""

from __future__ import annotations

import inspect

import numpy as np

from splitwise_plan.inputs.workloads import load_workload
from splitwise_plan.sim.events import state
from splitwise_plan.sim.events.engine import simulate_events
from splitwise_plan.sim.simulator import Simulator


def _point(design="HH", p=6, t=2, rate=40.0, seconds=30.0):
    stream = load_workload("coding").generate(rate, duration_s=seconds, seed=3)
    return Simulator(stream, method="events").cluster(design, p, t), stream


def _same(a, b) -> None:
    for f in ("ttft", "e2e", "busy_s"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
    assert (a.horizon_s, a.oom, a.overloaded, a.failed) == (b.horizon_s, b.oom, b.overloaded, b.failed)


def test_progress_is_reported_between_chunks_without_changing_the_answers():
    cluster, stream = _point("HH", 20, 3, rate=70.0, seconds=60.0)   # ~30,000 events: a few chunks
    heard = []
    _same(simulate_events(cluster, stream, on_arrivals=heard.append), simulate_events(cluster, stream))
    assert heard and heard == sorted(heard) and heard[-1] <= len(stream)


def test_lists_and_heap_grown_from_one_slot_give_the_same_answers(monkeypatch):
    for design, p, t in (("HH", 3, 1), ("A100", 8, 0)):
        cluster, stream = _point(design, p, t)
        wide = simulate_events(cluster, stream)
        monkeypatch.setattr(state, "INITIAL_CAPACITY", 1)
        monkeypatch.setattr(state, "INITIAL_HEAP", 1)
        _same(simulate_events(cluster, stream), wide)
        monkeypatch.undo()


def test_until_stops_the_run_at_that_time():
    cluster, stream = _point()
    full = simulate_events(cluster, stream)
    cut = simulate_events(cluster, stream, until=10.0)
    assert cut.horizon_s <= 10.0
    done = np.isfinite(cut.e2e)
    assert 0 < done.sum() < len(stream)
    np.testing.assert_array_equal(cut.e2e[done], full.e2e[done])


def test_the_kernel_takes_the_state_in_the_order_of_its_fields():
    from splitwise_plan.sim.events.kernels import run_events
    params = list(inspect.signature(getattr(run_events, "py_func", run_events)).parameters)
    assert params == [*state.Sim._fields, "chunk"]


def test_the_kernels_are_compiled_ahead_on_the_first_design_the_machines_can_hold(tmp_path):
    """Before worker processes start, the run's own process compiles (or loads) the kernels, skipping a
    design its machines cannot hold; compiled or not, a run afterwards gives the same answers."""
    import dataclasses

    from splitwise_plan.inputs.machines import BUILTIN_MACHINES
    from splitwise_plan.sim.events.kernels import run_events
    from splitwise_plan.sim.jit import compiled

    cluster, stream = _point("HH", 6, 2)
    before = simulate_events(cluster, stream)
    small = {**BUILTIN_MACHINES, "dgx-a100": dataclasses.replace(BUILTIN_MACHINES["dgx-a100"], gpus=4)}
    sim = Simulator(stream, method="events", machines=small)
    sim.compile_kernels(["AA", "HH"], {"events", "fluid"})   # AA's machines hold no instance at TP8: HH compiles them
    assert not compiled(run_events) or run_events.signatures
    _same(simulate_events(cluster, stream), before)
    fluid = sim.run("HH", 6, 2, method="fluid")   # and the fluid model, compiled in a child process meanwhile, runs
    assert fluid.method == "fluid" and fluid.completed > 0
