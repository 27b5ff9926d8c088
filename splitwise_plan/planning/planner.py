"""The planner: the best machine counts of each design under a goal, confirmed, ranked.

Goals (the paper's section IV-D):

- ``min-cost`` / ``min-power`` at ``rps`` (iso-throughput): per design, the cheapest
  (lowest-power) prompt and token machine counts that meet every SLO;
- ``max-throughput`` within ``budget_cost`` or ``budget_power`` (iso-cost, iso-power):
  per design, the highest rate some machine counts within the budget hold.

Per design: the capacity model and its PuLP ILP prune what cannot work or cannot
win (:mod:`.capacity`), a search finds the optimum with the fast simulator
(:mod:`.search`), and the confirm simulator (the discrete-event oracle by default)
re-checks the answer on the full stream; with ``seeds`` K both run over K streams and a
point's result is its worst; a point that fails confirmation is excluded and the search
moves to the next.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import os
import sys
import time
from concurrent.futures import Future, TimeoutError as FutureTimeout
from dataclasses import dataclass, field, replace

import numpy as np

from splitwise_plan.inputs.budget import parse_budget
from splitwise_plan.inputs.designs import MAX_POOL, pool_size
from splitwise_plan.sim.cluster import SchedulerConfig, instance_layout
from splitwise_plan.inputs.designs import DESIGNS, Design, get_design
from splitwise_plan.inputs.models import get_model
from splitwise_plan.errors import plural
from splitwise_plan.errors import SplitwisePlanError, choices, positive_number, real_number, seed_value, whole_number
from splitwise_plan.inputs.machines import Machine
from splitwise_plan.perf.profiles import ProfileSet
from splitwise_plan.inputs.slos import SLOSet
from splitwise_plan.inputs.workloads import RequestStream, Workload
from splitwise_plan.search.storage import normalize_storage, open_storage
from splitwise_plan.search import STRATEGIES, WAKE_S, Evaluator, Lockstep, Space, capacity_model, passes, search
from splitwise_plan.sim.simulator import FEW_CACHES, METHODS, Simulator, cpu_cores, fluid_available, starting_workers

GOALS = ("min-cost", "min-power", "max-throughput")
ALL_DESIGNS = tuple(d.name for d in DESIGNS.values())
#: The reference's provisioning sweeps at 70 req/s (prompt max, token max); scaled with the rate.
REFERENCE_GRID = {"splitwise-aa": (69, 69), "splitwise-hh": (39, 39), "splitwise-ha": (39, 69),
                  "splitwise-hhcap": (39, 39), "baseline-a100": (139, 0), "baseline-h100": (79, 0)}
REFERENCE_RATE = 70.0


def default_batch(method: str, design: Design) -> int:
    """Points per search round and design: a fluid round (all designs of a kind in lockstep) pays
    ~1 s for the pass plus ~8 ms (Splitwise, failing ones stopped early) or ~50 ms (baseline) per
    point at 70 req/s x 120 s, so mid-size batches; the events oracle pays per point: small ones."""
    if method != "fluid":
        return 4
    return 8 if design.is_baseline else 12


MAX_SEEDS = 1000   # streams a plan takes the worst of: each multiplies its simulations

#: The inputs a plan takes as a file (or, for the workload, a shipped name) or as a loaded object (from a notebook).
IN_MEMORY = {"workload": (Workload, "Workload"), "trace": (RequestStream, "RequestStream"),
             "slos": (SLOSet, "SLOSet"), "machines_file": (dict, "machine catalog (a dict of name: Machine)"),
             "profiles": (ProfileSet, "ProfileSet")}


def input_label(value) -> str | None:
    """How a report and a title name an input: its path (or shipped name), or what an in-memory one is."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict):
        return "<in-memory machine catalog>"
    name = getattr(value, "name", None)
    return f"<in-memory {type(value).__name__}{f' {name}' if name else ''}>"


def in_memory_inputs(req: "PlanRequest") -> list[str]:
    """The options of ``req`` given as loaded objects rather than files."""
    return [k for k in IN_MEMORY if not (getattr(req, k) is None or isinstance(getattr(req, k), str))]


@dataclass(frozen=True)
class PlanRequest:
    """What to plan. Paths are optional user files; None means the shipped defaults. The workload,
    trace, SLOs, machine catalog and profiles may also be objects already loaded (a notebook's
    ``load_trace(...)``, an edited catalog), as :class:`Simulator` takes them.

    The question: ``goal`` (min-cost, min-power at ``rps`` req/s or the ``trace``'s own rate;
    max-throughput within ``budget_power`` or ``budget_cost``, a number in the catalog's units or
    machines such as "40xH100"), ``model`` at ``tp``, ``designs`` (names or short forms, a comma
    list or a sequence), a generated stream (``workload``, ``duration`` seconds, ``seed``; ``seeds``
    K: hold on the worst of K streams) or a ``trace``, the ``slos``, the ``transfer`` of the KV
    cache at ``bandwidth`` GiB/s. How: ``search_method`` and ``confirm_method`` (fluid or events),
    ``strategy``, ``margin`` (hold every SLO below 1 - margin), ``limits`` ((design, prompt max,
    token max), ...), ``jobs`` (0: all cores), ``storage``/``study`` (keep the Optuna trials).
    The command line's options are these, with dashes.
    """

    goal: str | None = None            # None: min-cost, or max-throughput when a budget is given
    rps: float | None = None
    budget_power: float | str | None = None
    budget_cost: float | str | None = None
    model: str = "bloom-176b"
    workload: str | Workload = "coding"
    trace: str | RequestStream | None = None
    slos: str | SLOSet | None = None
    machines_file: str | dict | None = None   # or the catalog itself: {name: Machine}, complete
    profiles: str | ProfileSet | None = None
    designs: tuple[str, ...] = ALL_DESIGNS
    duration: float = 120.0
    seed: int = 0
    seeds: int = 1
    jobs: int = 0                      # 0: all cores (at most one per design)
    tp: int = 8
    search_method: str = "auto"        # auto: fluid when available, else events
    confirm_method: str = "events"
    strategy: str = "frontier"
    batch: int | None = None           # points per search round (default: see default_batch)
    rate_tol: float = 0.5              # max-throughput: rate resolution, req/s
    limits: tuple = ()                 # ((design, prompt max, token max), ...) overriding the grid
    margin: float = 0.0                # the search asks the tightest SLO ratio to stay below 1 - margin
    max_confirm: int = 8               # candidates the confirm simulator may reject before giving up
    storage: str | None = None         # Optuna storage URL (sqlite:///plan.db, postgresql://...); None: in memory
    study: str | None = None           # study name prefix, one study PREFIX/SHORT per design (default: from the inputs)
    transfer: str = "serialized"       # KV-cache transfer: serialized or layerwise (see cluster.TRANSFERS)
    bandwidth: float = 200.0           # its bandwidth between two machines, GiB/s

    @property
    def scheduler(self) -> SchedulerConfig:
        """The scheduling constants of the plan (the reference's, with this KV-cache transfer)."""
        return SchedulerConfig.with_transfer(self.transfer, self.bandwidth)

    def input_files(self) -> dict:
        """The files the plan reads, by option (its SQLite storage among them): what no report of it
        may overwrite."""
        from splitwise_plan.search.storage import sqlite_file
        files = {"--trace": self.trace, "--workload": self.workload, "--slo": self.slos,
                 "--machines-file": self.machines_file, "--profiles": self.profiles}
        return {**{k: v for k, v in files.items() if isinstance(v, str)}, "--storage": sqlite_file(self.storage)}

    def __post_init__(self) -> None:
        if self.goal is None:   # as on the command line
            has_budget = self.budget_power is not None or self.budget_cost is not None
            object.__setattr__(self, "goal", "max-throughput" if has_budget else "min-cost")
        for name in ("goal", "search_method", "confirm_method", "strategy", "transfer"):   # MIN-COST is min-cost
            if isinstance(getattr(self, name), str):
                object.__setattr__(self, name, getattr(self, name).strip().lower())
        object.__setattr__(self, "model", get_model(self.model).name)   # as the profiles spell it
        for name in ("workload", "trace", "slos", "machines_file", "profiles"):   # reports serialize them
            if isinstance(getattr(self, name), os.PathLike):
                object.__setattr__(self, name, os.fspath(getattr(self, name)))
        for name, (kind, what) in IN_MEMORY.items():
            v = getattr(self, name)
            if not (v is None or isinstance(v, (str, kind))) or (
                    isinstance(v, dict) and not all(isinstance(m, Machine) for m in v.values())):
                raise SplitwisePlanError(f"{name} must be a file path or a {what}, got {type(v).__name__} {v!r:.60}")
            if name == "workload" and v is None:
                raise SplitwisePlanError("workload must be a workload name, a trace file or a Workload, got None")
        for name in ("budget_power", "budget_cost"):   # a numpy number is a plain one
            v = getattr(self, name)
            if isinstance(v, numbers.Real) and not isinstance(v, bool) and type(v) not in (int, float):
                object.__setattr__(self, name, float(v))
        if self.goal not in GOALS:
            raise SplitwisePlanError(f"goal {self.goal!r} is unknown; valid: {', '.join(GOALS)}")
        if self.goal == "max-throughput":
            if (self.budget_power is None) == (self.budget_cost is None):
                raise SplitwisePlanError("--goal max-throughput needs exactly one of --budget-power and --budget-cost")
            if self.rps is not None:
                raise SplitwisePlanError("a budget (--budget-power, --budget-cost) asks for the highest rate it "
                                         "holds (goal max-throughput), which finds the rate itself: drop --rps, "
                                         "or the budget to find the cheapest cluster at that rate")
        else:
            if self.budget_power is not None or self.budget_cost is not None:
                raise SplitwisePlanError(f"--goal {self.goal} takes --rps, not a budget (budgets go with max-throughput)")
            if self.rps is None and self.trace is None:
                raise SplitwisePlanError(f"--goal {self.goal} needs --rps (requests per second) or --trace")
            if self.rps is not None and self.trace is not None:
                raise SplitwisePlanError("--trace replays the file at its own rate; give --rps or --trace, not both")
        # numbers as plain Python ones (numpy scalars and numeric strings too): reports serialize them
        for name in ("seeds", "tp", "jobs", "seed", "max_confirm", "batch"):   # "8" as the rate's "70" is
            v = getattr(self, name)
            if isinstance(v, str) and v.strip().lstrip("+-").isdigit():
                object.__setattr__(self, name, int(v))
        fields = {"duration": positive_number(self.duration, "--duration"),
                  "rate_tol": positive_number(self.rate_tol, "rate tolerance"),
                  "seeds": whole_number(self.seeds, "--seeds", 1, MAX_SEEDS), "tp": whole_number(self.tp, "--tp", 1),
                  "jobs": whole_number(self.jobs, "--jobs", 0), "seed": seed_value(self.seed),
                  "max_confirm": whole_number(self.max_confirm, "max_confirm", 1)}
        if self.rps is not None:   # a float whatever its type: study names hash it (20 and 20.0 are one question)
            object.__setattr__(self, "rps", positive_number(self.rps, "--rps"))
        if self.batch is not None:
            fields["batch"] = whole_number(self.batch, "batch", 1)
        fields["margin"] = real_number(self.margin, "margin")
        if not 0 <= fields["margin"] < 1:
            raise SplitwisePlanError(f"margin must be a number in [0, 1), got {self.margin!r}")
        _check_limits(self.limits)
        object.__setattr__(self, "limits", tuple(tuple(x) for x in self.limits))   # hashable, equal however given
        for k, v in fields.items():   # a plain int or float stays as given (study names hash the request)
            if type(getattr(self, k)) not in (int, float):
                object.__setattr__(self, k, v)
        if self.trace is not None:   # (the command line refuses these flags with --trace too)
            default = {f.name: f.default for f in dataclasses.fields(self)}
            shaping = [f"{k}={getattr(self, k)!r}" for k in ("workload", "duration", "seed", "seeds")
                       if getattr(self, k) != default[k]]
            if shaping:
                raise SplitwisePlanError(f"trace replays its stream as it is; {', '.join(shaping)} "
                                         "shape a generated stream only: drop them or the trace")
        if self.search_method not in (*METHODS, "auto"):
            raise SplitwisePlanError(f"search method {self.search_method!r} is unknown; valid: auto, {', '.join(METHODS)}")
        if self.confirm_method not in METHODS:
            raise SplitwisePlanError(f"confirm method {self.confirm_method!r} is unknown; valid: {', '.join(METHODS)}")
        if self.strategy not in STRATEGIES:
            raise SplitwisePlanError(f"search strategy {self.strategy!r} is unknown; valid: {', '.join(STRATEGIES)}")
        sched = SchedulerConfig.with_transfer(self.transfer, self.bandwidth)   # a bad --transfer or --bandwidth: one line
        if type(self.bandwidth) not in (int, float):
            object.__setattr__(self, "bandwidth", sched.bandwidth_gib_s)
        names = parse_designs(self.designs)
        object.__setattr__(self, "designs", names)
        if self.storage is not None or self.study is not None:
            check_storage_request(self)

    @property
    def objective(self) -> str:
        """The machine attribute the goal minimizes (or the budget is on)."""
        if self.goal == "min-power" or (self.goal == "max-throughput" and self.budget_power is not None):
            return "power"
        return "cost"

    def resolved_search_method(self) -> str:
        if self.search_method != "auto":
            return self.search_method
        return "fluid" if fluid_available() else "events"




