"""The planner: goals, confirmation, ranking, gains, the API and the CLI root command (short streams)."""

from __future__ import annotations

import re

import pytest

from splitwise_plan import PlanRequest, plan
from splitwise_plan.cli import main
from splitwise_plan.errors import SplitwisePlanError
from splitwise_plan.inputs.machines import BUILTIN_MACHINES
from splitwise_plan.inputs.workloads import load_workload
from splitwise_plan.planning import DesignPlan, Inputs, gain_text, iso
from splitwise_plan.planning.budget import budget_points
from splitwise_plan.planning.confirm import Confirmer
from splitwise_plan.report import plan as plan_reports
from splitwise_plan.search.evaluator import passes
from splitwise_plan.sim import simulator
from splitwise_plan.sim.simulator import Simulator

SMALL = dict(rps=10, duration=20, designs="HH,H100", jobs=1,
             limits=(("HH", 10, 6), ("H100", 20, 0)), search_method="fluid", seeds=1)   # one stream: exact counts
A100, H100 = BUILTIN_MACHINES["dgx-a100"], BUILTIN_MACHINES["dgx-h100"]   # the catalog's prices and powers


@pytest.fixture(scope="module")
def min_cost():
    return plan(goal="min-cost", **SMALL)


def test_min_cost_plans_every_design(min_cost):
    assert {d.short for d in min_cost.designs} == {"HH", "H100"}
    for d in min_cost.designs:
        assert d.status == "ok", d.note
        assert d.result is not None and d.result.slo_met
        assert d.result.method == "events"             # confirmed by the oracle
        assert d.confirmations >= 1
        assert 0 <= d.headroom < 1
        assert d.evaluations < d.grid_size
    hh, h100 = min_cost.get("HH"), min_cost.get("H100")
    assert hh.cost == pytest.approx(hh.prompt * H100.cost + hh.token * H100.cost)
    assert h100.cost == pytest.approx(h100.prompt * H100.cost) and h100.token == 0
    assert min_cost.winner == min(min_cost.designs, key=lambda d: d.cost).design
    assert min_cost.designs[0].design == min_cost.winner   # ranked by the goal


def test_min_cost_equals_the_exhaustive_grid():
    kw = dict(SMALL, confirm_method="fluid")
    fast = plan(goal="min-cost", **kw)
    full = plan(goal="min-cost", strategy="exhaustive", **kw)
    for a in fast.designs:
        b = full.get(a.design)
        assert (a.prompt, a.token) == (b.prompt, b.token)
        assert a.evaluations < b.evaluations


def test_min_power_minimizes_power_where_cost_orders_the_points_otherwise(write):
    """A100 token machines made cheaper and power-hungry (1.5 and 60 a machine; an H100 is the catalog's): each design's
    min-power answer is its grid's least-power passing point, its min-cost answer the least-cost one, they
    differ for Splitwise-HA, and the winners are ranked by each goal's own number (the only min-power test
    planned all-H100 designs, whose cost and power order every point alike)."""
    from splitwise_plan.inputs.machines import load_machines
    from splitwise_plan.inputs.workloads import load_workload
    from splitwise_plan.sim.simulator import Simulator
    f = write("m.toml", "[machines.dgx-a100]\npower = 60\ncost = 1.5\n")
    n = 12
    kw = dict(rps=25, duration=20, designs="HA,HH,AA", jobs=1, limits=(("HA", n, n), ("HH", n, n), ("AA", 2 * n, n)),
              machines_file=str(f), search_method="fluid", confirm_method="fluid", seeds=1)   # seed 0's stream, as below
    sim = Simulator(load_workload("coding").generate(25, duration_s=20, seed=0), machines=load_machines(f),
                    method="fluid")
    grid = [(p, t) for p in range(1, n + 1) for t in range(1, n + 1)]
    hp, hc = H100.power, H100.cost
    prices = {"HA": ((hp, 60.0), (hc, 1.5)), "HH": ((hp, hp), (hc, hc)),   # (power, cost) a pool
              "AA": ((60.0, 60.0), (1.5, 1.5))}
    least = {}
    for design, ((wp, wt), (cp, ct)) in prices.items():
        pts = grid if design != "AA" else [(p, t) for p in range(1, 2 * n + 1) for t in range(1, n + 1)]
        ok = [pt for pt, r in zip(pts, sim.run_many(design, pts)) if r.slo_met]
        least[design] = (min(wp * p + wt * t for p, t in ok), min(cp * p + ct * t for p, t in ok))
    by_power, by_cost = plan(goal="min-power", **kw), plan(goal="min-cost", **kw)
    for design, (power, cost) in least.items():
        assert by_power.get(design).power == pytest.approx(power)
        assert by_cost.get(design).cost == pytest.approx(cost)
    assert by_power.get("HA").power < by_cost.get("HA").power and by_cost.get("HA").cost < by_power.get("HA").cost
    names = {"HA": "splitwise-ha", "HH": "splitwise-hh", "AA": "splitwise-aa"}
    assert by_power.winner == names[min(least, key=lambda d: least[d][0])]
    assert by_cost.winner == names[min(least, key=lambda d: least[d][1])]
    assert by_power.winner != by_cost.winner


