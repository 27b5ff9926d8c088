"""Machine and model catalogues, and user machine files."""

from __future__ import annotations

import json

import pytest

from splitwise_plan import BUILTIN_MACHINES, BUILTIN_MODELS, SplitwisePlanError, get_machine, get_model, load_machines
from splitwise_plan.cli import main
from splitwise_plan.inputs.designs import get_design
from splitwise_plan.inputs.machines import GIB, SHEET_KEYS, Machine, catalog_units, machine_by_name, with_short_names

B200 = """
[machines.B200]
hardware = "h100-80gb"
gpus = 8
hbm_gib_per_gpu = 80
cost = 4.0
power = 40.0
"""

#: The builtin machines beyond the paper's: hardware, HBM bytes per GPU (data sheets' GB are 1e9 bytes),
#: kW, and the data sheet (HBM TB/s, dense bf16 and fp8 TFLOPS, GPU-to-GPU GB/s)
NEW_MACHINES = {
    "dgx-h200": ("h200-141gb", 141 * 10**9, 10.2, (4.8, 989.0, 1979.0, 900.0)),
    "dgx-b200": ("b200-180gb", 180 * 10**9, 14.3, (8.0, 2250.0, 4500.0, 1800.0)),
    "mi300x-8": ("mi300x-192gb", 192 * 10**9, 10.0, (5.3, 1307.0, 2615.0, 896.0)),
    # NVIDIA data sheets as aiconfigurator-core's systems/*.yaml quote them (NVLink and PCIe doubled to both
    # directions): B300 62 TB/s / 8, 4.5 and 9 PFLOPS sparse halved; GB200 8 TB/s, 2500 and 5000 TFLOPS
    # dense; L40S 864 GB/s, 362.05 and 733 TFLOPS dense, PCIe Gen4 x16 32 GB/s each way
    "dgx-b300": ("b300-288gb", 288 * 10**9, 14.0, (7.75, 2250.0, 4500.0, 1800.0)),
    "gb200-8": ("gb200-186gb", 186 * 10**9, 120.0 / 9, (8.0, 2500.0, 5000.0, 1800.0)),
    "l40s-8": ("l40s-48gb", 48 * 10**9, 6.8, (0.864, 362.05, 733.0, 64.0)),
}


def test_builtin_machines_are_priced_per_hour_and_powered_in_kw_with_their_sources():
    # cost: AWS p5.48xlarge's 2026 on-demand list price, the A100's at the paper's ratio 2.21/4.76 of it;
    # power: the DGX data sheets' maximum, the capped H100 at 70% of the H100's
    h100_usd = 55.04
    expected = {"dgx-a100": ("a100-80gb", A100_USD, 6.5, None), "dgx-h100": ("h100-80gb", h100_usd, 10.2, None),
                "dgx-h100-cap": ("h100-80gb-pcap", h100_usd, 7.14, "dgx-h100")}
    assert set(BUILTIN_MACHINES) == set(expected) | set(NEW_MACHINES)
    for name, (hw, cost, power, base) in expected.items():
        m = BUILTIN_MACHINES[name]
        assert (m.hardware, m.gpus, m.hbm_bytes_per_gpu, m.base) == (hw, 8, 85899345920, base)
        assert (m.cost, m.power) == (pytest.approx(cost, rel=1e-12), pytest.approx(power, rel=1e-12))
        assert (m.cost_unit, m.power_unit) == ("USD/h", "kW")
    assert "p4de.24xlarge" in BUILTIN_MACHINES["dgx-a100"].source
    assert "DGX A100 data sheet" in BUILTIN_MACHINES["dgx-a100"].source
    assert "4.76/2.21" in BUILTIN_MACHINES["dgx-a100"].source and "p5.48xlarge" in BUILTIN_MACHINES["dgx-h100"].source
    for m in BUILTIN_MACHINES.values():   # each price says whether it is a list price (and its date) or an estimate
        cost = m.source.split("cost: ")[1]
        assert cost.startswith(("list price, ", "an estimate, ", "the DGX H100's")), m.name
        assert not cost.startswith("list price") or "2026" in cost.split("; power")[0], m.name
    assert "DGX H100 data sheet" in BUILTIN_MACHINES["dgx-h100"].source
    assert "70%" in BUILTIN_MACHINES["dgx-h100-cap"].source
    assert all("\n" not in m.source for m in BUILTIN_MACHINES.values())   # one line each
    assert f"{BUILTIN_MACHINES['dgx-h100'].cost:.2f}" == "55.04"
    assert load_machines(None) == BUILTIN_MACHINES