def check_storage_request(req) -> None:
    """PlanRequest checks of ``storage``/``study``; switches the strategy to optuna with a storage."""
    if req.study is not None and (not str(req.study).strip() or any(c.isspace() for c in str(req.study))):
        raise SplitwisePlanError(f"--study must be a name without spaces, got {req.study!r}")
    if req.storage is None:
        if req.study is not None:
            raise SplitwisePlanError("--study names a study in a --storage; give --storage too")
        return
    url = normalize_storage(req.storage)
    object.__setattr__(req, "storage", url)
    if url is None:
        if req.study is not None:
            raise SplitwisePlanError("--study names a study in a --storage; an in-memory study has no name")
        return
    loaded = in_memory_inputs(req)
    if loaded:   # a stored study is resumed, and its workers rebuild the search, from the files it names
        raise SplitwisePlanError(f"--storage needs the plan's inputs as files; {', '.join(loaded)} "
                                 f"{'is' if len(loaded) == 1 else 'are'} an object in memory here")
    if req.goal == "max-throughput":   # before connecting: a refused request leaves no new database behind
        raise SplitwisePlanError("--storage keeps the (prompt, token) search of --goal min-cost and min-power; "
                                 "max-throughput does not use it")
    if req.strategy == "exhaustive":
        raise SplitwisePlanError("--storage keeps Optuna trials: use --strategy optuna (the default with --storage)")
    open_storage(url)   # a bad storage fails before any simulation
    object.__setattr__(req, "strategy", "optuna")


def parse_designs(designs) -> tuple[str, ...]:
    """Full design names from a comma list or a sequence of names (short forms allowed)."""
    if isinstance(designs, str):
        designs = designs.split(",")
    if designs is None:   # as for the other options: the default
        designs = ALL_DESIGNS
    if isinstance(designs, (bytes, numbers.Number)):
        raise SplitwisePlanError(f"designs must be a comma list or a sequence of design names, got {designs!r}")
    names = []
    for d in designs:
        if not str(d).strip():
            continue
        n = get_design(str(d)).name
        if n not in names:
            names.append(n)
    if not names:
        raise SplitwisePlanError(f"no design given; choose from {choices(ALL_DESIGNS)}")
    return tuple(names)


@dataclass(frozen=True)
class DesignPlan:
    """The planner's answer for one design."""

    design: str
    short: str
    status: str                     # ok | infeasible | unconfirmed
    prompt: int = 0
    token: int = 0
    cost: float = float("nan")
    power: float = float("nan")
    rate: float = float("nan")      # req/s the design holds (the asked rate for iso-throughput)
    result: object | None = field(default=None, repr=False)   # worst confirmed SimulationResult
    bound: float = float("nan")     # ILP lower bound of the objective (upper bound of the rate multiplier)
    evaluations: int = 0            # simulations by the search method
    confirmations: int = 0          # simulations by the confirm method
    grid_size: int = 0
    candidates: int = 0
    seconds: float = field(default=0.0, compare=False)
    note: str = ""
    #: ((rate, SimulationResult), ...): every point the search method simulated (the CSV report's rows)
    evaluated: tuple = field(default=(), repr=False, compare=False)
    #: ((rate, SimulationResult), ...): every point the confirm method checked, held or rejected, in order
    confirmed: tuple = field(default=(), repr=False, compare=False)

    def __eq__(self, other) -> bool:
        """Equal answers (NaN equals NaN here, and the time taken does not count)."""
        if not isinstance(other, DesignPlan):
            return NotImplemented
        mine, theirs = self.to_dict(), other.to_dict()
        mine.pop("seconds"), theirs.pop("seconds")
        return mine == theirs

    __hash__ = None   # a result holds dicts

    @property
    def machines(self) -> int:
        return self.prompt + self.token

    @property
    def headroom(self) -> float:
        """1 - the tightest SLO's value/limit ratio on the worst confirmation stream."""
        if self.result is None or not self.result.tightest:
            return float("nan")
        return 1.0 - float(self.result.tightest["ratio"])

    def to_record(self) -> dict:
        """The whole answer as JSON-able data (its results and evaluated points too): what a stopped
        plan keeps of each finished design (see :func:`from_record`)."""
        from splitwise_plan.search.storage import encode_result
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.name not in ("result", "evaluated", "confirmed")}
        out["result"] = None if self.result is None else encode_result(self.result)
        for name in ("evaluated", "confirmed"):
            out[name] = [[float(rate), encode_result(r)] for rate, r in getattr(self, name)]
        return out

    @classmethod
    def from_record(cls, d: dict) -> "DesignPlan":
        """The inverse of :meth:`to_record` (an error of the ``ValueError``, ``KeyError`` or ``TypeError`` kind
        for data that is not one)."""
        from splitwise_plan.sim.simulator import SimulationResult
        from splitwise_plan.search.storage import decode_result

        def result(x):
            r = decode_result(x)
            if not isinstance(r, SimulationResult):
                raise TypeError("not a simulation result")
            return r
        try:
            vals = dict(d)
            vals["result"] = None if d["result"] is None else result(d["result"])
            vals["evaluated"] = tuple((float(rate), result(r)) for rate, r in d["evaluated"])
            vals["confirmed"] = tuple((float(rate), result(r)) for rate, r in d.get("confirmed", ()))   # (since 2026-12)
            return cls(**vals)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:   # (SplitwisePlanError is a ValueError)
            raise SplitwisePlanError(f"not a record made by DesignPlan.to_record (a report's entry is not one): "
                                     f"{type(exc).__name__}: {exc}") from None

    def to_dict(self, rate_bound: bool = False) -> dict:
        """The answer as the JSON report has it; ``rate_bound``: ``bound`` is a rate (max-throughput: the
        capacity model's upper bound, ``bound_rps``), else the ILP's lower bound on the cost or power."""
        r = self.result
        none = self.machines == 0   # no answer (infeasible, or nothing held): no count, as no cost
        return {"design": self.design, "short": self.short, "status": self.status,
                "prompt_machines": None if none else self.prompt, "token_machines": None if none else self.token,
                "machines": None if none else self.machines, "cost": json_number(round(self.cost, 6)),
                "power": json_number(round(self.power, 6)), "rate_rps": json_number(self.rate), "slo_headroom": json_number(self.headroom),
                "slo_met": None if r is None else bool(r.slo_met),
                "tightest": None if r is None or not r.tightest else {
                    k: (json_number(v) if isinstance(v, float) else v) for k, v in r.tightest.items()},
                "evaluations": self.evaluations, "confirmations": self.confirmations,
                "grid_size": self.grid_size, "candidates": self.candidates,
                "bound": None if rate_bound else json_number(round(self.bound, 6)),
                "bound_rps": json_number(round(self.bound, 6)) if rate_bound else None,
                "seconds": round(self.seconds, 3), "note": self.note,
                "seed": None if r is None else r.seed,   # the stream of ``result`` (the worst of --seeds)
                "result": self.result.to_dict() if self.result is not None else None}