def test_the_answer_steps_down_to_a_cheaper_point_the_search_failed_and_the_oracle_holds():
    # At 70 req/s of coding the fluid search fails Splitwise-AA 55+6 (tightest SLO 1.12x of its
    # limit) where the discrete-event oracle holds it (0.997x): the planner confirms the search's
    # a point of 62 machines (55+7 before the search learned from its rejection of 56+5; 57+5 since),
    # then must step down to 55+6, where the oracle fails both cheaper neighbours.
    from splitwise_plan.inputs.workloads import load_workload
    from splitwise_plan.sim.simulator import Simulator
    aa = plan(goal="min-cost", rps=70, designs="AA", jobs=1, seeds=1).get("AA")
    assert (aa.status, aa.prompt, aa.token) == ("ok", 55, 6) and "cheaper than the fast model's 57+5" in aa.note
    oracle = Simulator(load_workload("coding").generate(70, duration_s=120, seed=0), method="events")
    assert oracle.run("AA", 55, 6).slo_met and aa.result.slo_met
    assert not oracle.run("AA", 54, 6).slo_met and not oracle.run("AA", 55, 5).slo_met
    # the CSV keeps each confirmation, the rejected ones too, with the oracle's numbers: the evidence
    from splitwise_plan.report.plan import csv_rows
    res = plan(goal="min-cost", rps=70, designs="AA", jobs=1, seeds=1, done={"AA": aa})   # (the plan above, reported)
    confirm = {(r["prompt_machines"], r["token_machines"]): r for r in csv_rows(res) if r["phase"] == "confirm"}
    assert [pt for pt, r in confirm.items() if r["chosen"]] == [(55, 6)] and confirm[(57, 5)]["slo_met"]
    tried = [r for pt, r in confirm.items() if pt not in ((55, 6), (57, 5))]   # the steps down it rejected
    assert tried and not any(r["slo_met"] for r in tried) and {r["method"] for r in tried} == {"events"}
    assert all(r["cost"] <= confirm[(55, 6)]["cost"] for r in tried)


def test_the_search_leaves_the_walk_its_near_misses_to_step_down_to():
    # The walk down tries the neighbours the fluid search ran to the end and failed narrowly. An early
    # verdict that stopped such narrow failures too would leave it nothing to try: reading Splitwise
    # TTFTs at their batches' ends (tried on 2026-12-03) stopped HH 13+9 here at 3,200 of 4,117
    # requests (the search fails it, the oracle holds it), and the plan answered 12+11, 4.5% dearer.
    hh = plan(goal="min-cost", rps=70, workload="conversation", duration=60, designs="HH", jobs=1, seeds=1).get("HH")
    assert (hh.status, hh.prompt, hh.token) == ("ok", 13, 9) and hh.cost == pytest.approx(22 * H100.cost)


def test_the_answer_steps_down_past_points_the_search_failed_far_off():
    # Llama2-70B at TP2 with a few A100 token machines: the fluid search fails the cheap points the
    # oracle holds by far more than its usual error (borrowing runs away in the fluid model), and
    # answers a dearer point (7+8); the walk confirms it, trades three A100 machines for one H100
    # (8+5) and steps down to a point the search failed far off, which the oracle holds and whose
    # cheaper neighbours it fails. The walk takes the first neighbour that holds, in the order of the
    # search's closeness, so where it ends depends on the fluid model's reads: the old model's walk
    # reached 7+6, this one's 8+4 (0.7% dearer). Of the 54 points cheaper than 8+4 the oracle holds
    # only 7+6: the answer must stay within 1% of it.
    kw = dict(model="llama2-70b", tp=2, duration=60, seed=0, seeds=1)
    ha = plan(goal="min-cost", rps=70, designs="HA", jobs=1, **kw).get("HA")
    searched = re.search(r"the fast model's (\d+)\+(\d+)", ha.note)   # the search's answer
    assert ha.status == "ok" and searched
    p, t = ha.prompt, ha.token
    stream = load_workload("coding").generate(70, duration_s=60, seed=0)
    fluid = Simulator(stream, "llama2-70b", tensor_parallel=2)
    oracle = Simulator(stream, "llama2-70b", tensor_parallel=2, method="events")
    assert ha.cost < fluid.cluster("HA", *map(int, searched.groups())).cost   # below the search's answer
    assert fluid.run("HA", p, t).tightest["ratio"] > iso._FLUID_SLACK
    assert oracle.run("HA", p, t).slo_met
    cheaper = [n for n in ((p - 1, t), (p, t - 1), (p - 1, t + 1), (p + 1, t - 1)) if oracle.cluster("HA", *n).cost < ha.cost]
    assert cheaper and not any(oracle.run("HA", *n).slo_met for n in cheaper)
    assert oracle.run("HA", 7, 6).slo_met and ha.cost <= 1.01 * oracle.cluster("HA", 7, 6).cost


