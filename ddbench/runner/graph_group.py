"""The buffers and launches a CUDA-graph group of cases shares: one capture, replayed at each case's lengths.

A suite's `sglang_buffers` in `cuda-graph` mode expands into a group of cases run one after another: the
first call's buffers (over-allocated for the group's capacity) become the group's, each backend's launch is
prepared on them once (`replayable`: for the custom kernel, planned for the capacity, with no host view of
the lengths), and every later case of the group writes its call into those buffers and launches the same
prepared launch again, as SGLang's graph runner copies a batch into its captured buffers and replays.
A replay selected without its group's earlier cases starts the group itself: the buffers and plan are the
same, as they depend on the capacity alone.
"""

from __future__ import annotations

from ddbench.backends.protocol import Backend, Launch, replayable
from ddbench.inputs.layout import VerifyInputs
from ddbench.inputs.served_buffers import write_into
from ddbench.suite.ids import canonical_json
from ddbench.suite.model import Case


def group_key(case: Case) -> str:
    """What every case of one group shares: its workload but for the lengths and which replay it is."""
    shape = case.shape()
    shape.pop("prefix_lens")
    shape["sglang_buffers"].pop("replay")
    return canonical_json([case.suite, shape])


class GraphGroup:
    """The group being run: its buffers and each backend's prepared launch."""

    def __init__(self) -> None:
        self._key: str | None = None
        self._buffers: VerifyInputs | None = None
        self._launches: dict[str, Launch] = {}

    def enter(self, case: Case) -> None:
        """Let go of the group held (its capacity-sized buffers, launches and captured graphs) unless `case`
        belongs to it: called before a case's inputs are made, so two groups are never held at once."""
        if not case.graph_replayed or group_key(case) != self._key:
            self._key, self._buffers, self._launches = None, None, {}

    def bind(self, case: Case, inputs: VerifyInputs) -> VerifyInputs:
        """The buffers `case` runs on: its own inputs when it starts a group, else the group's buffers with
        its call written into them."""
        key = group_key(case)
        if key == self._key and self._buffers is not None:
            return write_into(self._buffers, inputs)
        self._key, self._buffers, self._launches = key, inputs, {}
        return inputs

    def launch(self, backend: Backend) -> Launch:
        """`backend`'s launch on the group's buffers, prepared at its first call."""
        if self._buffers is None:
            raise RuntimeError("no group bound")
        if backend.name not in self._launches:
            self._launches[backend.name] = replayable(backend, self._buffers)
        return self._launches[backend.name]
