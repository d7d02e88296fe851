"""The AROUND hook on SGLang's `extend_attention_fwd`: who serves a target-verify call, and the live check.

Modes (DDBENCH_APPLY): `shadow` — Triton serves; every Nth eligible call the candidate also runs, into a
poisoned scratch buffer, and is compared. `apply` — the candidate serves; every Nth call its output is
checked for NaN/Inf and unwritten elements. `apply+shadow` — the candidate serves; every Nth call Triton
also runs, into scratch, and is compared. A breach (a bound exceeded, NaN/Inf/unwritten output, an
exception in the candidate) serves Triton's output for that call, opens this process's breaker (Triton
serves from then on), is logged once with its figures and written as a breach capture.

Inside a CUDA-graph capture (SGLang's graph runner) nothing real flows: the candidate's capacity launch is
recorded into the graph (`launch_in_capture`), comparisons are skipped and counted, and a replay runs no
Python of ours. Every exception of the plugin itself is caught and counted, and Triton serves that call;
Triton's own exceptions pass through unchanged.
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ddbench.backends.protocol import Backend, GraphCapturableBackend, unsupported_by
from ddbench.capture.context import call_site, device_name, parallel_info, versions
from ddbench.capture.snapshot import unsupported
from ddbench.inputs.layout import VerifyInputs
from ddbench.metrics.figures import ParityFigures
from ddbench.poison import poison_, poisoned_mask
from ddbench.serving.apply_log import ApplyLog
from ddbench.serving.breach import Breach, write_breach
from ddbench.serving.breaker import Breaker
from ddbench.serving.call import ArgumentLayout, verify_inputs
from ddbench.serving.comparison import compare, serving_bounds
from ddbench.serving.counters import ApplyCounters
from ddbench.serving.settings import ApplySettings

log = logging.getLogger("ddbench.serving")

_LOGGED_ERRORS = 5


def _capturing(q: torch.Tensor) -> bool:
    return q.is_cuda and torch.cuda.is_current_stream_capturing()


def _raised(err: Exception) -> str:
    return f"the candidate raised {type(err).__name__}: {err}"


def _copy_or_none(t: torch.Tensor) -> torch.Tensor | None:
    """A copy of the candidate's output for the breach capture; none when even that fails (out of memory)."""
    try:
        return t.clone()
    except Exception:
        return None


@dataclass(slots=True)
class _Call:
    """One eligible call: its arguments by name and whether it is this round's compared one."""

    arguments: dict[str, Any]
    inputs: VerifyInputs  # the call's own tensors, writing into its o_extend
    index: int  # among this process's eligible calls
    sampled: bool
    capturing: bool