@pytest.mark.parametrize("cores", [2, 4])
def test_side_processes_give_the_same_plan(min_cost, cores, monkeypatch):
    # With two jobs the baselines and the confirmations run in other processes, the Splitwise
    # searches in lockstep here (with more than two cores the next candidates' confirmations
    # also start ahead): the answers must not change, and the run must end.
    monkeypatch.setattr(simulator.os, "cpu_count", lambda: cores)
    par = plan(goal="min-cost", **dict(SMALL, jobs=2))
    for a in min_cost.designs:
        b = par.get(a.design)
        assert (b.status, b.prompt, b.token) == (a.status, a.prompt, a.token)
        assert b.result.method == "events"


def test_min_power_and_gains_text():
    res = plan(goal="min-power", **dict(SMALL, confirm_method="fluid"))
    assert res.winner is not None
    w = res.get(res.winner)
    assert w.power == min(d.power for d in res.designs if d.status == "ok")
    if res.winner != "baseline-h100":
        assert any("Baseline-H100" in g and "lower power" in g for g in res.gains)


def test_gain_text_in_the_papers_terms():
    w = DesignPlan("splitwise-aa", "AA", "ok", cost=80.0, power=100.0, rate=140.0)
    b = DesignPlan("baseline-h100", "H100", "ok", cost=100.0, power=100.0, rate=100.0)
    assert gain_text(w, b, "max-throughput") == (
        "Splitwise-AA (A100:A100) vs Baseline-H100: 1.40x throughput at 20% lower cost and the same power")
    assert gain_text(w, b, "min-cost").startswith("Splitwise-AA (A100:A100) vs Baseline-H100: same throughput at 20% "
                                                  "lower cost")


def test_max_throughput_within_a_power_budget():
    res = plan(goal="max-throughput", budget_power="6xH100", designs="HH,H100", duration=10, jobs=1,
               rate_tol=2.0, search_method="fluid")
    for d in res.designs:
        assert d.status == "ok", d.note
        assert d.rate > 0
        assert d.power <= 6 * H100.power + 1e-9
    assert res.winner == max(res.designs, key=lambda d: d.rate).design
    assert res.inputs["budget"] == {"objective": "power", "amount": pytest.approx(6 * H100.power)}   # 6 DGX-H100
    assert (f"max-throughput within power budget 6xH100 = {6 * H100.power:g} - "
            in plan_reports.plan_title(res.request, budget=res.budget))


def test_max_throughput_tries_the_next_design_at_a_rate_before_lowering_it(monkeypatch):
    # When the confirm simulator rejects the search's first choice at a rate, another design
    # within the budget that the search passes there is tried before the rate is lowered
    # (within 40xH100 the oracle once rejected Splitwise-HA 37+5 at 100.5 req/s while 38+3
    # held, and the plan fell to 98 req/s). Here the confirmer rejects the first design it sees;
    # within 20xH100 the search passes two designs at its highest rate (58 req/s: 18+2, 17+3).
    calls = []

    def confirm(self, design, pt, rate, search_result=None):
        calls.append((rate, pt))
        return len(calls) > 1 and rate <= calls[0][0], search_result, None   # and nothing above that rate

    monkeypatch.setattr(Confirmer, "__call__", confirm)
    res = plan(goal="max-throughput", budget_power="20xH100", designs="HH", duration=10, jobs=1,
               rate_tol=1.0, search_method="fluid")
    d = res.get("HH")
    (rate0, first), (rate1, second) = calls[:2]
    assert rate1 == rate0 == d.rate and second != first
    assert all(rate > rate0 for rate, _ in calls[2:])   # then the rates above it (which fail here)
    assert (d.prompt, d.token) == second
    assert f"{rate0:g} req/s {first[0]}+{first[1]}" in d.note