def json_number(v):
    v = float(v)
    return v if math.isfinite(v) else None


@dataclass(frozen=True)
class PlanResult:
    """All designs ranked by the goal, the winner and its gains over the baselines."""

    request: PlanRequest
    designs: tuple[DesignPlan, ...]
    winner: str | None
    gains: tuple[str, ...]
    search_method: str
    seconds: float = field(compare=False)
    #: the report's ``inputs`` block, made as the plan ran (its files then, not as they are later)
    inputs: dict | None = field(default=None, compare=False, repr=False)

    @property
    def trace_s(self) -> float | None:
        """The replayed trace's duration (None: a generated stream, or a result built by hand)."""
        return self.inputs["duration_s"] if self.request.trace is not None and self.inputs is not None else None

    @property
    def budget(self) -> float | None:
        """A max-throughput plan's budget as its machine catalog prices it (None: another goal, or unknown)."""
        return (self.inputs or {}).get("budget", {}).get("amount")

    @property
    def evaluations(self) -> int:
        return sum(d.evaluations for d in self.designs)

    @property
    def confirmations(self) -> int:
        return sum(d.confirmations for d in self.designs)

    @property
    def grid_size(self) -> int:
        return sum(d.grid_size for d in self.designs)

    def get(self, design: str) -> DesignPlan:
        name = get_design(design).name
        for d in self.designs:
            if d.design == name:
                return d
        raise SplitwisePlanError(f"design {name} was not planned")

    def to_dict(self) -> dict:
        r = self.request
        workload, duration, seed = stream_of(r, self.trace_s)
        rate = r.rps if r.rps is not None or r.goal == "max-throughput" else (self.inputs or {}).get("rate_rps")
        return {"goal": r.goal, "rate_rps": None if rate is None else float(rate), "budget_power": r.budget_power,
                "budget_cost": r.budget_cost, "model": r.model, "workload": input_label(workload),
                "trace": input_label(r.trace),
                "duration": float(duration),   # floats however given (20 from Python, 20.0 from the CLI)
                "seed": seed, "seeds": r.seeds if r.trace is None else 1, "tp": r.tp, "strategy": r.strategy,
                "margin": r.margin,
                "search_method": self.search_method,
                "confirm_method": r.confirm_method, "winner": self.winner, "gains": list(self.gains),
                "evaluations": self.evaluations, "confirmations": self.confirmations,
                "grid_size": self.grid_size, "seconds": round(self.seconds, 3),
                "designs": [d.to_dict(rate_bound=r.goal == "max-throughput") for d in self.designs]}


# --- inputs ------------------------------------------------------------------------

@dataclass
class Inputs:
    """Loaded inputs shared by all designs (picklable, sent to joblib workers)."""

    model: str
    tp: int
    profiles: object
    machines: dict
    slos: object
    workload: object | None
    trace: object | None
    duration: float
    scheduler: SchedulerConfig = SchedulerConfig()

    @classmethod
    def load(cls, req: PlanRequest) -> "Inputs":
        from splitwise_plan.inputs.machines import load_machines
        from splitwise_plan.inputs.models import get_model
        from splitwise_plan.perf.profiles import load_profiles
        from splitwise_plan.inputs.slos import load_slos
        from splitwise_plan.inputs.workloads import load_trace, load_workload

        get_model(req.model)

        def loaded(value, load, kind):   # a file (or None: the shipped one), or the object itself
            return value if isinstance(value, kind) else load(value)
        profiles = loaded(req.profiles, load_profiles, ProfileSet)
        # names match in any case (a file's catalog is in lower case already; a dict given in code may not be)
        given = loaded(req.machines_file, load_machines, dict)
        machines = {str(k).lower(): m for k, m in given.items()}
        if len(machines) < len(given):   # as a file's tables are refused
            twice = sorted(k for k in given if sum(str(j).lower() == str(k).lower() for j in given) > 1)
            raise SplitwisePlanError(f"the machine catalog names one machine twice ({', '.join(map(str, twice))}: "
                                     "names are matched in any case); keep one")
        slos = loaded(req.slos, load_slos, SLOSet)
        trace = loaded(req.trace, load_trace, RequestStream) if req.trace is not None else None
        if trace is not None and not len(trace):
            raise SplitwisePlanError(f"trace {input_label(req.trace)} has no requests")
        if trace is not None and req.goal == "max-throughput" and not trace.duration_s > 0:
            raise SplitwisePlanError(f"trace {input_label(req.trace)}: all its requests arrive at one instant, so it "
                                     "has no rate for --goal max-throughput to scale; give a trace that spans time")
        workload = None if trace is not None else loaded(req.workload, load_workload, Workload)
        inp = cls(req.model, int(req.tp), profiles, machines, slos, workload, trace, float(req.duration), req.scheduler)
        for name in req.designs:   # fail early, with one line, on a design the catalog cannot build
            d = get_design(name)
            for m in d.machines:
                if m not in machines:
                    raise SplitwisePlanError(f"{d.name} needs machine {m!r}, which the machine catalog lacks")
        return inp

    def unfit(self, design: str) -> str:
        """Why ``design`` cannot be planned ('' when it can): its machines cannot hold the model's
        weights, or the profiles have no latency curves for their hardware (a user's table without
        the power-capped H100 leaves Splitwise-HHcap out, not the whole plan)."""
        d = get_design(design)
        try:
            for m in d.machines:
                instance_layout(self.machines[m], self.tp, d.is_baseline, get_model(self.model))
                self.profiles.latency_model(self.model, self.machines[m].hardware, self.tp)
        except SplitwisePlanError as exc:
            return str(exc)
        return ""

    def stream(self, rate: float | None, seed: int):
        """The request stream at ``rate`` (a trace is time-scaled to it) with ``seed``."""
        if self.trace is not None:
            tr = self.trace
            return tr if rate is None or abs(rate - tr.rate) < 1e-12 else tr.at_rate(rate)
        from splitwise_plan.inputs.workloads import nonempty
        return nonempty(self.workload.generate(rate, duration_s=self.duration, seed=seed), rate, self.duration, seed)

    def simulator(self, stream, method: str, search: bool = False) -> Simulator:
        """A simulator of the inputs; a ``search`` one stops a design once an SLO can no longer hold
        (only its verdict counts there)."""
        return Simulator(stream, self.model, tensor_parallel=self.tp, profiles=self.profiles,
                         machines=self.machines, slos=self.slos, scheduler=self.scheduler, method=method,
                         stop_early=search)


def key_fn(objective: str, up: dict, tp: dict):
    """Lexicographic key: the objective, then the other one, then fewer machines, then fewer prompt machines."""
    other = "power" if objective == "cost" else "cost"

    def key(p: int, t: int) -> tuple:
        return (round(up[objective] * p + tp[objective] * t, 9), round(up[other] * p + tp[other] * t, 9), p + t, p)
    return key


def pool_units(inputs: Inputs, d: Design) -> tuple[dict, dict]:
    pm = inputs.machines[d.prompt_machine]
    tm = inputs.machines[d.token_machine] if d.token_machine else None
    up = {"cost": pm.cost, "power": pm.power}
    ut = {"cost": tm.cost if tm else 0.0, "power": tm.power if tm else 0.0}
    return up, ut


