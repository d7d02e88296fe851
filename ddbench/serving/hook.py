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
from ddbench.inputs.layout import VerifyInputs, poison_, poisoned_mask
from ddbench.serving.apply_log import ApplyLog
from ddbench.serving.breach import Breach, write_breach
from ddbench.serving.breaker import Breaker
from ddbench.serving.call import ArgumentLayout, verify_inputs
from ddbench.serving.comparison import compare, serving_bounds
from ddbench.serving.counters import ApplyCounters
from ddbench.serving.settings import ApplySettings

log = logging.getLogger("ddbench.serving")

COUNTERS_EVERY_S = 60.0  # a counters line at most this often (and at every breach, and at exit)
_LOGGED_ERRORS = 5


def _capturing(q: torch.Tensor) -> bool:
    return q.is_cuda and torch.cuda.is_current_stream_capturing()


class _NothingToWrite(Exception):
    pass


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
        self._said: set[str] = set()
        self._rank: int | None = None
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
            return self._triton_serves()
        arguments = layout.arguments(args, kwargs)
        reason = unsupported(arguments) or self._candidate_problem()
        capturing = _capturing(arguments["q_extend"])
        if reason is None and capturing and self.settings.candidate_serves and not self._recordable:
            reason = f"{self.candidate.name} cannot be recorded into a CUDA graph (no launch_in_capture)"
        inputs = verify_inputs(arguments, arguments["o_extend"], None)
        if reason is None:
            reason = unsupported_by(self.candidate, inputs)
        if reason is not None:
            if self.counters.count(self.counters.ineligible, reason):
                self._say_once(
                    f"ineligible:{reason}",
                    "Triton serves target-verify calls the candidate cannot take: %s",
                    reason,
                )
            return self._triton_serves()
        index = self.counters.eligible  # SGLang calls attention from one thread a process
        self.counters.eligible += 1
        if index == 0:
            self._start()
        sampled = index % self.settings.every == 0
        if sampled and capturing:  # no real data flows while a graph is captured: nothing to judge
            self.counters.uncompared_graph += 1
            sampled = False
        if not self.settings.candidate_serves and not sampled:
            return self._triton_serves()
        return _Call(arguments, inputs, index, sampled, capturing)

    def _triton_serves(self) -> None:
        self.counters.served_triton += 1
        return None

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
        scratch: torch.Tensor | None = None
        try:
            scratch = poison_(torch.empty_like(served))
            self._run_candidate(call, scratch)
        except Exception as err:
            self._breach_safely(
                call, (f"the candidate raised {type(err).__name__}: {err}",), None, served, None
            )
            return result
        self._compare_safely(call, scratch, served, served_side="triton")
        return result

    # -- apply: the candidate serves ------------------------------------------------------------------------

    def _apply(self, original: Callable[..., Any], args: tuple, kwargs: dict, call: _Call) -> Any:
        served = call.arguments["o_extend"]
        try:
            if call.sampled:
                poison_(served)  # an element the candidate leaves unwritten shows
            self._run_candidate(call, served)
        except Exception as err:
            result = original(*args, **kwargs)  # Triton's bits are served
            self.counters.served_triton += 1
            self.counters.count(self.counters.fallbacks, "the candidate raised")
            self._breach_safely(
                call, (f"the candidate raised {type(err).__name__}: {err}",), None, served, None
            )
            return result
        self.counters.served_candidate += 1
        if not call.sampled:
            return None  # SGLang's function returns nothing: the output is o_extend
        if self.settings.compares:
            layout = self._layout(original)
            try:  # the candidate served this call: Triton failing beside it must not fail the server
                scratch = poison_(torch.empty_like(served))
                shadow_args, shadow_kwargs = layout.with_output(args, kwargs, scratch)
                original(*shadow_args, **shadow_kwargs)
            except Exception:
                self._plugin_error("Triton's shadow run (the candidate's output is served, uncompared)")
                return None
            if self._compare_safely(call, served, scratch, served_side="candidate"):
                served.copy_(scratch)  # breached: Triton's output is served instead
        else:
            self._check_alone_safely(original, args, kwargs, call, served)
        return None

    def _run_candidate(self, call: _Call, out: torch.Tensor) -> torch.Tensor:
        inputs = (
            call.inputs if out is call.inputs.o_extend else dataclasses.replace(call.inputs, o_extend=out)
        )
        launch = self.candidate.launch_in_capture if call.capturing else self.candidate.run  # type: ignore[attr-defined]
        result = launch(inputs)
        if result is not out:
            out.copy_(result)
        return out

    # -- judging -----------------------------------------------------------------------------------------

    def _compare_safely(
        self, call: _Call, candidate_out: torch.Tensor, triton_out: torch.Tensor, served_side: str
    ) -> bool:
        """Compare and count; True on a breach (the caller serves Triton's output)."""
        try:
            comparison = compare(candidate_out, triton_out, self.bounds, self.candidate.name)
        except Exception:
            self._plugin_error("comparing the outputs")
            return False
        self.counters.record(comparison.figures)
        if comparison.breached:
            if served_side == "candidate":
                candidate_out = candidate_out.clone()  # the served buffer is about to take Triton's output
                self.counters.served_candidate -= 1
                self.counters.served_triton += 1
                self.counters.count(self.counters.fallbacks, "breach")
            self._breach_safely(
                call, comparison.reasons, comparison.figures.to_json(), triton_out, candidate_out
            )
        else:
            self._maybe_write_counters()
        return comparison.breached

    def _check_alone_safely(
        self, original: Callable[..., Any], args: tuple, kwargs: dict, call: _Call, served: torch.Tensor
    ) -> None:
        """`apply` without a shadow: the sampled call's output must be finite and fully written."""
        try:
            unwritten = int(poisoned_mask(served).sum())
            nonfinite = int((~torch.isfinite(served)).sum()) - unwritten
        except Exception:
            self._plugin_error("checking the candidate's output")
            return
        reasons = []
        if unwritten:
            reasons.append(f"{unwritten} output elements never written")
        if nonfinite:
            reasons.append(f"{nonfinite} NaN/Inf in {self.candidate.name} output")
        if not reasons:
            self._maybe_write_counters()
            return
        candidate_out = served.clone()
        original(*args, **kwargs)  # Triton's output is served
        self.counters.served_candidate -= 1
        self.counters.served_triton += 1
        self.counters.count(self.counters.fallbacks, "breach")
        self._breach_safely(call, tuple(reasons), None, served, candidate_out)

    # -- breaches ----------------------------------------------------------------------------------------

    def _breach_safely(
        self,
        call: _Call,
        reasons: tuple[str, ...],
        figures: dict[str, Any] | None,
        triton_out: torch.Tensor,
        candidate_out: torch.Tensor | None,
    ) -> None:
        if not self.breaker.trip("; ".join(reasons)):
            return
        self.counters.breaches += 1
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
        written = "not written: made while a CUDA graph was captured, no real data to copy"
        try:
            if call.capturing:
                raise _NothingToWrite
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
        except _NothingToWrite:
            pass
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

    def _start(self) -> None:
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
            device=device_name(torch.empty(0, device="cuda")) if torch.cuda.is_available() else "cpu",
        )
        self._last_counters = time.monotonic()

    def _maybe_write_counters(self) -> None:
        if time.monotonic() - self._last_counters >= COUNTERS_EVERY_S:
            self.write_counters()

    def write_counters(self, final: bool = False) -> None:
        """One counters line (at most every minute, at each breach, and at exit). Never raises."""
        try:
            if final and self.counters.seen == 0:
                return
            self._last_counters = time.monotonic()
            self.counters.log_errors = max(self.counters.log_errors, self.log.failures)
            self.log.write(
                "counters",
                pid=os.getpid(),
                rank=self._rank,
                mode=self.settings.mode,
                backend=self.candidate.name,
                tripped=self.breaker.tripped,
                final=final,
                **self.counters.to_json(),
            )
        except Exception:
            self._plugin_error("writing the counters")

    def _say_once(self, key: str, message: str, *args: Any) -> None:
        if key not in self._said:
            self._said.add(key)
            log.warning("ddbench apply: " + message + " (said once)", *args)

    def _plugin_error(self, what: str) -> None:
        self.counters.errors += 1
        if self.counters.errors <= _LOGGED_ERRORS:
            log.exception("ddbench apply: %s failed; Triton serves the call", what)
