"""The latency model: how long a prompt batch, a decode iteration or a mixed batch takes on one machine,
from the measured profiles (:mod:`.profiles`, :mod:`.latency_model`).

Imports only :mod:`splitwise_plan.inputs` and :mod:`splitwise_plan.errors` below it.
"""

from splitwise_plan.perf.analytic import (
    ACCELERATORS,
    ARCHITECTURES,
    Accelerator,
    Architecture,
    HeldOutError,
    estimate_rows,
    fit_stack,
    held_out_errors,
    predict_times,
)
from splitwise_plan.perf.stack import Stack, load_stack

__all__ = ["ACCELERATORS", "ARCHITECTURES", "Accelerator", "Architecture", "HeldOutError", "Stack",
           "estimate_rows", "fit_stack", "held_out_errors", "load_stack", "predict_times"]
