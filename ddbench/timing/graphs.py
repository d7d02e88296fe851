"""CUDA-graph mode, and the check that whatever is timed did kernel work.

Serving replays CUDA graphs, so that is what is timed on a GPU. A graph that captured nothing (the work
ran outside the capture, or on another stream) replays in a microsecond and would pass any budget; so
would a launch that returns without writing. Before sampling, each one is run once on a poisoned output:
an output that is still all NaN afterwards, or a graph with no nodes, is an error, not a fast time.
"""

from __future__ import annotations

import ctypes
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

_NODE_COUNTERS = (  # found by soname: the libraries torch already loaded
    ("libcuda.so.1", "cuGraphGetNodes"),
    ("libcudart.so.13", "cudaGraphGetNodes"),
    ("libcudart.so.12", "cudaGraphGetNodes"),
)


class NoKernelWork(RuntimeError):
    """What would be timed does no work: its output stays poisoned, or its graph is empty."""


def poison(output: torch.Tensor) -> None:
    if output.is_floating_point():
        output.fill_(float("nan"))


def check_did_work(output: torch.Tensor, node_count: int | None, what: str) -> None:
    """Raise NoKernelWork when the graph has no nodes or `output` is still all NaN (the poison).

    `node_count` is None where torch does not expose the graph (then the output alone decides).
    """
    if node_count == 0:
        raise NoKernelWork(f"{what}: the captured CUDA graph has no nodes (the work ran outside the capture)")
    if output.is_floating_point() and output.numel() > 0 and bool(torch.isnan(output).all()):
        raise NoKernelWork(
            f"{what}: the output is still all NaN, as poisoned, after the call: it did no kernel work"
        )


def verify_call(
    call: Callable[[], object],
    output: torch.Tensor,
    before: Callable[[], object],
    node_count: int | None,
    what: str,
) -> None:
    """Poison `output` (and run `before`), make the call, wait for the device, then `check_did_work`."""
    before()
    poison(output)
    call()
    if output.is_cuda:
        torch.cuda.synchronize(output.device)
    check_did_work(output, node_count, what)


@dataclass
class CapturedGraph:
    graph: Any  # torch.cuda.CUDAGraph
    output: torch.Tensor  # what the captured launch returned: the replay writes it
    node_count: int | None

    def replay(self) -> None:
        self.graph.replay()


def _new_graph() -> tuple[Any, bool]:
    """A CUDAGraph that keeps its cudaGraph_t (so its nodes can be counted) where this torch allows it."""
    try:
        return torch.cuda.CUDAGraph(keep_graph=True), True
    except TypeError:  # older torch: no keep_graph, no raw graph
        return torch.cuda.CUDAGraph(), False


def _count_nodes(library: str, function: str, raw: int) -> int | None:
    try:
        count = ctypes.c_size_t(0)
        status = getattr(ctypes.CDLL(library), function)(ctypes.c_void_p(raw), None, ctypes.byref(count))
    except (OSError, AttributeError):
        return None
    return int(count.value) if status == 0 else None


def graph_node_count(graph: Any) -> int | None:
    """Nodes in the captured graph (the driver's cuGraphGetNodes, else the runtime's cudaGraphGetNodes: a
    cudaGraph_t is a CUgraph); None when neither can be asked here."""
    try:
        raw = graph.raw_cuda_graph()
    except Exception:  # not kept, or not exposed by this torch
        return None
    if not raw:
        return None
    for library, function in _NODE_COUNTERS:
        if (count := _count_nodes(library, function, raw)) is not None:
            return count
    return None


def warned_empty(messages: Sequence[str]) -> bool:
    """torch's own sign of an empty capture: its "The CUDA Graph is empty" warning at the end of capture."""
    return any("graph is empty" in m.lower() for m in messages)


def capture(launch: Callable[[], torch.Tensor]) -> CapturedGraph:
    """Warm `launch` up on a side stream (lazy init, autotuning, allocator), then capture one call."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        launch()
    torch.cuda.current_stream().wait_stream(side)
    graph, kept = _new_graph()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.cuda.graph(graph):
            output = launch()
    node_count = graph_node_count(graph) if kept else None
    if warned_empty([str(w.message) for w in caught]):
        node_count = 0
    if kept:
        graph.instantiate()
    torch.cuda.synchronize()
    return CapturedGraph(graph, output, node_count)
