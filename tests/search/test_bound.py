"""The capacity model and its PuLP ILP: safe lower bounds, consistent with each other."""

from __future__ import annotations

import numpy as np
import pytest

from splitwise_plan.errors import SplitwisePlanError
from splitwise_plan.inputs.budget import parse_budget
from splitwise_plan.inputs.machines import BUILTIN_MACHINES, load_machines
from splitwise_plan.inputs.workloads import load_workload
from splitwise_plan.search.bound import capacity_model, default_max_load
from splitwise_plan.sim.simulator import Simulator


@pytest.fixture(scope="module")
def sim70():
    return Simulator(load_workload("coding").generate(70, 30, 0), method="events")


def test_work_scales_with_the_machine(sim70):
    hh, aa = capacity_model(sim70, "HH"), capacity_model(sim70, "AA")
    # H100 prompts are faster than A100 ones; the memory per machine is the same
    assert hh.prompt_side.prompt < aa.prompt_side.prompt
    assert hh.prompt_side.mem_free == aa.prompt_side.mem_free > 0
    assert hh.max_load == pytest.approx(default_max_load(30))


@pytest.mark.parametrize("design", ["HH", "HA", "AA", "HHcap"])
def test_min_token_is_the_first_feasible_token_count_of_the_whole_grid(sim70, design):
    cm = capacity_model(sim70, design)
    ps, T = np.arange(1, 80), 12
    ok = cm.feasible(ps[:, None], np.arange(1, T + 1)[None, :])
    want = np.where(ok.any(axis=1), ok.argmax(axis=1) + 1, T + 1)
    assert cm.min_token(ps, T).tolist() == want.tolist()
    assert (want <= T).any() and (want > T).any()   # both kinds of column


def test_feasibility_is_monotone(sim70):
    cm = capacity_model(sim70, "HA")
    p, t = np.meshgrid(np.arange(1, 40), np.arange(1, 40), indexing="ij")
    ok = cm.feasible(p, t)
    assert ok.any() and not ok.all()
    # more machines of either pool never make a feasible design infeasible
    assert np.all(ok[1:, :] >= ok[:-1, :])
    assert np.all(ok[:, 1:] >= ok[:, :-1])


def test_small_token_pools_survive_through_the_mixed_pool(sim70):
    # the reference passes Splitwise-HH 28+1 at 70 req/s: prompt machines take token work
    cm = capacity_model(sim70, "HH")
    assert cm.feasible(28, 1)
    assert cm.min_token(np.array([28, 29]), 39).tolist() == [1, 1]


def test_without_mixed_pool_each_pool_must_carry_its_phase(sim70):
    from dataclasses import replace
    cm = capacity_model(sim70, "HH")
    strict = replace(cm, mixed_pool=False)
    assert not strict.feasible(5, 30)      # 5 prompt machines cannot do the prompt work alone
    assert cm.feasible(5, 30)              # but may borrow token machines


def test_ilp_bound_matches_the_vectorized_check(sim70):
    for name in ("HH", "HA", "H100"):
        cm = capacity_model(sim70, name)
        pmax, tmax = (39, 39) if name != "H100" else (79, 0)
        bound = cm.ilp_bound("cost", p_max=pmax, t_max=tmax or None)
        assert bound.feasible
        up, ut = cm.unit("cost")
        ps = np.arange(1, pmax + 1)
        tmin = cm.min_token(ps, tmax)
        costs = [up * p + ut * t for p, t in zip(ps, tmin) if t <= tmax]
        assert bound.value == pytest.approx(min(costs), rel=1e-9)


def test_ilp_rate_bound_within_a_budget(sim70):
    cm = capacity_model(sim70, "HH")
    budget = parse_budget("40xH100", "power")
    b = cm.ilp_bound("power", p_max=40, t_max=39, budget=("power", budget), maximize_scale=True)
    assert b.feasible and b.scale > 1.0
    assert BUILTIN_MACHINES["dgx-h100"].power * (b.prompt + b.token) <= budget + 1e-9
    # the point it returns carries that multiple of the stream and no more
    assert cm.feasible(b.prompt, b.token, b.scale * 0.999)
    assert not cm.feasible(b.prompt, b.token, b.scale * 1.01)
    assert float(cm.max_scale(b.prompt, b.token)) == pytest.approx(b.scale, rel=1e-3)


def test_weights_that_do_not_fit_are_a_user_error(write):
    path = write("m.toml", "[machines.dgx-a100]\nhbm_gib_per_gpu = 16\n")
    sim = Simulator(load_workload("coding").generate(5, 5, 0), machines=load_machines(path), method="events")
    with pytest.raises(SplitwisePlanError, match="do not fit"):
        capacity_model(sim, "AA")


# the catalog's data-sheet figures (tests/inputs/test_machines.py checks them): 10.2 kW an H100,
# 6.5 kW an A100, 70% of the H100's a capped one; an H100 costs 55.04 USD/h, as the capped one
H100_USD = 55.04


@pytest.mark.parametrize("spec,kind,value", [
    ("40xH100", "power", 40 * 10.2), ("40xH100", "cost", 40 * H100_USD), ("1760", "power", 1760.0),
    (123.5, "cost", 123.5), ("20xH100+10xA100", "power", 20 * 10.2 + 10 * 6.5),
    ("10 x dgx-h100-cap", "power", 10 * 7.14), ("2xh100cap", "cost", 2 * H100_USD),
    ("40xB300", "power", 40 * 14.0), ("9xGB200", "power", 120.0), ("2xL40S+1xB200", "power", 2 * 6.8 + 14.3),
])
def test_parse_budget(spec, kind, value):
    assert parse_budget(spec, kind) == pytest.approx(value)


@pytest.mark.parametrize("spec", ["", "-5", "0", "40xB900", "forty", "nan", "40x"])
def test_bad_budgets(spec):
    with pytest.raises(SplitwisePlanError):
        parse_budget(spec, "power")


def test_no_design_the_reference_passes_is_pruned(sim_dir):
    """The capacity model is a safe bound: every design the reference simulator passes on its own trace
    (21 of its 75 runs) is feasible in it, and so never pruned from a search."""
    import pandas as pd

    from splitwise_plan.inputs.workloads import load_trace
    table = pd.read_csv(sim_dir / "reference_results_calibration.csv")
    sim = Simulator(load_trace(sim_dir / "rr_code_70_2min.csv"), method="events")
    passing = table[table.all_slos_met]
    assert len(passing) == 21
    for system, rows in passing.groupby("system"):
        cm = capacity_model(sim, system)
        assert cm.feasible(rows.n_prompt.to_numpy(), rows.n_token.to_numpy()).all(), system


def test_the_memory_bound_prunes_a_design_whose_kv_cache_cannot_fit():
    """Llama2-70B at TP2 leaves each instance 37 GB of KV cache: at 25 req/s of conversation Splitwise-HH
    2+1 cannot hold the requests' KV cache (the oracle overloads on it), and only the memory bound says
    so (its compute would carry the load); designs the oracle passes stay feasible."""
    stream = load_workload("conversation").generate(25, duration_s=120, seed=5)
    sim = Simulator(stream, "llama2-70b", tensor_parallel=2, method="events")
    cm = capacity_model(sim, "HH")
    assert not cm.feasible(2, 1) and not sim.run("HH", 2, 1).slo_met
    for pt in ((4, 6), (6, 4)):
        assert cm.feasible(*pt) and sim.run("HH", *pt).slo_met