def test_max_throughput_answers_the_confirm_simulators_highest_rate():
    """Within 40xH100, the fluid search holds Baseline-H100 at 55 req/s of coding (20 s) and fails 55.5,
    while the discrete-event simulator holds 56 and fails 56.5: the answer is the latter's, as check says."""
    res = plan(goal="max-throughput", budget_power="40xH100", designs="H100", duration=20, jobs=1, seeds=1)
    d = res.get("H100")

    def sim(rate):
        return Simulator(load_workload("coding").generate(rate, duration_s=20.0, seed=0), method="events")
    assert d.status == "ok" and d.prompt == 40
    assert passes(sim(d.rate).run("H100", 40)) and not passes(sim(d.rate + 0.5).run("H100", 40))
    assert d.rate == 56.0
    assert d.note == "search rate 55 req/s; the confirm simulator holds 56 and fails 56.5 req/s"


def test_budget_points_are_the_maximal_designs():
    inp = Inputs.load(PlanRequest(goal="min-cost", rps=1, designs="HH,HA"))
    from splitwise_plan.inputs.designs import get_design
    pts = budget_points(inp, get_design("HH"), "power", 40 * H100.power, 40, 39)
    assert pts == [(p, 40 - p) for p in range(1, 40)]
    budget = 10 * H100.cost
    ha = budget_points(inp, get_design("HA"), "cost", budget, 10, 21)
    assert ha
    assert all(H100.cost * p + A100.cost * t <= budget + 1e-9 for p, t in ha)
    assert all(H100.cost * p + A100.cost * (t + 1) > budget for p, t in ha)      # no room for one more token machine


@pytest.mark.parametrize("goal", [dict(goal="min-cost", rps=70), dict(goal="max-throughput", budget_power="60xH100")])
def test_the_margin_holds_in_the_answer_not_only_in_the_search(goal):
    # The confirm simulator holds Baseline-H100 at 70 req/s of coding with 49 machines and no
    # headroom (TBT P90 1.497x against 1.5x); the search, asked for a margin of 0.2, answers 59.
    # Stepping down from 59 used to keep only the SLOs, and the margin was gone from the answer.
    res = plan(**goal, designs="H100", duration=60, jobs=1, margin=0.2)
    d = res.get("H100")
    assert d.status == "ok", d.note
    assert d.result.method == "events" and d.result.tightest["ratio"] < 0.8 and d.headroom > 0.2


def test_seeds_search_over_the_same_streams_as_confirmation():
    # Splitwise-HA at 70 req/s over three 60 s streams: searched on the first stream alone, its
    # eight best points each failed one of the others under the oracle, and the design was given up
    # as unconfirmed although some of its designs hold on all three (28+2 among them).
    from splitwise_plan.inputs.workloads import load_workload
    from splitwise_plan.sim.simulator import Simulator
    d = plan(goal="min-cost", rps=70, designs="HA", duration=60, seeds=3, jobs=1).get("HA")
    assert d.status == "ok", d.note
    for seed in (0, 1, 2):
        stream = load_workload("coding").generate(70, duration_s=60, seed=seed)
        r = Simulator(stream, method="events").run("HA", d.prompt, d.token)
        assert r.slo_met
        if seed == d.to_dict()["seed"]:   # the report names the stream of the worst result it shows
            assert r.latency_s == d.result.latency_s
    assert d.to_dict()["seed"] in (0, 1, 2)
    assert d.cost <= (28 * H100.cost + 2 * A100.cost) * 1.05   # within 5% of that one


def test_a_plan_over_seeds_reports_its_answers_worst_stream():
    """Over three streams the report gives each answer's worst: its tightest SLO ratio is the highest of
    the three streams' own (simulated here apart from the plan), and its title says so. The test above
    could not tell: it compared the stream the report itself named."""
    from splitwise_plan.inputs.workloads import load_workload
    from splitwise_plan.report import plan as plan_reports
    from splitwise_plan.sim.simulator import Simulator
    res = plan(goal="min-cost", rps=20, designs="H100", duration=30, seeds=3, seed=4, jobs=1)
    d = res.get("H100")
    assert d.status == "ok", d.note
    ratios = [Simulator(load_workload("coding").generate(20, duration_s=30, seed=s), method="events")
              .run("H100", d.prompt, d.token).tightest["ratio"] for s in (4, 5, 6)]
    assert len(set(ratios)) == 3   # three streams that differ, so the worst is one of them
    assert d.result.tightest["ratio"] == pytest.approx(max(ratios), rel=1e-12)
    assert d.to_dict()["seed"] == 4 + ratios.index(max(ratios))
    assert "seeds 4-6, each design's worst" in plan_reports.plan_title(res.request)