def _check_limits(limits) -> None:
    """A user error unless ``limits`` is ((design, prompt max, token max), ...) with valid names and counts."""
    try:
        entries = [tuple(x) for x in limits]
    except TypeError:
        entries = None
    if entries is None or any(len(x) != 3 for x in entries):
        raise SplitwisePlanError(f"limits are ((design, prompt max, token max), ...), got {limits!r}")
    for name, p, t in entries:
        get_design(name)
        pool_size(p, f"limits of {name}: prompt max")
        whole_number(t, f"limits of {name}: token max", 0, MAX_POOL)


def grid_limits(req: PlanRequest, d: Design, rate: float) -> tuple[int, int]:
    for name, pmax, tmax in req.limits:
        if get_design(name).name == d.name:
            return int(pmax), (0 if d.is_baseline else int(tmax))
    # a design of the user's own machine types gets the largest shipped design's grid
    pmax, tmax = REFERENCE_GRID.get(d.name, (139, 0) if d.is_baseline else (69, 69))
    f = max(1.0, rate / REFERENCE_RATE)   # the reference's grid, scaled with the rate, within the pool bound
    return min(MAX_POOL, int(math.ceil(pmax * f))), min(MAX_POOL, int(math.ceil(tmax * f)))


class _Pool:
    """Side processes that remember their jobs, so that closing drops the ones still pending
    (confirmations started ahead and no longer needed) instead of awaiting them."""

    def __init__(self, executor) -> None:
        self.executor, self.jobs = executor, []

    def submit(self, fn, *args):
        self.jobs.append(self.executor.submit(fn, *args))
        return self.jobs[-1]

    def close(self, kill: bool = False) -> None:
        """Drop the pending jobs; wait for the running ones, or (``kill``: the caller was stopped) end them."""
        for job in self.jobs:
            job.cancel()
        if kill:
            self.executor.shutdown(wait=True, kill_workers=True)
        else:
            self.executor.shutdown(wait=True)


def _ratio_text(r: float) -> str:
    """An SLO ratio for the notes: three decimals (0.997 read 1.00 rounded to two, like a miss), more
    where three would put it on the wrong side of 1 (a miss at 1.000088 read 1.000, as if it passed)."""
    text = f"{r:.3f}"
    return f"{r:.6f}" if text == "1.000" and r != 1.0 else text


def _point_text(d: Design, pt) -> str:
    """A design point as the notes write it: ``24+5``, or a baseline's machine count."""
    return f"{pt[0]}" if d.is_baseline else f"{pt[0]}+{pt[1]}"


def _seeds(inputs: Inputs, req: PlanRequest) -> list[int]:
    """The seeds of the streams an answer must hold on (a trace is one stream)."""
    return [req.seed] if inputs.trace is not None else list(range(req.seed, req.seed + req.seeds))


def _severity(r) -> tuple:
    """How badly a result misses: a failing one first, then by its tightest SLO ratio."""
    return not r.slo_met, _ratio(r)


def _worst(results_by_seed: list) -> list:
    """Per point, its worst result over the streams."""
    return [max(rs, key=_severity) for rs in zip(*results_by_seed)]


class _OverSeeds:
    """The search's simulator on every seed's stream, a point's result its worst: so the search
    asks what confirmation will (with ``seeds`` K, the worst of K streams), and its answer is not
    a point that holds on the first stream only (which confirmation then rejects, and the next,
    until the design is given up)."""

    def __init__(self, inputs: Inputs, req: PlanRequest, method: str, first: Simulator, rate=None) -> None:
        seeds = _seeds(inputs, req)
        rate = req.rps if rate is None else rate   # max-throughput searches at rates of its own
        self.sims = [first] + [inputs.simulator(inputs.stream(rate, s), method, search=True) for s in seeds[1:]]
        self.tags = [None] if inputs.trace is not None else seeds   # each result's stream (a trace has no seed)

    def run_points(self, points) -> list:
        return _worst([[replace(r, seed=k) for r in s.run_points(points)] for k, s in zip(self.tags, self.sims)])

    def run_many(self, design: str, points) -> list:
        return _worst([[replace(r, seed=k) for r in s.run_many(design, points)] for k, s in zip(self.tags, self.sims)])


def _confirm_sim(inputs: Inputs, req: PlanRequest, rate, seed: int) -> Simulator:
    """The confirm method's simulator on one stream at ``rate``."""
    return inputs.simulator(inputs.stream(rate, seed), req.confirm_method)


def _confirm_run(inputs: Inputs, req: PlanRequest, design: str, pt, rate, seed: int):
    """One confirmation simulation (a picklable task for another process)."""
    return _confirm_sim(inputs, req, rate, seed).run(design, *pt)


class _Confirmer:
    """Runs the confirm method over ``seeds`` streams at one rate and keeps the worst result; a
    point holds when every stream passes with the request's margin, as in the search.

    With a process ``pool`` (and the ``lockstep`` its search runs in) each simulation runs
    there, while the other designs' searches go on here.
    """

    def __init__(self, inputs: Inputs, req: PlanRequest, search_method: str, pool=None, lockstep=None,
                 search_over_seeds: bool = False) -> None:
        self.inputs, self.req, self.search_method = inputs, req, search_method
        self.pool, self.lockstep = pool, lockstep
        self.search_over_seeds = search_over_seeds   # a search result is then the worst over all the seeds
        self.threshold = 1.0 - req.margin
        self._sims: dict = {}
        self._jobs: dict = {}        # (design, point, rate, seed) -> Future of the pool
        self.runs = 0
        self.history: list = []      # ((rate, worst SimulationResult), ...): every point confirmed, in order

    def confirmed(self, rate: float | None = None) -> tuple:
        """:attr:`history` for a :class:`DesignPlan`: a trace's rate (None here) as ``rate``, the plan's."""
        return tuple((float(rate if r is None else r), res) for r, res in self.history)

    def _sim(self, rate, seed):
        k = (rate, seed)
        if k not in self._sims:
            self._sims[k] = _confirm_sim(self.inputs, self.req, rate, seed)
        return self._sims[k]

    def _submit(self, design: str, pt, rate, seed: int):
        key = (design, tuple(pt), rate, seed)
        if key not in self._jobs:
            self._jobs[key] = self.pool.submit(_confirm_run, self.inputs, self.req, design, pt, rate, seed)
        return self._jobs[key]

    def prefetch(self, design: str, pt, rate) -> None:
        """Start confirming ``pt`` in the pool (on the first stream) before it is asked for."""
        if self.pool is not None and self.req.confirm_method != self.search_method:
            self._submit(design, pt, rate, self.req.seed)

    def searches_done(self) -> bool:
        """Has every other design's search in this process ended (so confirmations started ahead slow none)?"""
        if self.lockstep is None:
            return True
        with self.lockstep.away():
            return self.lockstep.idle()

    def __call__(self, design: str, pt, rate, search_result=None):
        """(all seeds pass?, worst SimulationResult, simulations run)."""
        req = self.req
        if search_result is not None and req.confirm_method == self.search_method and self.search_over_seeds:
            # the search ran these simulations (on the first stream alone when there is one)
            worst = _on_stream(search_result, _first_stream(self.inputs, req))
            self.history.append((rate, worst))
            return passes(search_result, self.threshold), worst, 0
        results, runs = [], 0
        trace = self.inputs.trace is not None
        for s in _seeds(self.inputs, req):
            if (s == req.seed and search_result is not None and req.confirm_method == self.search_method):
                results.append(replace(search_result, seed=None if trace else s))   # the search ran it already
                continue
            if self.pool is not None:
                key = (design, tuple(pt), rate, s)
                job = self._submit(*key)
                with self.lockstep.away():   # the other searches go on meanwhile
                    if self.lockstep.idle() and job.cancel():   # not started, and nothing else runs here
                        job = self._jobs[key] = Future()
                        job.set_result(self._sim(rate, s).run(design, *pt))
                    results.append(job.result())
            else:
                results.append(self._sim(rate, s).run(design, *pt))
            results[-1] = replace(results[-1], seed=None if trace else s)
            runs += 1
            if not passes(results[-1], self.threshold):
                break
        self.runs += runs
        worst = max(results, key=_severity)
        self.history.append((rate, worst))
        return all(passes(r, self.threshold) for r in results), worst, runs

    def lookahead(self, ev: Evaluator, space: Space, design: str, rate, excluded: list, best, depth: int,
                  batch: int) -> None:
        """Prefetch the confirmations of the ``depth`` points the search would return next, should
        ``best`` (then each next one) fail confirmation, as far as they need no new simulation."""
        if self.pool is None:
            return
        dry = Evaluator(run=_no_simulation, threshold=ev.threshold)
        dry.cache = ev.cache          # read only: a new point ends the look-ahead before it is stored
        out = list(excluded) + [best]
        for _ in range(depth):
            try:
                nxt = search(dry, space, "frontier", exclude=out, batch=batch).best
            except _NeedsSimulation:
                return
            if nxt is None:
                return
            self.prefetch(design, nxt, rate)
            out.append(nxt)


class _NeedsSimulation(Exception):
    pass


def _no_simulation(points):
    raise _NeedsSimulation


# --- iso-throughput ------------------------------------------------------------------

