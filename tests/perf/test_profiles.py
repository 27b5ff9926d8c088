"""Profile loading, the latency model built from it, and its held-out accuracy."""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd
import pytest

from splitwise_plan import SplitwisePlanError, load_profiles, profile_accuracy
from splitwise_plan.inputs.paths import data_file

HEADER = "model,hardware,prompt_size,batch_size,token_size,prompt_time,token_time,tensor_parallel\n"
# Two batch_tokens points (128, 256) of a toy model on a toy GPU.
GOOD = HEADER + "m,g,128,1,16,10,5,8\nm,g,256,1,16,20,6,8\n"


@pytest.fixture(scope="module")
def shipped():
    return load_profiles()


def test_shipped_profile_sha256_and_licence():
    # The sha256 of data/perf_model.csv at splitwise-sim commit 8f99e7dc (its README).
    digest = hashlib.sha256(data_file("profiles", "perf_model.csv").read_bytes()).hexdigest()
    assert digest == "dbbe505d1d64fc4bd1ec03c50edf944643586de4f68a81e94cbd55dd5bdfbf41"
    licence = data_file("profiles", "LICENSE").read_text()
    assert "Copyright (c) 2024 Pratyush Patel" in licence and "MIT License" in licence


def test_shipped_profile_is_byte_copy_of_shared(sim_dir):
    assert data_file("profiles", "perf_model.csv").read_bytes() == (sim_dir / "perf_model.csv").read_bytes()


def test_entries_cover_models_hardware_tp(shipped):
    entries = shipped.entries()
    keys = {(e.model, e.hardware, e.tensor_parallel) for e in entries}
    hws = {"a100-80gb", "h100-80gb", "h100-80gb-pcap"}
    expected = {("bloom-176b", h, 8) for h in hws} | {("llama2-70b", h, tp) for h in hws for tp in (2, 4, 8)}
    assert keys == expected
    assert all(e.n_points == 105 for e in entries)
    model, hardware, tp, n = entries[0]  # tuple-unpackable
    assert (model, tp, n) == ("bloom-176b", 8, 105)


def test_interpolation_hits_every_reference_median(shipped, sim_dir):
    # The reference medians are written with 4 decimals (ms), so allow half a unit of the last
    # place (5e-5 ms) on top of the 1e-6 relative tolerance.
    ref = pd.read_csv(sim_dir / "perf_model_medians_by_batch_tokens.csv")
    assert len(ref) == 108
    for (model, hw, tp), grp in ref.groupby(["model", "hardware", "tensor_parallel"]):
        lm = shipped.latency_model(model, hw, int(tp))
        bt = grp["batch_tokens"].to_numpy(float)
        np.testing.assert_allclose(lm.prompt_time(bt) * 1000, grp["prompt_time_ms_median"], rtol=1e-6, atol=5e-5)
        np.testing.assert_allclose(lm.token_time(bt) * 1000, grp["token_time_ms_median"], rtol=1e-6, atol=5e-5)
        med = shipped.medians(model, hw, int(tp))
        np.testing.assert_array_equal(med["batch_tokens"].to_numpy(), grp["batch_tokens"].to_numpy())


def test_interpolation_between_points_is_linear(shipped, sim_dir):
    ref = pd.read_csv(sim_dir / "perf_model_medians_by_batch_tokens.csv")
    grp = ref[(ref.model == "bloom-176b") & (ref.hardware == "a100-80gb")]
    lm = shipped.latency_model("bloom-176b", "a100-80gb", 8)
    x = np.array([200.0, 1469.0, 3000.0, 20000.0])
    np.testing.assert_allclose(lm.prompt_time(x) * 1000,
                               np.interp(x, grp.batch_tokens, grp.prompt_time_ms_median), rtol=1e-6, atol=5e-5)


@pytest.mark.parametrize("hw,at1,at512", [("h100-80gb", 35.3, 36.2), ("a100-80gb", 47.5, 49.3)])
def test_bloom_decode_extrapolation_matches_reference(shipped, hw, at1, at512):
    # Values the reference simulator's interp1d(fill_value="extrapolate") gives (shared README).
    lm = shipped.latency_model("bloom-176b", hw, 8)
    assert lm.token_time(1) * 1000 == pytest.approx(at1, abs=0.05)
    assert lm.token_time(512) * 1000 == pytest.approx(at512, abs=0.05)


