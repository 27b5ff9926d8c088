"""Machine and model catalogues, and user machine files."""

from __future__ import annotations

import json

import pytest

from splitwise_plan import BUILTIN_MACHINES, BUILTIN_MODELS, SplitwisePlanError, get_machine, get_model, load_machines
from splitwise_plan.cli import main
from splitwise_plan.inputs.machines import GIB

B200 = """
[machines.B200]
hardware = "h100-80gb"
gpus = 8
hbm_gib_per_gpu = 80
cost = 4.0
power = 40.0
"""


def test_builtin_machines_match_reference():
    # splitwise_sim_constants.yaml: machine_cost_power and hardware_skus.
    expected = {"dgx-a100": ("a100-80gb", 2.21, 24.8), "dgx-h100": ("h100-80gb", 4.76, 44.0),
                "dgx-h100-cap": ("h100-80gb-pcap", 4.76, 30.8)}
    assert set(BUILTIN_MACHINES) == set(expected)
    for name, (hw, cost, power) in expected.items():
        m = BUILTIN_MACHINES[name]
        assert (m.hardware, m.cost, m.power, m.gpus, m.hbm_bytes_per_gpu) == (hw, cost, power, 8, 85899345920)
    assert load_machines(None) == BUILTIN_MACHINES


def test_iso_power_40_h100_about_70_a100():
    h, a = BUILTIN_MACHINES["dgx-h100"], BUILTIN_MACHINES["dgx-a100"]
    assert 40 * h.power == pytest.approx(70 * a.power, rel=0.02)  # 1760 vs 1736
    assert int(44 * 40 // 24.8) == 70  # the reference's iso-power formula


@pytest.mark.parametrize("design, want_cost, want_power", [
    ("HA", 3 * 4.76 + 2 * 2.21, 3 * 44.0 + 2 * 24.8),        # H100 prompt, A100 token machines
    ("HHcap", 3 * 4.76 + 2 * 4.76, 3 * 44.0 + 2 * 30.8),     # power-capped H100 token machines
    ("AA", 5 * 2.21, 5 * 24.8), ("A100", 3 * 2.21, 3 * 24.8),
])
def test_a_designs_cost_and_power_price_each_pool_by_its_own_machine(design, want_cost, want_power):
    """The paper's units (splitwise_sim_constants.yaml): 3 prompt and 2 token machines, each pool at its
    machine's price; a baseline's 3 machines."""
    from splitwise_plan.inputs.workloads import load_workload
    from splitwise_plan.sim.simulator import Simulator
    sim = Simulator(load_workload("coding").generate(1, duration_s=5, seed=0), method="events")
    c = sim.cluster(design, 3, 0 if design == "A100" else 2)
    assert (c.cost, c.power) == (pytest.approx(want_cost), pytest.approx(want_power))


def test_models_kv_bytes():
    assert BUILTIN_MODELS["bloom-176b"].kv_bytes_per_token == 4014080
    assert BUILTIN_MODELS["llama2-70b"].kv_bytes_per_token == 2621440
    assert get_model("llama2-70b") is BUILTIN_MODELS["llama2-70b"]


def test_override_and_extend(write):
    path = write("m.toml", """
[machines.dgx-a100]
cost = 2.5
[machines.my-box]
hardware = "h100-80gb"
gpus = 4
hbm_gib_per_gpu = 94
cost = 3
power = 20.5
""")
    ms = load_machines(path)
    assert ms["dgx-a100"].cost == 2.5 and ms["dgx-a100"].power == 24.8
    assert ms["my-box"].gpus == 4 and ms["my-box"].hbm_bytes_per_gpu == 94 * GIB
    assert ms["my-box"].hbm_bytes == 4 * 94 * GIB and ms["my-box"].cost == 3.0
    assert ms["dgx-h100"] == BUILTIN_MACHINES["dgx-h100"]
    assert BUILTIN_MACHINES["dgx-a100"].cost == 2.21  # builtins untouched


@pytest.mark.parametrize("text,needle", [
    ("[machines.dgx-a100\ncost=1", "not valid TOML"),
    ("cost = 1", "unknown top-level key(s) cost"),
    ("", "defines no [machines.NAME] table"),
    ("[machines.dgx-a100]\ncots = 1", "unknown key(s) cots"),
    ("[machines.dgx-a100]\ncost = -1", "cost must be positive"),
    ("[machines.dgx-a100]\npower = 'x'", "power must be a number"),
    ("[machines.dgx-a100]\ngpus = 2.5", "gpus must be an integer"),
    ("[machines.new]\ncost = 1", "a new machine needs hardware, gpus, hbm_gib_per_gpu (or hbm_bytes_per_gpu), power"),
])
def test_bad_machine_files(write, text, needle):
    with pytest.raises(SplitwisePlanError) as err:
        load_machines(write("m.toml", text))
    assert needle in str(err.value) and "m.toml" in str(err.value)


def test_missing_machine_file(tmp_path):
    with pytest.raises(SplitwisePlanError, match="machine file not found"):
        load_machines(tmp_path / "none.toml")


def test_unknown_names_list_valid_ones():
    with pytest.raises(SplitwisePlanError, match="unknown machine 'dgx-b200'; valid: dgx-a100, dgx-h100, dgx-h100-cap"):
        get_machine("dgx-b200")
    with pytest.raises(SplitwisePlanError, match="unknown model 'gpt3'; valid: bloom-176b, llama2-70b"):
        get_model("gpt3")


def test_a_name_in_upper_case_is_the_catalogs_in_lower_case(write):
    """Designs name their machines in lower case (B200:dgx-a100 is b200:dgx-a100): the catalog must too."""
    ms = load_machines(write("m.toml", B200))
    assert "b200" in ms and "B200" not in ms and ms["b200"].name == "b200"
    assert get_machine("B200", ms) is ms["b200"]


@pytest.mark.parametrize("design,named", [("B200:dgx-a100", "b200:dgx-a100"), ("b200:DGX-A100", "b200:dgx-a100"),
                                          ("baseline:B200", "baseline:b200")])
def test_a_machine_named_in_upper_case_can_be_simulated(capsys, write, design, named):
    counts = ["--machines", 4] if design.startswith("baseline") else ["-p", 3, "-t", 1]
    code = main([str(a) for a in ("simulate", "--design", design, *counts, "--rps", 5, "--duration", 10,
                                  "--method", "events", "--quiet", "--machines-file", write("m.toml", B200),
                                  "--json", "-")])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    assert doc["design"] == named and doc["cost"] == pytest.approx(4 * 4.0 if "baseline" in named else 3 * 4.0 + 2.21)


@pytest.mark.parametrize("name,needle", [
    ('" my-h100 "', "a machine name must be non-empty, without spaces around it"),
    ('""', "a machine name must be non-empty"),
    ('"a:b"', "a machine name cannot hold ':'"),
    ('"a,b"', "a machine name cannot hold ','"),
    ("HH", "'HH' names a design"),
    ("Splitwise-AA", "'Splitwise-AA' names a design"),
    ("h100", "'h100' names a design"),
    ("BASELINE", "'BASELINE' starts a baseline:MACHINE design"),
])
def test_names_no_command_can_use_are_refused(capsys, write, name, needle):
    path = write("m.toml", B200.replace("B200", name))
    with pytest.raises(SplitwisePlanError) as err:
        load_machines(path)
    assert f"machine file {path}, [machines.{name}]: {needle}" in str(err.value)
    assert main(["machines", "--machines-file", str(path)]) == 2   # one error line, exit 2
    assert needle in capsys.readouterr().err


@pytest.mark.parametrize("text,needle", [
    ("[machines.dgx-a100]\nhbm_gib_per_gpu = 1e-12",
     "[machines.dgx-a100]: hbm_gib_per_gpu must be at least 9.31e-10 (one byte), got 1e-12"),
    (B200.replace("hbm_gib_per_gpu = 80", "hbm_gib_per_gpu = 1e-10"),
     "[machines.B200]: hbm_gib_per_gpu must be at least"),
])
def test_a_value_the_machine_refuses_names_the_file_table_and_key(write, text, needle):
    path = write("m.toml", text)
    with pytest.raises(SplitwisePlanError) as err:
        load_machines(path)
    assert str(err.value).startswith(f"machine file {path}, ") and needle in str(err.value)
    assert "hbm_bytes_per_gpu" not in str(err.value)
