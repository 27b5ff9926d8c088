"""The latency model: how long a prompt batch, a decode iteration or a mixed batch takes on one machine,
from the measured profiles (:mod:`.profiles`, :mod:`.latency_model`).

Imports only :mod:`splitwise_plan.inputs` and :mod:`splitwise_plan.errors` below it.
"""