def _plan_iso(inputs: Inputs, req: PlanRequest, design: str, method: str, lockstep: Lockstep | None = None,
              pool=None, sim: Simulator | None = None) -> DesignPlan:
    """The best machine counts of ``design`` at the goal's rate: search, then confirm.

    In a ``lockstep`` the search's simulations run batched with other designs' (see
    :func:`_plan_group`); a ``pool`` then runs its confirmations. ``sim``: the search's
    simulator at the goal's rate, if the caller has one.
    """
    t0 = time.perf_counter()
    d = get_design(design)
    rate = req.rps if req.rps is not None else inputs.trace.rate
    if sim is None:
        sim = inputs.simulator(inputs.stream(req.rps, req.seed), method, search=True)
    cm = capacity_model(sim, d)
    p_max, t_max = grid_limits(req, d, rate)
    up, ut = pool_units(inputs, d)
    key = key_fn(req.objective, up, ut)
    ps = np.arange(1, p_max + 1)
    space = Space((1, p_max), (0, 0) if d.is_baseline else (1, t_max), key,
                  t_min=cm.min_token(ps, t_max if not d.is_baseline else 0))
    bound = cm.ilp_bound(req.objective, p_max=p_max, t_max=None if d.is_baseline else t_max)
    batch = req.batch or default_batch(method, d)
    jobs = max(1, req.jobs if req.jobs > 0 else 1)
    # the search's simulations cover every seed's stream, but with a storage (whose workers
    # simulate the first stream's trials for any request)
    over_seeds = req.storage is None
    streams = len(_seeds(inputs, req)) if over_seeds else 1   # simulations a search point costs
    if lockstep is not None:
        ev = Evaluator(run=lockstep.client(d.name), threshold=1.0 - req.margin)
    elif over_seeds and len(_seeds(inputs, req)) > 1:
        seeds = _OverSeeds(inputs, req, method, sim)
        ev = Evaluator(run=lambda pts: seeds.run_many(d.name, pts), threshold=1.0 - req.margin)
    else:
        ev = Evaluator(sim, d.name, method, jobs=jobs, threshold=1.0 - req.margin)
    confirm = _Confirmer(inputs, req, method, pool, lockstep, search_over_seeds=over_seeds)
    excluded: list = []
    rejected: list = []   # "p+t (search ratio -> confirm ratio)"
    base = dict(design=d.name, short=d.short, rate=float(rate), bound=bound.value, grid_size=space.size,
                candidates=space.candidates())
    opts = {"batch": batch}
    if req.strategy == "optuna":
        opts.update(seed=req.seed)
    if req.storage is not None:   # trials kept in an Optuna storage: one study per (question, design)
        from splitwise_plan.planning.stored import search_options
        opts.update(search_options(req, d, method, space, (up, ut), rate, batch))
    if pool is not None and req.strategy == "frontier":
        def on_round(best, probes):
            """A round short of points is likely the last: confirm the best so far meanwhile."""
            if best is not None and len(probes) < batch:
                confirm.prefetch(d.name, best, req.rps)
        opts["on_round"] = on_round
    while True:
        sr = search(ev, space, req.strategy, exclude=excluded, **opts)
        if sr.best is None:
            note = (f"no design within {p_max} machines meets the SLOs" if d.is_baseline else
                    f"no design within {p_max} prompt x {t_max} token machines meets the SLOs")
            note += (f" with the {req.margin:.0%} margin" if req.margin > 0 else "") + _too_big(sim, d)
            if excluded:
                note += f" (confirmation rejected {', '.join(_point_text(d, pt) for pt in excluded)})"
            status = "unconfirmed" if excluded else "infeasible"
            return DesignPlan(status=status, evaluations=ev.evaluations * streams, confirmations=confirm.runs,
                              confirmed=confirm.confirmed(rate), seconds=time.perf_counter() - t0, note=note,
                              evaluated=_evaluated(ev, rate, _first_stream(inputs, req)), **base)
        if req.strategy == "frontier" and cpu_cores() > 2:
            # with a core to spare: should this one fail, the search's next answer is already
            # being confirmed (on two cores both are busy, and the guess only slows the searches)
            confirm.lookahead(ev, space, d.name, req.rps, excluded, sr.best, 1, batch)
        ok, worst, _ = confirm(d.name, sr.best, req.rps, ev.cache.get(sr.best))
        if ok:
            p, t = sr.best
            note = f"rejected by confirmation: {', '.join(rejected)}" if rejected else ""
            if d.is_baseline and req.confirm_method != method:
                # One pool: the confirm simulator may hold with fewer machines than the search's;
                # gallop down (steps 1, 1, 2, 4, ...), then bisect, so the answer is the confirm
                # simulator's optimum.
                p_lb = int(np.argmax(space.lower() == 0)) + 1    # the capacity model's lower bound
                lo_p = max([p_lb - 1] + [q for q, _ in excluded if q < p])   # known to fail at or below
                step, refined = 1, p
                while refined - lo_p > 1:
                    q = max(lo_p + 1, refined - step)
                    ok2, worst2, _ = confirm(d.name, (q, 0), req.rps)
                    if not ok2:
                        lo_p = q
                        break
                    # one machine at a time first (the search is rarely off by more), then doubling
                    refined, worst, step = q, worst2, (step * 2 if refined < p else step)
                while refined - lo_p > 1:
                    q = (refined + lo_p) // 2
                    ok2, worst2, _ = confirm(d.name, (q, 0), req.rps)
                    if ok2:
                        refined, worst = q, worst2
                    else:
                        lo_p = q
                if refined < p:
                    note = (note + "; " if note else "") + (
                        f"the confirm simulator holds with {refined} machines (search: {p})")
                    p = refined
            elif req.confirm_method != method:
                (p2, t2), worst = _descend(confirm, d.name, (p, t), worst, key, space, excluded, req.rps, ev.cache,
                                           _far_tries(sim, d), probe=ev)
                if (p2, t2) != (p, t):
                    note = (note + "; " if note else "") + (
                        f"the confirm simulator holds with {p2}+{t2} (search: {p}+{t})")
                    p, t = p2, t2
            return DesignPlan(status="ok", prompt=p, token=t, cost=worst.cost, power=worst.power, result=worst,
                              evaluations=ev.evaluations * streams, confirmations=confirm.runs,
                              confirmed=confirm.confirmed(rate), seconds=time.perf_counter() - t0, note=note,
                              evaluated=_evaluated(ev, rate, _first_stream(inputs, req)), **base)
        excluded.append(sr.best)
        point = _point_text(d, sr.best)
        rejected.append(f"{point} ({_ratio_text(_ratio(ev.cache.get(sr.best)))} -> {_ratio_text(_ratio(worst))})")
        if len(excluded) >= req.max_confirm:
            return DesignPlan(status="unconfirmed", prompt=sr.best[0], token=sr.best[1], cost=worst.cost,
                              power=worst.power, result=worst, evaluations=ev.evaluations * streams,
                              confirmations=confirm.runs, confirmed=confirm.confirmed(rate),
                              seconds=time.perf_counter() - t0,
                              note=f"all {len(excluded)} candidates failed confirmation: {', '.join(rejected)}",
                              evaluated=_evaluated(ev, rate, _first_stream(inputs, req)), **base)


def _too_big(sim: Simulator, d: Design) -> str:
    """Why no design of ``d`` can finish every request, if some need more KV cache than any of its
    instances holds beside the weights ('' otherwise)."""
    c = sim.cluster(d, 1, 0 if d.is_baseline else 1)
    free = c.kv_room
    s = sim.stream
    n = int(np.count_nonzero((s.prompt_tokens + s.output_tokens) * float(c.model.kv_bytes_per_token) > free))
    return (f": {plural(n, 'request')} need{'s' if n == 1 else ''} more KV cache than an instance "
            f"holds beside the weights ({free / 1e9:.3g} GB), so never finish{'es' if n == 1 else ''}") if n else ""


# The fluid model's tightest SLO ratio runs up to ~1.28x the discrete-event oracle's near the Splitwise
# frontiers (bench_simulator.py: Splitwise-AA 76+8 at 100 req/s of coding, 1.22 against 0.95): a
# point the search failed by less than this much may well hold
_FLUID_SLACK = 1.3
# Where a token instance holds few requests' KV caches (simulator.FEW_CACHES), the fluid model can read
# 2-3x the oracle's, and a cheaper design that holds would stay hidden (Llama2-70B at TP2, 60 s at 70 req/s
# of coding: the search answers Splitwise-HA 8+6 and fails 7+6, which the oracle holds). There a descent
# also confirms the neighbours the search failed by more, until _FAR_TRIES of them have failed (elsewhere
# such neighbours fail in the oracle too: they would only cost time)
_FAR_TRIES = 4


def _far_tries(sim: Simulator, d: Design) -> int:
    """Oracle runs a descent of ``d`` may lose on neighbours the search failed far off (see _FAR_TRIES)."""
    return _FAR_TRIES if sim.caches_per_token_instance(d) < FEW_CACHES else 0


