"""One SGLang server process on this machine's loopback: start it, wait until it generates, ask, stop it.

The server runs in its own process group with its output in a log file, so that stopping it reaches the
scheduler and detokenizer processes it spawned, and so that what it printed before dying can be shown.
Requests go to 127.0.0.1 only, with a deadline each: a server that hangs costs its timeout, not the run.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ddbench.results.server_parity import Generation

HOST = "127.0.0.1"
POLL_S = 2.0  # at most this long between two readiness checks (the first ones come sooner)
STOP_GRACE_S = 30.0
LOG_TAIL_CHARS = 4000


class ServerFailed(RuntimeError):
    """The server exited, never became ready, or answered a request wrongly; the message says which."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def log_tail(path: Path, chars: int = LOG_TAIL_CHARS) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(max(0, path.stat().st_size - chars))
            return handle.read().decode(errors="replace")
    except OSError:
        return ""


class SglangServer:
    """A launched server; use as a context manager so that it is stopped whatever happens."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], port: int, log_path: Path) -> None:
        self.argv = list(argv)
        self.port = port
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = log_path.open("wb")
        self.process = subprocess.Popen(
            self.argv,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def __enter__(self) -> SglangServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _url(self, path: str) -> str:
        return f"http://{HOST}:{self.port}{path}"

    def _exited(self, what: str) -> ServerFailed:
        return ServerFailed(
            f"the server exited with code {self.process.returncode} {what}; its last output:\n"
            + log_tail(self.log_path)
        )

    def wait_ready(self, timeout_s: float) -> float:
        """Seconds until /health_generate answers 200 (the server has generated a token)."""
        start = time.monotonic()
        pause = 0.1
        while True:
            if self.process.poll() is not None:
                raise self._exited("before it was ready")
            try:
                with urllib.request.urlopen(self._url("/health_generate"), timeout=POLL_S * 5) as reply:
                    if reply.status == 200:
                        return time.monotonic() - start
            except (urllib.error.URLError, OSError):
                pass  # not listening yet, or still loading
            if time.monotonic() - start > timeout_s:
                tail = log_tail(self.log_path)
                raise ServerFailed(f"not ready after {timeout_s:g} s; the server's last output:\n{tail}")
            time.sleep(pause)
            pause = min(POLL_S, pause * 1.5)

    def generate(self, prompts: Sequence[str], new_tokens: int, timeout_s: float) -> list[Generation]:
        """The prompts as one batch, greedy, with the top-2 log-probabilities of every generated token."""
        body = {
            "text": list(prompts),
            "sampling_params": {"temperature": 0.0, "max_new_tokens": new_tokens},
            "return_logprob": True,
            "top_logprobs_num": 2,
        }
        request = urllib.request.Request(
            self._url("/generate"),
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as reply:
                answer = json.loads(reply.read())
        except urllib.error.HTTPError as err:
            said = err.read()[:500].decode(errors="replace")
            raise ServerFailed(f"/generate answered {err.code}: {said}") from None
        except (urllib.error.URLError, OSError, ValueError) as err:
            if self.process.poll() is not None:
                raise self._exited("while generating") from None
            raise ServerFailed(f"/generate failed: {err}") from None
        if not isinstance(answer, list) or len(answer) != len(prompts):
            raise ServerFailed(f"/generate returned {type(answer).__name__}, not one answer per prompt")
        return [parse_generation(item, index) for index, item in enumerate(answer)]

    def stop(self) -> None:
        """SIGTERM to the whole group, then SIGKILL to what is left after a grace period; never raises."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if self.process.poll() is None:
                os.killpg(self.process.pid, signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.process.wait(STOP_GRACE_S)
            os.killpg(self.process.pid, signal.SIGKILL)  # children the server left behind, if any
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(STOP_GRACE_S)
        self._wait_group_gone()
        self._log.close()

    def _wait_group_gone(self) -> None:
        """Until no process of the group is left: the next server needs the GPU memory they hold."""
        deadline = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < deadline:
            try:
                os.killpg(self.process.pid, 0)
            except (ProcessLookupError, PermissionError):
                return
            time.sleep(0.2)


def parse_generation(item: Any, index: int) -> Generation:
    """One item of SGLang's /generate answer; ServerFailed naming the field when it has another shape."""
    where = f"/generate answer {index}"
    try:
        meta = item["meta_info"]
        tokens = meta["output_token_logprobs"]
        tops = meta["output_top_logprobs"]
        ids = tuple(int(entry[1]) for entry in tokens)
        margins = tuple(_margin(top) for top in tops)
        if len(margins) != len(ids):
            raise ValueError(f"{len(ids)} tokens but {len(margins)} top log-probability lists")
        accept = meta.get("spec_accept_length")
        return Generation(
            text=str(item["text"]),
            token_ids=ids,
            margins=margins,
            completion_tokens=int(meta.get("completion_tokens", len(ids))),
            spec_verify_ct=int(meta.get("spec_verify_ct") or 0),
            spec_accept_length=None if accept is None else float(accept),
        )
    except (KeyError, IndexError, TypeError, ValueError) as err:
        raise ServerFailed(f"{where}: unexpected shape: {type(err).__name__}: {err}") from None


def _margin(top: Sequence[Sequence[Any]]) -> float:
    """Top-1 minus top-2 log-probability (log-softmax shifts every logit alike: the logit margin)."""
    values = sorted((float(entry[0]) for entry in top), reverse=True)
    return values[0] - values[1] if len(values) >= 2 else float("inf")
