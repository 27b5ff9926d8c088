"""splitwise-plan: size LLM inference clusters with split prompt and token pools (Splitwise, ISCA 2024).

The public API is imported on first use (``from splitwise_plan import plan`` works as usual), so the
command starts, and answers a Ctrl-C, before numpy and pandas are loaded.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

# each public name and the module that defines it
_EXPORTS = {
    "errors": ("SplitwisePlanError",),
    "inputs.machines": ("Machine", "BUILTIN_MACHINES", "load_machines", "get_machine"),
    "inputs.models": ("ModelSpec", "BUILTIN_MODELS", "get_model"),
    "inputs.paths": ("data_dir", "data_file"),
    "inputs.slos": ("SLO", "SLOSet", "load_slos"),
    "inputs.workloads": ("Workload", "RequestStream", "load_workload", "load_trace", "workload_names"),
    "inputs.budget": ("parse_budget",),
    "inputs.serving_bench": ("ServingBenchmark", "read_serving_benchmark"),
    "perf.latency_model": ("LatencyModel", "PhaseCurve", "reference_latencies"),
    "perf.profiles": ("ProfileSet", "ProfileEntry", "ProfileAccuracy", "load_profiles", "profile_accuracy"),
    "sim.cluster": ("SchedulerConfig",),
    "sim.simulator": ("Simulator", "SimulationResult"),
    "planning.planner": ("plan",),
    "planning.request": ("PlanRequest",),
    "planning.result": ("PlanResult", "DesignPlan"),
    "planning.calibrate": ("Calibration", "calibrate"),
    "report.plan": ("render_plan", "plan_report", "write_reports"),
}
_RENAMED = {"render_plan": "render"}   # exported under another name than its module's
_HOME = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = ["__version__", *_HOME]


def __getattr__(name: str):
    """Import a public name's module on first use (PEP 562)."""
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), _RENAMED.get(name, name))
    globals()[name] = value   # later lookups find it directly
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:   # what static tools and IDEs see: the same names, imported eagerly
    from splitwise_plan.errors import SplitwisePlanError
    from splitwise_plan.inputs.budget import parse_budget
    from splitwise_plan.inputs.machines import BUILTIN_MACHINES, Machine, get_machine, load_machines
    from splitwise_plan.inputs.models import BUILTIN_MODELS, ModelSpec, get_model
    from splitwise_plan.inputs.paths import data_dir, data_file
    from splitwise_plan.inputs.serving_bench import ServingBenchmark, read_serving_benchmark
    from splitwise_plan.inputs.slos import SLO, SLOSet, load_slos
    from splitwise_plan.inputs.workloads import RequestStream, Workload, load_trace, load_workload, workload_names
    from splitwise_plan.perf.latency_model import LatencyModel, PhaseCurve, reference_latencies
    from splitwise_plan.perf.profiles import ProfileAccuracy, ProfileEntry, ProfileSet, load_profiles, profile_accuracy
    from splitwise_plan.planning.calibrate import Calibration, calibrate
    from splitwise_plan.planning.planner import plan
    from splitwise_plan.planning.request import PlanRequest
    from splitwise_plan.planning.result import DesignPlan, PlanResult
    from splitwise_plan.report.plan import plan_report, write_reports
    from splitwise_plan.report.plan import render as render_plan
    from splitwise_plan.sim.cluster import SchedulerConfig
    from splitwise_plan.sim.simulator import SimulationResult, Simulator