def test_max_throughput_searches_over_every_seeds_stream():
    """Within the power of 9 DGX-H100 (Splitwise-HH 8+1), over two 30 s streams: the search ran on the
    first stream alone, so its rates were the first stream's, and the answer stopped at 17.5 req/s,
    below the 18 that 8+1 holds on both streams under the oracle."""
    from splitwise_plan.inputs.workloads import load_workload
    from splitwise_plan.sim.simulator import Simulator

    def holds(rate, pt):
        return all(Simulator(load_workload("coding").generate(rate, duration_s=30, seed=s), method="events")
                   .run("HH", *pt).slo_met for s in (0, 1))

    assert holds(18.0, (8, 1))
    d = plan(goal="max-throughput", budget_power="9xH100", seeds=2, duration=30, designs="HH", jobs=1).get("HH")
    assert d.status == "ok" and d.rate >= 18.0, (d.rate, d.note)
    assert holds(d.rate, (d.prompt, d.token))
    assert {r.seed for _, r in d.evaluated} == {0, 1}   # each search point's worst stream


def test_a_plan_says_when_requests_are_too_big_for_every_instance(write):
    """18 GiB GPUs leave a Llama2-70B instance 19.6 GB beside its weights: the longest coding requests
    never get their KV cache, so no design finishes every request, and the plan must say why."""
    f = write("m.toml", "[machines.dgx-h100]\nhbm_gib_per_gpu = 18\n")
    d = plan(goal="min-cost", rps=20, model="llama2-70b", designs="H100", duration=60, machines_file=str(f),
             jobs=1).get("H100")
    assert d.status == "infeasible"
    assert "requests need more KV cache than an instance holds beside the weights (19.6 GB)" in d.note


def test_seeds_confirm_over_several_streams():
    res = plan(goal="min-cost", **dict(SMALL, designs="H100", seeds=2))
    d = res.get("H100")
    assert d.status == "ok" and d.confirmations >= 2


@pytest.mark.parametrize("kw,msg", [
    (dict(goal="fastest", rps=1), "goal"),
    (dict(goal="min-cost"), "^goal min-cost needs rps \\(requests per second\\) or trace$"),
    (dict(goal="min-cost", rps=-1), "^rps must be positive"),
    (dict(goal="min-cost", rps=1, budget_power="40xH100"), "budget"),
    (dict(goal="max-throughput"), "exactly one"),
    (dict(goal="max-throughput", budget_power=1, budget_cost=1), "exactly one"),
    (dict(goal="min-cost", rps=1, designs="HH,ZZ"), "unknown"),
    (dict(goal="min-cost", rps=1, seeds=0), "^seeds must be between"),
    (dict(goal="min-cost", rps=1, duration=0), "^duration must be positive"),
    (dict(goal="min-cost", rps=1, strategy="random"), "strategy"),
    (dict(goal="min-cost", rps=1, confirm_method="magic"), "confirm"),
    (dict(goal="min-cost", rps=1, transfer="pigeon"), "^transfer 'pigeon' is unknown"),
    (dict(goal="min-cost", rps=1, bandwidth=-1.0), "^bandwidth must be between"),
])
def test_bad_requests(kw, msg):
    with pytest.raises(SplitwisePlanError, match=msg):
        PlanRequest(**kw)


@pytest.mark.parametrize("args, api, cli", [
    (["--rps", "-1"], dict(rps=-1.0), "error: --rps must be positive and finite, got -1.0\n"),
    (["--goal", "max-throughput"], dict(goal="max-throughput"),
     "error: --goal max-throughput needs exactly one of --budget-power and --budget-cost\n"),
    (["--rps", "5", "--study", "a b"], dict(rps=5, study="a b"),
     "error: --study must be a name without spaces, got 'a b'\n"),
])
def test_an_error_names_the_field_through_the_api_and_the_option_on_the_command_line(args, api, cli, capsys):
    """The request names its fields (rps, budget_power); the command line says its options instead."""
    with pytest.raises(SplitwisePlanError) as err:
        PlanRequest(**api)
    assert "--" not in str(err.value)
    assert main(args) == 2
    assert capsys.readouterr().err == cli
    assert str(err.value) == cli.removeprefix("error: ").rstrip("\n").replace("--budget-", "budget_").replace("--", "")


def test_bad_inputs_are_caught_before_any_work(write):
    with pytest.raises(SplitwisePlanError):
        plan(goal="min-cost", rps=1, model="gpt-5")
    with pytest.raises(SplitwisePlanError):
        plan(goal="max-throughput", budget_power="40xTPU", designs="HH")
    with pytest.raises(SplitwisePlanError):
        plan(goal="min-cost", rps=1, slos=str(write("bad.toml", "[ttft]\np50 = -1\n")))


def test_cli_root_plans(capsys):
    code = main(["--goal", "min-cost", "--rps", "10", "--duration", "15", "--designs", "H100", "--jobs", "1"])
    out = capsys.readouterr().out
    assert code == 0
    assert "Winner (lowest cost): Baseline-H100" in out
    assert "TTFT" in out and "P99" in out


