"""The search learns from confirmation (planning/bias.py, planning/iso.py): a point the fast model
passed and the event simulation failed makes the search read that SLO as the event simulation did, so
its next candidate is dearer, not another of the same cost; and a design that a larger cluster
satisfies is never left unconfirmed."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from splitwise_plan.inputs.slos import load_slos
from splitwise_plan.planning import plan
from splitwise_plan.planning.bias import MAX_STEP, Bias

SLOS = load_slos()   # the paper's nine slowdown SLOs


def _result(tbt_p99: float, ratio_of_others: float = 0.5, completed: int = 10):
    """A simulation result whose TBT P99 is ``tbt_p99`` of its limit and every other SLO ``ratio_of_others``."""
    slowdown = {}
    for s in SLOS:
        r = tbt_p99 if (s.metric, s.percentile) == ("tbt", 99) else ratio_of_others
        slowdown.setdefault(s.metric, {})[s.percentile] = r * s.limit
    rows = SLOS.assess(slowdown, None)
    tightest = max(rows, key=lambda row: row["ratio"])
    return SimpleNamespace(slowdown=slowdown, latency_s=None, slo_met=all(row["met"] for row in rows),
                           completed=completed, requests=10, tightest=tightest)


def test_a_miss_makes_the_search_read_the_missed_slo_as_confirmation_did():
    bias = Bias(SLOS, 1.0)
    assert bias.passes(_result(0.9)) and bias.text() == ""
    more = [_result(0.3)]                            # a larger design the search read
    bias.learn(_result(0.9), _result(1.08), more)    # the event simulation read it 1.2x the fast model
    assert bias.factor == {("tbt", 99): pytest.approx(1.2)} and bias.text() == "TBT P99 x1.20"
    assert not bias.passes(_result(0.9))             # the point it missed fails the search now
    assert not bias.passes(_result(0.84))            # 0.84 x 1.2 = 1.008
    assert bias.passes(_result(0.82))                # 0.984
    assert bias.passes(_result(0.82, ratio_of_others=0.99))   # the other SLOs are read as before
    assert not bias.passes(_result(0.5, completed=9))         # an unfinished request fails as ever


def test_only_the_slos_that_failed_confirmation_are_learned_and_each_step_is_bounded():
    bias = Bias(SLOS, 0.9)                           # a 10% margin: confirmation asks every SLO below 0.9
    more = [_result(0.1, ratio_of_others=0.1)]
    bias.learn(_result(0.5, ratio_of_others=0.6), _result(0.95, ratio_of_others=0.7), more)
    assert set(bias.factor) == {("tbt", 99)} and bias.factor[("tbt", 99)] == pytest.approx(1.9)
    bias.learn(_result(0.1), _result(math.inf), more)   # a confirm run that never finished
    assert bias.factor[("tbt", 99)] == MAX_STEP      # the largest step, never infinity
    bias.learn(None, _result(2.0))                   # nothing the search ran: nothing learned
    assert bias.factor[("tbt", 99)] == MAX_STEP


def test_a_factor_never_fails_an_slo_where_the_search_read_it_least():
    # Llama-3.1-70B at 1,000 req/s of conversation on H100:H100: the search passed 111+3 (TBT P50 at
    # 0.61 of its limit, as in every larger design: the decode step alone sets it) where the event
    # simulation read 1.89 (the decodes spilled onto the prompt machines). A factor of 2 there failed
    # every design of the grid, and the search simulated all of it.
    bias = Bias(SLOS, 1.0)
    bias.learn(_result(0.61), _result(1.89), [_result(0.60), _result(0.605)])
    assert bias.factor[("tbt", 99)] == pytest.approx(0.99 / 0.60)
    assert bias.passes(_result(0.60)) and not bias.passes(_result(0.61))
    bias.learn(_result(0.995), _result(1.89), [_result(0.99)])   # its least read at the threshold already
    assert bias.factor[("tbt", 99)] == pytest.approx(0.99 / 0.60)   # nothing tighter learned


def test_after_its_last_allowed_candidate_fails_the_event_simulation_searches_the_grid():
    # Splitwise-AA at 70 req/s of coding, one stream: the search's first candidate 56+5 fails the event
    # simulation (112%). Allowed one rejection, the planner used to give the design up as unconfirmed;
    # now the event simulation searches the grid itself and finds the answer of the full plan, 55+6.
    aa = plan(goal="min-cost", rps=70, designs="AA", jobs=1, seeds=1, max_confirm=1).get("AA")
    assert (aa.status, aa.prompt, aa.token) == ("ok", 55, 6), aa.note
    assert aa.result.method == "events" and aa.result.slo_met
    assert "after 1 candidate failed, the event simulation searched the grid itself" in aa.note
