"""SLO files, their evaluation (strictly below the limit) and the slowdown reference."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from splitwise_plan import SLO, SLOSet, SplitwisePlanError, load_profiles, load_slos, reference_latencies

TABLE_VI = {"ttft": {50: 2.0, 90: 3.0, 99: 6.0}, "tbt": {50: 1.25, 90: 1.5, 99: 5.0},
            "e2e": {50: 1.25, 90: 1.5, 99: 5.0}}


def scaled(f: float) -> dict:
    return {m: {p: f * v for p, v in d.items()} for m, d in TABLE_VI.items()}


def test_paper_slos_are_table_vi():
    s = load_slos()
    assert s.name == "paper" and len(s) == 9
    assert s.reference_hardware == "a100-80gb" and s.reference_tensor_parallel == 8
    got = {(x.metric, x.percentile): x.limit for x in s}
    assert got == {(m, p): v for m, d in TABLE_VI.items() for p, v in d.items()}
    assert all(x.unit == "slowdown" for x in s)
    assert s.percentiles() == {"ttft": (50, 90, 99), "tbt": (50, 90, 99), "e2e": (50, 90, 99)}


def test_strictly_below():
    s = load_slos()
    ok, violations = s.evaluate(scaled(0.999), None)
    assert ok and violations == []
    ok, violations = s.evaluate(scaled(1.0), None)  # equal to the limit fails
    assert not ok and len(violations) == 9
    v = violations[0]
    assert set(v) == {"metric", "percentile", "value", "limit", "unit", "margin"}
    assert v["margin"] == 0.0


def test_one_violation_and_tightest():
    s = load_slos()
    sd = scaled(0.5)
    sd["tbt"][99] = 5.5
    sd["ttft"][50] = float("nan")
    ok, violations = s.evaluate(sd, None)
    assert not ok
    assert {(v["metric"], v["percentile"]) for v in violations} == {("tbt", 99), ("ttft", 50)}
    tbt = next(v for v in violations if v["metric"] == "tbt")
    assert tbt["margin"] == pytest.approx(-0.5)
    sd["ttft"][50] = 0.1
    t = s.tightest(sd, None)
    assert (t["metric"], t["percentile"], t["ratio"]) == ("tbt", 99, pytest.approx(1.1))


def test_user_file_seconds_and_mixed_units(write):
    path = write("s.toml", """
