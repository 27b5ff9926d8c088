"""The planner: the best machine counts of each design under a goal, confirmed, ranked.

Goals (the paper's section IV-D):

- ``min-cost`` / ``min-power`` at ``rps`` (iso-throughput): per design, the cheapest
  (lowest-power) prompt and token machine counts that meet every SLO (:mod:`.iso`);
- ``max-throughput`` within ``budget_cost`` or ``budget_power`` (iso-cost, iso-power):
  per design, the highest rate some machine counts within the budget hold (:mod:`.budget`).

Per design: the capacity model and its PuLP ILP prune what cannot work or cannot
win (:mod:`splitwise_plan.search`), a search finds the optimum with the fast simulator,
and the confirm simulator (the discrete-event oracle by default, :mod:`.confirm`)
re-checks the answer on the full stream; with ``seeds`` K both run over K streams and a
point's result is its worst; a point that fails confirmation is excluded and the search
moves to the next. This module runs the designs (in lockstep, in threads, in worker processes
or one by one), ranks them (:mod:`.objectives`) and makes the report's ``inputs`` block.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
import threading
import time
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import replace

from splitwise_plan.errors import SplitwisePlanError
from splitwise_plan.inputs.budget import parse_budget
from splitwise_plan.inputs.designs import MAX_POOL, base_design, get_design, with_tp
from splitwise_plan.inputs.models import get_model
from splitwise_plan.perf.sources import latency_sources, stack_label
from splitwise_plan.planning import tp
from splitwise_plan.planning.alternative import robust_alternative
from splitwise_plan.planning.budget import plan_budget
from splitwise_plan.planning.confirm import Confirmer, OverSeeds, Pool
from splitwise_plan.planning.explain import searched_text
from splitwise_plan.planning.iso import plan_iso
from splitwise_plan.planning.memo import Memo
from splitwise_plan.planning.objectives import gains, goal_value, rank_key, tightest_ratio
from splitwise_plan.planning.request import AUTO, Inputs, PlanRequest, input_label, pool_tps
from splitwise_plan.planning.result import DesignPlan, PlanResult
from splitwise_plan.planning.sureness import sureness
from splitwise_plan.search import WAKE_S, Lockstep
from splitwise_plan.sim.simulator import cpu_cores, starting_workers


def _plan_one(inputs: Inputs, req: PlanRequest, design: str, method: str, memo: Memo | None = None,
              say=None) -> DesignPlan:
    """One design's answer under the request's goal (a joblib worker's task)."""
    if req.goal == "max-throughput":
        return plan_budget(inputs, req, design, method)
    return plan_iso(inputs, req, design, method, memo=memo, say=say)


def _awaited(get, timed_out: type):
    """``get(timeout=...)`` (a queue's or a future's) retried until it answers: a wait with no timeout in
    the main thread missed a Ctrl-C that another thread received (one of the search threads, say) until
    the wait ended, seconds later; one that wakes every ``WAKE_S`` lets Python run the handler."""
    while True:
        try:
            return get(timeout=WAKE_S)
        except timed_out:
            pass


class _Stops:
    """The locksteps of the groups planning side by side, to stop together: one that starts after the
    stop is stopped as it starts."""

    def __init__(self) -> None:
        self.locksteps: list = []
        self.stopped = False
        self._lock = threading.Lock()

    def add(self, lockstep: Lockstep) -> None:
        with self._lock:
            self.locksteps.append(lockstep)
            if self.stopped:
                lockstep.stop()

    def stop(self) -> None:
        with self._lock:
            self.stopped = True
            for lockstep in self.locksteps:
                lockstep.stop()


def _plan_group(inputs: Inputs, req: PlanRequest, designs, method: str, pool=None, on_design=None,
                threads: int = 1, memo: Memo | None = None, stops: _Stops | None = None, say=None) -> list:
    """Plan designs of one kind (Splitwise or baseline) together: one search thread per design,
    their simulations batched a round at a time (:class:`Lockstep`), so the fluid simulator's
    per-request loop runs once a round for all of them, ``threads`` designs side by side.
    ``pool`` runs the confirmations; ``memo`` knows and keeps their simulations; ``stops``, if
    given, can stop this group's searches from another thread."""
    import queue

    sim = inputs.simulator(inputs.stream(req.rps, req.seed), method, search=True, threads=threads)
    over = OverSeeds(inputs, req, method, sim, memo=memo, say=say)
    lockstep = Lockstep(over.run_points)
    over.stopped = lockstep.stopped
    if stops is not None:
        stops.add(lockstep)
    done: queue.Queue = queue.Queue()

    def work(name):
        try:
            done.put(plan_iso(inputs, req, name, method, lockstep, pool, sim, over, memo, say))
        except BaseException as exc:   # reported in the calling thread
            done.put(exc)
        finally:
            lockstep.leave()

    searches = [threading.Thread(target=work, args=(n,), daemon=True) for n in designs]
    for _ in searches:
        lockstep.enter()
    for th in searches:
        th.start()
    plans, error = [], None
    try:
        for _ in searches:
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
    for th in searches:
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
def plan(request: PlanRequest | None = None, /, *, on_design=None, done=None, memo: Memo | None = None,
         on_step=None, **kwargs) -> PlanResult:
    """Plan every requested design under the goal; see :class:`PlanRequest` for the options.

    ``plan(goal="min-cost", rps=70)`` or ``plan(PlanRequest(...))``. ``on_design(DesignPlan)``,
    if given, is called in the calling process as each design finishes (for progress bars).
    ``done`` ({design name: DesignPlan}) holds designs already planned for the same request (a
    stopped run's), taken as they are: a design's answer does not depend on the others planned.
    ``memo`` (a :class:`~splitwise_plan.planning.memo.Memo`) holds the simulations a stopped run of the
    same request ran, and keeps the new ones as they finish: the designs it was planning resume their
    searches where they were (all but those planned in ``--jobs`` worker processes, with another search
    method than the fluid model). ``on_step(text)``, if given, is told in plain words what the plan is
    doing as it goes ("confirming HH 330+34 (event simulation, stream 2 of 3)"), from any of its threads.
    """
    t0 = time.perf_counter()
    req, done = _request_of(request, on_design, done, kwargs)
    method = req.resolved_search_method()
    given = req
    if req.headroom:   # every SLO held at the rate with its load headroom; the report keeps the rate asked
        req = replace(req, rps=req.planned_rps, headroom=0.0)
    asked = req
    if req.tp == AUTO:   # every design at each TP it fits: each a design of its own (see planning/tp.py)
        req = replace(req, designs=planned_designs(req))
    inputs = Inputs.load(req)
    if req.goal == "max-throughput":   # check the budget once, before any work
        _check_budget(req, inputs)
    by_name = {}

    def collect(p):
        by_name[p.design] = p
        if on_design is not None:
            on_design(p)

    if req.tp == AUTO:
        _run_auto(inputs, req, done, method, collect, memo, on_step)
        plans = tp.collapsed([by_name[n] for n in req.designs if n in by_name], rank_key(req.goal), inputs.machines)
        req = replace(asked, designs=tuple(base_design(get_design(p.design)).name for p in plans))
    else:
        order = _to_plan(req, inputs, done, collect)
        _run(inputs, req, order, method, collect, memo, on_step)
        plans = [by_name[n] for n in req.designs]
    ranked = tuple(sorted(plans, key=rank_key(req.goal)))
    winner = ranked[0] if ranked and ranked[0].status == "ok" else None
    stress = _at_higher_rate(inputs, req, winner, on_step) if winner is not None else None
    sure, rival = _judged(inputs, req, ranked, winner, stress, method, on_step)
    return PlanResult(replace(given, designs=req.designs), ranked, winner.design if winner else None,
                      gains(ranked, winner, req.goal), method, time.perf_counter() - t0,
                      inputs=inputs_block(req, inputs, method, [p.design for p in plans]), stress=stress,
                      sureness=sure, alternative=rival, output_tokens=_mean_output(inputs),
                      gpus={m: inputs.machines[m].gpus for p in plans for m in get_design(p.design).machines})


def _mean_output(inputs: Inputs) -> float:
    """The mean output tokens of a request: of the trace replayed, else of the workload's sizes."""
    sizes = inputs.trace if inputs.trace is not None else inputs.workload
    return float(sizes.output_tokens.mean())


def _judged(inputs: Inputs, req: PlanRequest, ranked: tuple, winner, stress, method: str, say) -> tuple:
    """(how sure the answer is, its robust alternative): see planning/sureness.py and planning/alternative.py."""
    def confirm(inp, design, point, rate):
        held, worst, _ = Confirmer(inp, req, req.confirm_method, say=say)(design, point, rate)
        return held, worst

    def replan(inp, names):   # (in memory: a --storage study keeps the plan's own latencies' trials)
        got: dict = {}
        _run(inp, replace(req, designs=tuple(names), storage=None, study=None), list(names), method,
             lambda p: got.__setitem__(p.design, p), None, say)
        return got

    sure = sureness(inputs, req, ranked, winner, replan, confirm, say)
    rival = robust_alternative(req, ranked, winner, stress, lambda *a: confirm(inputs, *a))
    return sure, rival


def planned_designs(req: PlanRequest) -> tuple[str, ...]:
    """The designs a plan of ``req`` plans, each reported to ``on_design``: its designs, or under ``--tp auto``
    each design at every TP its machines fit the model at."""
    if req.tp != AUTO:
        return tuple(req.designs)
    return tuple(v for n in req.designs for v in _variants(req, n))


def _variants(req: PlanRequest, name: str) -> list[str]:
    """Design ``name`` at each TP its machines fit the model at (see :func:`.tp.variants`)."""
    from splitwise_plan.inputs.machines import load_machines, with_short_names

    machines = req.machines_file if isinstance(req.machines_file, dict) else load_machines(req.machines_file)
    found = tp.variants(name, with_short_names({str(k).lower(): m for k, m in machines.items()}),
                        get_model(req.model, dtype=req.dtype))
    return found or [with_tp(get_design(name), tp.DEFAULT_TP).name]   # (none fits: refused as at TP8)


def _run_auto(inputs: Inputs, req: PlanRequest, done: dict, method: str, collect, memo, say) -> None:
    """Plan each design's TP variants (``req.designs``) in two rounds: the lowest-bound and the TP8 variant of each
    design, then those whose ILP bound could beat their design's best answer of the first round."""
    order = _to_plan(req, inputs, done, lambda p: None)
    if req.goal == "max-throughput":   # (no cost to beat: every pair is planned)
        for n in req.designs:
            if n not in order:
                collect(done[n] if n in done else _infeasible(inputs, n))
        _run(inputs, req, order, method, collect, memo, say)
        return
    bounds = _bounds(inputs.simulator(inputs.stream(req.rps, req.seed), method), req, order)
    groups: dict = {}
    for n in order:
        groups.setdefault(base_design(get_design(n)).name, []).append(n)
    first = [n for names in groups.values() for n in tp.first_round(names, bounds)]
    answers = {}

    def keep(p):
        answers[p.design] = p
        collect(p)

    for n in req.designs:   # those that cannot hold the model, and those done already
        if n not in order:
            keep(done[n] if n in done else _infeasible(inputs, n))
    _run(inputs, req, first, method, keep, memo, say)
    second, ceilings = [], {}
    for names in groups.values():
        best = min((goal_value(answers[n], req.goal) for n in names if n in answers), default=math.inf)
        for n in names:
            if n in answers:
                continue
            if tp.can_beat(n, bounds, best):   # searched only below that answer
                second.append(n)
                if math.isfinite(best):
                    ceilings[n] = best
            else:   # its best case cannot beat its design's best answer: never simulated
                keep(DesignPlan(design=n, short=get_design(n).short, status="pruned", bound=bounds[n],
                                note=f"its ILP bound {bounds[n]:,.2f} is not below its design's best answer {best:,.2f}"))
    if second:
        _run(replace(inputs, ceilings=ceilings), req, second, method, keep, memo, say)


def _infeasible(inputs: Inputs, name: str) -> DesignPlan:
    """The answer of a design whose machines cannot hold the model."""
    return DesignPlan(design=name, short=get_design(name).short, status="infeasible", note=inputs.unfit(name))


def _bounds(sim, req: PlanRequest, names: list) -> dict:
    """Each design's ILP lower bound of the goal's objective."""
    from splitwise_plan.search import capacity_model

    out = {}
    for n in names:
        try:
            out[n] = capacity_model(sim, n).ilp_bound(req.objective, p_max=MAX_POOL, t_max=MAX_POOL).value
        except SplitwisePlanError:
            out[n] = 0.0
    return out


#: How much above the goal's rate the winner is tried, to tell how near its verdict is to turning.
STRESS_FACTOR = 1.05


def _at_higher_rate(inputs: Inputs, req: PlanRequest, winner: DesignPlan, say=None) -> dict | None:
    """The winner's verdict at the rate x :data:`STRESS_FACTOR` with the confirm method, the worst over
    the plan's streams (None for max-throughput, whose winner's rate is its limit already)."""
    if req.goal == "max-throughput":
        return None
    rate = winner.rate * STRESS_FACTOR
    held, worst, _ = Confirmer(inputs, req, req.confirm_method, say=say)(winner.design, (winner.prompt, winner.token),
                                                                       rate)
    return {"factor": STRESS_FACTOR, "rate_rps": rate, "slo_met": held,
            "headroom": 1.0 - tightest_ratio(worst), "result": worst}


def _request_of(request: PlanRequest | None, on_design, done, kwargs: dict) -> tuple[PlanRequest, dict]:
    """(the request, ``done`` by full design name) of :func:`plan`'s arguments, checked."""
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
    return req, done


def _check_budget(req: PlanRequest, inputs: Inputs) -> None:
    """Refuse a max-throughput budget that buys more machines than a pool holds, or no complete design."""
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


def _to_plan(req: PlanRequest, inputs: Inputs, done: dict, collect) -> list:
    """The designs left to plan, heaviest first, once those that cannot hold the model (infeasible) and
    those ``done`` already are collected."""
    unfit = {n: why for n in req.designs if (why := inputs.unfit(n))}
    if len(unfit) == len(req.designs):   # nothing to plan: the inputs are wrong, not the SLOs too tight
        raise SplitwisePlanError("no design given can hold the model: " + "; ".join(unfit.values()))
    for n, why in unfit.items():   # a design whose machines cannot hold the model: nothing to search
        collect(DesignPlan(design=n, short=get_design(n).short, status="infeasible", note=why))
    for n in req.designs:
        if n in done and n not in unfit:
            _check_done(done[n], req, inputs)
            collect(done[n])
    return sorted((n for n in req.designs if n not in unfit and n not in done),
                  key=lambda n: _WORK_ORDER.index(n) if n in _WORK_ORDER else 99)


def _run(inputs: Inputs, req: PlanRequest, order: list, method: str, collect, memo: Memo | None = None,
         say=None) -> None:
    """Plan the designs of ``order``, each answer to ``collect`` as it comes: fluid searches in lockstep,
    else in parallel processes (``req.jobs``), else one after another."""
    jobs = req.jobs if req.jobs > 0 else cpu_cores()
    jobs = min(jobs, len(order))
    if jobs > 1:   # the kernels compiled once, here, not in each worker
        stream = inputs.trace if inputs.trace is not None else inputs.workload.generate(10.0, duration_s=10.0, seed=0)
        inputs.simulator(stream, "events").compile_kernels(order, {method, req.confirm_method})
    if method == "fluid" and req.goal != "max-throughput" and req.storage is None:
        _run_groups(inputs, req, order, method, jobs, collect, memo, say)
    elif jobs > 1:
        _run_parallel(inputs, req, order, method, jobs, collect)
    else:
        for n in order:
            collect(_plan_one(inputs, req, n, method, memo, say))


def _run_groups(inputs: Inputs, req: PlanRequest, order: list, method: str, jobs: int, collect,
                memo: Memo | None = None, say=None) -> None:
    """Designs of a kind share each fluid round; with two or more cores the baselines plan in
    another thread meanwhile, and the Splitwise confirmations in others. The compiled simulators
    release Python's lock, so threads use the cores as processes would, without starting any."""
    from concurrent.futures import ThreadPoolExecutor

    groups = [g for g in ([n for n in order if not get_design(n).is_baseline],
                          [n for n in order if get_design(n).is_baseline]) if g]
    sub = replace(req, jobs=1)
    if jobs > 1 and len(groups) == 2:
        stops = _Stops()
        side = ThreadPoolExecutor(1, thread_name_prefix="baselines")
        pool = Pool(ThreadPoolExecutor(jobs, thread_name_prefix="confirm"))
        other = side.submit(_plan_group, inputs, sub, groups[1], method, None, None, 1, memo, stops, say)
        try:
            _plan_group(inputs, sub, groups[0], method, pool, collect, threads=jobs, memo=memo, stops=stops, say=say)
            for p in _awaited(other.result, FutureTimeout):
                collect(p)
        except BaseException:   # Ctrl-C (a notebook's interrupt too): the baselines' searches stop now
            stops.stop()
            if other.done() and not other.cancelled() and other.exception() is None:
                for p in other.result():   # its designs, finished before the stop, are kept
                    collect(p)
            pool.close(kill=True)
            side.shutdown(wait=False, cancel_futures=True)
            raise
        pool.close()
        side.shutdown()
    else:
        for g in groups:
            _plan_group(inputs, sub, g, method, None, collect, threads=jobs, memo=memo, say=say)


def _run_parallel(inputs: Inputs, req: PlanRequest, order: list, method: str, jobs: int, collect) -> None:
    """One design per joblib process, ``jobs`` at a time."""
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


def _check_done(p: DesignPlan, req: PlanRequest, inputs: Inputs) -> None:
    """Refuse a design planned for another request than ``req`` (another rate or model): it would stand
    in this plan's report as this request's answer, and might win it. What it records is checked; the
    checkpoint of the command line also compares the inputs' contents."""
    r = p.result
    model = inputs.model.name
    if r is not None and getattr(r, "model", model) != model:
        raise SplitwisePlanError(f"done[{p.short!r}] was planned for model {r.model}, not this plan's {model}")
    if req.goal != "max-throughput" and p.status == "ok":
        rate = req.rps if req.rps is not None else inputs.trace.rate
        if not math.isclose(p.rate, rate, rel_tol=1e-9):
            raise SplitwisePlanError(f"done[{p.short!r}] was planned at {p.rate:g} req/s, not this plan's {rate:g}")


# --- the inputs a plan ran on (its report names them) ------------------------------------------

def inputs_block(req: PlanRequest, inputs: Inputs, search_method: str, planned: list | None = None) -> dict:
    """The ``inputs`` block of a plan of ``req`` on the loaded ``inputs``; ``planned``: the designs as planned (under
    ``--tp auto``, each design's chosen TP variant), else ``req``'s."""
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
    if stack_label(inputs.stack, inputs.stack_why):
        extra["stack"] = stack_label(inputs.stack, inputs.stack_why)
    # each simulator's role in words (``method`` and ``confirm_method`` keep their names: fluid, events)
    extra["simulators"] = {"search": {"method": search_method, "name": searched_text(search_method),
                                      "role": "searches the machine counts"},
                           "confirm": {"method": req.confirm_method, "name": searched_text(req.confirm_method),
                                       "role": "confirms every answer: the reported results are its"}}
    return _inputs(model=req.model, tensor_parallel=req.tp, workload=input_label(workload),
                   trace=input_label(req.trace), rate=rate, duration_s=duration, seed=seed, requests=requests,
                   slo_file=input_label(req.slos), slos=inputs.slos, machines_file=input_label(req.machines_file),
                   machines=inputs.machines, profiles_file=input_label(req.profiles), method=search_method,
                   confirm_method=req.confirm_method,
                   goal=req.goal, budget_power=req.budget_power, budget_cost=req.budget_cost,
                   designs=list(req.designs), seeds=1 if req.trace is not None else req.seeds, strategy=req.strategy,
                   margin=req.margin, kv_transfer=req.scheduler.kv_transfer(),
                   latency_sources=latency_sources(inputs.profiles, inputs.model, inputs.machines,
                                                   [p for n in planned or req.designs
                                                    for p in pool_tps(get_design(n), req.tp)],
                                                   inputs.slos), **extra)