def test_pcap_prompt_is_1_3x_h100_and_token_identical(shipped):
    x = np.array([1.0, 128, 700, 2048, 8192, 40000])
    for model, tp in (("bloom-176b", 8), ("llama2-70b", 2), ("llama2-70b", 8)):
        h = shipped.latency_model(model, "h100-80gb", tp)
        c = shipped.latency_model(model, "h100-80gb-pcap", tp)
        np.testing.assert_allclose(c.prompt_time(x), 1.3 * h.prompt_time(x), rtol=1e-9)
        np.testing.assert_allclose(c.token_time(x), h.token_time(x), rtol=1e-12)


def test_mixed_batch_rule(shipped):
    lm = shipped.latency_model("bloom-176b", "h100-80gb", 8)
    assert lm.iteration_time(1000, 24) == pytest.approx(1.1 * lm.prompt_time(1024))
    assert lm.iteration_time(0, 24) == pytest.approx(lm.token_time(24))


def test_user_profile_and_cache(write):
    ps = load_profiles(write("p.csv", GOOD))
    lm = ps.latency_model("m", "g", 8)
    assert lm.prompt_time(192) == pytest.approx(0.015)  # ms -> s, halfway between 10 and 20 ms
    assert lm.token_time(64) == pytest.approx(0.0045)  # linear extrapolation below 128
    assert ps.latency_model("m", "g", 8) is lm


def test_profile_accuracy_is_seeded_and_bounded(shipped):
    a = profile_accuracy(shipped, seed=0)
    assert a == profile_accuracy(shipped, seed=0)
    assert a != profile_accuracy(shipped, seed=1)
    assert len(a) == 12 and all(x.n_test == 21 and x.n_train == 84 for x in a)
    # Measured with seed 0: 0.8%..7.8% per entry (the paper reports < 3% overall).
    for x in a:
        assert 0 < x.prompt_mape_pct < 10 and 0 < x.token_mape_pct < 10


def test_profile_accuracy_zero_on_exactly_linear_profile(write):
    rows = [f"m,g,{p},{b},16,{0.01 * p * b + 3},{0.002 * p * b + 1},8"
            for p, b in ((128, 1), (256, 1), (512, 1), (512, 2), (512, 4), (1024, 1)) for _ in range(5)]
    ps = load_profiles(write("lin.csv", HEADER + "\n".join(rows) + "\n"))
    (acc,) = profile_accuracy(ps, seed=3)
    assert acc.n_test == 6
    assert acc.prompt_mape_pct == pytest.approx(0, abs=1e-9)
    assert acc.token_mape_pct == pytest.approx(0, abs=1e-9)


@pytest.mark.parametrize("text,needle", [
    ("", "is empty"),
    ("model,hardware\nm,g\n", "lacks column(s) prompt_size"),
    (HEADER, "no data rows"),
    (GOOD.replace("10,5", "abc,5"), "line 2, column prompt_time: 'abc' is not a positive finite number"),
    (GOOD.replace("10,5", "-10,5"), "line 2, column prompt_time"),
    (GOOD.replace("20,6", "20,inf"), "line 3, column token_time"),
    (GOOD.replace("128,1,16", "128,1.5,16"), "line 2, column batch_size: '1.5' is not a positive integer"),
    (GOOD.replace("256,1,16,20,6,8", "256,1,16,20,6,0"), "line 3, column tensor_parallel"),
    (GOOD.replace("m,g,256", ",g,256"), "line 3, column model: empty value"),
    (HEADER + "m,g,128,1,16,10,5,8\n", "interpolate; model m, hardware g, tensor_parallel 8 has 1"),
])
def test_bad_profile_files(write, text, needle):
    path = write("bad.csv", text)
    with pytest.raises(SplitwisePlanError) as err:
        load_profiles(path).latency_model("m", "g", 8)
    assert needle in str(err.value)
    assert "\n" not in str(err.value)


def test_missing_profile_file(tmp_path):
    with pytest.raises(SplitwisePlanError, match="profile file not found: .*nope.csv"):
        load_profiles(tmp_path / "nope.csv")


@pytest.mark.parametrize("args,needle", [
    (("gpt3", "a100-80gb", 8), "unknown model 'gpt3'.*available: bloom-176b, llama2-70b"),
    (("bloom-176b", "tpu", 8), "hardware 'tpu'.*a100-80gb, h100-80gb, h100-80gb-pcap"),
    (("bloom-176b", "a100-80gb", 4), "tensor_parallel=4.*available: 8"),
])
def test_unknown_names_list_what_exists(shipped, args, needle):
    with pytest.raises(SplitwisePlanError, match=needle):
        shipped.latency_model(*args)


