"""What a plan asks and what it reads: the request (:class:`PlanRequest`, whose options are checked as
it is made, a storage's among them), the designs it names (:func:`parse_designs`), and the inputs loaded
once for all its designs (:class:`Inputs`: profiles, machines, SLOs, the stream or the trace). Also how a
report names an input (:func:`input_label`) and the stream a plan ran on (:func:`stream_of`).
"""

from __future__ import annotations

import dataclasses
import numbers
import os
from dataclasses import dataclass, field

from splitwise_plan.errors import (
    SplitwisePlanError,
    choices,
    input_name,
    positive_number,
    real_number,
    seed_value,
    whole_number,
)
from splitwise_plan.inputs.designs import DESIGNS, MAX_POOL, Design, get_design, parse_tp, pool_size
from splitwise_plan.inputs.machines import Machine, with_short_names
from splitwise_plan.inputs.models import BUILTIN_MODELS, get_model
from splitwise_plan.inputs.slos import SLOSet
from splitwise_plan.inputs.workloads import RequestStream, Workload
from splitwise_plan.perf.profiles import ProfileSet
from splitwise_plan.perf.sources import sourced_latency
from splitwise_plan.planning.options import default
from splitwise_plan.search import STRATEGIES
from splitwise_plan.search.storage import normalize_storage, open_storage
from splitwise_plan.sim.cluster import SchedulerConfig, instance_layout
from splitwise_plan.sim.simulator import METHODS, Simulator, fluid_available

