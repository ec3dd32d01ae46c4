"""A vLLM stand-in: replays a real vLLM server's recorded answers on loopback.

It serves the files of one recorded server in a bundle (fixtures/real/vllm-cpu/<scenario>/vllm/<name>.*):
each GET /metrics returns the next recorded scrape (`<name>.metrics.txt`, `.metrics.1.txt`, ...; the
last one repeats), so scrapes see the counters move as they did; /v1/models returns `<name>.models.json`;
/health answers the recorded status code.

Run it under vLLM's own command line, e.g.

    PYTHONPATH=<shim> python -m vllm.entrypoints.openai.api_server --model M --port 8000 --max-num-seqs 2

where <shim>/vllm/entrypoints/openai/api_server.py is this file, so that the process looks like the
recorded server to whoever reads its argv from /proc. What to serve comes from the environment,
leaving the command line vLLM's:

    LLMDIAG_STANDIN_RECORDING   the recorded server's path prefix, e.g. .../vllm/127.0.0.1_53735 (required)
    LLMDIAG_STANDIN_HEALTH      HTTP status of GET /health instead of the recorded one

Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

# prometheus_client's CONTENT_TYPE_LATEST, which vLLM's /metrics answers with
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Recording:
    """The recorded answers of one server; hands out the /metrics scrapes in order (thread-safe)."""

    def __init__(self, prefix: Path) -> None:
        scrape = re.compile(re.escape(prefix.name) + r"\.metrics(?:\.(\d+))?\.txt")
        numbered = [(int(m[1] or 0), p) for p in prefix.parent.iterdir() if (m := scrape.fullmatch(p.name))]
        if not numbered:
            raise ValueError(f"no recorded scrape {prefix}.metrics.txt")
        self.scrapes = [p.read_bytes() for _, p in sorted(numbered)]
        self.models = prefix.with_name(prefix.name + ".models.json").read_bytes()
        self.health = int(prefix.with_name(prefix.name + ".health.txt").read_text().strip())
        self._next = 0
        self._lock = threading.Lock()

    def next_scrape(self) -> bytes:
        with self._lock:
            text = self.scrapes[min(self._next, len(self.scrapes) - 1)]
            self._next += 1
            return text


def make_handler(recording: Recording, health_status: int) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # http.server's naming
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._answer(200, recording.next_scrape(), METRICS_CONTENT_TYPE)
            elif path == "/health":
                self._answer(health_status, b"")
            elif path == "/v1/models":
                self._answer(200, recording.models, "application/json")
            else:
                self._answer(404, json.dumps({"detail": "Not Found"}).encode(), "application/json")

        def _answer(self, status: int, body: bytes, content_type: str | None = None) -> None:
            self.send_response(status)
            if content_type:
                self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # http.server's signature
            sys.stderr.write("standin: " + (format % args) + "\n")

    return Handler


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="vllm.entrypoints.openai.api_server")
    parser.add_argument("--model", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args, _engine_flags = parser.parse_known_args(argv)  # the other vLLM flags only need to be visible

    prefix = os.environ.get("LLMDIAG_STANDIN_RECORDING")
    if not prefix:
        parser.error("LLMDIAG_STANDIN_RECORDING is not set")
    recording = Recording(Path(prefix))
    health = int(os.environ.get("LLMDIAG_STANDIN_HEALTH") or recording.health)

    server = ThreadingHTTPServer((args.host, args.port), make_handler(recording, health))
    print(f"standin: replaying {prefix} on http://{args.host}:{args.port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main(sys.argv[1:])
