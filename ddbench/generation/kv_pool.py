"""The KV pool as SGLang keeps it: one bf16 row of 576 per token and layer, handed out page by page.

Pages come from a seeded, shuffled free list, so a request's rows are scattered over the pool; a freed
page goes back to the front of the list and is the next one handed out, so rejected draft slots are
reused at once. Every row not holding a committed or in-flight token is NaN: a kernel that reads a slot
it should not turns the logits to NaN instead of passing quietly.

A request's token at logical position p lives at `table[p // page_size] * page_size + p % page_size`.
With page_size 1 accepting drafts only re-points the table (as SGLang frees the rejected slots and keeps
the accepted ones where they are); with larger pages the accepted rows are copied to their final
positions, so every page holds its tokens in order.
"""

from __future__ import annotations

import random

import torch

from ddbench.mla import HEAD_DIM_QK


class PoolExhausted(RuntimeError):
    """More tokens in flight than the pool was sized for (a harness sizing bug, not a kernel's fault)."""


class PagedKvPool:
    def __init__(
        self,
        layers: int,
        pages: int,
        page_size: int,
        seed: int,
        device: torch.device,
        dtype: torch.dtype = torch.bfloat16,  # the kernel's layout; float32 lets a test see the model's error
    ) -> None:
        self.page_size = page_size
        self.rows = pages * page_size
        self.k_buffers = [
            torch.full((self.rows, 1, HEAD_DIM_QK), float("nan"), dtype=dtype, device=device)
            for _ in range(layers)
        ]
        free = list(range(pages))
        random.Random(f"pool:{seed}").shuffle(free)
        self._free = free
        self._tables: list[list[int]] = []  # per request: its pages, or (page_size 1) its slots in order

    def add_request(self) -> int:
        self._tables.append([])
        return len(self._tables) - 1

    def _page(self) -> int:
        if not self._free:
            raise PoolExhausted(f"the KV pool of {self.rows} rows is full")
        return self._free.pop(0)

    def reserve(self, request: int, length: int) -> None:
        """Pages for logical positions [0, length)."""
        table = self._tables[request]
        while len(table) * self.page_size < length:
            table.append(self._page())

    def slots(self, request: int, start: int, end: int) -> torch.Tensor:
        """Pool rows of logical positions [start, end), int64 on the pool's device."""
        ps, table = self.page_size, self._tables[request]
        rows = [table[p // ps] * ps + p % ps for p in range(start, end)]
        return torch.tensor(rows, dtype=torch.int64, device=self.k_buffers[0].device)

    def write(self, layer: int, slots: torch.Tensor, kv: torch.Tensor) -> None:
        self.k_buffers[layer][slots, 0] = kv

    def keep(self, request: int, start: int, chosen: list[int]) -> None:
        """After a verify step wrote positions [start, start + q_len): keep the rows at `start + c` for
        each c in `chosen` (increasing, chosen[i] >= i) as positions start, start + 1, ...; free the rest."""
        ps, table = self.page_size, self._tables[request]
        if ps == 1:
            kept, chosen_set = [table[start + c] for c in chosen], set(chosen)
            dropped = [s for i, s in enumerate(table[start:]) if i not in chosen_set]
            table[start:] = kept
            self._release_slots(dropped)
            return
        for i, c in enumerate(chosen):
            if c != i:
                src = self.slots(request, start + c, start + c + 1)
                dst = self.slots(request, start + i, start + i + 1)
                for buffer in self.k_buffers:
                    buffer[dst] = buffer[src]
        self.truncate(request, start + len(chosen))

    def truncate(self, request: int, length: int) -> None:
        """Keep logical positions [0, length): rows past it turn NaN, pages wholly past it are freed."""
        ps, table = self.page_size, self._tables[request]
        end = len(table) * ps
        if end > length:
            tail = self.slots(request, length, end)
            for buffer in self.k_buffers:
                buffer[tail] = float("nan")
        keep_pages = -(-length // ps)
        self._free[:0] = table[keep_pages:]
        del table[keep_pages:]

    def _release_slots(self, slots: list[int]) -> None:
        if not slots:
            return
        rows = torch.tensor(slots, dtype=torch.int64, device=self.k_buffers[0].device)
        for buffer in self.k_buffers:
            buffer[rows] = float("nan")
        self._free[:0] = slots

    def release(self, request: int) -> None:
        """A finished request gives its rows back."""
        self.truncate(request, 0)
