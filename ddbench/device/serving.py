"""The device check's serving step: the `cuda` kernel through the SGLang plugin, eager and under a CUDA graph.

SGLang's real HookRegistry wraps `extend_attention_fwd` with the plugin's hook; calls are made as the
Triton backend makes them (ddbench.capture.harness) in over-allocated buffers, at two lengths. Eager, in
apply+shadow with every call compared: Triton's and the kernel's outputs must agree within the `cuda`
bounds and nothing may breach. Under a graph, in apply: one call is captured as SGLang's graph runner
captures it, then the graph is replayed after each new call is written into the buffers; each replay must
match Triton on that call within the bounds, and the hook must not have run (its `seen` count stays put).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any

import torch

from ddbench.backends import get_backend
from ddbench.capture.harness import TARGET_MODULE, call_like_sglang
from ddbench.inputs import generate_inputs
from ddbench.inputs.served_buffers import write_into
from ddbench.metrics import judge, parity_figures
from ddbench.serving import plugin
from ddbench.serving.comparison import serving_bounds
from ddbench.suite import parse_suite

_GROUP = {
    "model": "kimi-k2.6",
    "layout": {"tp": 8},
    "batch_size": 4,
    "prefix": [700, 3000, 1, 1],
    "seed": 11,
    "tree": {"kind": "ddtree", "budget": 8},
    "sglang_buffers": {
        "mode": "cuda-graph",
        "max_context": 4096,
        "replay_prefix": [0, 4096, [1, 4000, 17, 2500]],
    },
}


def _arm(mode: str, module: Any, original: Any) -> Any:
    """SGLang's registry wraps the original afresh (never the previous step's hook) with this mode's hook."""
    from sglang.srt.plugins.hook_registry import HookRegistry

    module.extend_attention_fwd = original
    os.environ.update(DDBENCH_APPLY=mode, DDBENCH_APPLY_BACKEND="cuda", DDBENCH_APPLY_EVERY="1")
    os.environ.setdefault(
        "DDBENCH_APPLY_DIR", os.path.join(os.environ.get("OUT") or "results/device", "apply")
    )
    HookRegistry.reset()
    plugin.disarm()
    plugin.register()
    HookRegistry.apply_hooks()
    return plugin.active_hook()


def step_serving() -> dict[str, Any]:
    import importlib

    module = importlib.import_module(TARGET_MODULE)
    original = module.extend_attention_fwd
    # where HookRegistry will re-point a `from … import` of it, to put back afterwards
    places = [
        (m, n)
        for m in list(sys.modules.values())
        for n, v in list(getattr(m, "__dict__", {}).items())
        if v is original
    ]
    environment = {k: v for k, v in os.environ.items() if k.startswith("DDBENCH_APPLY")}
    triton = get_backend("triton")
    bounds = serving_bounds("cuda")
    cases = parse_suite({"name": "serving", "cases": [_GROUP]}, "device").cases
    calls = [generate_inputs(c, device="cuda") for c in cases]
    truth = []
    for x in calls:
        exact = x.exact()
        truth.append(triton.run(dataclasses.replace(exact, o_extend=exact.o_extend.clone())).clone())
    buffers = calls[0]
    report: dict[str, Any] = {"eager": [], "graph": []}

    def judged(out: torch.Tensor, want: torch.Tensor) -> dict[str, Any]:
        figures = parity_figures(out, want)
        verdicts = [judge(b, figures, "cuda") for b in bounds]
        return {"max_row_ulp": figures.max_row_ulp, "ok": not any(v.failed for v in verdicts)}

    try:
        hook = _arm("apply+shadow", module, original)
        for x, want in zip(calls, truth, strict=True):
            report["eager"].append(judged(call_like_sglang(write_into(buffers, x)), want))
        report["eager_counters"] = hook.counters.to_json()
        eager_ok = hook.counters.compared == len(calls) and not hook.breaker.tripped

        hook = _arm("apply", module, original)
        write_into(buffers, calls[0])
        call_like_sglang(buffers)  # SGLang warms up eagerly before it captures
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):  # its own capture stream, as SGLang's graph runner uses
            call_like_sglang(buffers)
        seen = hook.counters.seen
        for x, want in zip(calls, truth, strict=True):
            write_into(buffers, x)
            buffers.o_extend.fill_(float("nan"))
            graph.replay()
            torch.cuda.synchronize()
            report["graph"].append(judged(buffers.o_extend.clone(), want))
        report["python_at_replay"] = hook.counters.seen - seen
        report["graph_counters"] = hook.counters.to_json()
        graph_ok = report["python_at_replay"] == 0 and hook.counters.served_candidate >= 2
        report["ok"] = eager_ok and graph_ok and all(r["ok"] for r in report["eager"] + report["graph"])
    finally:
        for owner, name in places:
            setattr(owner, name, original)
        for key in [k for k in os.environ if k.startswith("DDBENCH_APPLY")]:
            del os.environ[key]
        os.environ.update(environment)
        plugin.disarm()
    return report
