"""A decode step that grows with the KV cache its batch holds: the estimate's rate, and both simulators' use of it.

Truth: the rate of the analytic stack is its memory roofline (a decode step reads each sequence's KV cache once,
at the stack's share of the GPUs' bandwidth); a lone request's decode iterations each hold one more token than
the last, so their times add up by hand from the latency model.
"""

from __future__ import annotations

import numpy as np
import pytest

from splitwise_plan.inputs.machines import BUILTIN_MACHINES
from splitwise_plan.inputs.models import get_model
from splitwise_plan.inputs.workloads import RequestStream
from splitwise_plan.perf.profiles import ProfileSet
from splitwise_plan.perf.sources import sourced_latency
from splitwise_plan.perf.stack import load_stack
from splitwise_plan.sim.simulator import Simulator

H100 = BUILTIN_MACHINES["dgx-h100"]
BOUND = 1000   # the KV tokens per sequence the estimate's token curve is read at


def _estimate():
    stack = load_stack("vllm").with_context(BOUND)
    return stack, sourced_latency(ProfileSet.load(), get_model("llama-3.1-70b"), H100, 8, stack).latency


def test_the_rate_is_the_kv_cache_read_at_the_stacks_bandwidth():
    stack, lm = _estimate()
    model = get_model("llama-3.1-70b")
    read = model.kv_bytes_per_token / (8 * H100.hbm_bandwidth_tbps * 1e12 * stack.eff_bw)   # s per KV token
    assert lm.kv_s_per_token == pytest.approx(read, rel=0.02) and lm.context_tokens == BOUND
    assert lm.token_time(32, 32 * 5000) == pytest.approx(lm.token_time(32) + lm.kv_s_per_token * 32 * 4000)
    assert lm.token_time(32, 32 * BOUND) == pytest.approx(lm.token_time(32))


def test_measured_profiles_read_no_context():
    lm = sourced_latency(ProfileSet.load(), get_model("llama2-70b"), H100, 8, load_stack("paper-2023")).latency
    assert lm.kv_s_per_token == 0 and lm.token_time(16, 10**6) == lm.token_time(16)


@pytest.mark.parametrize("method, rel", [("events", 1e-9), ("fluid", 1e-4)])
def test_a_lone_requests_decode_steps_grow_by_a_token_each(method, rel):
    """8,000 prompt tokens against a curve read at 1,000: every step holds 7,000 more, and one more each time."""
    stack, lm = _estimate()
    prompt, output = 8000, 200
    stream = RequestStream(np.array([0.0]), np.array([prompt]), np.array([output]))
    sim = Simulator(stream, "llama-3.1-70b", stack=stack, method=method)
    _, table = sim.run_requests("baseline:H100", 1)
    decode_s = table["e2e_s"][0] - table["ttft_s"][0]
    steps = [lm.token_time(1, prompt + 1 + j) for j in range(output - 1)]
    assert decode_s == pytest.approx(sum(steps), rel=rel)
    assert decode_s > (output - 1) * lm.token_time(1) * 1.01   # (blind to the context, it was this: 1.1% less)