GOALS = ("min-cost", "min-power", "max-throughput")
ALL_DESIGNS = tuple(d.name for d in DESIGNS.values())


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

    # the defaults of the options the command line shares live in planning/options.py, with their help
    goal: str | None = default("goal")      # None: min-cost, or max-throughput when a budget is given
    rps: float | None = default("rps")
    budget_power: float | str | None = default("budget_power")
    budget_cost: float | str | None = default("budget_cost")
    model: str = default("model")
    dtype: str | None = default("dtype")       # the weights' precision (None: the model's own)
    stack: str | None = default("stack")       # serving stack of estimated latencies (None: the shipped default)
    workload: str | Workload = default("workload")
    trace: str | RequestStream | None = default("trace")
    slos: str | SLOSet | None = default("slos")
    machines_file: str | dict | None = default("machines_file")   # or the catalog itself: {name: Machine}, complete
    profiles: str | ProfileSet | None = default("profiles")
    designs: tuple[str, ...] = default("designs")   # a comma list or a sequence; made a tuple of names
    duration: float = default("duration")
    seed: int = default("seed")
    seeds: int = default("seeds")
    jobs: int = default("jobs")             # 0: all cores (at most one per design)
    tp: int = default("tp")
    search_method: str = default("search_method")   # auto: fluid when available, else events
    confirm_method: str = default("confirm_method")
    strategy: str = default("strategy")
    batch: int | None = None           # points per search round (default: see default_batch)
    rate_tol: float = 0.5              # max-throughput: rate resolution, req/s
    limits: tuple = ()                 # ((design, prompt max, token max), ...) overriding the grid
    margin: float = default("margin")  # the search asks the tightest SLO ratio to stay below 1 - margin
    headroom: float = default("headroom")            # hold the SLOs at rps x (1 + headroom)
    latency_error: float | None = default("latency_error")   # the sureness check's band (None: each source's)
    max_confirm: int = 8               # candidates the confirm simulator may reject before giving up
    storage: str | None = default("storage")   # Optuna storage URL (sqlite:///plan.db, postgresql://...); None: in memory
    study: str | None = default("study")       # study name prefix, one study PREFIX/SHORT per design
    transfer: str = default("transfer")        # KV-cache transfer: serialized or layerwise (see cluster.TRANSFERS)
    bandwidth: float = default("bandwidth")    # its bandwidth between two machines, GiB/s

    @property
    def scheduler(self) -> SchedulerConfig:
        """The scheduling constants of the plan (the reference's, with this KV-cache transfer)."""
        return SchedulerConfig.with_transfer(self.transfer, self.bandwidth)

    def input_files(self) -> dict:
        """The files the plan reads, by option (its SQLite storage among them): what no report of it
        may overwrite."""
        from splitwise_plan.search.storage import sqlite_file
        files = {name: getattr(self, name) for name in ("trace", "workload", "slos", "machines_file", "profiles",
                                                         "stack")}
        return {**{input_name(k): v for k, v in files.items() if isinstance(v, str)},
                input_name("storage"): sqlite_file(self.storage)}

    def __post_init__(self) -> None:
        if self.goal is None:   # as on the command line
            has_budget = self.budget_power is not None or self.budget_cost is not None
            object.__setattr__(self, "goal", "max-throughput" if has_budget else "min-cost")
        for name in ("goal", "search_method", "confirm_method", "strategy", "transfer"):   # MIN-COST is min-cost
            if isinstance(getattr(self, name), str):
                object.__setattr__(self, name, getattr(self, name).strip().lower())
        spec = get_model(self.model, dtype=self.dtype)   # (a bad config.json or dtype fails here, in one line)
        builtin = isinstance(self.model, str) and spec.name in BUILTIN_MODELS and not os.path.exists(self.model)
        object.__setattr__(self, "model", spec.name if builtin else os.fspath(self.model))   # a name as the profiles spell it
        if self.dtype is not None:
            object.__setattr__(self, "dtype", spec.dtype)
        object.__setattr__(self, "tp", request_tp(self.tp, spec))
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
                raise SplitwisePlanError(f"{input_name('goal')} max-throughput needs exactly one of "
                                         f"{input_name('budget_power')} and {input_name('budget_cost')}")
            if self.rps is not None:
                raise SplitwisePlanError(f"a budget ({input_name('budget_power')}, {input_name('budget_cost')}) asks "
                                         "for the highest rate it holds (goal max-throughput), which finds the rate "
                                         f"itself: drop {input_name('rps')}, "
                                         "or the budget to find the cheapest cluster at that rate")
        else:
            if self.budget_power is not None or self.budget_cost is not None:
                raise SplitwisePlanError(f"{input_name('goal')} {self.goal} takes {input_name('rps')}, not a budget "
                                         "(budgets go with max-throughput)")
            if self.rps is None and self.trace is None:
                raise SplitwisePlanError(f"{input_name('goal')} {self.goal} needs {input_name('rps')} (requests per "
                                         f"second) or {input_name('trace')}")
            if self.rps is not None and self.trace is not None:
                raise SplitwisePlanError(f"{input_name('trace')} replays the file at its own rate; give "
                                         f"{input_name('rps')} or {input_name('trace')}, not both")
        # numbers as plain Python ones (numpy scalars and numeric strings too): reports serialize them
        for name in ("seeds", "jobs", "seed", "max_confirm", "batch"):   # "8" as the rate's "70" is
            v = getattr(self, name)
            if isinstance(v, str) and v.strip().lstrip("+-").isdigit():
                object.__setattr__(self, name, int(v))
        fields = {"duration": positive_number(self.duration, input_name("duration")),
                  "rate_tol": positive_number(self.rate_tol, "rate tolerance"),
                  "seeds": whole_number(self.seeds, input_name("seeds"), 1, MAX_SEEDS),
                  "jobs": whole_number(self.jobs, input_name("jobs"), 0), "seed": seed_value(self.seed, input_name("seed")),
                  "max_confirm": whole_number(self.max_confirm, "max_confirm", 1)}
        if self.rps is not None:   # a float whatever its type: study names hash it (20 and 20.0 are one question)
            object.__setattr__(self, "rps", positive_number(self.rps, input_name("rps")))
        if self.batch is not None:
            fields["batch"] = whole_number(self.batch, "batch", 1)
        fields["margin"] = real_number(self.margin, "margin")
        if not 0 <= fields["margin"] < 1:
            raise SplitwisePlanError(f"margin must be a number in [0, 1), got {self.margin!r}")
        self._check_headroom(fields)
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

    def _check_headroom(self, fields: dict) -> None:
        """``headroom`` and ``latency_error``: numbers from 0 (a trace or a budget takes no load headroom)."""
        fields["headroom"] = real_number(self.headroom, input_name("headroom"))
        if not 0 <= fields["headroom"] <= 10:
            raise SplitwisePlanError(f"{input_name('headroom')} must be a number from 0 to 10 (0.2: 20% more load), "
                                     f"got {self.headroom!r}")
        if fields["headroom"] and (self.rps is None or self.goal == "max-throughput"):
            raise SplitwisePlanError(f"{input_name('headroom')} raises the rate of {input_name('rps')}: a trace plays at "
                                     "its own rate and max-throughput finds its limit; drop it")
        if self.latency_error is not None:
            fields["latency_error"] = real_number(self.latency_error, input_name("latency_error"))
            if not 0 <= fields["latency_error"] <= 10:
                raise SplitwisePlanError(f"{input_name('latency_error')} must be a number from 0 to 10 (0.2: 20% slower), "
                                         f"got {self.latency_error!r}")

    @property
    def planned_rps(self) -> float | None:
        """The rate every SLO is held at: ``rps`` with its load headroom."""
        return None if self.rps is None else self.rps * (1.0 + self.headroom)

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
        raise SplitwisePlanError(f"{input_name('study')} must be a name without spaces, got {req.study!r}")
    if req.storage is None:
        if req.study is not None:
            raise SplitwisePlanError(f"{input_name('study')} names a study in a {input_name('storage')}; give "
                                     f"{input_name('storage')} too")
        return
    url = normalize_storage(req.storage)
    object.__setattr__(req, "storage", url)
    if url is None:
        if req.study is not None:
            raise SplitwisePlanError(f"{input_name('study')} names a study in a {input_name('storage')}; an "
                                     "in-memory study has no name")
        return
    loaded = in_memory_inputs(req)
    if loaded:   # a stored study is resumed, and its workers rebuild the search, from the files it names
        raise SplitwisePlanError(f"{input_name('storage')} needs the plan's inputs as files; {', '.join(loaded)} "
                                 f"{'is' if len(loaded) == 1 else 'are'} an object in memory here")
    if req.goal == "max-throughput":   # before connecting: a refused request leaves no new database behind
        raise SplitwisePlanError(f"{input_name('storage')} keeps the (prompt, token) search of {input_name('goal')} "
                                 "min-cost and min-power; "
                                 "max-throughput does not use it")
    if req.strategy == "exhaustive":
        raise SplitwisePlanError(f"{input_name('storage')} keeps Optuna trials: use {input_name('strategy')} optuna "
                                 f"(the default with {input_name('storage')})")
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


