"""A stand-in for `python -m sglang.launch_server` in the server-parity tests: the same HTTP routes and
answer shapes (/health_generate, /generate with log-probabilities and speculative counts), deterministic
tokens, and, in the server whose environment arms the ddbench plugin, the plugin's real log lines.

FAKE_BEHAVIOUR picks what the armed server does: same, diverge (token 5 of prompt 1 differs, confidently),
tie (the same, where both margins are tiny), unserved (no plugin log), breach, no-spec (no verify step),
crash (exits before it listens), hang (listens, never ready).
"""

from __future__ import annotations

import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

BEHAVIOUR = os.environ.get("FAKE_BEHAVIOUR", "same")
ARMED = os.environ.get("DDBENCH_APPLY", "off") not in ("", "off")
DIVERGE_AT = (1, 5)


def generation(prompt: int, new_tokens: int) -> dict:
    ids = [(prompt * 7 + k * 3) % 100 for k in range(new_tokens)]
    margins = [2.0] * new_tokens
    if BEHAVIOUR == "tie" and prompt == DIVERGE_AT[0]:
        margins[DIVERGE_AT[1]] = 0.01
    if ARMED and BEHAVIOUR in ("diverge", "tie") and prompt == DIVERGE_AT[0]:
        ids[DIVERGE_AT[1]] = 999
    verify = 0 if BEHAVIOUR == "no-spec" else max(1, new_tokens // 3)
    return {
        "text": " ".join(str(i) for i in ids),
        "meta_info": {
            "completion_tokens": new_tokens,
            "spec_verify_ct": verify,
            "spec_accept_length": new_tokens / verify if verify else None,
            "output_token_logprobs": [[-0.1, i, None] for i in ids],
            "output_top_logprobs": [
                [[-0.1, i, None], [-0.1 - m, i + 1, None]] for i, m in zip(ids, margins, strict=False)
            ],
        },
    }


def write_plugin_log() -> None:
    if not ARMED or BEHAVIOUR == "unserved":
        return
    from ddbench.serving.apply_log import ApplyLog  # the plugin's own writer (it imports torch: only here)
    from ddbench.serving.counters import ApplyCounters

    log = ApplyLog(Path(os.environ["DDBENCH_APPLY_DIR"]))
    log.open(0)
    counters = ApplyCounters(seen=40, eligible=40, served_candidate=40)
    if BEHAVIOUR == "breach":
        counters = ApplyCounters(seen=40, eligible=40, served_candidate=12, served_triton=28, breaches=1)
        counters.fallbacks = {"breach": 1}
    log.write("start", pid=os.getpid(), mode=os.environ["DDBENCH_APPLY"], backend="cuda", tp_rank=0)
    fields = counters.to_json()
    log.write("counters", pid=os.getpid(), rank=0, mode="apply", backend="cuda", final=False,
              tripped=BEHAVIOUR == "breach", **fields)  # fmt: skip


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def _answer(self, code: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/health_generate" and BEHAVIOUR != "hang":
            self._answer(200, {})
        else:
            self._answer(503, {"error": "loading"})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        assert body["sampling_params"]["temperature"] == 0.0 and body["top_logprobs_num"] == 2
        new_tokens = body["sampling_params"]["max_new_tokens"]
        answer = [generation(i, new_tokens) for i in range(len(body["text"]))]
        write_plugin_log()
        self._answer(200, answer)


def main() -> None:
    port = int(sys.argv[sys.argv.index("--port") + 1])
    print("fake server: loading", flush=True)
    if BEHAVIOUR == "crash":
        print("RuntimeError: CUDA out of memory while loading the weights", flush=True)
        sys.exit(1)
    time.sleep(0.2)  # a server that takes a moment to listen
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