class ApplyHook:
    """Callable as SGLang's AROUND hook: `hook(original, *args, **kwargs)`."""

    def __init__(self, settings: ApplySettings, candidate: Backend) -> None:
        self.settings = settings
        self.candidate = candidate
        self.bounds = serving_bounds(settings.bounds)
        self.counters = ApplyCounters()
        self.breaker = Breaker()
        self.log = ApplyLog(settings.directory)
        self._layouts: dict[int, ArgumentLayout] = {}
        # Asked once: a runtime protocol check costs tens of microseconds.
        self._recordable = isinstance(candidate, GraphCapturableBackend)
        self._unavailable: str | None = None
        self._checked = False
        self._last_counters = 0.0
        self._rank: int | None = None
        self._started = False
        atexit.register(self.write_counters, final=True)

    # -- the hook ------------------------------------------------------------------------------------------

    def __call__(self, original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self.counters.seen += 1
        try:
            call = self._eligible(original, args, kwargs)
        except Exception:
            self._plugin_error("deciding on a call")
            call = None
        if call is None:
            return original(*args, **kwargs)
        if self.settings.candidate_serves:
            return self._apply(original, args, kwargs, call)
        return self._shadow(original, args, kwargs, call)

    def _layout(self, original: Callable[..., Any]) -> ArgumentLayout:
        layout = self._layouts.get(id(original))
        if layout is None:
            layout = self._layouts[id(original)] = ArgumentLayout(original)
        return layout

    def _eligible(self, original: Callable[..., Any], args: tuple, kwargs: dict) -> _Call | None:
        """The call, when the candidate takes part in it; None when Triton simply serves it (counted)."""
        layout = self._layout(original)
        if layout.get("custom_mask", args, kwargs) is None:
            return None  # not target-verify: prefill, decode, draft-extend
        if self.breaker.tripped:
            return self._left_to_triton()
        arguments = layout.arguments(args, kwargs)
        if arguments is None:  # the function will raise TypeError itself: let Triton's call do it
            return self._ineligible("arguments the function itself refuses")
        reason = unsupported(arguments) or self._candidate_problem()
        capturing = _capturing(arguments["q_extend"])
        if reason is None and capturing and self.settings.candidate_serves and not self._recordable:
            reason = f"{self.candidate.name} cannot be recorded into a CUDA graph (no launch_in_capture)"
        inputs = verify_inputs(arguments, arguments["o_extend"], None)
        if reason is None:
            reason = unsupported_by(self.candidate, inputs)
        if reason is not None:
            return self._ineligible(reason)
        if not self._started:
            self._start(arguments["q_extend"])
        index = self.counters.eligible  # SGLang calls attention from one thread a process
        self.counters.eligible += 1
        sampled = index % self.settings.every == 0
        if sampled and capturing:  # no real data flows while a graph is captured: nothing to judge
            self.counters.uncompared_graph += 1
            sampled = False
        if not self.settings.candidate_serves and not sampled:
            return self._left_to_triton()
        return _Call(arguments, inputs, index, sampled, capturing)

    def _left_to_triton(self) -> None:
        """Count a call the caller then hands to Triton unchanged."""
        self.counters.served_triton += 1
        return None

    def _ineligible(self, reason: str) -> None:
        if self.counters.count(self.counters.ineligible, reason):
            log.warning(
                "ddbench apply: Triton serves target-verify calls the candidate cannot take: %s", reason
            )
        self._left_to_triton()
        self._maybe_write_counters()  # a process whose every call is ineligible still says so in its log

    def _candidate_problem(self) -> str | None:
        """Why the candidate cannot run in this process (asked once, at the first target-verify call)."""
        if not self._checked:
            self._checked = True
            try:
                status = self.candidate.availability()
                self._unavailable = None if status.ok else f"unavailable: {status.detail}"
            except Exception as err:
                self._unavailable = f"unavailable: {type(err).__name__}: {err}"
            if self._unavailable:
                log.error(
                    "ddbench apply: candidate %s %s; Triton serves every call of this process",
                    self.candidate.name,
                    self._unavailable,
                )
                self.log.open(parallel_info()["tp_rank"])
                self.log.write("unavailable", backend=self.candidate.name, reason=self._unavailable)
        return self._unavailable

    # -- shadow: Triton serves, the candidate is compared ----------------------------------------------------

    def _shadow(self, original: Callable[..., Any], args: tuple, kwargs: dict, call: _Call) -> Any:
        result = original(*args, **kwargs)  # served, bits untouched
        self.counters.served_triton += 1
        served = call.arguments["o_extend"]
        try:
            scratch = poison_(torch.empty_like(served))
            inputs = dataclasses.replace(call.inputs, o_extend=scratch)
        except Exception:
            self._plugin_error("preparing the candidate's shadow run")
            return result
        try:
            self._run_candidate(call, inputs)
        except Exception as err:
            if self._open_breaker((_raised(err),)):
                self._report_breach(call, (_raised(err),), None, served, None)
            return result
        try:
            comparison = compare(scratch, served, self.bounds, self.candidate.name)
        except Exception:
            self._plugin_error("comparing the outputs")
            return result
        self._judged(call, comparison.figures, comparison.reasons, served, scratch)
        return result

    # -- apply: the candidate serves ------------------------------------------------------------------------

    def _apply(self, original: Callable[..., Any], args: tuple, kwargs: dict, call: _Call) -> Any:
        served = call.arguments["o_extend"]
        if call.sampled:
            try:
                poison_(served)  # an element the candidate leaves unwritten shows
            except Exception:
                self._plugin_error("poisoning the output of a checked call")
                return self._serve_triton(original, args, kwargs)
        try:
            self._run_candidate(call, call.inputs)
        except Exception as err:
            # The breaker opens before Triton runs: if Triton fails too (a CUDA error the candidate left),
            # the breach is still counted and later calls still go to Triton.
            first = self._open_breaker((_raised(err),))
            self.counters.count(self.counters.fallbacks, "the candidate raised")
            result = self._serve_triton(original, args, kwargs)
            if first:
                self._report_breach(call, (_raised(err),), None, served, None)
            return result
        self.counters.served_candidate += 1
        if not call.sampled:
            self._maybe_write_counters()  # also while a graph is captured: host I/O only, no sync
            return None  # SGLang's function returns nothing: the output is o_extend
        try:  # whatever goes wrong in the check, the call is served by Triton, never unchecked
            if self.settings.compares:
                self._apply_compared(original, args, kwargs, call, served)
            else:
                self._apply_checked(original, args, kwargs, call, served)
        except Exception:
            self._plugin_error("checking a sampled call")
            self._unserve_candidate("the check failed")
            original(*args, **kwargs)
        return None

    def _apply_compared(
        self, original: Callable[..., Any], args: tuple, kwargs: dict, call: _Call, served: torch.Tensor
    ) -> None:
        """apply+shadow: Triton into scratch beside the served candidate output, then judged."""
        scratch = poison_(torch.empty_like(served))
        shadow_args, shadow_kwargs = self._layout(original).with_output(args, kwargs, scratch)
        original(*shadow_args, **shadow_kwargs)
        comparison = compare(served, scratch, self.bounds, self.candidate.name)
        if comparison.breached:
            candidate_out = _copy_or_none(served)
            served.copy_(scratch)  # Triton's output is served instead
            self._unserve_candidate("breach")
            self._judged(call, comparison.figures, comparison.reasons, served, candidate_out)
        else:
            self._judged(call, comparison.figures, (), served, None)

    def _apply_checked(
        self, original: Callable[..., Any], args: tuple, kwargs: dict, call: _Call, served: torch.Tensor
    ) -> None:
        """apply alone: the sampled call's output must be finite and fully written."""
        unwritten = int(poisoned_mask(served).sum())
        nonfinite = int((~torch.isfinite(served)).sum()) - unwritten
        self.counters.checked += 1
        reasons = []
        if unwritten:
            reasons.append(f"{unwritten} output elements never written")
        if nonfinite:
            reasons.append(f"{nonfinite} NaN/Inf in {self.candidate.name} output")
        if not reasons:
            self._maybe_write_counters()
            return
        candidate_out = _copy_or_none(served)
        self._unserve_candidate("breach")
        original(*args, **kwargs)  # Triton's output is served
        if self._open_breaker(tuple(reasons)):
            self._report_breach(call, tuple(reasons), None, served, candidate_out)

    def _run_candidate(self, call: _Call, inputs: VerifyInputs) -> None:
        launch = self.candidate.launch_in_capture if call.capturing else self.candidate.run  # type: ignore[attr-defined]
        result = launch(inputs)
        if result is not inputs.o_extend:
            inputs.o_extend.copy_(result)

    def _serve_triton(self, original: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        self.counters.served_triton += 1
        return original(*args, **kwargs)

    def _unserve_candidate(self, why: str) -> None:
        """The candidate's output of this call is replaced by Triton's."""
        self.counters.served_candidate -= 1
        self.counters.served_triton += 1
        self.counters.count(self.counters.fallbacks, why)

    # -- judging and breaches ----------------------------------------------------------------------------

    def _judged(
        self,
        call: _Call,
        figures: ParityFigures,
        reasons: tuple[str, ...],
        triton_out: torch.Tensor,
        candidate_out: torch.Tensor | None,
    ) -> None:
        self.counters.record(figures)
        if reasons and self._open_breaker(reasons):
            self._report_breach(call, reasons, figures.to_json(), triton_out, candidate_out)
        else:
            self._maybe_write_counters()

    def _open_breaker(self, reasons: tuple[str, ...]) -> bool:
        """Trip the breaker and count the breach; True for the call that tripped it (the one reported)."""
        if not self.breaker.trip("; ".join(reasons)):
            return False
        self.counters.breaches += 1
        return True

    def _report_breach(
        self,
        call: _Call,
        reasons: tuple[str, ...],
        figures: dict[str, Any] | None,
        triton_out: torch.Tensor,
        candidate_out: torch.Tensor | None,
    ) -> None:
        """Say it once, write the breach capture and its replay suite, and the counters. Never raises."""
        try:
            site = call_site()
            parallel = parallel_info()
            breach = Breach(
                mode=self.settings.mode,
                backend=self.candidate.name,
                bounds=self.settings.bounds,
                reasons=reasons,
                figures=figures,
                call_index=call.index,
                layer=site.layer_id,
                rank=parallel["tp_rank"],
            )
        except Exception:
            self._plugin_error("describing a breach")
            return
        if call.capturing:
            written = "not written: made while a CUDA graph was captured, no real data to copy"
        else:
            try:
                capture, _suite = write_breach(
                    self.settings.directory,
                    breach,
                    call.arguments,
                    site,
                    parallel,
                    triton_out,
                    candidate_out,
                    self.bounds,
                    os.getpid(),
                )
                written = str(capture)
            except Exception as err:
                self.counters.log_errors += 1
                written = f"not written ({type(err).__name__}: {err})"
        log.error(
            "ddbench apply: BREACH on rank %s, layer %s, eligible call %d (%s, candidate %s, bounds %s): %s. "
            "Triton's output was served and serves every later call of this process. Capture: %s",
            breach.rank,
            breach.layer,
            call.index,
            self.settings.mode,
            self.candidate.name,
            self.settings.bounds,
            "; ".join(reasons),
            written,
        )
        self.log.write(
            "breach",
            **breach.to_json(),
            rank=breach.rank,
            layer=breach.layer,
            call_index=call.index,
            capture=written,
        )
        self.write_counters()

    # -- the log -----------------------------------------------------------------------------------------

    def _start(self, q: torch.Tensor) -> None:
        """The log's first line, once the rank is known (tried once; a failure is counted, never raised)."""
        self._started = True
        try:
            self._write_start(q)
        except Exception:
            self._plugin_error("writing the start line")

    def _write_start(self, q: torch.Tensor) -> None:
        parallel = parallel_info()
        self._rank = parallel["tp_rank"]
        self.log.open(self._rank)
        self.log.write(
            "start",
            pid=os.getpid(),
            **parallel,
            mode=self.settings.mode,
            backend=self.candidate.name,
            every=self.settings.every,
            bounds=self.settings.bounds,
            versions=versions(),
            device=device_name(q),
        )
        self._last_counters = time.monotonic()

    def _maybe_write_counters(self) -> None:
        if time.monotonic() - self._last_counters >= self.settings.counters_every_s:
            self.write_counters()

    def write_counters(self, final: bool = False) -> None:
        """One counters line (at most every minute, at each breach, and at exit). Never raises."""
        try:
            if final and self.counters.seen == 0:
                return
            self._last_counters = time.monotonic()
            counters = self.counters.to_json()
            counters["log_errors"] += self.log.failures
            self.log.write(
                "counters",
                pid=os.getpid(),
                rank=self._rank,
                mode=self.settings.mode,
                backend=self.candidate.name,
                tripped=self.breaker.tripped,
                final=final,
                **counters,
            )
        except Exception:
            self._plugin_error("writing the counters")

    def _plugin_error(self, what: str) -> None:
        self.counters.errors += 1
        if self.counters.errors <= _LOGGED_ERRORS:
            log.exception("ddbench apply: %s failed; Triton serves the call", what)