@pytest.mark.parametrize("args", [
    ["--goal", "min-cost"],
    ["--goal", "nope", "--rps", "10"],
    ["--rps", "0"],
    ["--goal", "max-throughput", "--budget-power", "lots"],
    ["--rps", "10", "--designs", "XX"],
    ["--rps", "10", "--trace", "/nonexistent/trace.csv"],
    ["--rps", "10", "--bandwidth", "0"],
])
def test_cli_root_bad_input_exits_2(args, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1


def test_a_slower_kv_link_never_makes_a_splitwise_plan_cheaper():
    # 1.5 GiB/s: a 1,500-token prompt's KV cache takes ~4 s to move, far past the E2E limits at that size
    kw = dict(SMALL, designs="HH", confirm_method="fluid")
    fast, slow = plan(goal="min-cost", **kw), plan(goal="min-cost", bandwidth=1.5, **kw)
    assert slow.get("HH").cost > fast.get("HH").cost or slow.get("HH").status != "ok"
    report = plan_reports.plan_inputs(slow)
    assert report["kv_transfer"] == {"mode": "serialized", "bandwidth_gib_s": 1.5}
    assert "KV transfer serialized at 1.5 GiB/s" in plan_reports.plan_title(slow.request)
    assert "KV transfer" not in plan_reports.plan_title(fast.request)   # the reference's link goes unsaid


def test_cli_without_arguments_prints_help(capsys):
    assert main([]) == 0
    assert "--goal" in capsys.readouterr().out


def test_a_design_whose_machines_cannot_hold_the_model_is_infeasible_and_the_others_are_planned(tmp_path):
    small_h100 = tmp_path / "m.toml"
    small_h100.write_text("[machines.dgx-h100]\nhbm_gib_per_gpu = 38\n")   # 304 GiB = 326 GB < BLOOM's 329 GB
    res = plan(goal="min-cost", **dict(SMALL, machines_file=str(small_h100), designs="HH,A100",
                                         limits=(("A100", 30, 0),)))
    hh, a100 = res.get("HH"), res.get("A100")
    assert hh.status == "infeasible" and "do not fit in the 304 GiB of HBM of dgx-h100" in hh.note
    assert hh.evaluations == 0 and hh.confirmations == 0
    assert a100.status == "ok" and res.winner == "baseline-a100"


def test_a_gpu_the_profiles_lack_is_estimated_from_its_data_sheet_and_the_report_says_so(tmp_path):
    """A user's profile table without the power-capped H100: Splitwise-HHcap's token pool is estimated from
    the data sheet (the measured H100 stays measured); a machine with neither a profile nor a data sheet
    leaves its design infeasible, saying what is missing, and the others are planned."""
    import pandas as pd

    from splitwise_plan.inputs.paths import data_file
    table = pd.read_csv(data_file("profiles", "perf_model.csv"))
    mine = tmp_path / "no-pcap.csv"
    table[table.hardware != "h100-80gb-pcap"].to_csv(mine, index=False)
    res = plan(goal="min-cost", **dict(SMALL, profiles=str(mine), designs="HHcap,A100",
                                         limits=(("A100", 30, 0),)))
    sources = res.inputs["latency_sources"]
    assert sources["dgx-h100-cap"].startswith("estimated from data sheets")
    assert sources["dgx-h100"] == sources["dgx-a100"] == "measured (no-pcap.csv)"
    assert res.get("HHcap").status == "ok" and res.get("A100").status == "ok"
    cat = tmp_path / "m.toml"
    cat.write_text('[machines.my-gpu]\nhardware = "x1-80gb"\ngpus = 8\nhbm_gib_per_gpu = 80\ncost = 50.0\npower = 9.0\n')
    res = plan(goal="min-cost", **dict(SMALL, machines_file=str(cat), designs="my-gpu:dgx-h100,HH"))
    assert res.get("my-gpu:dgx-h100").status == "infeasible" and "no hbm_bandwidth_tbps" in res.get("my-gpu:dgx-h100").note
    assert res.get("HH").status == "ok"


def test_a_plan_no_design_of_which_can_hold_the_model_is_a_user_error(tmp_path):
    """Every design asked for unfit (a machine file's typo): an error naming why, not an exit-0 plan
    that says "No design meets all SLOs" as if the SLOs were too tight."""
    f = tmp_path / "m.toml"
    f.write_text("[machines.dgx-h100]\ngpus = 4\n")
    with pytest.raises(SplitwisePlanError, match="no design given can hold the model: dgx-h100 has 4 GPUs"):
        plan(goal="min-cost", **dict(SMALL, machines_file=str(f), designs="HH,H100"))


def test_seeds_are_bounded_and_max_throughput_needs_a_trace_that_spans_time(tmp_path):
    with pytest.raises(SplitwisePlanError, match=r"0.01 req/s over 20 s gives no request \(seed 0\); raise rps or duration$"):
        plan(goal="min-cost", rps=0.01, duration=20, designs="HH", jobs=1)
    with pytest.raises(SplitwisePlanError, match="^seeds must be between 1 and 1,000"):
        PlanRequest(goal="min-cost", rps=10, seeds=10**6)
    t = tmp_path / "t.csv"
    t.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,100,10\n"
                 "2023-11-16 18:15:46.68,200,20\n")
    with pytest.raises(SplitwisePlanError, match="all its requests arrive at one instant"):
        plan(goal="max-throughput", budget_power="10xH100", trace=str(t), designs="H100", jobs=1)


