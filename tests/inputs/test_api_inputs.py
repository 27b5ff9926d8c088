"""The Python API as a notebook calls it: a wrong value is one SplitwisePlanError naming it, never a
deep numpy or pandas error, a silent coercion or a silently different run."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import splitwise_plan as sp
from splitwise_plan.inputs.machines import BUILTIN_MACHINES
from splitwise_plan.inputs.workloads import RequestStream, Workload, load_workload
from splitwise_plan.sim.simulator import Simulator


@pytest.fixture(scope="module")
def sim():
    return Simulator(load_workload("coding").generate(5.0, duration_s=10.0, seed=0))


@pytest.mark.parametrize("call,needle", [
    (lambda s: s.run_requests("HH", 3, 3, method="events "), "simulation method 'events ' is unknown"),
    (lambda s: s.run_points([("HH", 3, 3)], method="x"), "simulation method 'x' is unknown"),
    (lambda s: s.run(None, 3, 3), "a design is named by a string"),
    (lambda s: s.run_many("HH", [3, 3]), "a design point is (prompt machines, token machines), got 3"),
    (lambda s: s.run_points([("HH",)]), "a design point is (design, prompt machines, token machines)"),
    (lambda s: s.run_many("HH", [(3, 3)], jobs="2"), "jobs must be a whole number"),
    (lambda s: s.run("HH", 3.5, 3), "prompt pool must be a whole number of machines"),
    (lambda s: Simulator(None), "stream must be a RequestStream"),
    (lambda s: Simulator(s.stream, tensor_parallel=8.9), "tensor_parallel must be a whole number, got 8.9"),
    (lambda s: Simulator(s.stream, slos="paper"), "slos must be a SLOSet"),
    (lambda s: Simulator(s.stream, scheduler="layerwise"), "scheduler must be a SchedulerConfig"),
    (lambda s: Simulator(s.stream, model=["x"]), "unknown model ['x']"),
    (lambda s: sp.load_workload(123), "a workload is a name (coding, conversation) or a path, got 123"),
    (lambda s: sp.load_slos(123), "a SLO file is given as a path, got 123"),
    (lambda s: sp.get_machine(["x"]), "unknown machine ['x']"),
    (lambda s: RequestStream([0.0, 1.0], [10.7, 3], [1, 2]), "tokens must be whole numbers between 1 and"),
    (lambda s: RequestStream([0.0], [np.nan], [1]), "tokens must be whole numbers"),
    (lambda s: Workload("w", [1.9], [2]), "workload 'w': prompt and output tokens must be whole numbers"),
    (lambda s: dataclasses.replace(BUILTIN_MACHINES["dgx-h100"], cost="4.0"), "cost must be a number, got '4.0'"),
    (lambda s: dataclasses.replace(BUILTIN_MACHINES["dgx-h100"], gpus=-8), "gpus must be between 1 and 4,096"),
    (lambda s: sp.plan("min-cost"), "plan() takes a PlanRequest or keyword options"),
    (lambda s: sp.plan(goal="min-cost", rps=5, foo=1), "plan() has no option foo"),
    (lambda s: sp.PlanRequest(rps=True), "rps must be a number, got True"),
    (lambda s: sp.PlanRequest(rps=5, designs=5), "designs must be a comma list or a sequence of design names, got 5"),
    (lambda s: sp.PlanRequest(rps=5, designs=""), "no design given"),
    (lambda s: sp.PlanRequest(rps=5, limits=(("HH", -1, 5),)), "limits of HH: prompt max must be between 1"),
    (lambda s: sp.PlanRequest(rps=5, limits="x"), "limits are ((design, prompt max, token max), ...)"),
])
def test_a_wrong_value_is_one_user_error(sim, call, needle):
    with pytest.raises(sp.SplitwisePlanError) as err:
        call(sim)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_numpy_and_numeric_strings_become_plain_numbers_that_reports_serialize():
    req = sp.PlanRequest(rps=np.float32(8), duration="20", bandwidth=np.int64(100), margin=np.float32(0.25),
                         max_confirm=np.int64(3), batch=np.int64(4), seed=np.int64(2), designs="HH")
    for name, kind in (("rps", float), ("duration", float), ("bandwidth", float), ("margin", float),
                       ("max_confirm", int), ("batch", int), ("seed", int)):
        assert type(getattr(req, name)) is kind, name
    assert (req.rps, req.duration, req.bandwidth, req.margin) == (8.0, 20.0, 100.0, 0.25)
    json.dumps(dataclasses.asdict(req))
    text = sp.PlanRequest(rps="8", tp="4", seeds=" 2", seed="3", jobs="1", margin="0.1", bandwidth="12.5", designs="HH")
    assert (text.rps, text.tp, text.seeds, text.seed, text.jobs, text.margin, text.bandwidth) == (8.0, 4, 2, 3, 1, 0.1, 12.5)
    assert [type(getattr(text, k)) for k in ("tp", "seeds", "margin", "bandwidth")] == [int, int, float, float]
    with pytest.raises(sp.SplitwisePlanError, match="^tp takes a tensor parallelism for every pool .* got '8.5'"):
        sp.PlanRequest(rps=8, tp="8.5")
    m = dataclasses.replace(BUILTIN_MACHINES["dgx-h100"], cost=np.float32(4), gpus=np.int64(4))
    assert (type(m.cost), type(m.gpus), m.hbm_bytes) == (float, int, 4 * 80 * 2**30)


def test_a_point_given_with_numpy_counts_is_the_same_point(sim):
    a = sim.run("HH", np.int64(3), np.int64(2))
    b = sim.run("HH", 3, 2)
    assert a.to_dict() == b.to_dict()


def test_names_in_any_case_are_the_same_run(sim):
    """EVENTS once ran the fluid model silently; now it is the events method, as BLOOM-176B is bloom-176b."""
    stream = sim.stream
    assert sim.run("HH", 3, 3, "EVENTS") == sim.run("HH", 3, 3, "events") != sim.run("HH", 3, 3, "fluid")
    assert Simulator(stream, "BLOOM-176B").run("HH", 3, 3) == sim.run("HH", 3, 3)
    assert len(load_workload("CODING").generate(5.0, duration_s=10.0, seed=0)) == len(stream)


@pytest.mark.parametrize("kw,needle", [
    (dict(max_batch_size=0), "SchedulerConfig.max_batch_size must be a whole number >= 1"),
    (dict(max_batch_tokens="2048"), "SchedulerConfig.max_batch_tokens must be a whole number"),
    (dict(transfer_bandwidth_bytes_s=0.0), "SchedulerConfig.transfer_bandwidth_bytes_s must be positive"),
    (dict(transfer_bandwidth_bytes_s=-1.0), "SchedulerConfig.transfer_bandwidth_bytes_s must be positive"),
    (dict(mixed_pool="no"), "SchedulerConfig.mixed_pool must be True or False"),
])
def test_scheduler_config_is_checked(kw, needle):
    with pytest.raises(sp.SplitwisePlanError, match=needle):
        sp.SchedulerConfig(**kw)


def test_the_fluid_model_refuses_scheduler_fields_it_does_not_model(sim):
    """It would keep the reference's batch size or preemption limit silently: the events method honours
    them (a batch of one runs longer)."""
    small = sp.SchedulerConfig(max_batch_size=1)
    with pytest.raises(sp.SplitwisePlanError, match="the fluid model keeps the reference's max_batch_size"):
        Simulator(sim.stream, scheduler=small).run("HH", 3, 1)
    patient = sp.SchedulerConfig(max_preemptions=sp.SchedulerConfig().max_preemptions + 1)
    with pytest.raises(sp.SplitwisePlanError, match="the fluid model keeps the reference's max_preemptions"):
        Simulator(sim.stream, scheduler=patient).run("HH", 3, 1)
    Simulator(sim.stream, scheduler=patient, method="events").run("HH", 3, 1)
    events = Simulator(sim.stream, scheduler=small, method="events").run("HH", 3, 1)
    assert events.latency_s["e2e"][99] > Simulator(sim.stream, method="events").run("HH", 3, 1).latency_s["e2e"][99]


def test_inputs_of_the_wrong_kind_are_named(sim):
    with pytest.raises(sp.SplitwisePlanError, match="machines must map names to Machine"):
        Simulator(sim.stream, machines="my.toml")
    frame = sim.stream.to_frame()
    import pandas as pd
    with pytest.raises(sp.SplitwisePlanError, match="give arrivals as seconds"):
        RequestStream(pd.to_datetime(frame.arrival_timestamp, unit="s"), frame.prompt_size, frame.token_size)
    slo = sp.SLO("ttft", np.int64(99), np.float32(5))   # the types a pandas column gives
    assert (slo.percentile, slo.limit) == (99, 5.0)


def test_results_compare_equal_across_pickling_and_runs(sim):
    import pickle
    a, b = sim.run("A100", 4), sim.run("A100", 4)     # a baseline: its token utilization is NaN
    assert a == b == pickle.loads(pickle.dumps(a)) and a != sim.run("A100", 5)
    p = sp.plan(rps=5, duration=10, designs="HH,H100", jobs=1)
    assert p == sp.plan(rps=5, duration=10, designs="HH,H100", jobs=1) == pickle.loads(pickle.dumps(p))


def test_write_reports_checks_every_path_before_writing_any(tmp_path):
    import pathlib
    p = sp.plan(rps=5, duration=10, designs="HH", jobs=1)
    for report in (sp.plan_report, sp.render_plan, lambda r: sp.write_reports(r, json_path=tmp_path / "s.json")):
        with pytest.raises(sp.SplitwisePlanError, match="takes a plan's result"):   # not an AttributeError
            report(p.designs[0].result)
    sp.write_reports(p, json_path="/dev/null", csv_path="/dev/null")   # reports thrown away: one device
    same = tmp_path / "x"
    with pytest.raises(sp.SplitwisePlanError, match="name the same file"):
        sp.write_reports(p, json_path=same, csv_path=same)
    with pytest.raises(sp.SplitwisePlanError, match="unknown extension"):
        sp.write_reports(p, csv_path=tmp_path / "a.csv", plot_path=tmp_path / "a.jpg")
    assert list(tmp_path.iterdir()) == []
    doc = json.loads(json.dumps(sp.plan_report(p), allow_nan=False))
    assert doc["plan"]["winner"] == p.winner
    assert (doc["plan"]["rate_rps"], doc["plan"]["duration"]) == (5.0, 10.0)   # floats, as the CLI's report has them
    assert isinstance(doc["plan"]["rate_rps"], float) and isinstance(doc["plan"]["duration"], float)
    from splitwise_plan.inputs.workloads import SHIPPED_WORKLOADS
    q = sp.plan(goal="max-throughput", budget_power=np.int64(400), designs="H100", duration=10, jobs=1,
                workload=pathlib.Path(sp.data_file("workloads", SHIPPED_WORKLOADS["coding"])))
    json.dumps(q.to_dict(), allow_nan=False)          # a numpy budget and a Path are plain values there


def test_a_plan_takes_its_inputs_loaded_as_from_files(tmp_path, capsys):
    """A notebook's objects (a stream, an edited machine catalog, SLOs, profiles) plan as the same inputs
    written to files do; the reports name them as in memory; a stored study, whose workers rebuild the
    search from the files it names, refuses them."""
    stream = load_workload("coding").generate(6.0, duration_s=15.0, seed=3)
    stream.to_csv(tmp_path / "t.csv")
    h100 = BUILTIN_MACHINES["dgx-h100"]
    cheap = {**BUILTIN_MACHINES, "dgx-h100": dataclasses.replace(h100, cost=h100.cost / 4)}
    (tmp_path / "m.toml").write_text(f"[machines.dgx-h100]\ncost = {h100.cost / 4!r}\n")
    kw = dict(designs="HH,HA,H100", jobs=2)
    mem = sp.plan(trace=stream, machines_file=cheap, slos=sp.load_slos(None), profiles=sp.load_profiles(None), **kw)
    files = sp.plan(trace=str(tmp_path / "t.csv"), machines_file=str(tmp_path / "m.toml"), **kw)
    answers = [(d.design, d.status, d.prompt, d.token, d.cost) for d in mem.designs]
    assert answers == [(d.design, d.status, d.prompt, d.token, d.cost) for d in files.designs]
    hh = mem.get("HH")
    assert hh.status == "ok" and hh.cost == pytest.approx((hh.prompt + hh.token) * h100.cost / 4)   # the catalog's price
    doc = json.loads(json.dumps(sp.plan_report(mem), allow_nan=False))
    assert doc["inputs"]["trace"] == "<in-memory RequestStream coding@6rps>" == doc["plan"]["trace"]
    assert doc["inputs"]["machines_file"] == "<in-memory machine catalog>"
    assert doc["inputs"]["machine_catalog"]["dgx-h100"]["cost"] == pytest.approx(h100.cost / 4)
    sp.render_plan(mem)
    assert doc["inputs"]["requests"] == len(stream) and "trace <in-memory RequestStream" in capsys.readouterr().out
    wl = sp.plan(rps=5, duration=10, workload=load_workload("conversation"), designs="HH", jobs=1)
    assert wl.designs == sp.plan(rps=5, duration=10, workload="conversation", designs="HH", jobs=1).designs
    with pytest.raises(sp.SplitwisePlanError, match="^storage needs the plan's inputs as files; trace is an object"):
        sp.plan(trace=stream, designs="HH", storage=f"sqlite:///{tmp_path / 's.db'}")
    assert not (tmp_path / "s.db").exists()
    for bad, needle in ((dict(trace=42), "trace must be a file path or a RequestStream, got int"),
                        (dict(machines_file={"x": 1}), "machines_file must be a file path or a machine catalog"),
                        (dict(slos=["ttft"]), "slos must be a file path or a SLOSet")):
        with pytest.raises(sp.SplitwisePlanError, match=needle):
            sp.plan(**{"rps": 5, **bad}) if "trace" not in bad else sp.plan(**bad)


def test_plan_takes_designs_done_by_their_names_short_or_long():
    first = sp.plan(rps=5, duration=10, designs="HH,H100", jobs=1)
    hh = first.get("HH")
    again = sp.plan(rps=5, duration=10, designs="HH,H100", jobs=1, done={"HH": hh})
    assert again.designs == first.designs and again.get("HH").seconds == hh.seconds   # taken as it was
    for bad, needle in (([hh], "done must map design names to their DesignPlan, got list"),
                        ({"HA": hh}, "as plan\\(\\) made them"), ({"XX": hh}, "design 'XX' is unknown")):
        with pytest.raises(sp.SplitwisePlanError, match=needle):
            sp.plan(rps=5, duration=10, designs="HH", jobs=1, done=bad)
