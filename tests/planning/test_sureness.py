"""How sure an answer is and its near-ties: error bands per phase, the winner re-checked with slower latencies
(against a simulator given those latencies by hand), the robust alternative, load headroom, and a buyer's units
(short streams)."""

from __future__ import annotations

import math

import pytest

from splitwise_plan import PlanRequest, plan
from splitwise_plan.errors import SplitwisePlanError
from splitwise_plan.inputs.designs import display_name
from splitwise_plan.inputs.models import get_model
from splitwise_plan.perf.bands import estimate_band, given_band
from splitwise_plan.perf.stack import load_stack
from splitwise_plan.planning import Inputs
from splitwise_plan.planning.alternative import robust_alternative
from splitwise_plan.planning.result import DesignPlan
from splitwise_plan.planning.sureness import band_text, design_bands
from splitwise_plan.sim.simulator import Simulator

SMALL = dict(rps=10, duration=20, designs="HH,H100", jobs=1, search_method="fluid", seeds=1)


def test_a_slowed_simulator_times_each_phase_that_much_slower_and_keeps_the_reference():
    base = Inputs.load(PlanRequest(**SMALL))
    stream = base.stream(10, 0)
    plain = Simulator(stream, "bloom-176b", profiles=base.profiles)
    slow = Simulator(stream, "bloom-176b", profiles=base.profiles, slower={"h100-80gb": (0.3, 0.1)})
    m = plain.machine("dgx-h100")
    a, b = plain.latency(m), slow.latency(m)
    for tokens in (128, 1500, 8000):
        assert b.prompt_time(tokens) == pytest.approx(1.3 * a.prompt_time(tokens), rel=1e-12)
    for n in (1, 16, 64):
        assert b.token_time(n) == pytest.approx(1.1 * a.token_time(n), rel=1e-12)
    assert slow.latency(plain.machine("dgx-a100")) is not None   # another GPU: as measured
    assert slow.latency(plain.machine("dgx-a100")).prompt_time(1500) == plain.latency(plain.machine("dgx-a100")).prompt_time(1500)
    assert all((x == y).all() for x, y in zip(slow.reference, plain.reference))   # the SLOs' reference keeps its own


def test_bands_come_from_the_held_out_errors_per_gpu_and_kind():
    vllm, dense, moe = load_stack("vllm"), get_model("llama-3.1-70b"), get_model("qwen3-30b-a3b")
    b200 = estimate_band(vllm, dense, "b200-180gb")
    assert (b200.prompt, b200.decode) == (pytest.approx(0.257), pytest.approx(0.22))   # its own row
    h100 = estimate_band(vllm, dense, "h100-80gb")   # fitted on it: the largest held-out row stands in
    assert (h100.prompt, h100.decode) == (b200.prompt, b200.decode) and "largest" in h100.basis
    assert estimate_band(vllm, moe, "h200-141gb").decode == pytest.approx(0.493)   # the mixtures' rows


def test_aiconfigurators_measured_kernels_have_no_band():
    pytest.importorskip("aiconfigurator_core", reason="the extra splitwise-plan[aiconfigurator] is not installed")
    assert estimate_band(load_stack("aiconfigurator:vllm"), get_model("llama-3.1-70b"), "h100-80gb") is None


def test_the_paper_stacks_held_out_rows_are_what_profiles_computes():
    """paper-2023.toml stores the held-out P90 errors held_out_errors recomputes (the larger of the two models)."""
    from splitwise_plan.perf.analytic import held_out_errors
    from splitwise_plan.perf.profiles import load_profiles

    errors = held_out_errors(load_profiles())
    rows = load_stack("paper-2023").held_out
    for gpu in ("a100-80gb", "h100-80gb"):
        mine = [e for e in errors if e.test == gpu]
        assert rows[gpu]["prompt_p90_pct"] == pytest.approx(max(e.prompt_p90_ape_pct for e in mine), abs=0.06)
        assert rows[gpu]["decode_p90_pct"] == pytest.approx(max(e.decode_p90_ape_pct for e in mine), abs=0.06)


def test_measured_latencies_have_no_band_unless_one_is_given():
    req = PlanRequest(**SMALL)
    inputs = Inputs.load(req)
    assert design_bands(inputs, req, "splitwise-hh") == {}
    given = PlanRequest(**SMALL, latency_error=0.2)
    assert design_bands(inputs, given, "splitwise-hh") == {"h100-80gb": given_band(0.2)}
    assert band_text({"h100-80gb": given_band(0.2)}) == "latencies 20% slower"


def test_the_winner_at_its_band_is_checked_against_a_hand_slowed_simulator():
    """With --latency-error 0.3 the plan's verdict on the winner is that of a simulator whose H100 latencies are
    30% slower, over the plan's one stream; where it fails, both designs are planned anew and the cheaper wins."""
    req = PlanRequest(**SMALL, latency_error=0.3)
    r = plan(req)
    sure, w = r.sureness, r.get(r.winner)
    inputs = Inputs.load(req)
    slow = Simulator(inputs.stream(10, 0), "bloom-176b", profiles=inputs.profiles, method="events",
                     slower={"h100-80gb": (0.3, 0.3)})
    by_hand = slow.run(w.design, w.prompt, w.token)
    assert sure["holds"] == bool(by_hand.slo_met)
    assert sure["tightest_ratio"] == pytest.approx(by_hand.tightest["ratio"], rel=1e-9)
    if not sure["holds"]:
        again = sure["at_band"][w.design]
        assert again["prompt_machines"] + again["token_machines"] > w.machines   # slower latencies need more
        assert slow.run(w.design, again["prompt_machines"], again["token_machines"]).slo_met
    assert sure["text"].startswith(("holds and still wins with latencies 30% slower", "with latencies 30% slower"))
    assert r.to_dict()["sureness"]["bands"] == {"h100-80gb": {"prompt": 0.3, "decode": 0.3,
                                                              "basis": "30% given (--latency-error)"}}


