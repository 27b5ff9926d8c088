"""TPE trials asked, simulated and told in batches by one or many workers, and the frontier walk's
simulations stored as trials (:func:`attach`).

Every point is simulated once: a trial whose point is stored takes the stored result, and one
whose point another worker is simulating waits for that result (see :mod:`.trials`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import Callable, Sequence

from splitwise_plan.search.storage.heartbeat import HEARTBEAT_INTERVAL, Heartbeat, fail_stale, worker_id
from splitwise_plan.search.storage.trials import (
    TRIAL_ATTR,
    WORKER_ATTR,
    Point,
    constraint,
    point_of,
    sync,
    trial_record,
)

PARAM_WAIT_S = 10.0              # how long to wait for another worker's just-asked trial to get its point


POLL_S = 0.1                     # polling period while waiting for another worker's trial


@dataclass
class ExploreStats:
    """What one :func:`explore` call did."""

    told: int = 0            # trials this process completed
    simulated: int = 0       # of which ran the simulator
    reused: int = 0          # took a stored result (earlier runs, other workers, this batch)
    pruned: int = 0          # infeasible by the capacity model: no simulation
    waited: int = 0          # waited for another worker's simulation of the same point
    failed: int = 0          # stale trials of dead workers this process failed
    rounds: int = 0
    complete: int = 0        # COMPLETE TPE trials in the study at the end
    running: int = 0         # RUNNING trials of other workers at the end

    def summary(self) -> str:
        return (f"{self.told} trials told here ({self.simulated} simulated, {self.reused} reused, "
                f"{self.pruned} pruned), {self.complete} complete in the study")


def explore(study, evaluate, space, *, n_trials: int, batch: int, exclude: Sequence[Point] = (),
            rdb=None, worker: str | None = None, log: Callable[[str], None] | None = None) -> ExploreStats:
    """Ask/evaluate/tell until the study holds ``n_trials`` COMPLETE or RUNNING TPE trials (module doc)."""
    run = _Exploration(study, evaluate, space, exclude=exclude, rdb=rdb, worker=worker or worker_id())
    try:
        while run.next_round(n_trials, batch):
            pass
    except BaseException:
        run.fail_inflight()   # Ctrl-C or a crash: never leave RUNNING trials
        raise
    finally:
        if run.hb is not None:
            run.hb.stop()
    if log is not None:
        log(run.stats.summary())
    return run.stats


class _Exploration:
    """The state of one :func:`explore` call: its trials in flight (trial number -> optuna Trial), the
    heartbeat that keeps them alive (with a storage ``rdb``) and the counts of what it did (``stats``)."""

    def __init__(self, study, evaluate, space, *, exclude: Sequence[Point], rdb, worker: str):
        self.study, self.evaluate, self.space, self.rdb, self.worker = study, evaluate, space, rdb, worker
        self.stats = ExploreStats()
        self.lower = space.lower()
        self.p_lo, self.p_hi = space.p_range
        self.t_lo, self.t_hi = space.t_range
        self.excluded = set(map(tuple, exclude))
        self.inflight: dict[int, object] = {}          # trial number -> optuna Trial
        self.hb = Heartbeat(rdb) if rdb is not None else None
        self.new_api = _new_api()
        self.has_token = self.t_hi > self.t_lo

    def tell(self, tr, pt, r, simulated) -> None:
        """Tell trial ``tr`` the result ``r`` of its point ``pt`` (None: pruned), and count it."""
        from optuna.exceptions import UpdateFinishedTrialError

        study, evaluate, space, excluded = self.study, self.evaluate, self.space, self.excluded
        rec = trial_record(evaluate, space, pt, r, simulated=simulated, worker=self.worker, phase="explore",
                           excluded=excluded)
        c = constraint(evaluate, r, pt, excluded)
        try:
            tr.set_user_attr(TRIAL_ATTR, rec)
            if self.new_api:
                tr.set_constraint("slo", c)
            else:
                tr.set_user_attr("constraint", (c,))
            study.tell(tr, rec["objective"])
        except (UpdateFinishedTrialError, ValueError) as exc:
            if isinstance(exc, ValueError) and "Cannot tell" not in str(exc):
                raise
            # another worker failed this trial as stale (this process was too slow): keep the
            # result anyway, as a trial of its own
            study.add_trial(_frozen(space, pt, rec, c, self.new_api))
        self.inflight.pop(tr.number, None)
        if self.hb is not None:
            self.hb.discard(tr._trial_id)
        stats = self.stats
        stats.told += 1
        stats.simulated += int(simulated)
        stats.pruned += int(r is None)
        stats.reused += int(r is not None and not simulated)

    def next_round(self, n_trials: int, batch: int) -> bool:
        """Ask a batch of trials, simulate the points no one has and tell them all; False (and the
        final counts in ``stats``) once the study holds ``n_trials``."""
        k = self._to_ask(n_trials, batch)
        if k <= 0:
            return False
        asked = self._ask_batch(k)
        self.stats.rounds += 1
        todo, follow = self._plan(asked)
        self._simulate_and_tell(asked, todo, follow)
        if follow:
            self.stats.waited += len(follow)
            _wait_for_leaders(self.study, self.evaluate, self.rdb, follow, self.tell, self.inflight, self.stats)
        return True

    def _to_ask(self, n_trials: int, batch: int) -> int:
        """How many trials to ask now (at most ``batch``): the study's TPE trials short of ``n_trials``,
        after failing the stale trials of dead workers."""
        from optuna.trial import TrialState

        study = self.study
        if self.rdb is not None:
            self.stats.failed += fail_stale(study, self.rdb, self.inflight)
        trials = study.get_trials(deepcopy=False)
        sync(trials, self.evaluate)
        complete = sum(t.state == TrialState.COMPLETE and _explored(t) for t in trials)
        running = sum(t.state == TrialState.RUNNING for t in trials)
        k = min(batch, n_trials - complete - running)
        if k <= 0:
            self.stats.complete, self.stats.running = complete, running
        return k

    def _ask_batch(self, k: int) -> list:
        """Ask ``k`` trials for their points: [(trial, (prompt, token))]."""
        asked = []
        for _ in range(k):
            tr = _ask(self.study, self.worker) if self.rdb is not None else self.study.ask()
            self.inflight[tr.number] = tr
            if self.hb is not None:
                self.hb.add(tr._trial_id)
            p = tr.suggest_int("prompt", self.p_lo, self.p_hi)
            t = tr.suggest_int("token", self.t_lo, self.t_hi) if self.t_hi > self.t_lo else self.t_lo
            asked.append((tr, (int(p), int(t))))
        return asked

    def _plan(self, asked: list) -> tuple[list, list]:
        """The points of a batch to simulate here (each once), and the trials that wait for another
        process's trial of the same point: [(trial, point, leader's number)]."""
        leader = (_leaders(self.study, self.evaluate, self.inflight, self.t_lo, self.has_token)
                  if self.rdb is not None else {})
        todo, sims, follow = [], set(), []
        for tr, pt in asked:
            if pt[1] < self.lower[pt[0] - self.p_lo]:
                continue
            if pt in self.evaluate.cache:
                continue
            lead = leader.get(pt)
            if lead is not None and lead < tr.number:
                follow.append((tr, pt, lead))
                continue
            if pt not in sims:
                sims.add(pt)
                todo.append(pt)
        return todo, follow

    def _simulate_and_tell(self, asked: list, todo: list, follow: list) -> None:
        """Simulate ``todo`` and tell every trial of the batch but the followers."""
        evaluate = self.evaluate
        known = set(evaluate.cache)
        if todo:
            evaluate(todo)
        fresh = set(todo)
        for tr, pt in asked:
            if any(f[0] is tr for f in follow):
                continue
            if pt[1] < self.lower[pt[0] - self.p_lo]:
                self.tell(tr, pt, None, False)
                continue
            simulated = pt in fresh and pt not in known
            fresh.discard(pt)         # later trials of the same point in this batch reuse it
            self.tell(tr, pt, evaluate.cache[pt], simulated)

    def fail_inflight(self) -> None:
        """Fail every trial still in flight (the database may be the cause: errors are ignored)."""
        from optuna.trial import TrialState

        for number, tr in list(self.inflight.items()):
            try:
                self.study.tell(tr, state=TrialState.FAIL, skip_if_finished=True)
            except Exception:  # noqa: BLE001 - the database may be the cause
                pass


def _ask(study, worker: str):
    """``study.ask()``, the trial created with its owner (``worker`` attribute) in one transaction,
    so that a process killed at any moment leaves no RUNNING trial without an owner."""
    import optuna
    from optuna.trial import FrozenTrial, TrialState

    if study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):   # enqueued trials first
        tr = study.ask()
        tr.set_user_attr(WORKER_ATTR, worker)
        return tr
    template = FrozenTrial(number=-1, state=TrialState.RUNNING, value=None, datetime_start=datetime.now(),
                           datetime_complete=None, params={}, distributions={}, user_attrs={WORKER_ATTR: worker},
                           system_attrs={}, intermediate_values={}, trial_id=-1)
    trial_id = study._storage.create_new_trial(study._study_id, template_trial=template)
    local = getattr(study, "_thread_local", None)
    if local is not None and hasattr(local, "cached_all_trials"):
        local.cached_all_trials = None       # as Study.ask: the sampler reads the trials afresh
    return optuna.trial.Trial(study, trial_id)


def _explored(trial) -> bool:
    """Does a trial count toward ``n_trials`` (TPE's; not those the frontier walk stored)?"""
    return (trial.user_attrs.get(TRIAL_ATTR) or {}).get("phase") != "frontier"


def _new_api() -> bool:
    import optuna
    return hasattr(optuna.trial.Trial, "set_constraint")


def _leaders(study, evaluate, mine: dict, t_lo: int, has_token: bool) -> dict:
    """point -> lowest number of another process's RUNNING trial holding it.

    Waits (at most PARAM_WAIT_S) for lower-numbered trials asked but not yet given their point.
    """
    from optuna.trial import TrialState

    deadline = time.monotonic() + PARAM_WAIT_S
    top = max(mine) if mine else -1
    while True:
        trials = study.get_trials(deepcopy=False)
        sync(trials, evaluate)
        running = [t for t in trials if t.state == TrialState.RUNNING and t.number not in mine]
        pending = [t for t in running if t.number < top and point_of(t, t_lo, has_token) is None]
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(POLL_S / 2)
    lead: dict = {}
    for t in running:
        pt = point_of(t, t_lo, has_token)
        if pt is not None and (pt not in lead or t.number < lead[pt]):
            lead[pt] = t.number
    return lead


def _wait_for_leaders(study, evaluate, rdb, follow, tell, inflight, stats) -> None:
    """Tell each follower the result of the trial it waits for, or simulate when that trial failed."""
    from optuna.trial import TrialState

    last_stale = time.monotonic()
    while follow:
        trials = {t.number: t for t in study.get_trials(deepcopy=False)}
        sync(trials.values(), evaluate)
        rest = []
        for tr, pt, lead in follow:
            if pt in evaluate.cache:
                tell(tr, pt, evaluate.cache[pt], False)
            elif trials.get(lead) is None or trials[lead].state != TrialState.RUNNING:
                evaluate([pt])                 # the other worker's trial failed: simulate it here
                tell(tr, pt, evaluate.cache[pt], True)
            else:
                rest.append((tr, pt, lead))
        follow = rest
        if follow:
            if time.monotonic() - last_stale > HEARTBEAT_INTERVAL:
                stats.failed += fail_stale(study, rdb, inflight)
                last_stale = time.monotonic()
            time.sleep(POLL_S)


def _distributions(space) -> dict:
    from optuna.distributions import IntDistribution

    d = {"prompt": IntDistribution(int(space.p_range[0]), int(space.p_range[1]))}
    if space.t_range[1] > space.t_range[0]:
        d["token"] = IntDistribution(int(space.t_range[0]), int(space.t_range[1]))
    return d


def _frozen(space, pt: Point, rec: dict, c: float, new_api: bool):
    import optuna

    dist = _distributions(space)
    params = {"prompt": int(pt[0])}
    if "token" in dist:
        params["token"] = int(pt[1])
    attrs = {TRIAL_ATTR: rec, WORKER_ATTR: rec["worker"]}
    kw = {"constraints": {"slo": float(c)}} if new_api else {}
    if not new_api:
        attrs["constraint"] = (float(c),)
    return optuna.trial.create_trial(params=params, distributions=dist, value=float(rec["objective"]),
                                     user_attrs=attrs, **kw)


def attach(study, evaluate, space, *, exclude: Sequence[Point] = (), phase: str = "frontier",
           worker: str | None = None) -> None:
    """Make ``evaluate`` read the study before each call and store each new simulation as a trial."""
    from optuna.trial import TrialState

    worker = worker or worker_id()
    excluded = set(map(tuple, exclude))
    new_api = _new_api()

    def prefetch(points):
        if any(tuple(p) not in evaluate.cache for p in points):
            sync(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)), evaluate)

    def record(points, results):
        frozen = []
        for pt, r in zip(points, results):
            rec = trial_record(evaluate, space, pt, r, simulated=True, worker=worker, phase=phase,
                               excluded=excluded)
            frozen.append(_frozen(space, pt, rec, constraint(evaluate, r, pt, excluded), new_api))
        study.add_trials(frozen)

    evaluate.prefetch, evaluate.record = prefetch, record
