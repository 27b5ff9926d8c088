"""Each pool its own tensor parallelism: ``--tp 8``, ``--tp 4:2`` and ``--tp auto``.

Truth: the divisors of a machine's GPUs and the weights each instance must hold (by hand); the simulators
themselves (a design fixed at a TP is the same cluster as the simulator at that TP); and, under ``auto``, the
plan at TP8 (auto plans it too, so it can only be as cheap or cheaper).
"""

from __future__ import annotations

import json

import pytest

from splitwise_plan import plan
from splitwise_plan.cli import main
from splitwise_plan.errors import SplitwisePlanError
from splitwise_plan.inputs.designs import base_design, get_design, parse_tp, with_tp
from splitwise_plan.inputs.machines import BUILTIN_MACHINES, with_short_names
from splitwise_plan.inputs.models import get_model
from splitwise_plan.inputs.workloads import load_workload
from splitwise_plan.planning import tp
from splitwise_plan.sim.simulator import Simulator


def test_a_tp_is_one_for_every_pool_or_one_each():
    assert parse_tp(8) == (8, 8) and parse_tp("4:2") == (4, 2) and parse_tp(" 2 ") == (2, 2)
    for bad in ("4:x", "0", "4:2:1", "", 2.5):
        with pytest.raises(SplitwisePlanError, match="--tp"):
            parse_tp(bad)


def test_a_design_at_a_tp_is_named_after_it_and_read_back():
    d = with_tp(get_design("HH"), "4:2")
    assert (d.name, d.tp) == ("splitwise-hh@tp4:2", (4, 2))
    assert get_design(d.name) == d and get_design("hh@TP4:2") == d and base_design(d) == get_design("HH")
    b = with_tp(get_design("baseline:H200"), 4)
    assert (b.name, b.tp, get_design(b.name)) == ("baseline:h200@tp4", (4, 4), b)
    with pytest.raises(SplitwisePlanError, match="design 'HH@tp4:y': its TP"):
        get_design("HH@tp4:y")


def test_each_pool_runs_instances_of_its_own_tp():
    """HH at 4:2: a prompt machine runs two instances of 4 GPUs, a token machine four of 2 (Llama2-70B, whose
    measured profiles hold TP2, TP4 and TP8); the same cluster as the simulator at 4:2."""
    stream = load_workload("coding").generate(20.0, duration_s=20.0, seed=1)
    sim = Simulator(stream, "llama2-70b", tensor_parallel="4:2", method="events")
    c = sim.cluster("HH", 3, 2)
    assert (c.prompt.per_machine, c.prompt.instance_gpus, c.token.per_machine, c.token.instance_gpus) == (2, 4, 4, 2)
    assert c.prompt.latency.tensor_parallel == 4 and c.token.latency.tensor_parallel == 2
    fixed = Simulator(stream, "llama2-70b", method="events").run("HH@tp4:2", 3, 2)
    assert fixed.latency_s == sim.run("HH", 3, 2).latency_s


def test_auto_tries_every_tp_the_model_fits():
    """Llama-3.1-70B (141 GB of bf16 weights) fits 2, 4 or 8 H100s (80 GiB each) but not one; a 180 GB B200 alone."""
    machines = with_short_names(dict(BUILTIN_MACHINES))
    model = get_model("llama-3.1-70b")
    found = {get_design(n).tp for n in tp.variants("H100:H100", machines, model)}
    assert found == {(p, t) for p in (2, 4, 8) for t in (2, 4, 8)}
    assert {get_design(n).tp for n in tp.variants("baseline:B200", machines, model)} == {(n, n) for n in (1, 2, 4, 8)}


def test_the_first_round_and_the_prune_follow_the_bounds():
    names = ["baseline-h100@tp2", "baseline-h100@tp4", "baseline-h100@tp8"]
    bounds = dict(zip(names, (300.0, 350.0, 600.0)))
    assert tp.first_round(names, bounds) == ["baseline-h100@tp2", "baseline-h100@tp8"]
    assert tp.can_beat(names[1], bounds, 400.0) and not tp.can_beat(names[1], bounds, 350.0)


def test_auto_is_at_least_as_cheap_as_tp8_and_names_each_pools_tp(tmp_path):
    kw = dict(rps=6, model="llama-3.1-8b", workload="conversation", designs="H100:H100", duration=60, seeds=1)
    at8, auto = plan(tp=8, **kw), plan(tp="auto", **kw)
    assert at8.winner == "splitwise-hh" and auto.winner.startswith("splitwise-hh@tp")
    w = auto.get(auto.winner)
    assert w.cost <= at8.get(at8.winner).cost + 1e-9
    doc = json.loads(json.dumps(auto.to_dict(), default=str))
    row = doc["designs"][0]
    p, t = get_design(w.design).tp
    assert (row["prompt_tp"], row["token_tp"]) == (p, t)
    assert (row["prompt_instances_per_machine"], row["token_instances_per_machine"]) == (8 // p, 8 // t)
    tried = {r["design"] for r in row["tp_tried"]}
    assert len(tried) == 15 and "splitwise-hh@tp8" in tried | {w.design}   # 4 x 4 TPs, the winner aside
    assert {r["status"] for r in row["tp_tried"]} <= {"ok", "unconfirmed", "pruned", "infeasible"}


def test_tp_errors_are_one_line(capsys):
    assert main(["simulate", "--design", "HH", "--prompt", "2", "--token", "1", "--rps", "5", "--tp", "auto"]) == 2
    assert "--tp auto is the planner's" in capsys.readouterr().err
    assert main(["--rps", "5", "--tp", "3:x"]) == 2
    err = capsys.readouterr().err
    assert "--tp takes a tensor parallelism" in err and len(err.strip().splitlines()) == 1


def test_a_cluster_file_gives_each_pools_tp(tmp_path, capsys):
    """check reads "4:2" from a cluster file: its report names it, and its pools run at it."""
    f = tmp_path / "c.toml"
    f.write_text('design = "HH"\nprompt_machines = 6\ntoken_machines = 2\nmodel = "llama2-70b"\n'
                 'tensor_parallel = "4:2"\n')
    code = main(["check", str(f), "--rps", "10", "--duration", "30", "--json", str(tmp_path / "c.json"), "-q"])
    assert code in (0, 1), capsys.readouterr().err
    doc = json.loads((tmp_path / "c.json").read_text())
    assert doc["inputs"]["tensor_parallel"] == "4:2"
    assert "TP4:2" in capsys.readouterr().out
    f.write_text('design = "HH"\nprompt_machines = 6\ntoken_machines = 2\ntensor_parallel = "4:z"\n')
    assert main(["check", str(f), "--rps", "10"]) == 2
    assert "tensor_parallel" in capsys.readouterr().err
