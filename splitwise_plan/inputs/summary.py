"""The inputs of a run as its reports give them: model, stream, SLOs, machine catalog, profiles, method.

One function, :func:`report_inputs`, shared by every command's report and by the planner's result,
so the ``inputs`` block reads alike everywhere.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from splitwise_plan.inputs.machines import is_short_name


def report_inputs(*, model: str, tensor_parallel: int | str, workload: str | None = None,
                  trace: str | Path | None = None, rate: float | None = None,
                  duration_s: float | None = None, seed: int | None = None, requests: int | None = None,
                  slo_file: str | Path | None = None, slos=None, machines_file: str | Path | None = None,
                  machines: Mapping | None = None, profiles_file: str | Path | None = None,
                  method: str | None = None, **extra) -> dict:
    """The inputs block of a report: everything the results depend on."""
    doc = {
        # 8; "4:2" (the prompt pool's, the token pool's) or "auto" (each design's own: see its results)
        "model": model, "tensor_parallel": tensor_parallel if isinstance(tensor_parallel, str) else int(tensor_parallel),
        "workload": workload, "trace": str(trace) if trace is not None else None,
        # numbers of one type whoever calls (the API's plain 70 is the command line's 70.0)
        "rate_rps": None if rate is None else float(rate),
        "duration_s": None if duration_s is None else float(duration_s), "seed": seed, "requests": requests,
        "slo_file": str(slo_file) if slo_file is not None else None,
        "machines_file": str(machines_file) if machines_file is not None else None,
        "profiles_file": str(profiles_file) if profiles_file is not None else None,
        "method": method,
    }
    if slos is not None:
        doc["slos"] = {"name": slos.name, "reference_hardware": slos.reference_hardware,
                       "reference_tensor_parallel": slos.reference_tensor_parallel,
                       "objectives": [{"metric": s.metric, "percentile": s.percentile,
                                       "limit": s.limit, "unit": s.unit} for s in slos]}
    if machines is not None:
        doc["machine_catalog"] = {
            name: {"hardware": m.hardware, "gpus": m.gpus, "hbm_bytes_per_gpu": m.hbm_bytes_per_gpu,
                   "cost": m.cost, "power": m.power, "cost_unit": _unit(m, "cost"), "power_unit": _unit(m, "power")}
            for name, m in machines.items() if not is_short_name(name, m)}
    doc.update(extra)
    return doc


def _unit(machine, key: str) -> str:
    """The unit of a machine's ``cost`` or ``power``."""
    return getattr(machine, f"{key}_unit", None) or {"cost": "USD/h", "power": "kW"}[key]