def test_the_cost_ratio_is_the_papers_so_cheapest_designs_are_too():
    h, a, cap = BUILTIN_MACHINES["dgx-h100"], BUILTIN_MACHINES["dgx-a100"], BUILTIN_MACHINES["dgx-h100-cap"]
    assert h.cost / a.cost == pytest.approx(4.76 / 2.21, rel=1e-15)
    assert cap.cost == h.cost and cap.power / h.power == pytest.approx(0.7, rel=1e-12)


def test_iso_power_40_h100_is_62_a100():
    h, a = BUILTIN_MACHINES["dgx-h100"], BUILTIN_MACHINES["dgx-a100"]
    assert 40 * h.power == pytest.approx(408.0) and 62 * a.power == pytest.approx(403.0)
    assert int(40 * h.power // a.power) == 62   # 408 kW / 6.5 kW = 62.8


def test_machines_are_still_built_by_position():
    m = Machine("box", "a100-80gb", 8, 80 * GIB, 3.0, 5.0)
    assert (m.cost_unit, m.power_unit, m.source, m.base) == ("USD/h", "kW", "", None)
    m = Machine("box", "a100-80gb", 8, 80 * GIB, 3.0, 5000.0, "EUR/h", "W", "my quote", "dgx-a100")
    assert (m.cost_unit, m.power_unit, m.source, m.base) == ("EUR/h", "W", "my quote", "dgx-a100")
    with pytest.raises(SplitwisePlanError, match="machine 'box': cost_unit must be a non-empty string"):
        Machine("box", "a100-80gb", 8, 80 * GIB, 3.0, 5.0, cost_unit=" ")


H100_USD = 55.04
A100_USD = H100_USD * 2.21 / 4.76   # the paper's cost ratio


@pytest.mark.parametrize("design, want_cost, want_power", [
    ("HA", 3 * H100_USD + 2 * A100_USD, 3 * 10.2 + 2 * 6.5),      # H100 prompt, A100 token machines
    ("HHcap", 5 * H100_USD, 3 * 10.2 + 2 * 7.14),              # power-capped H100 token machines
    ("AA", 5 * A100_USD, 5 * 6.5), ("A100", 3 * A100_USD, 3 * 6.5),
])
def test_a_designs_cost_and_power_price_each_pool_by_its_own_machine(design, want_cost, want_power):
    """3 prompt and 2 token machines, each pool at its machine's price (USD/h) and power (kW); a
    baseline's 3 machines."""
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
    assert ms["dgx-a100"].cost == 2.5 and ms["dgx-a100"].power == 6.5
    assert ms["my-box"].gpus == 4 and ms["my-box"].hbm_bytes_per_gpu == 94 * GIB
    assert ms["my-box"].hbm_bytes == 4 * 94 * GIB and ms["my-box"].cost == 3.0
    assert ms["dgx-h100"] == BUILTIN_MACHINES["dgx-h100"]
    assert BUILTIN_MACHINES["dgx-a100"].cost == pytest.approx(A100_USD, rel=1e-12)  # builtins untouched
    assert ms["dgx-a100"].source == f"machine file {path}" and ms["my-box"].source == f"machine file {path}"
    assert (ms["my-box"].cost_unit, ms["my-box"].power_unit) == ("USD/h", "kW")


@pytest.mark.parametrize("text,needle", [
    ("[machines.dgx-a100\ncost=1", "not valid TOML"),
    ("cost = 1", "unknown top-level key(s) cost"),
    ("[units]\ncost = 'EUR/h'", "defines no [machines.NAME] table"),
    ("units = 'EUR'\n[machines.dgx-a100]\ncost=1", "units must be a table"),
    ("[units]\ncurrency = 'EUR'\n[machines.dgx-a100]\ncost=1", "[units]: unknown key(s) currency; valid: cost, power"),
    ("[units]\ncost = ''\n[machines.dgx-a100]\ncost=1", "[units]: cost must be a non-empty string"),
    ("[units]\npower = 1000\n[machines.dgx-a100]\ncost=1", "[units]: power must be a non-empty string"),
    ("[machines.dgx-a100]\nsource = 3", "[machines.dgx-a100]: source must be a string, got 3"),
    ("[machines.dgx-a100]\nbase = ''", "[machines.dgx-a100]: base must be a non-empty string"),
    ("[machines.dgx-a100]\nbase = 'dgx-b900'", "[machines.dgx-a100]: base 'dgx-b900' names no machine; valid: "
                                              "dgx-b200, dgx-b300, dgx-h100, dgx-h100-cap, dgx-h200, gb200-8, "
                                              "l40s-8, mi300x-8"),
    ("[machines.dgx-a100]\nbase = 'DGX-A100'", "[machines.dgx-a100]: base names the machine itself"),
    ("[machines.dgx-h100]\nbase = 'dgx-h100-cap'",
     "the bases of [machines.dgx-h100], [machines.dgx-h100-cap] go round (dgx-h100 -> dgx-h100-cap -> dgx-h100)"),
    ("", "defines no [machines.NAME] table"),
    ("[machines.dgx-a100]\ncots = 1", "unknown key(s) cots"),
    ("[machines.dgx-a100]\ncost = -1", "cost must be positive"),
    ("[machines.dgx-a100]\npower = 'x'", "power must be a number"),
    ("[machines.dgx-a100]\ngpus = 2.5", "gpus must be an integer"),
    ("[machines.new]\ncost = 1", "[machines.new]: a new machine needs hardware, gpus, hbm_gib_per_gpu "
                                   "(or hbm_bytes_per_gpu), power or a base to take them from"),
])
def test_bad_machine_files(write, text, needle):
    with pytest.raises(SplitwisePlanError) as err:
        load_machines(write("m.toml", text))
    assert needle in str(err.value) and "m.toml" in str(err.value)


def test_missing_machine_file(tmp_path):
    with pytest.raises(SplitwisePlanError, match="machine file not found"):
        load_machines(tmp_path / "none.toml")


def test_unknown_names_list_valid_ones():
    with pytest.raises(SplitwisePlanError, match="unknown machine 'dgx-b900'; valid: dgx-a100, dgx-b200, dgx-b300, "
                                                 "dgx-h100, dgx-h100-cap, dgx-h200, gb200-8, l40s-8, mi300x-8"):
        get_machine("dgx-b900")
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
    assert doc["design"] == named and doc["cost"] == pytest.approx(4 * 4.0 if "baseline" in named else 3 * 4.0 + A100_USD)


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


# --- units, sources and derived machines ------------------------------------------------

def test_raising_the_h100s_cost_raises_the_capped_h100s(write):
    """The capped H100 derives from the H100: it takes its price unless the file sets its own."""
    ms = load_machines(write("m.toml", "[machines.dgx-h100]\ncost = 7.14\n"))
    assert ms["dgx-h100"].cost == 7.14 and ms["dgx-h100-cap"].cost == 7.14
    assert ms["dgx-h100-cap"].power == 7.14   # its power was not overridden: unchanged
    assert ms["dgx-h100-cap"].source.startswith("cost follow dgx-h100 in machine file ")
    assert ms["dgx-a100"] == BUILTIN_MACHINES["dgx-a100"]


def test_an_h100_power_override_scales_the_capped_h100_by_its_cap(write):
    ms = load_machines(write("m.toml", "[machines.dgx-h100]\npower = 12.0\n"))
    assert ms["dgx-h100-cap"].power == pytest.approx(0.7 * 12.0)   # 8.4 kW: still 70% of the H100's
    assert ms["dgx-h100-cap"].cost == BUILTIN_MACHINES["dgx-h100-cap"].cost


def test_a_derived_machine_that_sets_its_own_numbers_keeps_them(write):
    ms = load_machines(write("m.toml", "[machines.dgx-h100]\ncost = 7.0\npower = 12.0\n"
                                       "[machines.dgx-h100-cap]\ncost = 6.0\n"))
    assert ms["dgx-h100-cap"].cost == 6.0 and ms["dgx-h100-cap"].power == pytest.approx(8.4)


def test_a_file_in_its_own_units_names_them_on_the_numbers_it_sets(write):
    """[units] power = "W": the H100's 10,200 W makes the capped H100's 7,140 W (70%), in W; the A100
    the file leaves alone keeps its kW, so a catalog of both is refused where its units are asked."""
    path = write("m.toml", '[units]\ncost = "EUR/h"\npower = "W"\n'
                           "[machines.dgx-h100]\ncost = 80.0\npower = 10200\n"
                           '[machines.my-box]\nhardware = "a100-80gb"\ngpus = 4\nhbm_gib_per_gpu = 80\n'
                           'cost = 20.0\npower = 3000\nsource = "vendor quote 2025-01"\n')
    ms = load_machines(path)
    h, cap, box, a = ms["dgx-h100"], ms["dgx-h100-cap"], ms["my-box"], ms["dgx-a100"]
    assert (h.cost, h.cost_unit, h.power, h.power_unit) == (80.0, "EUR/h", 10200.0, "W")
    assert (cap.cost, cap.cost_unit, cap.power_unit) == (80.0, "EUR/h", "W")
    assert cap.power == pytest.approx(7140.0)
    assert (box.cost_unit, box.power_unit, box.source) == ("EUR/h", "W", "vendor quote 2025-01")
    assert (a.cost_unit, a.power_unit) == ("USD/h", "kW") and a == BUILTIN_MACHINES["dgx-a100"]
    assert catalog_units([h, cap, box]) == ("EUR/h", "W")
    assert catalog_units({"dgx-a100": a}) == ("USD/h", "kW")
    with pytest.raises(SplitwisePlanError) as err:
        catalog_units(ms)
    assert str(err.value) == ("machines give cost in different units (dgx-a100: USD/h, dgx-h100: EUR/h); "
                              "a machine file that sets [units] cost must set the cost of every machine used")


def test_catalog_units_of_no_machines_are_the_defaults():
    assert catalog_units([]) == ("USD/h", "kW")
    assert catalog_units(BUILTIN_MACHINES) == ("USD/h", "kW")


def test_a_new_machine_with_a_base_takes_what_it_does_not_set(write):
    ms = load_machines(write("m.toml", '[machines.h100-spot]\nbase = "DGX-H100"\ncost = 30.0\n'
                                       'source = "spot price"\n'))
    spot, h = ms["h100-spot"], BUILTIN_MACHINES["dgx-h100"]
    assert (spot.base, spot.cost, spot.power, spot.hardware, spot.gpus) == ("dgx-h100", 30.0, 10.2, "h100-80gb", 8)
    assert (spot.cost_unit, spot.power_unit) == ("USD/h", "kW") and h.cost == pytest.approx(H100_USD)
    assert spot.source == "spot price"


def test_the_machines_command_names_units_and_sources(capsys, write):
    assert main(["machines"]) == 0
    out = capsys.readouterr().out
    assert "cost (USD/h)" in out and "power (kW)" in out
    assert "25.55" in out and "55.04" in out and "7.14" in out and "p5.48xlarge" in out
    path = write("m.toml", '[units]\ncost = "EUR/h"\n[machines.dgx-a100]\ncost = 38.5\n'
                           '[machines.dgx-h100]\ncost = 80\n[machines.dgx-h200]\ncost = 90\n'
                           '[machines.dgx-b200]\ncost = 110\n[machines.mi300x-8]\ncost = 70\n'
                           '[machines.dgx-b300]\ncost = 105\n[machines.gb200-8]\ncost = 100\n'
                           '[machines.l40s-8]\ncost = 40\n')
    assert main(["machines", "--machines-file", str(path)]) == 0
    out = capsys.readouterr().out
    assert "cost (EUR/h)" in out and "38.50" in out and "80.00" in out   # the capped H100 follows: all EUR
    path = write("w.toml", '[units]\npower = "W"\n[machines.dgx-a100]\npower = 6500\n')
    assert main(["machines", "--machines-file", str(path)]) == 0
    out = capsys.readouterr().out
    assert "6,500 W" in out and "10.2 kW" in out and "mixes units" in out


# --- data sheets, the newer machines and short names ---------------------------------------

def test_the_paper_machines_carry_their_gpus_data_sheets():
    sheet = {name: tuple(getattr(m, k) for k in SHEET_KEYS) for name, m in BUILTIN_MACHINES.items()}
    assert sheet["dgx-a100"] == (2.039, 312.0, None, 600.0, None)   # the A100 has no fp8
    assert sheet["dgx-h100"] == (3.35, 989.0, 1979.0, 900.0, None)
    assert sheet["dgx-h100-cap"] == (3.35, 989.0, 1979.0, 900.0, 0.7)
    assert "A100 80GB SXM data sheet" in BUILTIN_MACHINES["dgx-a100"].source
    assert "H100 SXM data sheet" in BUILTIN_MACHINES["dgx-h100"].source
    assert "H100 SXM" in BUILTIN_MACHINES["dgx-h100-cap"].source


@pytest.mark.parametrize("name", sorted(NEW_MACHINES))
def test_the_newer_machines_numbers_units_and_sources(name):
    hw, hbm, kw, sheet = NEW_MACHINES[name]
    m = BUILTIN_MACHINES[name]
    assert (m.hardware, m.gpus, m.hbm_bytes_per_gpu, m.base, m.power_cap) == (hw, 8, hbm, None, None)
    assert (m.hbm_bandwidth_tbps, m.bf16_tflops, m.fp8_tflops, m.interconnect_gbps) == sheet
    assert m.power == pytest.approx(kw) and (m.cost_unit, m.power_unit) == ("USD/h", "kW")
    assert "data sheet" in m.source and "\n" not in m.source
    assert get_machine(name) is m and load_machines(None)[name] == m


def test_the_newer_machines_prices_are_2026_list_prices_or_stated_estimates():
    h100 = BUILTIN_MACHINES["dgx-h100"].cost
    listed = {"dgx-h200": (63.296, "p5en.48xlarge"), "dgx-b200": (113.9328, "p6-b200.48xlarge"),
              "dgx-b300": (142.416, "p6-b300.48xlarge"), "l40s-8": (30.13118, "g6e.48xlarge"),
              "mi300x-8": (48.0, "BM.GPU.MI300X.8")}
    for name, (usd, offer) in listed.items():
        m = BUILTIN_MACHINES[name]
        assert m.cost == usd and offer in m.source and "cost: list price" in m.source, name
    assert "896 GB/s" in BUILTIN_MACHINES["mi300x-8"].source
    assert BUILTIN_MACHINES["dgx-b200"].hbm_of() == 1440 * 10**9   # the DGX B200's 1,440 GB
    assert BUILTIN_MACHINES["gb200-8"].cost == pytest.approx(h100 * (120.0 / 9) / 10.2)   # max-power ratio
    assert "13.33/10.2" in BUILTIN_MACHINES["gb200-8"].source and "an estimate" in BUILTIN_MACHINES["gb200-8"].source


def test_the_gb200_slice_is_a_ninth_of_an_nvl72_rack():
    # 72 GPUs in 18 compute trays of 4: 9 slices of 2 trays; the rack's about 120 kW shared by them
    m = BUILTIN_MACHINES["gb200-8"]
    assert m.power == pytest.approx(120.0 / 9, rel=1e-12) and f"{m.power:.2f}" == "13.33"
    assert m.hbm_bytes_per_gpu == int(13.4e12 / 72 / 1e9) * 10**9   # the NVL72's 13.4 TB over 72 GPUs: 186 GB
    assert "120 kW" in m.source and "/ 9 slices" in m.source and "estimate" in m.source


def test_the_b300_and_l40s_add_up_to_their_data_sheets():
    assert BUILTIN_MACHINES["dgx-b300"].hbm_of() == 2304 * 10**9   # 8 x 288 GB: the DGX B300's 2.3 TB
    assert BUILTIN_MACHINES["dgx-b300"].hbm_bandwidth_tbps * 8 == 62.0   # 62 TB/s in all
    assert BUILTIN_MACHINES["l40s-8"].power == pytest.approx(8 * 0.350 + 4.0)   # 8 x 350 W and 4 kW of host
    l40s = BUILTIN_MACHINES["l40s-8"].source
    assert "350 W" in l40s and "PCIe Gen4" in l40s and "no NVLink" in l40s


def test_a_machine_file_sets_data_sheet_numbers_and_adds_a_machine_with_them(write):
    path = write("m.toml", """
[machines.dgx-a100]
hbm_bandwidth_tbps = 1.935
fp8_tflops = 100
[machines.my-gpu]
hardware = "h100-80gb"
gpus = 4
hbm_gib_per_gpu = 96
cost = 20.0
power = 5.0
hbm_bandwidth_tbps = 4.0
bf16_tflops = 1000
fp8_tflops = 2000
interconnect_gbps = 450
""")
    ms = load_machines(path)
    a, mine = ms["dgx-a100"], ms["my-gpu"]
    assert (a.hbm_bandwidth_tbps, a.bf16_tflops, a.fp8_tflops, a.interconnect_gbps) == (1.935, 312.0, 100.0, 600.0)
    assert (a.cost, a.power) == (pytest.approx(A100_USD, rel=1e-12), 6.5) and a.source == f"machine file {path}"
    assert tuple(getattr(mine, k) for k in SHEET_KEYS) == (4.0, 1000.0, 2000.0, 450.0, None)
    assert isinstance(mine.bf16_tflops, float)
    assert ms["dgx-h100"] == BUILTIN_MACHINES["dgx-h100"]   # the others untouched
    bare = load_machines(write("n.toml", B200))["b200"]   # a machine without a data sheet: unknown
    assert all(getattr(bare, k) is None for k in SHEET_KEYS)


def test_a_capped_variant_of_a_new_gpu_takes_its_bases_sheet_and_a_share_of_its_power(write):
    ms = load_machines(write("m.toml", '[machines.h200-cap]\nbase = "dgx-h200"\npower_cap = 0.7\n'
                                       '[machines.h200-cheap]\nbase = "h200-cap"\ncost = 50.0\n'))
    cap, h200, cheap = ms["h200-cap"], ms["dgx-h200"], ms["h200-cheap"]
    assert (cap.hardware, cap.gpus, cap.hbm_bytes_per_gpu, cap.cost) == (
        h200.hardware, 8, h200.hbm_bytes_per_gpu, h200.cost)
    assert tuple(getattr(cap, k) for k in SHEET_KEYS) == (4.8, 989.0, 1979.0, 900.0, 0.7)
    assert cap.power == pytest.approx(0.7 * 10.2) and cap.power_unit == "kW"
    assert (cheap.power_cap, cheap.power, cheap.cost) == (0.7, cap.power, 50.0)   # a variant of a variant
    assert h200 == BUILTIN_MACHINES["dgx-h200"]


def test_the_capped_h100_follows_the_data_sheet_the_file_gives_its_base(write):
    ms = load_machines(write("m.toml", "[machines.dgx-h100]\nhbm_bandwidth_tbps = 3.9\n"))
    cap = ms["dgx-h100-cap"]
    assert (cap.hbm_bandwidth_tbps, cap.bf16_tflops, cap.power_cap) == (3.9, 989.0, 0.7)
    assert (cap.cost, cap.power) == (BUILTIN_MACHINES["dgx-h100-cap"].cost, 7.14)
    assert cap.source.startswith("data sheet follow dgx-h100 in machine file ")
    own = load_machines(write("n.toml", "[machines.dgx-h100]\nhbm_bandwidth_tbps = 3.9\n"
                                        "[machines.dgx-h100-cap]\nhbm_bandwidth_tbps = 3.0\npower_cap = 0.5\n"))
    assert (own["dgx-h100-cap"].hbm_bandwidth_tbps, own["dgx-h100-cap"].power_cap) == (3.0, 0.5)
    assert own["dgx-h100-cap"].power == pytest.approx(0.5 * 10.2)   # the cap it sets, of its base's power


@pytest.mark.parametrize("key,value,needle", [
    ("hbm_bandwidth_tbps", -1, "hbm_bandwidth_tbps must be positive and finite, got -1"),
    ("bf16_tflops", "989", "bf16_tflops must be a number, got '989'"),
    ("fp8_tflops", float("inf"), "fp8_tflops must be positive and finite, got inf"),
    ("interconnect_gbps", 0, "interconnect_gbps must be positive and finite, got 0"),
    ("power_cap", 1.5, "power_cap must be at most 1, got 1.5"),
    ("power_cap", True, "power_cap must be a number, got True"),
    ("bf16_tflops", 1e9, "bf16_tflops must be at most 1e+07, got 1000000000.0"),
])
def test_a_bad_data_sheet_number_is_one_line_naming_machine_and_field(write, key, value, needle):
    with pytest.raises(SplitwisePlanError) as err:
        Machine("box", "a100-80gb", 8, 80 * GIB, 3.0, 5.0, **{key: value})
    assert str(err.value) == f"machine 'box': {needle}"
    if isinstance(value, str) or value in (float("inf"), True):
        return   # (TOML writes these differently)
    path = write("m.toml", f"[machines.dgx-h200]\n{key} = {value!r}\n")
    with pytest.raises(SplitwisePlanError) as err:
        load_machines(path)
    assert str(err.value) == f"machine file {path}, [machines.dgx-h200]: {needle}" and "\n" not in str(err.value)


@pytest.mark.parametrize("name,machine", [
    ("dgx-h200", "dgx-h200"), ("h200", "dgx-h200"), ("H200", "dgx-h200"), ("h200-141gb", "dgx-h200"),
    ("B200", "dgx-b200"), ("DGX-B200", "dgx-b200"), ("b200-180gb", "dgx-b200"),
    ("MI300X", "mi300x-8"), ("mi300x-192gb", "mi300x-8"), ("MI300X-8", "mi300x-8"),
    ("B300", "dgx-b300"), ("dgx-b300", "dgx-b300"), ("b300-288gb", "dgx-b300"),
    ("GB200", "gb200-8"), ("gb200-8", "gb200-8"), ("GB200-186GB", "gb200-8"),
    ("L40S", "l40s-8"), ("l40s", "l40s-8"), ("l40s-48gb", "l40s-8"),
    ("H100", "dgx-h100"), ("A100", "dgx-a100"), ("H100cap", "dgx-h100-cap"), ("h100-80gb", "dgx-h100"),
    (" h200 ", "dgx-h200"),
])
def test_short_names_resolve_to_the_catalogs_machines(name, machine):
    assert machine_by_name(None, name) is BUILTIN_MACHINES[machine]
    assert machine_by_name(BUILTIN_MACHINES, name) is BUILTIN_MACHINES[machine]
    # a catalog with the short names added holds each machine twice: still that one machine
    assert machine_by_name(with_short_names(BUILTIN_MACHINES), name) is BUILTIN_MACHINES[machine]


@pytest.mark.parametrize("machine, tp, fits", [("L40S", 2, False), ("L40S", 4, True), ("GB200", 1, True),
                                              ("B300", 1, True)])
def test_llama_70b_fits_the_newer_machines_as_their_memory_says(capsys, machine, tp, fits):
    # 141 GB of bf16 weights: not in 2 x 48 GB of L40S, in 4 x 48 GB, in one 186 GB GB200 or 288 GB B300 GPU
    code = main(["profiles", "show", "--model", "llama-3.1-70b", "--machine", machine, "--tp", str(tp)])
    captured = capsys.readouterr()
    assert code == (0 if fits else 2)
    if not fits:
        assert len(captured.err.strip().splitlines()) == 1 and "do not fit" in captured.err


def test_a_machine_files_own_gb200_comes_before_the_slice(write):
    ms = load_machines(write("m.toml", '[machines.gb200]\nbase = "gb200-8"\ncost = 90.0\n'))
    assert machine_by_name(ms, "GB200") is ms["gb200"] and ms["gb200"].cost == 90.0
    assert with_short_names(ms)["gb200"] is ms["gb200"] and machine_by_name(ms, "gb200-186gb") is ms["gb200-8"]


@pytest.mark.parametrize("design, machines", [("B300:L40S", ("dgx-b300", "l40s-8")),
                                               ("baseline:GB200", ("gb200-8",))])
def test_designs_name_the_newer_machines_by_short_name(design, machines):
    catalog = with_short_names(BUILTIN_MACHINES)
    assert tuple(catalog[n].name for n in get_design(design).machines) == machines


def test_a_catalog_name_comes_before_a_short_name(write):
    ms = load_machines(write("m.toml", B200 + '[machines.h200-spot]\nbase = "dgx-h200"\ncost = 40.0\n'))
    assert machine_by_name(ms, "B200") is ms["b200"]              # the file's own b200, not dgx-b200
    assert machine_by_name(ms, "dgx-b200") is ms["dgx-b200"]
    assert machine_by_name(ms, "h200-141gb") is ms["dgx-h200"]    # its variant shares the hardware: the base
    two = {"x": Machine("x", "gpu-1", 8, GIB, 1.0, 1.0), "y": Machine("y", "gpu-1", 8, GIB, 2.0, 1.0)}
    with pytest.raises(SplitwisePlanError, match="machine 'GPU-1' is the hardware of x, y; name one of them"):
        machine_by_name(two, "GPU-1")


@pytest.mark.parametrize("name,needle", [
    ("h300", "unknown machine 'h300'; valid: dgx-a100, dgx-b200, dgx-b300, dgx-h100, dgx-h100-cap, dgx-h200, "
             "gb200-8, l40s-8, mi300x-8 (or a short name: A100, H100, H100cap, H200, B200, B300, GB200, MI300X, "
             "L40S)"),
    ("", "a machine is named by a non-empty string"), (None, "a machine is named by a non-empty string"),
])
def test_an_unknown_short_name_lists_the_valid_ones(name, needle):
    with pytest.raises(SplitwisePlanError) as err:
        machine_by_name(None, name)
    assert needle in str(err.value)
    only = {"dgx-a100": BUILTIN_MACHINES["dgx-a100"]}
    with pytest.raises(SplitwisePlanError, match=r"valid: dgx-a100 \(or a short name: A100\)$"):
        machine_by_name(only, "H200")


def test_the_machines_command_shows_the_data_sheets(capsys):
    assert main(["machines"]) == 0
    out = capsys.readouterr().out
    for text in ("TB/s", "bf16", "fp8", "TFLOPS", "dgx-h200", "dgx-b200", "mi300x-8", "2.039", "4.8", "2,250",
                 "4,500", "1,307", "2,615", "63.3", "14.3", "131.3", "dgx-b300", "gb200-8", "l40s-8", "7.75",
                 "2,500", "5,000", "0.864", "362.05", "733"):
        assert text in out, text