def _answer(design, cost, headroom):
    from types import SimpleNamespace
    result = SimpleNamespace(tightest={"ratio": 1 - headroom})
    return DesignPlan(design=design, short=design, status="ok", prompt=2, token=1, cost=cost, power=1.0,
                      rate=10.0, result=result)


@pytest.mark.parametrize("rival_cost, rival_room, rival_holds, named", [
    (102.0, 0.16, False, True),    # 2% dearer, 16% headroom against 0.3%: named
    (102.0, 0.008, True, True),    # thin headroom, but holds at +5% where the winner fails
    (102.0, 0.008, False, False),  # neither
    (106.0, 0.16, True, False),    # 6% dearer: not a near-tie
    (101.0, 0.012, False, False),  # 4x the winner's headroom, but 1.2%: thin itself
])
def test_a_robust_alternative_is_a_near_tie_markedly_safer(rival_cost, rival_room, rival_holds, named):
    winner, rival = _answer("b200:b200", 100.0, 0.003), _answer("splitwise-hh", rival_cost, rival_room)
    stress = {"slo_met": False, "rate_rps": 10.5}
    asked = []

    def confirm(design, point, rate):
        asked.append((design, rate))
        return rival_holds, None
    alt = robust_alternative(PlanRequest(**SMALL), (winner, rival), winner, stress, confirm)
    assert (alt is not None) == named
    if named:
        assert alt["design"] == "splitwise-hh" and alt["extra"] == pytest.approx(rival_cost / 100 - 1)
    assert asked in ([], [("splitwise-hh", 10.5)])   # only a near rival is tried at the higher rate


def test_load_headroom_holds_every_slo_at_the_higher_rate():
    r = plan(PlanRequest(**SMALL, headroom=0.5))
    plain = plan(PlanRequest(**{**SMALL, "rps": 15}))
    assert [(d.design, d.prompt, d.token) for d in r.designs] == [(d.design, d.prompt, d.token) for d in plain.designs]
    assert r.request.rps == 10 and all(d.rate == 15 for d in r.designs if d.status == "ok")
    doc = r.to_dict()
    assert (doc["rate_rps"], doc["planned_rps"], doc["load_headroom"]) == (10.0, 15.0, 0.5)
    with pytest.raises(SplitwisePlanError, match="headroom"):
        PlanRequest(budget_power="40xH100", headroom=0.2)


def test_a_buyers_figures_are_hand_computed():
    """GPUs in all, cost a month (730 h) and per million output tokens at the asked rate."""
    r = plan(PlanRequest(**SMALL))
    w = r.get(r.winner)
    f = r.figures(w)
    assert f["gpus"] == 8 * w.machines
    assert f["cost_per_month"] == pytest.approx(w.cost * 730, abs=0.01)
    mean_out = Inputs.load(PlanRequest(**SMALL)).workload.output_tokens.mean()
    assert f["cost_per_million_output_tokens"] == pytest.approx(w.cost / (10 * mean_out * 3600) * 1e6, rel=1e-4)
    assert math.isclose(r.to_dict()["output_tokens_per_request"], mean_out, rel_tol=1e-3)


@pytest.mark.parametrize("name, shown", [
    ("HH", "Splitwise-HH (H100:H100)"), ("HHcap", "Splitwise-HHcap (H100:H100cap)"), ("A100", "Baseline-A100"),
    ("dgx-h100:h200", "H100:H200"), ("h200:h200", "H200:H200"), ("baseline:dgx-b200", "Baseline-B200"),
    ("splitwise-hh@tp2:4", "Splitwise-HH (H100:H100) TP2:4"), ("b200:b200@tp1", "B200:B200 TP1"),
])
def test_every_design_has_one_display_name(name, shown):
    assert display_name(name) == shown


def test_a_rival_behind_the_runner_up_can_win_at_the_band():
    """The winner fails at its band and costs 120 anew; of the rivals cheaper than that, each is planned anew below
    120: the runner-up then costs 125 (so it comes back none), the third 110, which wins."""
    from splitwise_plan.planning.sureness import sureness

    req = PlanRequest(**{**SMALL, "designs": "HH,HA,H100"}, latency_error=0.2)
    inputs = Inputs.load(req)
    ranked = (_answer("splitwise-hh", 100.0, 0.1), _answer("splitwise-ha", 102.0, 0.1),
              _answer("baseline-h100", 104.0, 0.1), _answer("splitwise-aa", 130.0, 0.1))
    anew = {"splitwise-hh": 120.0, "splitwise-ha": 125.0, "baseline-h100": 110.0}
    asked = []

    def replan(inp, names):
        asked.append((tuple(names), dict(inp.ceilings)))
        return {n: _answer(n, anew[n], 0.05) if anew[n] < inp.ceilings.get(n, math.inf) else
                DesignPlan(design=n, short=n, status="pruned") for n in names}
    out = sureness(inputs, req, ranked, ranked[0], replan, lambda *a: (False, None))
    assert asked == [(("splitwise-hh",), {}),
                     (("splitwise-ha", "baseline-h100"), {"splitwise-ha": 120.0, "baseline-h100": 120.0})]
    assert (out["holds"], out["still_wins"], out["winner_if_not"]) == (False, False, "baseline-h100")
    assert out["text"] == ("with latencies 20% slower, Baseline-H100 wins: 2 machines (110.00 USD/h), against "
                           "2 prompt + 1 token machines (120.00 USD/h) for the winner")