def _descend(confirm, design: str, pt, worst, key, space: Space, known_fail, rate, searched: dict,
             far_tries: int = 0, probe=None):
    """From a confirmed Splitwise answer, move to a neighbour better by the objective (one machine
    fewer in a pool, or one moved to the cheaper pool) while the confirm simulator holds there.

    Near the frontier the fluid search errs both ways, so better neighbours are confirmed, best
    first, but none below a point the confirm simulator failed: those the search simulated to
    the end and failed by less than ``_FLUID_SLACK`` (``searched``: its results), and the
    others until ``far_tries`` of them have failed confirmation, those the search came closest on
    first (``probe(points)`` adds the search's results of points it never simulated to ``searched``).
    Returns (point, its worst result)."""
    failed = set(map(tuple, known_fail))   # points the confirm simulator failed: so do those with fewer machines
    lower = space.lower()
    (p_lo, p_hi), (_, t_hi) = space.p_range, space.t_range

    def allowed(n) -> bool:
        """May ``n`` be confirmed: a near miss of the search, or another while the far budget lasts?"""
        return far_tries > 0 or _near_miss(searched.get(n))

    while True:
        p, t = pt
        here = key(p, t)[0]
        # and one machine moved to the dearer pool for as few of the cheaper pool's as make it better
        # (Llama2-70B at TP2, Splitwise-HA: the search answered 6+11, the oracle holds 7+6, 12% cheaper)
        trades = [next(((p + 1, t - k) for k in range(2, t) if key(p + 1, t - k)[0] < here), None),
                  next(((p - k, t + 1) for k in range(2, p) if key(p - k, t + 1)[0] < here), None)]
        better = [n for n in ((p - 1, t), (p, t - 1), (p - 1, t + 1), (p + 1, t - 1), *filter(None, trades))
                  if p_lo <= n[0] <= p_hi and lower[n[0] - p_lo] <= n[1] <= t_hi
                  and key(*n)[0] < here and allowed(n)
                  and not any(f[0] >= n[0] and f[1] >= n[1] for f in failed)]
        unseen = [n for n in better if n not in searched]
        if far_tries > 0 and probe is not None and unseen:
            probe(unseen)   # the search's verdicts rank them (one pass)
        # the search's near misses first, best first; then the others, the search's closest first
        better.sort(key=lambda n: (0, key(*n)) if _near_miss(searched.get(n))
                    else (1, _closeness(searched.get(n)), key(*n)))
        if confirm.searches_done():   # the first here, the others side by side in the pool (if any)
            for n in better[1:]:
                confirm.prefetch(design, n, rate)
        for n in better:   # a point that holds is better than those tried before: never a candidate again
            if not allowed(n):   # the far budget ran out in this step
                continue
            ok, w, _ = confirm(design, n, rate)
            if ok:
                pt, worst = n, w
                break
            failed.add(n)
            far_tries -= not _near_miss(searched.get(n))
        else:
            return pt, worst


def _closeness(r) -> tuple:
    """How near the search came to passing ``r``: by its tightest SLO ratio, or, stopped by the
    verdict, by how many requests it ran first (more is nearer); unsearched last."""
    if r is None:
        return (2, 0.0)
    return (1, -float(r.completed)) if r.stopped_early else (0, _ratio(r))


def _near_miss(r) -> bool:
    """Did the search simulate the point to the end and fail it by less than ``_FLUID_SLACK``?"""
    return r is not None and not r.stopped_early and _ratio(r) < _FLUID_SLACK


def _ratio(r) -> float:
    return float(r.tightest.get("ratio", math.inf)) if r is not None and r.tightest else math.inf


# --- iso-cost / iso-power: max throughput ---------------------------------------------

_TRIES_PER_RATE = 2   # budget points the confirm simulator may reject at one rate before it counts as failed


def budget_points(inputs: Inputs, d: Design, kind: str, budget: float, p_max: int, t_max: int) -> list:
    """The maximal (prompt, token) counts within the budget (every other point is dominated)."""
    up, ut = pool_units(inputs, d)
    pts = []
    eps = 1e-9 * max(1.0, budget)
    if d.is_baseline:
        n = min(p_max, int(math.floor((budget + eps) / up[kind])))
        return [(n, 0)] if n >= 1 else []
    for p in range(1, p_max + 1):
        rest = budget - p * up[kind] + eps
        if rest < ut[kind]:
            break
        pts.append((p, min(t_max, int(math.floor(rest / ut[kind])))))
    # drop points dominated by another point within the budget
    return [pt for pt in pts if not any(q != pt and q[0] >= pt[0] and q[1] >= pt[1] for q in pts)]


def _plan_budget(inputs: Inputs, req: PlanRequest, design: str, method: str) -> DesignPlan:
    t0 = time.perf_counter()
    d = get_design(design)
    kind = req.objective
    budget = parse_budget(req.budget_power if kind == "power" else req.budget_cost, kind, inputs.machines)
    up, ut = pool_units(inputs, d)
    p_max = int(math.floor(budget / up[kind] + 1e-9))
    t_max = 0 if d.is_baseline else int(math.floor((budget - up[kind]) / ut[kind] + 1e-9))
    pts = budget_points(inputs, d, kind, budget, max(p_max, 0), max(t_max, 0))
    base = dict(design=d.name, short=d.short, grid_size=len(pts))
    if not pts:
        return DesignPlan(status="infeasible", note=f"the budget of {budget:g} buys no complete {d.name}",
                          seconds=time.perf_counter() - t0, **base)
    nominal = req.rps or (inputs.trace.rate if inputs.trace is not None else REFERENCE_RATE)
    sim0 = inputs.simulator(inputs.stream(nominal, req.seed), method, search=True)
    cm0 = capacity_model(sim0, d)
    ilp = cm0.ilp_bound(kind, p_max=p_max, t_max=None if d.is_baseline else t_max,
                        budget=(kind, budget), maximize_scale=True)
    r_hi = ilp.scale * sim0.stream.rate * cm0.max_load if ilp.feasible else 0.0
    batch = req.batch or default_batch(method, d)
    tol = req.rate_tol
    streams = len(_seeds(inputs, req))   # simulations a search point costs
    evals = 0
    threshold = 1.0 - req.margin
    cache: dict = {}   # rate -> (evaluator, passing points)
    prefer: list = []

    def check(rate: float):
        """Passing budget points at ``rate`` with the search method: stop at the first passing batch."""
        nonlocal evals
        sim = inputs.simulator(inputs.stream(rate, req.seed), method, search=True)
        cm = capacity_model(sim, d)
        arr = np.asarray(pts)
        ok = cm.feasible(arr[:, 0], arr[:, 1])
        head = cm.max_scale(arr[:, 0], arr[:, 1], hi=8.0, iters=20)
        order = [i for i in np.argsort(-head, kind="stable") if ok[i]]
        cand = [pts[i] for i in order]
        cand = [p for p in prefer if p in cand] + [p for p in cand if p not in prefer]
        if streams > 1:   # each point's worst over the seeds' streams, as confirmation asks
            seeds = _OverSeeds(inputs, req, method, sim, rate)
            ev = Evaluator(run=lambda pts: seeds.run_many(d.name, pts), threshold=threshold)
        else:
            ev = Evaluator(sim, d.name, method, jobs=max(1, req.jobs if req.jobs > 0 else 1), threshold=threshold)
        passing = []
        for k in range(0, len(cand), batch):
            res = ev(cand[k:k + batch])
            passing += [pt for pt, r in zip(cand[k:k + batch], res) if ev.ok(r)]
            if passing:
                break
        evals += ev.evaluations * streams
        cache[rate] = (ev, passing, cand)
        return passing

    lo_k, hi_k = 0, max(1, int(math.ceil(r_hi / tol)))
    while hi_k - lo_k > 1:
        mid = (lo_k + hi_k) // 2
        passing = check(mid * tol)
        if passing:
            lo_k = mid
            prefer = passing
        else:
            hi_k = mid
    confirm = _Confirmer(inputs, req, method, search_over_seeds=True)

    refused: dict = {}          # rate step -> points the confirm simulator rejected there

    def best_at(k: int):
        """The budget point with the most headroom at rate k * tol (search method) that the confirm
        simulator has not rejected, or None: a passing one, or where the search passes none the
        nearest to passing, since the confirm simulator may hold more than the search's."""
        nonlocal evals
        rate = k * tol
        if rate not in cache:
            check(rate)
        ev, _, cand = cache[rate]
        rest = [p for p in cand if p not in ev.cache]
        if rest:   # see every candidate at this rate to pick the one with most headroom
            ev(rest)
            evals += len(rest) * streams
        ranked = sorted((p for p in cand if p not in refused.get(k, ())),
                        key=lambda p: _ratio(ev.cache[p]))
        return (ranked[0], ev.cache[ranked[0]]) if ranked else (None, None)

    def refuse(k: int, pt) -> bool:
        """Record a rejected point; True once the rate has had its tries (then it counts as failed):
        the search method's second choice at a rate often holds where its first did not."""
        refused.setdefault(k, set()).add(pt)
        if k <= lo_k:   # above the search's highest rate, a failure is the oracle's limit, not a rejection
            rejected.append(f"{k * tol:g} req/s {_point_text(d, pt)}")
        return len(refused[k]) >= _TRIES_PER_RATE

    # The confirm simulator may hold less than the search simulator: gallop down from the
    # search's rate until a confirmation passes, then bisect up between the two. A rate
    # fails once the confirm simulator has rejected _TRIES_PER_RATE designs there.
    attempts, step = 0, 1
    good = None                 # (k, point, worst result)
    bad_k = lo_k + 1 if lo_k > 0 else 0
    k = lo_k
    rejected: list = []

    def attempt(k: int) -> str:
        """Confirm the best point left at rate step k: "held" (then ``good`` is it), "empty" (no
        point left there), "failed" (the rate's tries are spent) or "again" (rejected; another may hold)."""
        nonlocal good, attempts
        pt, res = best_at(k)
        if pt is None:
            return "empty"
        ok, worst, _ = confirm(d.name, pt, k * tol, res)
        attempts += 1
        if ok:
            good = (k, pt, worst)
            return "held"
        return "failed" if refuse(k, pt) else "again"

    while k > 0 and attempts < req.max_confirm:
        outcome = attempt(k)
        if outcome == "held":
            break
        if outcome == "empty":
            bad_k, k = k, k - 1
        elif outcome == "failed":
            bad_k, k, step = k, max(0, k - step), step * 2
    if good is not None and good[0] == lo_k:
        # the search's highest rate holds: gallop up with the confirm simulator (steps 1, 2, 4, ...)
        # until a rate fails, so that the answer is its optimum and not the search's (the baselines'
        # TBT P90 sits within a few percent of its limit over a wide range of rates)
        step, bad_k = 1, None
        while bad_k is None and attempts < req.max_confirm:
            k = good[0] + step
            outcome = attempt(k)
            if outcome == "held":
                step *= 2
            elif outcome != "again":
                bad_k = k
        if bad_k is None:   # out of confirmations: the highest rate held is the answer
            bad_k = good[0] + 1
    # between the highest rate held and the lowest failed, bisect to the rate resolution: a few steps
    # of at most _TRIES_PER_RATE confirmations each, whatever the gallops spent (max_confirm bounds those)
    while good is not None and bad_k - good[0] > 1:
        k = (good[0] + bad_k) // 2
        if attempt(k) in ("empty", "failed"):
            bad_k = k
    if good is not None:
        k, pt, worst = good
        notes = [f"search rate {lo_k * tol:g} req/s"] if rejected or k != lo_k else []
        if rejected:
            notes.append(f"confirmation rejected {', '.join(rejected)}")
        if k > lo_k:
            notes.append(f"the confirm simulator holds {k * tol:g} and fails {bad_k * tol:g} req/s")
        note = "; ".join(notes)
        return DesignPlan(status="ok", prompt=pt[0], token=pt[1], cost=worst.cost, power=worst.power,
                          rate=float(k * tol), result=worst, bound=r_hi, evaluations=evals,
                          confirmations=confirm.runs, confirmed=confirm.confirmed(), candidates=len(pts),
                          seconds=time.perf_counter() - t0, note=note,
                          evaluated=_evaluated_budget(cache, _first_stream(inputs, req)), **base)
    return DesignPlan(status="unconfirmed" if rejected else "infeasible", bound=r_hi, evaluations=evals,
                      confirmations=confirm.runs, confirmed=confirm.confirmed(), candidates=len(pts),
                      seconds=time.perf_counter() - t0,
                      note=(f"no confirmed rate within the budget; rejected {', '.join(rejected)}" if rejected else
                            f"holds no rate >= {tol:g} req/s within the budget"),
                      evaluated=_evaluated_budget(cache, _first_stream(inputs, req)), **base)


