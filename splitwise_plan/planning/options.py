"""A plan's options in one place: each field's default and help text.

:class:`~splitwise_plan.planning.request.PlanRequest` takes its defaults from :data:`PLAN_OPTIONS`, and
the command line its defaults and help texts (the simulation commands share the stream's and the
model's defaults). A field's option on the command line is its name with dashes (``budget_power``:
``--budget-power``) unless :data:`OPTION_OF` says otherwise; errors name fields with
:func:`~splitwise_plan.errors.input_name`, and the command line shows them as its options.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The designs a plan compares by default, as the command line lists them.
DEFAULT_DESIGNS = "AA,HH,HA,HHcap,A100,H100"


@dataclass(frozen=True)
class Option:
    """One field of a plan request: its default and what it means."""

    default: object
    help: str


PLAN_OPTIONS: dict[str, Option] = {
    "goal": Option(None, "min-cost or min-power (at --rps), max-throughput (within --budget-power/--budget-cost). "
                         "Default: min-cost, or max-throughput when a budget is given."),
    "rps": Option(None, "Requests per second to hold (iso-throughput goals)."),
    "budget_power": Option(None, "Power budget: machines, e.g. 40xH100, or a number in the machine catalog's units "
                                 "(a DGX-H100 is 10.2 kW; see `splitwise-plan machines`) (max-throughput)."),
    "budget_cost": Option(None, "Cost budget: machines, e.g. 40xH100, or a number in the machine catalog's units "
                                "(a DGX-H100 is 55.04 USD/h; see `splitwise-plan machines`) (max-throughput)."),
    "model": Option("bloom-176b", "Model: a built-in name (bloom-176b, llama2-70b, llama-3.1-8b/70b/405b, "
                                  "qwen2.5-72b, mistral-large-2, the mixtures of experts qwen3-30b-a3b, deepseek-v3 ...; see "
                                  "`splitwise-plan models`) or a Hugging Face config.json (or its folder)."),
    "dtype": Option(None, "Precision of the model's weights: bf16 or fp8 (default: the model's own)."),
    "stack": Option(None, "Serving stack of the latencies estimated from data sheets (where no profile measured the "
                          "model on a GPU): paper-2023 (the paper's, fitted on the shipped profiles; alias default), "
                          "vllm, sglang or trtllm (today's engines, fitted on AIConfigurator's data), or a stack TOML "
                          "file from `splitwise-plan profiles fit`. Default auto: paper-2023 for a model the profiles "
                          "measured (BLOOM-176B, Llama2-70B), else vllm. Or aiconfigurator:vllm|sglang|trtllm[@VERSION] "
                          "for every pool's latencies from AIConfigurator's measured kernels (the extra "
                          "splitwise-plan[aiconfigurator]; no version: the current one of each GPU)."),
    "workload": Option("coding", "coding, conversation, or a trace CSV (Azure or reference format) to draw sizes "
                                 "from."),
    "trace": Option(None, "Replay this trace (max-throughput scales its arrival times to each rate it tries)."),
    "slos": Option(None, "SLO TOML file (default: the paper's)."),
    "machines_file": Option(None, "Machine TOML file, overriding or extending the builtin machine catalog."),
    "profiles": Option(None, "Profile CSV. Default: the shipped perf_model.csv."),
    "designs": Option(DEFAULT_DESIGNS, "Comma list of designs; machine types of --machines-file as PROMPT:TOKEN or "
                                       "baseline:MACHINE."),
    "duration": Option(120.0, "Length of the generated stream, seconds."),
    "seed": Option(0, "Seed of the request stream."),
    "seeds": Option(3, "Plan over this many independent streams (seed..seed+K-1): an answer holds on their worst. "
                       "1 is the paper's single-stream method (a --trace is one stream)."),
    "jobs": Option(0, "Parallel workers (0: all cores)."),
    "tp": Option(None, "Tensor parallelism: 8 (every pool), 4:2 (the prompt pool's, the token pool's), or auto (the "
                       "planner chooses each pool's, among the machine's GPU counts at which the model fits, with the "
                       "machine counts). Default: 8 for the paper's models (BLOOM-176B, Llama2-70B), auto for others."),
    "strategy": Option("frontier", "Search: frontier, optuna or exhaustive."),
    "search_method": Option("auto", "Search simulator: fluid (the fast model), events, "
                                    "or auto (fluid where it is installed, else events)."),
    "confirm_method": Option("events", "Confirming simulator: events or fluid."),
    "margin": Option(0.0, "Hold every SLO with this margin: the tightest SLO's value/limit below 1 - margin, in the "
                          "search and the confirmation."),
    "headroom": Option(0.0, "Load headroom: hold every SLO at --rps x (1 + H), as `check --headroom` does (0.2: 20% more "
                            "load). Costs per token stay at --rps."),
    "latency_error": Option(None, "Check the answer with every phase's latencies this much slower (0.2: 20%), on every "
                                  "machine. Default: each estimated machine's held-out P90 error per phase (as "
                                  "`splitwise-plan profiles` prints it); measured latencies none."),
    "transfer": Option("serialized", "KV-cache transfer from prompt to token machine: after the prompt (serialized, "
                                     "the reference's default) or layer by layer during it (layerwise, ~90% hidden)."),
    "bandwidth": Option(200.0, "KV-cache transfer bandwidth between two machines, GiB/s (the reference's 200; 12.5 "
                               "for its Ethernet variant)."),
    "storage": Option(None, "Keep the search's Optuna trials: sqlite:///plan.db or postgresql://USER@HOST/DB "
                            "(default: in memory). Resumable; `splitwise-plan worker` processes can join."),
    "study": Option(None, "Study name prefix in --storage, one study NAME/<SHORT> per design, e.g. NAME/HH (default: "
                          "derived from the inputs)."),
}

#: Fields whose command-line option is not their name with dashes.
OPTION_OF = {"slos": "--slo"}


def default(name: str):
    """The default of the plan field ``name``."""
    return PLAN_OPTIONS[name].default


def option_name(name: str) -> str:
    """The command line's option for a field: ``budget_power`` is ``--budget-power``, ``slos`` ``--slo``."""
    return OPTION_OF.get(name, "--" + name.replace("_", "-"))
