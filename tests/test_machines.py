"""Machine and model catalogues, and user machine files."""

from __future__ import annotations

import pytest

from splitwise_plan import (BUILTIN_MACHINES, BUILTIN_MODELS, SplitwisePlanError, get_machine, get_model,
                            load_machines)
from splitwise_plan.machines import GIB


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
