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
    "latency_model": ("LatencyModel", "PhaseCurve"),
    "machines": ("Machine", "BUILTIN_MACHINES", "load_machines", "get_machine"),
    "models": ("ModelSpec", "BUILTIN_MODELS", "get_model"),
    "paths": ("data_dir", "data_file"),
    "profiles": ("ProfileSet", "ProfileEntry", "ProfileAccuracy", "load_profiles", "profile_accuracy"),
    "slos": ("SLO", "SLOSet", "load_slos", "reference_latencies"),
    "workloads": ("Workload", "RequestStream", "load_workload", "load_trace", "workload_names"),
    # the planner (issue 4): ``from splitwise_plan import plan`` for notebooks
    "planner": ("plan", "PlanRequest", "PlanResult", "DesignPlan"),
    "plan_reports": ("render_plan", "plan_report", "write_reports"),
    "budget": ("parse_budget",),
    "simulator": ("Simulator", "SimulationResult"),
    "cluster": ("SchedulerConfig",),
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
    from .budget import parse_budget
    from .cluster import SchedulerConfig
    from .errors import SplitwisePlanError
    from .latency_model import LatencyModel, PhaseCurve
    from .machines import BUILTIN_MACHINES, Machine, get_machine, load_machines
    from .models import BUILTIN_MODELS, ModelSpec, get_model
    from .paths import data_dir, data_file
    from .plan_reports import plan_report, render as render_plan, write_reports
    from .planner import DesignPlan, PlanRequest, PlanResult, plan
    from .profiles import ProfileAccuracy, ProfileEntry, ProfileSet, load_profiles, profile_accuracy
    from .simulator import SimulationResult, Simulator
    from .slos import SLO, SLOSet, load_slos, reference_latencies
    from .workloads import RequestStream, Workload, load_trace, load_workload, workload_names