def test_goal_and_model_names_in_any_case():
    req = PlanRequest(goal="MIN-COST", rps=10, model="BLOOM-176B", designs="HH")
    assert (req.goal, req.model) == ("min-cost", "bloom-176b")
    with pytest.raises(SplitwisePlanError, match="unknown model"):
        PlanRequest(goal="min-cost", rps=10, model="bloom-7b")


def test_designs_of_the_users_own_machine_types(tmp_path):
    """A machine type of her catalog plans as PROMPT:TOKEN or baseline:MACHINE. One that is a DGX-H100
    at twice the price and power has every key doubled: the same machine counts as Splitwise-HH and
    Baseline-H100, at twice their cost."""
    from splitwise_plan.inputs.designs import get_design
    cat = tmp_path / "mine.toml"
    cat.write_text('[machines.my-h100]\nhardware = "H100-80GB"\ngpus = 8\nhbm_gib_per_gpu = 80\n'
                   f'cost = {2 * H100.cost!r}\npower = {2 * H100.power!r}\n')
    opts = dict(goal="min-cost", rps=20, duration=20, jobs=1)
    mine = plan(designs=("my-h100:my-h100", "baseline:MY-H100"), machines_file=str(cat), **opts)
    ours = plan(designs=("HH", "H100"), **opts)
    for custom, shipped in (("my-h100:my-h100", "splitwise-hh"), ("baseline:my-h100", "baseline-h100")):
        a, b = mine.get(custom), ours.get(shipped)
        assert (a.status, a.prompt, a.token) == (b.status, b.prompt, b.token) and a.status == "ok"
        assert a.cost == pytest.approx(2 * b.cost)
    assert get_design("DGX-H100:dgx-a100").name == "splitwise-ha"   # a shipped design's machines: that design
    assert get_design("baseline:dgx-a100").name == "baseline-a100"
    with pytest.raises(SplitwisePlanError, match="needs machine 'nope', which the machine catalog lacks"):
        plan(designs=("nope:dgx-a100",), **opts)
    with pytest.raises(SplitwisePlanError, match="PROMPT:TOKEN"):
        get_design("H200")


@pytest.mark.skipif(not hasattr(__import__("signal"), "SIGALRM"), reason="needs SIGALRM")
def test_an_interrupted_plan_leaves_no_search_running():
    """A notebook's interrupt (KeyboardInterrupt in plan()) stops the search threads and the side
    process of the baselines; before, they ran on to the end, a core busy behind the user's back."""
    import os
    import signal
    import threading
    import time

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    rounds, stopped = [], []
    real = Simulator.run_points

    def counted(self, *a, **k):   # the simulation rounds started after the interrupt: none
        if not rounds:   # the interrupt comes 0.5 s into the first round, however long the inputs took to load
            signal.setitimer(signal.ITIMER_REAL, 0.5)
        rounds.append(bool(stopped))
        return real(self, *a, **k)

    def children() -> set:
        me = os.getpid()
        return set(open(f"/proc/{me}/task/{me}/children").read().split()) if os.path.isdir(f"/proc/{me}") else set()

    before, kids_before = threading.active_count(), children()   # (earlier tests' reusable workers stay)
    old = signal.signal(signal.SIGALRM, interrupt)
    signal.alarm(120)   # (should no round ever start)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(Simulator, "run_points", counted)
            with pytest.raises(KeyboardInterrupt):
                plan(goal="min-cost", rps=300, duration=30, jobs=2, designs="HH,HA,H100")
            stopped.append(True)
            signal.alarm(0)
            # the threads end at their next round (a round in flight finishes first: on a busy shared
            # host allow it minutes)
            for _ in range(1800):
                if threading.active_count() <= before:
                    break
                time.sleep(0.1)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert threading.active_count() <= before, [t.name for t in threading.enumerate()]
    assert rounds and not any(rounds), "a search went on after the interrupt"
    if os.path.isdir(f"/proc/{os.getpid()}"):
        alive = [k for k in children() - kids_before if os.path.exists(f"/proc/{k}")
                 and "Z" not in open(f"/proc/{k}/stat").read().split()[2]
                 and "resource_tracker" not in open(f"/proc/{k}/cmdline").read()]   # (idle, kept by design)
        assert not alive, [open(f"/proc/{k}/cmdline").read().replace("\0", " ")[:200] for k in alive]


