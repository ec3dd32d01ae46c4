"""A vLLM stand-in: answers /metrics, /health and /v1/models on loopback the way `vllm serve` does.

Each GET /metrics returns the next recorded exposition text (the last one repeats), so scrapes see
counters move. Run it under the name `vllm` with vLLM's own command line, e.g.

    python <dir>/vllm serve /models/tiny-llama --port 8000 --max-num-seqs 4

so that the process looks like a real server to whoever reads its argv from /proc. What to serve
comes from the environment, leaving the command line vLLM's:

    LLMDIAG_STANDIN_METRICS   exposition files to serve in turn, separated by os.pathsep (required)
    LLMDIAG_STANDIN_HEALTH    HTTP status of GET /health (default 200)

Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

# prometheus_client's CONTENT_TYPE_LATEST, which vLLM's /metrics answers with
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _Replay:
    """The recorded /metrics texts, handed out in order; thread-safe."""

    def __init__(self, texts: list[bytes]) -> None:
        self._texts = texts
        self._next = 0
        self._lock = threading.Lock()

    def next_text(self) -> bytes:
        with self._lock:
            text = self._texts[min(self._next, len(self._texts) - 1)]
            self._next += 1
            return text


def _model_list(model: str, served_name: str, max_model_len: int, created: int) -> bytes:
    """The /v1/models answer, with the fields of vLLM's ModelList / ModelCard / ModelPermission."""
    permission = {
        "id": "modelperm-standin",
        "object": "model_permission",
        "created": created,
        "allow_create_engine": False,
        "allow_sampling": True,
        "allow_logprobs": True,
        "allow_search_indices": False,
        "allow_view": True,
        "allow_fine_tuning": False,
        "organization": "*",
        "group": None,
        "is_blocking": False,
    }
    card = {
        "id": served_name,
        "object": "model",
        "created": created,
        "owned_by": "vllm",
        "root": model,
        "parent": None,
        "max_model_len": max_model_len,
        "permission": [permission],
    }
    return json.dumps({"object": "list", "data": [card]}).encode()


def make_handler(replay: _Replay, health_status: int, models_body: bytes) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._answer(200, METRICS_CONTENT_TYPE, replay.next_text())
            elif path == "/health":
                self._answer(health_status, "application/json", b"")
            elif path == "/v1/models":
                self._answer(200, "application/json", models_body)
            else:
                self._answer(404, "application/json", json.dumps({"detail": "Not Found"}).encode())

        def _answer(self, status: int, content_type: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (http.server's signature)
            sys.stderr.write("standin: " + (format % args) + "\n")

    return Handler


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="vllm")
    parser.add_argument("subcommand", choices=["serve"])
    parser.add_argument("model")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--max-model-len", type=int, default=2048)
    args, _engine_flags = parser.parse_known_args(argv)  # the other vLLM flags only need to be visible

    files = [f for f in os.environ.get("LLMDIAG_STANDIN_METRICS", "").split(os.pathsep) if f]
    if not files:
        parser.error("LLMDIAG_STANDIN_METRICS names no exposition file")
    replay = _Replay([Path(f).read_bytes() for f in files])
    health = int(os.environ.get("LLMDIAG_STANDIN_HEALTH", "200"))
    models = _model_list(args.model, args.served_model_name or args.model, args.max_model_len, int(time.time()))

    server = ThreadingHTTPServer((args.host, args.port), make_handler(replay, health, models))
    print(f"standin: serving on http://{args.host}:{args.port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main(sys.argv[1:])
