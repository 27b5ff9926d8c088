"""``splitwise-plan profiles show``: the prefill and decode times a plan would use for one model on one machine,
with their source (a measured profile, a stack's estimate, or AIConfigurator's kernels), as a table or JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from splitwise_plan.cli.app import console
from splitwise_plan.errors import SplitwisePlanError


def whole_numbers(text: str, flag: str) -> list[int]:
    """``--batch 1,32,128`` as numbers; a one-line user error naming ``flag`` where one is not a positive whole number."""
    out = []
    for part in str(text).split(","):
        try:
            value = int(part.strip())
        except ValueError:
            value = 0
        if value < 1:
            raise SplitwisePlanError(f"{flag} takes positive whole numbers separated by commas (e.g. 1,32,128), "
                                     f"got {part.strip()!r}")
        out.append(value)
    return out


def latency_rows(model, machine, tp: int, profiles, stack, prompt_tokens, batches, contexts) -> dict:
    """``{"source": ..., "rows": [...]}``: the prefill of one prompt of each size, and the decode step of each batch
    at each context (the KV tokens each sequence holds), as the plan's simulators read them from the source."""
    from types import SimpleNamespace

    from splitwise_plan.perf.sources import for_requests, sourced_latency

    def at(c):   # the source bound to requests of mean context ``c``
        return for_requests(stack, SimpleNamespace(prompt_tokens=[c], output_tokens=[0]))

    first = sourced_latency(profiles, model, machine, tp, at(contexts[0]))
    rows = [{"phase": "prefill", "batch": 1, "tokens": int(n), "ms": float(first.latency.prompt_time(n)) * 1e3}
            for n in prompt_tokens]
    for c in contexts:
        lm = sourced_latency(profiles, model, machine, tp, at(c)).latency
        rows += [{"phase": "decode", "batch": int(b), "context": int(c), "ms": float(lm.token_time(b)) * 1e3}
                 for b in batches]
    reads_context = hasattr(stack, "with_context") and first.kind != "measured"   # (aiconfigurator's kernels)
    return {"source": first.detail, "reads_context": reads_context, "rows": rows}


def show(model: str, machine: str, tp: int, dtype: Optional[str], stack: Optional[str], prompt_tokens: str,
         batch: str, context: str, as_json: bool, profiles: Optional[Path], machines_file: Optional[Path]) -> None:
    """Print (or write as JSON to stdout) what a plan of ``model`` on ``machine`` would read."""
    import json

    from splitwise_plan.inputs.machines import load_machines, machine_by_name
    from splitwise_plan.inputs.models import get_model
    from splitwise_plan.perf.profiles import load_profiles
    from splitwise_plan.perf.sources import resolve_stack
    from splitwise_plan.sim.cluster import instance_layout

    prompts = whole_numbers(prompt_tokens, "--prompt-tokens")
    batches, contexts = whole_numbers(batch, "--batch"), whole_numbers(context, "--context")
    spec = get_model(model, dtype=dtype)
    m = machine_by_name(load_machines(machines_file), machine)
    instance_layout(m, tp, False, spec)   # (a TP the machine cannot run, or weights that do not fit: one line)
    ps = load_profiles(profiles)
    chosen, why = resolve_stack(stack, ps, spec)
    doc = latency_rows(spec, m, tp, ps, chosen, prompts, batches, contexts)
    if why:
        doc["stack"] = f"{chosen.name} ({why})"
    if as_json:
        typer.echo(json.dumps(doc, indent=2))
        return
    table = Table(title=f"{spec.name} on {m.name} at TP{tp}: what a plan reads",
                  caption=f"source: {doc['source']}" + (f"; stack {doc['stack']}" if why else "")
                  + ("" if doc["reads_context"] else "; its decode step does not read the context"))
    for col in ("phase", "batch", "tokens / context", "ms"):
        table.add_column(col, justify="left" if col == "phase" else "right")
    for r in doc["rows"]:
        table.add_row(r["phase"], str(r["batch"]), f"{r.get('tokens', r.get('context')):,}", f"{r['ms']:.2f}")
    console().print(table)