name = "mine"
unit = "seconds"
[ttft]
p99 = 2.5
"p99.9" = 4
[e2e]
unit = "slowdown"
p50 = 1.2
[[slo]]
metric = "tbt"
percentile = 95
limit = 0.2
""")
    s = load_slos(path)
    assert s.name == "mine"
    assert s.percentiles() == {"ttft": (99, 99.9), "tbt": (95,), "e2e": (50,)}
    units = {(x.metric, x.percentile): x.unit for x in s}
    assert units == {("ttft", 99): "seconds", ("ttft", 99.9): "seconds", ("tbt", 95): "seconds",
                     ("e2e", 50): "slowdown"}
    latency = {"ttft": {99: 2.4, 99.9: 3.9}, "tbt": {95: 0.19}}
    assert s.evaluate({"e2e": {50: 1.1}}, latency) == (True, [])
    latency["ttft"][99.9] = 4.0
    ok, v = s.evaluate({"e2e": {50: 1.1}}, latency)
    assert not ok and v[0]["percentile"] == 99.9 and v[0]["unit"] == "seconds"


def test_missing_measurement_is_an_error():
    with pytest.raises(SplitwisePlanError, match="no slowdown value given for TBT P90"):
        load_slos().evaluate({"ttft": TABLE_VI["ttft"], "tbt": {50: 1.0}, "e2e": {}}, None)


@pytest.mark.parametrize("text,needle", [
    ("[ttft\np50=1", "not valid TOML"),
    ("", "has no SLO"),
    ("[ttfb]\np50 = 1", "unknown key(s) ttfb"),
    ("[ttft]\nmedian = 1", "key 'median' is not a percentile"),
    ("[ttft]\np100 = 1", "between 0 and 100"),
    ("[ttft]\np50 = 0", "must be a positive number"),
    ("[ttft]\np50 = 'x'", "must be a positive number"),
    ("unit = 'minutes'\n[ttft]\np50 = 1", "unknown SLO unit 'minutes'"),
    ("[[slo]]\nmetric = 'ttft'\nlimit = 1", "missing: percentile"),
    ("[ttft]\np50 = 1\n[[slo]]\nmetric = 'ttft'\npercentile = 50\nlimit = 2", "gives TTFT P50 (slowdown) twice"),
    # unquoted, TOML reads p99.9 as p99 = {9 = 6}: it was blamed on P99 ("got {'9': 6.0}")
    ("[ttft]\np99.9 = 6", 'quote a fractional percentile\'s key: "p99.9" = 6'),
    # said as written, not as the float it rounds to ("got 100")
    ("[ttft]\n\"p99.99999999999999999\" = 6", "key 'p99.99999999999999999': a percentile must be between 0 and 100"),
])
def test_bad_slo_files(write, text, needle):
    with pytest.raises(SplitwisePlanError) as err:
        load_slos(write("s.toml", text))
    assert needle in str(err.value) and "s.toml" in str(err.value)


def test_missing_slo_file(tmp_path):
    with pytest.raises(SplitwisePlanError, match="SLO file not found"):
        load_slos(tmp_path / "none.toml")


def test_slo_dataclass_validates():
    assert SLO("tbt", 99.0, 5).percentile == 99
    with pytest.raises(SplitwisePlanError, match="unknown SLO metric"):
        SLO("latency", 50, 1.0)
    with pytest.raises(SplitwisePlanError, match="has no SLO"):
        SLOSet((), "empty")


def test_slowdown_reference_latencies(sim_dir):
    # Independent truth: np.interp over the reference medians (BLOOM-176B, A100, TP8); the
    # reference takes TTFT = prompt(prompt_size), TBT = token(prompt_size) and
    # E2E = TTFT + TBT * (token_size - 1). Points inside the measured range need no extrapolation.
    med = pd.read_csv(sim_dir / "perf_model_medians_by_batch_tokens.csv")
    m = med[(med.model == "bloom-176b") & (med.hardware == "a100-80gb")]
    ref_lm = load_profiles().latency_model("bloom-176b", "a100-80gb", 8)
    prompt = np.array([1469, 128, 5000, 8192])
    output = np.array([13, 1, 129, 2])
    ttft, tbt, e2e = reference_latencies(ref_lm, prompt, output)
    want_ttft = np.interp(prompt, m.batch_tokens, m.prompt_time_ms_median) / 1000
    want_tbt = np.interp(prompt, m.batch_tokens, m.token_time_ms_median) / 1000
    np.testing.assert_allclose(ttft, want_ttft, rtol=1e-6)
    np.testing.assert_allclose(tbt, want_tbt, rtol=1e-6)
    np.testing.assert_allclose(e2e, want_ttft + want_tbt * (output - 1), rtol=1e-6)
    assert e2e[1] == ttft[1]  # a one-token request is its prompt phase alone
    # Paper §III: a ~1,500-token BLOOM prompt phase costs about as much as ~6 output tokens.
    assert 4 < ttft[0] / tbt[0] < 8


def test_slowdowns_are_against_the_slo_files_reference_tensor_parallelism(write):
    """An SLO file's reference_tensor_parallel = 4: a lone request's TTFT slowdown is its TTFT over its
    prompt's time on a DGX-A100 at TP4, not at TP8 (which no test told apart from a fixed 8)."""
    from pathlib import Path

    from splitwise_plan.inputs.workloads import RequestStream
    from splitwise_plan.sim.simulator import Simulator
    paper = (Path(__file__).resolve().parents[2] / "slos" / "paper.toml").read_text()
    text = paper.replace("reference_tensor_parallel = 8", "reference_tensor_parallel = 4")
    assert text != paper
    stream = RequestStream(np.array([0.0]), np.array([1500]), np.array([20]), name="one")
    r = Simulator(stream, "llama2-70b", slos=load_slos(write("tp4.toml", text)), method="events").run("HH", 1, 1)
    profiles = load_profiles()
    tp4 = profiles.latency_model("llama2-70b", "a100-80gb", 4).prompt_time(1500)
    tp8 = profiles.latency_model("llama2-70b", "a100-80gb", 8).prompt_time(1500)
    assert abs(tp4 / tp8 - 1) > 0.1
    assert r.slowdown["ttft"][50] == pytest.approx(r.latency_s["ttft"][50] / tp4, rel=1e-9)


def test_an_slo_files_reference_error_names_the_file(write):
    """A user's copy of paper.toml keeps name = "paper": the error named the shipped set, not the file."""
    from splitwise_plan.inputs.machines import BUILTIN_MACHINES
    from splitwise_plan.inputs.models import get_model
    from splitwise_plan.perf.profiles import load_profiles
    from splitwise_plan.perf.sources import reference_latency
    slos = load_slos(write("mine.toml", 'name = "paper"\nreference_hardware = "tpu"\n[ttft]\np50 = 2\n'))
    with pytest.raises(SplitwisePlanError, match=r"the reference of SLO file .*mine\.toml;"):
        reference_latency(slos, load_profiles(), get_model("bloom-176b"), BUILTIN_MACHINES)