# --- ranking and gains ------------------------------------------------------------------

def _rank_key(goal: str):
    def key(dp: DesignPlan):
        if dp.status != "ok":
            return (1, 0.0, 0.0)
        if goal == "min-cost":
            return (0, dp.cost, dp.power)
        if goal == "min-power":
            return (0, dp.power, dp.cost)
        return (0, -dp.rate, dp.cost)
    return key


def _pct(new: float, old: float, what: str) -> str:
    if not (old > 0 and math.isfinite(new)):
        return f"{what} n/a"
    ch = (new - old) / old
    if abs(ch) < 0.005:
        return f"the same {what}"
    return f"{abs(ch) * 100:.0f}% {'lower' if ch < 0 else 'higher'} {what}"


def gain_text(winner: DesignPlan, other: DesignPlan, goal: str) -> str:
    """The winner against another design, in the paper's terms."""
    if goal == "max-throughput":
        thr = winner.rate / other.rate if other.rate > 0 else math.inf
        head = "the same throughput" if abs(thr - 1.0) < 0.005 else f"{thr:.2f}x throughput"
    else:
        head = "same throughput"
    first, second = ("power", "cost") if goal == "min-power" else ("cost", "power")
    return (f"{winner.design} vs {other.design}: {head} at {_pct(getattr(winner, first), getattr(other, first), first)}"
            f" and {_pct(getattr(winner, second), getattr(other, second), second)}")


def _gains(designs: tuple[DesignPlan, ...], winner: DesignPlan | None, goal: str) -> tuple[str, ...]:
    if winner is None:
        return ()
    out = []
    for dp in designs:
        if dp.status == "ok" and dp is not winner and get_design(dp.design).is_baseline:
            out.append(gain_text(winner, dp, goal))
    return tuple(out)


# --- the API -------------------------------------------------------------------------

def _plan_one(inputs: Inputs, req: PlanRequest, design: str, method: str) -> DesignPlan:
    if req.goal == "max-throughput":
        return _plan_budget(inputs, req, design, method)
    return _plan_iso(inputs, req, design, method)


def _awaited(get, timed_out: type):
    """``get(timeout=...)`` (a queue's or a future's) retried until it answers: a wait with no timeout in
    the main thread missed a Ctrl-C that another thread received (one of the search threads, say) until
    the wait ended, seconds later; one that wakes every ``WAKE_S`` lets Python run the handler."""
    while True:
        try:
            return get(timeout=WAKE_S)
        except timed_out:
            pass


def _plan_group(inputs: Inputs, req: PlanRequest, designs, method: str, pool=None, on_design=None) -> list:
    """Plan designs of one kind (Splitwise or baseline) together: one search thread per design,
    their simulations batched a round at a time (:class:`Lockstep`), so the fluid simulator's
    per-request loop runs once a round for all of them. ``pool`` runs the confirmations."""
    import queue
    import threading

    sim = inputs.simulator(inputs.stream(req.rps, req.seed), method, search=True)
    lockstep = Lockstep(_OverSeeds(inputs, req, method, sim).run_points)
    done: queue.Queue = queue.Queue()

    def work(name):
        try:
            done.put(_plan_iso(inputs, req, name, method, lockstep, pool, sim))
        except BaseException as exc:   # reported in the calling thread
            done.put(exc)
        finally:
            lockstep.leave()

    threads = [threading.Thread(target=work, args=(n,), daemon=True) for n in designs]
    for _ in threads:
        lockstep.enter()
    for th in threads:
        th.start()
    plans, error = [], None
    try:
        for _ in threads:
            p = _awaited(done.get, queue.Empty)
            if isinstance(p, BaseException):
                error = error or p
                continue
            plans.append(p)
            if on_design is not None:
                on_design(p)
    except BaseException:   # Ctrl-C here: the search threads stop at their next simulation round
        lockstep.stop()
        raise
    for th in threads:
        th.join()
    if error is not None:
        raise error
    return plans


# heavier designs first, so parallel workers finish together
_WORK_ORDER = ("splitwise-aa", "splitwise-ha", "splitwise-hhcap", "splitwise-hh", "baseline-a100", "baseline-h100")


