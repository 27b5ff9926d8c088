"""splitwise-plan: size LLM inference clusters with split prompt and token pools (Splitwise, ISCA 2024)."""

from __future__ import annotations

__version__ = "0.1.0"

from .errors import SplitwisePlanError
from .latency_model import LatencyModel, PhaseCurve
from .machines import BUILTIN_MACHINES, Machine, get_machine, load_machines
from .models import BUILTIN_MODELS, ModelSpec, get_model
from .paths import data_dir, data_file
from .profiles import ProfileAccuracy, ProfileEntry, ProfileSet, load_profiles, profile_accuracy
from .slos import SLO, SLOSet, load_slos, reference_latencies
from .workloads import RequestStream, Workload, load_trace, load_workload, workload_names

__all__ = [
    "__version__",
    "SplitwisePlanError",
    "LatencyModel", "PhaseCurve",
    "Machine", "BUILTIN_MACHINES", "load_machines", "get_machine",
    "ModelSpec", "BUILTIN_MODELS", "get_model",
    "data_dir", "data_file",
    "ProfileSet", "ProfileEntry", "ProfileAccuracy", "load_profiles", "profile_accuracy",
    "SLO", "SLOSet", "load_slos", "reference_latencies",
    "Workload", "RequestStream", "load_workload", "load_trace", "workload_names",
]

# The planner (issue 4): ``from splitwise_plan import plan`` for notebooks.
from .budget import parse_budget  # noqa: E402
from .planner import DesignPlan, PlanRequest, PlanResult, plan  # noqa: E402
from .plan_reports import plan_report, render as render_plan, write_reports  # noqa: E402
from .cluster import SchedulerConfig  # noqa: E402
from .simulator import SimulationResult, Simulator  # noqa: E402

__all__ += ["plan", "PlanRequest", "PlanResult", "DesignPlan", "render_plan", "plan_report", "write_reports",
            "parse_budget",
            "Simulator", "SimulationResult", "SchedulerConfig"]