def test_a_design_planned_for_another_request_is_refused_as_done():
    """plan(done=...) took a DesignPlan of another rate or model as this plan's answer, and it won."""
    first = plan(goal="min-cost", **SMALL)
    hh = first.get("HH")
    for other, needle in ((dict(SMALL, rps=20), "was planned at 10 req/s, not this plan's 20"),
                          (dict(SMALL, model="llama2-70b"), "was planned for model bloom-176b, not this plan's llama2-70b")):
        with pytest.raises(SplitwisePlanError, match=needle):
            plan(goal="min-cost", done={"HH": hh}, **other)
    assert plan(goal="min-cost", done={"HH": hh}, **SMALL).get("HH") == hh


def test_a_budget_without_a_goal_asks_for_the_highest_rate_as_on_the_command_line():
    assert PlanRequest(budget_cost=100, designs="HH").goal == "max-throughput"
    assert PlanRequest(rps=5, designs="HH").goal == "min-cost"


def test_a_trace_refuses_what_shapes_a_generated_stream():
    """The command line refused --seeds/--seed/--duration/--workload with --trace; the API ignored them."""
    s = load_workload("coding").generate(5.0, duration_s=10.0, seed=0)
    for kw in (dict(seeds=2), dict(seed=5), dict(duration=60.0), dict(workload="conversation")):   # (3: the default)
        with pytest.raises(SplitwisePlanError, match="shape a generated stream only"):
            PlanRequest(trace=s, designs="HH", **kw)


def test_a_record_that_is_not_one_is_one_user_error():
    with pytest.raises(SplitwisePlanError, match="not a record made by DesignPlan.to_record"):
        DesignPlan.from_record({"design": "splitwise-hh", "result": {"type": "x"}, "evaluated": []})
    with pytest.raises(SplitwisePlanError, match="not a record made by DesignPlan.to_record"):
        DesignPlan.from_record(None)


def test_a_machine_dict_naming_one_machine_twice_by_case_is_refused():
    import dataclasses

    from splitwise_plan.inputs.machines import BUILTIN_MACHINES
    cat = {**BUILTIN_MACHINES, "DGX-H100": dataclasses.replace(BUILTIN_MACHINES["dgx-h100"], cost=1.0)}
    with pytest.raises(SplitwisePlanError, match=r"names one machine twice \(DGX-H100, dgx-h100"):
        plan(goal="min-cost", **dict(SMALL, machines_file=cat))


def test_a_rejection_note_never_rounds_a_ratio_onto_the_other_side_of_its_limit():
    """A miss at 1.000088 of its limit read '1.000' in the notes, and a pass at 0.99996 did too."""
    from splitwise_plan.planning.objectives import ratio_text as _ratio_text
    assert [_ratio_text(r) for r in (0.997, 1.000088, 0.99996, 1.0, 1.25)] == [
        "0.997", "1.000088", "0.999960", "1.000", "1.250"]


def test_an_unconfirmed_baseline_names_the_machine_counts_it_rejected():
    # 70 req/s of conversation (60 s, seed 3): the fluid model passes Baseline-H100 with 24 machines
    # (0.986x its tightest limit), which the oracle fails (1.014x): capped at 24 machines, nothing
    # confirmed is left. The note names the rejected point as a baseline is counted.
    res = plan(goal="min-cost", rps=70, workload="conversation", duration=60, seed=3, seeds=1, designs="H100", jobs=1,
               limits=(("H100", 24, 0),))
    h100 = res.get("H100")
    assert h100.status == "unconfirmed"
    assert "the fast model passed and the event simulation failed 24 (101%)" in h100.note   # 24, not 24+0
    assert "the event simulation holds no design within 24 machines" in h100.note   # the grid's bound, named


def test_a_plan_says_in_plain_words_what_it_is_doing():
    """on_step hears each search round and each stream of each confirmation, naming the design and
    its machine counts: the confirmations of the answer among them."""
    steps: list = []
    res = plan(goal="min-cost", rps=20, designs="HH", duration=30, seeds=2, jobs=1, on_step=steps.append)
    hh = res.get("HH")
    assert hh.status == "ok"
    assert any(s.startswith("searching HH (fast model, ") and s.endswith(" simulations)") for s in steps)
    assert f"confirming HH {hh.prompt}+{hh.token} (event simulation, stream 1 of 2)" in steps
    assert f"confirming HH {hh.prompt}+{hh.token} (event simulation, stream 2 of 2)" in steps
    assert any(s.startswith(f"confirming HH {hh.prompt}+{hh.token} at 21 req/s") for s in steps)   # the +5% try