#: The models the paper planned: their default tensor parallelism is its TP8 (every other model's: auto).
PAPER_MODELS = ("bloom-176b", "llama2-70b")
AUTO = "auto"


def request_tp(value, model) -> int | str:
    """A plan's tensor parallelism: 8 (every pool), "4:2" (the prompt pool's, the token pool's) or "auto" (the planner
    chooses); None: 8 for the paper's models, auto for the others. A one-line user error otherwise."""
    if value is None:
        return 8 if model.name in PAPER_MODELS else AUTO
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return AUTO
    pair = parse_tp(value, input_name("tp"))
    return pair[0] if pair[0] == pair[1] else f"{pair[0]}:{pair[1]}"


# --- the loaded inputs ---------------------------------------------------------------

@dataclass
class Inputs:
    """Loaded inputs shared by all designs (picklable, sent to joblib workers). ``profiles`` hold the
    analytic estimate of the model on each GPU the designs use that no profile measured (see
    :func:`~splitwise_plan.perf.sources.with_estimates`)."""

    model: object   # ModelSpec
    tp: int | str   # 8, "4:2" (each pool's) or "auto" (each design's own TPs: see planning/tp.py)
    profiles: object
    machines: dict
    slos: object
    workload: object | None
    trace: object | None
    duration: float
    scheduler: SchedulerConfig = SchedulerConfig()
    stack: object = None   # the serving stack of estimated latencies
    stack_why: str = ""    # why ``--stack auto`` chose it ('' where the request named it)
    #: {design: the goal's value its answer must beat}: under ``--tp auto``, a TP pair's design's best answer
    ceilings: dict = field(default_factory=dict)
    #: {GPU: (prompt, decode)}: each phase's latencies that much slower (a sureness check: planning/sureness.py)
    slower: dict = field(default_factory=dict)

    @classmethod
    def load(cls, req: PlanRequest) -> "Inputs":
        from splitwise_plan.inputs.machines import load_machines
        from splitwise_plan.inputs.slos import load_slos
        from splitwise_plan.inputs.workloads import load_trace, load_workload
        from splitwise_plan.perf.profiles import load_profiles
        from splitwise_plan.perf.sources import for_requests, resolve_stack
        model = get_model(req.model, dtype=req.dtype)

        def loaded(value, load, kind):   # a file (or None: the shipped one), or the object itself
            return value if isinstance(value, kind) else load(value)
        profiles = loaded(req.profiles, load_profiles, ProfileSet)
        stack, stack_why = resolve_stack(req.stack, profiles, model)
        # names match in any case (a file's catalog is in lower case already; a dict given in code may not be)
        given = loaded(req.machines_file, load_machines, dict)
        machines = {str(k).lower(): m for k, m in given.items()}
        if len(machines) < len(given):   # as a file's tables are refused
            twice = sorted(k for k in given if sum(str(j).lower() == str(k).lower() for j in given) > 1)
            raise SplitwisePlanError(f"the machine catalog names one machine twice ({', '.join(map(str, twice))}: "
                                     "names are matched in any case); keep one")
        machines = with_short_names(machines)   # H200 names dgx-h200 (unless the catalog has an h200)
        slos = loaded(req.slos, load_slos, SLOSet)
        trace = loaded(req.trace, load_trace, RequestStream) if req.trace is not None else None
        if trace is not None and not len(trace):
            raise SplitwisePlanError(f"trace {input_label(req.trace)} has no requests")
        if trace is not None and req.goal == "max-throughput" and not trace.duration_s > 0:
            raise SplitwisePlanError(f"trace {input_label(req.trace)}: all its requests arrive at one instant, so it "
                                     f"has no rate for {input_name('goal')} max-throughput to scale; give a trace that spans time")
        workload = None if trace is not None else loaded(req.workload, load_workload, Workload)
        stack = for_requests(stack, trace if trace is not None else workload)   # (a decode's context, where read)
        for name in req.designs:   # fail early, with one line, on a design the catalog cannot build
            d = get_design(name)
            for m in d.machines:
                if m not in machines:
                    raise SplitwisePlanError(f"{d.name} needs machine {m!r}, which the machine catalog lacks")
        profiles = _with_estimates(profiles, model, machines, slos, req, stack)
        return cls(model, req.tp, profiles, machines, slos, workload, trace, float(req.duration), req.scheduler,
                   stack, stack_why)

    def unfit(self, design: str) -> str:
        """Why ``design`` cannot be planned ('' when it can): its machines cannot hold the model's
        weights, or the profiles have no latency curves for their hardware (a user's table without
        the power-capped H100 leaves Splitwise-HHcap out, not the whole plan)."""
        d = get_design(design)
        try:
            for m, tp in pool_tps(d, self.tp):
                instance_layout(self.machines[m], tp, d.is_baseline, self.model)
                sourced_latency(self.profiles, self.model, self.machines[m], tp, self.stack)
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

    def simulator(self, stream, method: str, search: bool = False, threads: int = 1) -> Simulator:
        """A simulator of the inputs; a ``search`` one stops a design once an SLO can no longer hold
        (only its verdict counts there); ``threads``: designs its fluid batches run side by side."""
        return Simulator(stream, self.model, tensor_parallel=8 if self.tp == AUTO else self.tp, profiles=self.profiles,
                         machines=self.machines, slos=self.slos, scheduler=self.scheduler, method=method,
                         stop_early=search, threads=threads, stack=self.stack, slower=self.slower)