def test_extrapolation_is_the_references_until_it_would_reach_zero():
    """Linear extrapolation as the reference does; where a falling profile would reach zero or
    negative times (once: negative utilization), a thousandth of its fastest batch instead."""
    from splitwise_plan.perf.latency_model import PhaseCurve

    falling = PhaseCurve(np.array([1.0, 2.0]), np.array([1.0, 0.5]))
    rising = PhaseCurve(np.array([10.0, 20.0]), np.array([1.0, 2.0]))
    for curve, x, want in ((falling, 1.5, 0.75), (falling, 2.5, 0.25), (falling, 3.0, 0.0005),
                           (falling, 10.0, 0.0005), (rising, 5.0, 0.5), (rising, 0.0, 0.001), (rising, 30.0, 3.0)):
        assert curve(x) == pytest.approx(want) and curve.at(x) == pytest.approx(want)
    assert np.allclose(falling(np.array([1.5, 10.0])), [0.75, 0.0005])


def test_names_in_a_users_profile_match_in_any_case(tmp_path):
    """BLOOM-176B and DGX hardware spelled in capitals (or half of the rows so) are the same
    model and hardware: one entry each, the same latencies, the default SLOs' reference found."""
    from splitwise_plan.inputs.workloads import load_workload
    from splitwise_plan.sim.simulator import Simulator
    df = pd.read_csv(data_file("profiles", "perf_model.csv"))
    df.loc[::2, "model"] = df.loc[::2, "model"].str.upper()
    df["hardware"] = df["hardware"].str.upper()
    df.to_csv(tmp_path / "mine.csv", index=False)
    mine, shipped = load_profiles(tmp_path / "mine.csv"), load_profiles()
    assert mine.entries() == shipped.entries()
    stream = load_workload("coding").generate(10, duration_s=10, seed=0)
    ours = Simulator(stream, "BLOOM-176B", profiles=mine).run("HH", 3, 1)
    assert ours == Simulator(stream, profiles=shipped).run("HH", 3, 1)


@pytest.mark.parametrize("text,needle", [
    (GOOD.replace("256,1,16", "1e30,1,16"),
     "line 3, column prompt_size: '1e+30' is not a positive integer of at most 1,000,000"),
    (GOOD.replace("256,1,16", "5000000000,5000000000,16"), "line 3, column prompt_size"),   # the product: past int64
    (GOOD.replace("256,1,16", "256,1000001,16"), "line 3, column batch_size"),
    (GOOD.replace("256,1,16", "256,1,9223372036854775807"), "line 3, column token_size"),
    (GOOD.replace("256,1,16,20,6,8", "256,1,16,20,6,8192"), "line 3, column tensor_parallel: '8192' is not a positive "
                                                             "integer of at most 4,096"),
    (GOOD.replace("m,g,128,1", "m,g,128,True").replace("m,g,256,1", "m,g,256,True"),
     "line 2, column batch_size: 'True' is not a positive integer"),
    ("# mine\n" + GOOD, "line 1 is a comment ('# mine'): comment lines are not supported"),
    (GOOD + "# end\n", "line 4 is a comment ('# end')"),
    (GOOD.replace("m,g,256", "m\x00,g,256"), "is not a text CSV: line 3 holds the control character '\\x00'"),
])
def test_profile_values_that_would_wrap_or_mislead(write, text, needle):
    """Integers past int64 wrapped silently (and prompt_size*batch_size with them); True read as 1; a
    comment line blamed on the next one: each is one error naming the file, line and column."""
    path = write("bad.csv", text)
    with pytest.raises(SplitwisePlanError) as err:
        load_profiles(path).latency_model("m", "g", 8)
    assert needle in str(err.value) and "bad.csv" in str(err.value)


@pytest.mark.parametrize("name", ["p.csv.zip", "p.csv.xz", "p.csv.zst", "p.csv.tar"])
def test_profile_not_compressed_as_its_name_says(write, capsys, name):
    from splitwise_plan.cli import main
    path = write(name, GOOD)
    assert main(["profiles", "--profiles", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: profile file {path}") and err.count("\n") == 1


def test_gzipped_profile_reads_as_the_plain_one(tmp_path):
    import gzip
    (tmp_path / "p.csv.gz").write_bytes(gzip.compress(GOOD.encode()))
    assert load_profiles(tmp_path / "p.csv.gz").entries() == [("m", "g", 8, 2)]
