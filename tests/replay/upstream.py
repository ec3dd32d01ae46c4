"""A real HTTP server on loopback that answers recorded bodies: what the replay server's pod and
service proxies forward to (here a vLLM server's /metrics, /health and /v1/models)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Self

# prometheus_client's CONTENT_TYPE_LATEST, which vLLM's /metrics answers with
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
VLLM_RECORDING = Path(__file__).with_name("vllm") / "llama"


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes = b""
    content_type: str = "application/json"
    delay_s: float = 0.0  # a server slow to answer


class RecordedHttp:
    """`with RecordedHttp({"/metrics": [a1, a2], ...}) as up:` serves each path's answers in turn,
    the last one repeating, at `up.url`; a path with no answers is a 404."""

    def __init__(self, routes: dict[str, list[Answer]]) -> None:
        self._routes = routes
        self._served: dict[str, int] = {}
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> Self:
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def served(self, path: str) -> int:
        with self._lock:
            return self._served.get(path, 0)

    def next_answer(self, path: str) -> Answer:
        answers = self._routes.get(path)
        if not answers:
            return Answer(404, b'{"detail":"Not Found"}')
        with self._lock:
            n = self._served.get(path, 0)
            self._served[path] = n + 1
        return answers[min(n, len(answers) - 1)]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                answer = upstream.next_answer(self.path.split("?", 1)[0])
                time.sleep(answer.delay_s)
                self.send_response(answer.status)
                self.send_header("Content-Type", answer.content_type)
                self.send_header("Content-Length", str(len(answer.body)))
                self.end_headers()
                self.wfile.write(answer.body)

        return Handler


def vllm_routes(health: int = 200) -> dict[str, list[Answer]]:
    """Two /metrics scrapes with the token counters moving, /health, /v1/models."""
    scrapes = sorted(
        VLLM_RECORDING.parent.glob(f"{VLLM_RECORDING.name}.metrics*.txt"), key=lambda p: (len(p.name), p.name)
    )
    return {
        "/metrics": [Answer(200, p.read_bytes(), METRICS_CONTENT_TYPE) for p in scrapes],
        "/health": [Answer(health)],
        "/v1/models": [Answer(200, VLLM_RECORDING.with_name(VLLM_RECORDING.name + ".models.json").read_bytes())],
    }