def _with_estimates(profiles, model, machines: dict, slos, req: PlanRequest, stack):
    """``profiles`` with the analytic estimate of ``model`` on each GPU of the designs (and the SLOs'
    reference GPU) they lack, so every simulator of the plan reads them as it reads measurements."""
    from splitwise_plan.inputs.models import weights_fit_problem
    from splitwise_plan.perf.sources import reference_machine, with_estimates

    needs = [(machines[m], tp) for n in req.designs for m, tp in pool_tps(get_design(n), req.tp)
             if not weights_fit_problem(model, machines[m], tp if tp < machines[m].gpus else 0)]
    ref, problem = reference_machine(slos, model, machines)
    if ref is not None and not problem:
        needs.append((ref, slos.reference_tensor_parallel))
    sheet = [(m, tp) for m, tp in needs if m.bf16_tflops is not None and m.hbm_bandwidth_tbps is not None]
    return with_estimates(profiles, model, sheet, stack)   # (one with no data sheet: its designs are left out)


def pool_tps(design: Design, tp) -> list[tuple[str, int]]:
    """(machine type, tensor parallelism) of each pool of ``design``: its own TP, else ``tp`` (8, or "4:2")."""
    pair = design.tp or parse_tp(8 if tp == AUTO else tp)
    return list(zip(design.machines, pair))


def stream_of(req: PlanRequest, trace_s: float | None = None) -> tuple:
    """(workload, duration in seconds, seed) of the stream a plan ran on: a replayed trace has no
    workload and no seed, and lasts as long as it does (``trace_s``, else read from the file)."""
    if req.trace is not None:
        if trace_s is None:
            from splitwise_plan.inputs.workloads import load_trace
            trace_s = (req.trace if isinstance(req.trace, RequestStream) else load_trace(req.trace)).duration_s
        return None, trace_s, None
    return req.workload, req.duration, req.seed
