"""Discrete-event simulator of a Splitwise or baseline cluster: the oracle.

Simple and literal: it follows the rules of the paper's reference simulator one event at a time
(join-the-shortest-queue routing, the mixed pool, FCFS prompt batches of at most 2048 tokens,
continuous token batching bounded by memory, mixed batching with preemption on baseline and borrowed
machines, KV-cache transfer). The fast fluid simulator is checked against it.

The rules run as compiled kernels (:mod:`.kernels`) over flat arrays (:mod:`.state`), a chunk of events
at a time: between two chunks this module reports progress (``on_arrivals``), lets Ctrl-C stop the run,
and gives the machines' lists or the event heap more room when the kernel asks for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from splitwise_plan.sim import jit
from splitwise_plan.sim.cluster import Cluster
from splitwise_plan.sim.events import state
from splitwise_plan.sim.events.kernels import run_events, seat_all
from splitwise_plan.sim.metrics import Verdict

if TYPE_CHECKING:
    from splitwise_plan.inputs.workloads import RequestStream

_PROGRESS_EVERY = 8192  # events between two reports to ``on_arrivals`` (and two chunks of the kernel)


@dataclass(frozen=True)
class RequestTimes:
    """Per-request outcome of a simulation, in seconds from each request's arrival."""

    ttft: np.ndarray      # NaN where the prompt phase never finished
    e2e: np.ndarray       # NaN where the request never finished
    busy_s: np.ndarray    # busy seconds of each machine (prompt pool first)
    horizon_s: float      # when the last event happened
    oom: bool = False     # a request never got the KV-cache memory it needs: more than any machine holds, or
                          # memory that waiting transfers hold (a deadlock)
    overloaded: bool = False   # stopped: a prompt waited longer than ``overload_s``; later requests unfinished (NaN)
    failed: bool = False       # stopped: finished requests already break an SLO of the verdict; the rest unfinished


def compile_ahead(cluster: Cluster) -> None:
    """Compile the kernels in this process, or load them from the cache, on one request through
    ``cluster``: worker processes started afterwards load them, instead of each compiling them at once.
    Nothing to do where the kernels are not kept between processes (no writable cache: each compiles its own),
    or are compiled here already, or run as plain Python."""
    if not jit.CACHED or not getattr(run_events, "py_func", None) or run_events.signatures:
        return
    from splitwise_plan.inputs.workloads import RequestStream
    simulate_events(cluster, RequestStream(np.zeros(1), np.ones(1, dtype=np.int64), np.full(1, 2, dtype=np.int64),
                                           name="compile"))


def simulate_events(cluster: Cluster, stream: RequestStream, until: float | None = None,
                    overload_s: float = float("inf"), on_arrivals=None, verdict: Verdict | None = None) -> RequestTimes:
    """Run the discrete-event simulation of ``cluster`` on ``stream`` to the end (or ``until``), or
    until a prompt has waited longer than ``overload_s`` (then ``overloaded``), or, with a ``verdict``,
    until finished requests already break one of its SLOs (then ``failed``: the verdict is certain,
    and a design that holds its SLOs runs to the end). ``on_arrivals(n)``, if given, hears now and
    then how many requests have arrived (for a progress bar)."""
    sim = state.build(cluster, stream, until, overload_s, verdict)
    jit.before_first_call(run_events, "the event simulator")
    seat_all(sim.pools, sim.counters, sim.tour, sim.inst_f, sim.inst_i)
    while True:
        status = run_events(*sim, _PROGRESS_EVERY)
        if status == state.GROW:
            sim = state.grow(sim)
        elif status == state.CHUNK:
            if on_arrivals is not None:
                on_arrivals(int(sim.counters[state.ARRIVED]))
        else:
            break
    c = sim.counters
    oom = bool(c[state.OOM])
    if c[state.HEAP_LEN] == 0 and c[state.NEXT_ARRIVAL] == len(stream) and np.isnan(sim.req_f[:, state.REQ_E2E]).any():
        # the events ran out with requests unfinished: each waits for KV-cache memory that nothing
        # will free (a machine's queue behind a task it cannot hold), never a silent loss
        oom = True
    return RequestTimes(sim.req_f[:, state.REQ_TTFT].copy(), sim.req_f[:, state.REQ_E2E].copy(),
                        sim.inst_f[:, state.BUSY].copy(), float(sim.clock[state.NOW]), oom,
                        bool(c[state.OVERLOADED]), bool(c[state.FAILED]))
