"""Decide which calls to capture, copy them, and write them on a background thread.

The serving path must never notice: every exception inside the recorder is caught, logged on
`logging.getLogger("ddbench.capture")` and counted; disk I/O happens on a writer thread behind a bounded
queue (when it is full the capture is dropped and counted, the caller never waits); the only work on the
caller's thread is the sampling decision, reading the index tensors and queueing the copies.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import logging
import os
import queue
import shutil
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ddbench.capture.context import call_site, parallel_info, served_model
from ddbench.capture.format import write_capture
from ddbench.capture.snapshot import CallSnapshot, unsupported
from ddbench.inputs.capture_format import SUFFIX

log = logging.getLogger("ddbench.capture")

_LOGGED_ERRORS = 5  # full tracebacks for the first few errors; later ones are only counted


@dataclass
class _Pending:
    snapshot: CallSnapshot
    o_extend: torch.Tensor
    path: Path
    metadata: dict[str, Any]


@dataclass
class Counters:
    seen: int = 0  # calls of the function
    eligible: int = 0  # target-verify calls (custom_mask present)
    written: int = 0  # capture files on disk
    bytes_written: int = 0
    skipped_unsupported: int = 0  # eligible but not a plain bf16 MLA call (fp8 KV, sinks, other head dims…)
    skipped_graph: int = 0  # made while a CUDA graph was being captured: nothing real to copy
    skipped_layer: int = 0  # not one of the requested layers (or the layer is unknown)
    skipped_sample: int = 0  # between two every-Nth samples
    skipped_max: int = 0  # after max_captures
    skipped_budget: int = 0  # would exceed max_bytes, or leave less than min_free_bytes on the disk
    dropped: int = 0  # the writer queue was full
    errors: int = 0  # exceptions caught inside the recorder


class Recorder:
    """One installed capture: its settings, its counters, its writer thread."""

    def __init__(
        self,
        directory: str | Path,
        *,
        every: int = 1,
        layers: Iterable[int] | None = None,
        max_captures: int = 64,
        max_bytes: int = 1 << 30,
        min_free_bytes: int = 1 << 30,
        model: str | None = None,
        queue_size: int = 4,
        source: str = "sglang-server",
    ) -> None:
        if every < 1 or max_captures < 0 or max_bytes < 0 or min_free_bytes < 0 or queue_size < 1:
            raise ValueError(
                f"every >= 1, max_captures/max_bytes/min_free_bytes >= 0, queue_size >= 1; "
                f"got every={every}, max_captures={max_captures}, max_bytes={max_bytes}, "
                f"min_free_bytes={min_free_bytes}, queue_size={queue_size}"
            )
        self.directory = Path(directory)
        self.every = every
        self.layers = None if layers is None else frozenset(int(n) for n in layers)
        self.max_captures = max_captures
        self.max_bytes = max_bytes
        self.min_free_bytes = min_free_bytes
        self.model = model
        self.source = source
        self._counters = Counters()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._queue_size = queue_size
        self._queue: queue.Queue[_Pending | None] = queue.Queue(queue_size)
        self._writer: threading.Thread | None = None
        self._writer_pid = 0
        self._in_flight = 0  # queued or being written
        self._reserved = 0  # bytes promised to queued captures
        self._accepted = 0  # captures counted against max_captures
        self._candidates = 0  # eligible calls of the selected layers, for every-Nth sampling
        self._warned: set[str] = set()
        self._restore: Callable[[], None] | None = None

    # -- counters ------------------------------------------------------------------------------------------

    def counters(self) -> dict[str, int]:
        with self._lock:
            return dataclasses.asdict(self._counters)

    def __getattr__(self, name: str) -> int:
        counters = self.__dict__.get("_counters")
        if counters is not None and name in Counters.__dataclass_fields__:
            return getattr(counters, name)
        raise AttributeError(name)

    def _count(self, name: str, by: int = 1) -> None:
        with self._lock:
            setattr(self._counters, name, getattr(self._counters, name) + by)

    def _warn_once(self, key: str, message: str, *args: Any) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(message + " (logged once)", *args)

    def _error(self, what: str) -> None:
        self._count("errors")
        errors = self._counters.errors
        if errors <= _LOGGED_ERRORS:
            log.exception("ddbench capture: %s failed; the serving call is unaffected", what)
            if errors == _LOGGED_ERRORS:
                log.error("ddbench capture: further errors are only counted (Recorder.errors)")

    # -- the wrapped call ----------------------------------------------------------------------------------

    def before_call(self, signature: inspect.Signature, args: tuple, kwargs: dict) -> _Pending | None:
        """Before the real call: decide, and queue the copies of the inputs. Never raises."""
        try:
            return self._before(signature, args, kwargs)
        except Exception:
            self._error("copying a call's inputs")
            return None

    def after_call(self, pending: _Pending | None) -> None:
        """After the real call: copy the output it wrote and hand the capture to the writer. Never raises."""
        if pending is None:
            return
        try:
            pending.snapshot.copy_output(pending.o_extend)
            pending.o_extend = None  # type: ignore[assignment]  # do not hold the server's buffer
            self._enqueue(pending)
        except Exception:
            self._release(pending.snapshot.nbytes, accepted=True)
            self._error("copying a call's output")

    def abandon(self, pending: _Pending | None) -> None:
        """The real call raised: forget the capture (its exception propagates unchanged)."""
        if pending is not None:
            self._release(pending.snapshot.nbytes, accepted=True)

    def _before(self, signature: inspect.Signature, args: tuple, kwargs: dict) -> _Pending | None:
        self._count("seen")
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        call = bound.arguments
        if call.get("custom_mask") is None:
            return None  # not target-verify: prefill, draft-extend, dense paths
        with self._lock:
            self._counters.eligible += 1
            call_index = self._counters.eligible - 1
        reason = unsupported(call)
        if reason is not None:
            self._count("skipped_unsupported")
            self._warn_once(
                "unsupported", "ddbench capture: skipping target-verify calls it cannot store: %s", reason
            )
            return None
        if call["q_extend"].is_cuda and torch.cuda.is_current_stream_capturing():
            self._count("skipped_graph")
            self._warn_once(
                "graph",
                "ddbench capture: target-verify runs inside CUDA graphs here, which replay without calling "
                "Python; start the server with --disable-cuda-graph to capture verify calls",
            )
            return None
        site = call_site()
        if self.layers is not None and site.layer_id not in self.layers:
            self._count("skipped_layer")
            if site.layer_id is None:
                self._warn_once(
                    "layer", "ddbench capture: the layer of a call is unknown; a layer filter skips it"
                )
            return None
        with self._lock:
            candidate = self._candidates
            self._candidates += 1
            if candidate % self.every:
                self._counters.skipped_sample += 1
                return None
            if self._accepted >= self.max_captures:
                self._counters.skipped_max += 1
                return None
        info = parallel_info()
        page_size = int(call.get("page_size") or 1)
        snapshot = CallSnapshot.plan_call(
            call, site, page_size, seed=call_index * 1009 + (info["tp_rank"] or 0)
        )
        with self._lock:
            over = self._counters.bytes_written + self._reserved + snapshot.nbytes > self.max_bytes
            full = self._accepted >= self.max_captures  # another thread may have taken the last slot
            if full:
                self._counters.skipped_max += 1
            elif over:
                self._counters.skipped_budget += 1
            else:
                self._reserved += snapshot.nbytes
                self._accepted += 1
        if full:
            return None
        if over:
            self._warn_once(
                "budget",
                "ddbench capture: disk budget reached (%d of %d bytes written); later captures are skipped",
                self._counters.bytes_written,
                self.max_bytes,
            )
            return None
        try:
            snapshot.copy_inputs(call)
            return _Pending(
                snapshot=snapshot,
                o_extend=call["o_extend"],
                path=self._file_name(info["tp_rank"], site.layer_id, call_index),
                metadata=snapshot.metadata(
                    call, site.layer_id, info, call_index, self.model or served_model(), self.source
                ),
            )
        except Exception:
            self._release(snapshot.nbytes, accepted=True)
            raise

    def _file_name(self, rank: int | None, layer: int | None, index: int) -> Path:
        r = "x" if rank is None else rank
        layer_part = "x" if layer is None else layer
        return self.directory / f"verify-r{r}-l{layer_part}-n{index:06d}-p{os.getpid()}{SUFFIX}"

    # -- the writer ----------------------------------------------------------------------------------------

    def _enqueue(self, pending: _Pending) -> None:
        self._ensure_writer()
        with self._lock:
            self._in_flight += 1
        try:
            self._queue.put_nowait(pending)
        except queue.Full:
            with self._lock:
                self._in_flight -= 1
                self._counters.dropped += 1
            self._release(pending.snapshot.nbytes, accepted=True)
            self._warn_once("dropped", "ddbench capture: the writer is behind; captures are being dropped")

    def _ensure_writer(self) -> None:
        if self._writer is not None and self._writer.is_alive() and self._writer_pid == os.getpid():
            return
        if self._writer_pid not in (0, os.getpid()):  # a forked child: the parent's thread and queue are gone
            self._queue = queue.Queue(self._queue_size)
            self._in_flight = 0
        self._writer_pid = os.getpid()
        self._writer = threading.Thread(target=self._write_loop, name="ddbench-capture-writer", daemon=True)
        self._writer.start()

    def _write_loop(self) -> None:
        while True:
            pending = self._queue.get()
            if pending is None:
                return
            try:
                self._write(pending)
            except Exception:
                self._error(f"writing {pending.path}")
            finally:
                self._release(pending.snapshot.nbytes, accepted=False, finished=True)

    def _write(self, pending: _Pending) -> None:
        size = pending.snapshot.nbytes
        self.directory.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(self.directory).free
        if free - size < self.min_free_bytes:
            self._count("skipped_budget")
            self._warn_once(
                "disk",
                "ddbench capture: %s has %d bytes free, under min_free_bytes %d; captures are skipped",
                self.directory,
                free,
                self.min_free_bytes,
            )
            return
        written = write_capture(pending.path, pending.snapshot.file_tensors(), pending.metadata)
        with self._lock:
            self._counters.written += 1
            self._counters.bytes_written += written

    def _release(self, nbytes: int, *, accepted: bool, finished: bool = False) -> None:
        """Give back the bytes reserved for a capture; `accepted` also gives back its max_captures slot."""
        with self._lock:
            self._reserved -= nbytes
            if accepted:
                self._accepted -= 1
            if finished:
                self._in_flight -= 1
                self._idle.notify_all()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued capture is written (or failed); False if `timeout` ran out first."""
        with self._idle:
            return self._idle.wait_for(lambda: self._in_flight == 0, timeout)

    # -- lifetime ------------------------------------------------------------------------------------------

    def uninstall(self, timeout: float | None = 60.0) -> None:
        """Put the original function back everywhere, then let the queued captures finish."""
        restore, self._restore = self._restore, None
        if restore is not None:
            restore()
        self.flush(timeout)
        if self._writer is not None and self._writer.is_alive() and self._writer_pid == os.getpid():
            with contextlib.suppress(queue.Full):
                self._queue.put(None, timeout=1.0)

    @property
    def installed(self) -> bool:
        return self._restore is not None

    def __repr__(self) -> str:
        return f"Recorder({str(self.directory)!r}, installed={self.installed}, {self.counters()})"