def _keeps_optuna_logging(fn):
    """``fn`` quiets Optuna's line per trial while it runs; its caller's Optuna logging is as it was after."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        optuna = sys.modules.get("optuna")
        level = optuna.logging.get_verbosity() if optuna is not None else None
        try:
            return fn(*args, **kwargs)
        finally:
            optuna = sys.modules.get("optuna")
            if optuna is not None:   # (imported by the plan itself: Optuna's own default)
                optuna.logging.set_verbosity(optuna.logging.INFO if level is None else level)
    return run


@_keeps_optuna_logging
def plan(request: PlanRequest | None = None, /, *, on_design=None, done=None, **kwargs) -> PlanResult:
    """Plan every requested design under the goal; see :class:`PlanRequest` for the options.

    ``plan(goal="min-cost", rps=70)`` or ``plan(PlanRequest(...))``. ``on_design(DesignPlan)``,
    if given, is called in the calling process as each design finishes (for progress bars).
    ``done`` ({design name: DesignPlan}) holds designs already planned for the same request (a
    stopped run's), taken as they are: a design's answer does not depend on the others planned.
    """
    t0 = time.perf_counter()
    if request is not None and not isinstance(request, PlanRequest):
        raise SplitwisePlanError(f"plan() takes a PlanRequest or keyword options (goal=..., rps=...), got {request!r}")
    unknown = sorted(set(kwargs) - {f.name for f in dataclasses.fields(PlanRequest)})
    if unknown:
        raise SplitwisePlanError(f"plan() has no option {', '.join(unknown)}; see PlanRequest for the options")
    if on_design is not None and not callable(on_design):   # else a TypeError after the first design's work
        raise SplitwisePlanError(f"on_design must be a function of a DesignPlan, got {on_design!r}")
    if done is not None and not isinstance(done, dict):
        raise SplitwisePlanError(f"done must map design names to their DesignPlan, got {type(done).__name__}")
    done = {get_design(str(n)).name: p for n, p in (done or {}).items()}   # short names too (HH)
    if not all(isinstance(p, DesignPlan) and p.design == n for n, p in done.items()):
        raise SplitwisePlanError("done must map design names to their DesignPlan, as plan() made them")
    req = request if request is not None else PlanRequest(**kwargs)
    if request is not None and kwargs:
        req = replace(request, **kwargs)
    method = req.resolved_search_method()
    inputs = Inputs.load(req)
    if req.goal == "max-throughput":   # check the budget once, before any work
        spec = req.budget_power if req.objective == "power" else req.budget_cost
        budget = parse_budget(spec, req.objective, inputs.machines)
        unit = min(getattr(inputs.machines[m], req.objective) for n in req.designs for m in get_design(n).machines)
        if budget / unit > 2 * MAX_POOL:
            raise SplitwisePlanError(f"--budget-{req.objective} {spec} buys {budget / unit:,.4g} machines; "
                                     f"a plan holds at most {MAX_POOL:,} a pool")
        # the least complete cluster of each design: one machine, or one prompt and one token machine
        least = {n: sum(getattr(inputs.machines[m], req.objective) for m in get_design(n).machines)
                 for n in req.designs}
        cheapest = min(least, key=least.get)
        if budget < least[cheapest] * (1.0 - 1e-9):   # nothing to plan: the budget, not the SLOs
            raise SplitwisePlanError(f"--budget-{req.objective} {spec} buys no complete design: the least is "
                                     f"{cheapest}'s at {least[cheapest]:g}")
    by_name = {}

    def collect(p):
        by_name[p.design] = p
        if on_design is not None:
            on_design(p)

    unfit = {n: why for n in req.designs if (why := inputs.unfit(n))}
    if len(unfit) == len(req.designs):   # nothing to plan: the inputs are wrong, not the SLOs too tight
        raise SplitwisePlanError("no design given can hold the model: " + "; ".join(unfit.values()))
    for n, why in unfit.items():   # a design whose machines cannot hold the model: nothing to search
        collect(DesignPlan(design=n, short=get_design(n).short, status="infeasible", note=why))
    for n in req.designs:
        if n in done and n not in unfit:
            _check_done(done[n], req, inputs)
            collect(done[n])
    order = sorted((n for n in req.designs if n not in unfit and n not in done),
                   key=lambda n: _WORK_ORDER.index(n) if n in _WORK_ORDER else 99)
    jobs = req.jobs if req.jobs > 0 else cpu_cores()
    jobs = min(jobs, len(order))

    if method == "fluid" and req.goal != "max-throughput" and req.storage is None:
        # designs of a kind share each fluid round; with two or more cores the baselines run in
        # a second process meanwhile, and the Splitwise confirmations in a third
        groups = [g for g in ([n for n in order if not get_design(n).is_baseline],
                              [n for n in order if get_design(n).is_baseline]) if g]
        sub = replace(req, jobs=1)
        if jobs > 1 and len(groups) == 2:
            from joblib.externals.loky import ProcessPoolExecutor   # a fresh process, as joblib's workers

            with starting_workers():   # (the executor's queues start loky's resource trackers)
                pool = _Pool(ProcessPoolExecutor(2))
                other = pool.submit(_plan_group, inputs, sub, groups[1], method)
            try:
                _plan_group(inputs, sub, groups[0], method, pool, collect)
                for p in _awaited(other.result, FutureTimeout):
                    collect(p)
            except BaseException:   # Ctrl-C (a notebook's interrupt too): the side process stops now
                if other.done() and not other.cancelled() and other.exception() is None:
                    for p in other.result():   # its designs, finished before the stop, are kept
                        collect(p)
                pool.close(kill=True)
                raise
            pool.close()
        else:
            for g in groups:
                _plan_group(inputs, sub, g, method, None, collect)
    elif jobs > 1:
        from joblib import Parallel, delayed
        sub = replace(req, jobs=1)
        try:   # results as each design finishes (joblib >= 1.4), so on_design reports progress
            par = Parallel(n_jobs=jobs, prefer="processes", batch_size=1, return_as="generator_unordered")
        except (TypeError, ValueError):
            par = Parallel(n_jobs=jobs, prefer="processes", batch_size=1, return_as="generator")
        with starting_workers():   # (a generator: the call starts them and returns)
            designs = par(delayed(_plan_one)(inputs, sub, n, method) for n in order)
        for p in designs:
            collect(p)
    else:
        for n in order:
            collect(_plan_one(inputs, req, n, method))
    ranked = tuple(sorted((by_name[n] for n in req.designs), key=_rank_key(req.goal)))
    winner = ranked[0] if ranked and ranked[0].status == "ok" else None
    return PlanResult(req, ranked, winner.design if winner else None, _gains(ranked, winner, req.goal),
                      method, time.perf_counter() - t0, inputs=inputs_block(req, inputs, method))


def _check_done(p: DesignPlan, req: PlanRequest, inputs: Inputs) -> None:
    """Refuse a design planned for another request than ``req`` (another rate or model): it would stand
    in this plan's report as this request's answer, and might win it. What it records is checked; the
    checkpoint of the command line also compares the inputs' contents."""
    r = p.result
    if r is not None and getattr(r, "model", req.model) != req.model:
        raise SplitwisePlanError(f"done[{p.short!r}] was planned for model {r.model}, not this plan's {req.model}")
    if req.goal != "max-throughput" and p.status == "ok":
        rate = req.rps if req.rps is not None else inputs.trace.rate
        if not math.isclose(p.rate, rate, rel_tol=1e-9):
            raise SplitwisePlanError(f"done[{p.short!r}] was planned at {p.rate:g} req/s, not this plan's {rate:g}")


# --- the streams and inputs a plan ran on (its results and reports name them) ----------------

def _evaluated(ev: Evaluator, rate: float, seed: int | None) -> tuple:
    """The points an evaluator simulated, as ((rate, SimulationResult), ...) in (prompt, token) order, each
    result naming its stream (``seed``, None for a trace, where the search ran on one stream only)."""
    return tuple((float(rate), _on_stream(r, seed)) for _, r in sorted(ev.cache.items()))


def _on_stream(r, seed: int | None):
    """``r`` naming the stream it ran on: ``seed`` unless it names one already (the worst of several)."""
    return r if r.seed is not None or seed is None else replace(r, seed=seed)


def _first_stream(inputs: Inputs, req: PlanRequest) -> int | None:
    """The seed of a plan's first stream (None: a trace)."""
    return None if inputs.trace is not None else req.seed


def _evaluated_budget(cache: dict, seed: int | None) -> tuple:
    """The points of every rate the max-throughput search tried (``cache``: rate -> (evaluator, ...)), on
    the stream of ``seed``."""
    return tuple(row for rate in sorted(cache) for row in _evaluated(cache[rate][0], rate, seed))


def stream_of(req: PlanRequest, trace_s: float | None = None) -> tuple:
    """(workload, duration in seconds, seed) of the stream a plan ran on: a replayed trace has no
    workload and no seed, and lasts as long as it does (``trace_s``, else read from the file)."""
    if req.trace is not None:
        if trace_s is None:
            from splitwise_plan.inputs.workloads import load_trace
            trace_s = (req.trace if isinstance(req.trace, RequestStream) else load_trace(req.trace)).duration_s
        return None, trace_s, None
    return req.workload, req.duration, req.seed


def inputs_block(req: PlanRequest, inputs: Inputs, search_method: str) -> dict:
    """The ``inputs`` block of a plan of ``req`` on the loaded ``inputs``."""
    from splitwise_plan.inputs.summary import report_inputs as _inputs

    if inputs.trace is not None:
        tr = inputs.trace
        rate, duration, seed, requests, workload = tr.rate, tr.duration_s, None, len(tr), None
    else:
        rate, duration, seed, workload = req.rps, req.duration, req.seed, req.workload
        # one stream's count; over several seeds each result has its own (and its seed)
        requests = len(inputs.stream(req.rps, req.seed)) if req.rps is not None and req.seeds == 1 else None
    extra = {}
    if req.goal == "max-throughput":   # the budget as the catalog prices it (40xH100: 40 of its H100 machines)
        spec = req.budget_power if req.objective == "power" else req.budget_cost
        amount = parse_budget(spec, req.objective, inputs.machines)
        extra["budget"] = {"objective": req.objective, "amount": round(amount, 9)}
    return _inputs(model=req.model, tensor_parallel=req.tp, workload=input_label(workload),
                   trace=input_label(req.trace), rate=rate, duration_s=duration, seed=seed, requests=requests,
                   slo_file=input_label(req.slos), slos=inputs.slos, machines_file=input_label(req.machines_file),
                   machines=inputs.machines, profiles_file=input_label(req.profiles), method=search_method,
                   confirm_method=req.confirm_method,
                   goal=req.goal, budget_power=req.budget_power, budget_cost=req.budget_cost,
                   designs=list(req.designs), seeds=1 if req.trace is not None else req.seeds, strategy=req.strategy,
                   margin=req.margin, kv_transfer=req.scheduler.kv_transfer(), **extra)

