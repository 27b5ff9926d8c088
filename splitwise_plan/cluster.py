"""A cluster to simulate: a design with machine counts, resolved to machines and latency models."""

from __future__ import annotations

from dataclasses import dataclass, field

from .latency_model import LatencyModel
from .machines import Machine
from .models import ModelSpec

GIB = 1024**3


@dataclass(frozen=True)
class SchedulerConfig:
    """Scheduling constants; defaults are the reference simulator's."""

    max_batch_tokens: int = 2048          # prompt tokens (+1 per decoding request) in one batch
    max_batch_size: int = 512             # requests in one batch
    max_preemptions: int = 4              # mixed batching: a task preempted this often runs first
    prompt_max_pending_tokens: int = 8192  # a prompt queue longer than this borrows a token machine
    transfer_bandwidth_bytes_s: float = 200 * GIB  # KV-cache transfer
    layerwise_transfer: bool = False      # overlap the transfer with the prompt compute (10x bandwidth)
    flow_retry_s: float = 1.0             # a transfer waits this long when the token machine is full
    mixed_pool: bool = True               # borrow machines across pools when one is overloaded

    @property
    def effective_bandwidth(self) -> float:
        return self.transfer_bandwidth_bytes_s * (10.0 if self.layerwise_transfer else 1.0)


@dataclass(frozen=True)
class Pool:
    """The machines of one pool: type, count and the latency model of that hardware."""

    machine: Machine
    count: int
    latency: LatencyModel = field(repr=False)


@dataclass(frozen=True)
class Cluster:
    """A fully resolved cluster design.

    ``token`` is None for a baseline: every machine of ``prompt`` runs both phases.
    """

    design: str
    model: ModelSpec
    prompt: Pool
    token: Pool | None
    scheduler: SchedulerConfig = SchedulerConfig()

    @property
    def is_baseline(self) -> bool:
        return self.token is None

    @property
    def n_machines(self) -> int:
        return self.prompt.count + (self.token.count if self.token else 0)

    @property
    def cost(self) -> float:
        return self.prompt.count * self.prompt.machine.cost + (
            self.token.count * self.token.machine.cost if self.token else 0.0)

    @property
    def power(self) -> float:
        return self.prompt.count * self.prompt.machine.power + (
            self.token.count * self.token.machine.power if self.token else 0.0)

    def kv_bytes(self, tokens):
        return tokens * self.model.kv_bytes_per_token
