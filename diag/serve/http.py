"""The HTTP side of `llmdiag serve`, on the standard library's ThreadingHTTPServer:

    GET  /healthz              200 while the schedule loop ticks
    GET  /readyz               200 once the rules are compiled and the kept reports read
    GET  /metrics              Prometheus' text exposition (diag/serve/metrics.py)
    GET  /reports              the kept reports, newest first (JSON)
    GET  /reports/<id>         one report as JSON; ?format=md for Markdown, ?format=html (serve --html)
    POST /alertmanager         Alertmanager's webhook, behind a bearer token; answers 202 at once

A body is read only with a Content-Length no larger than the bound; /alertmanager answers 403 while no
token is configured.
"""

from __future__ import annotations

import hmac
import json
import logging
import signal
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from diag.core.errors import UserError
from diag.serve.alerts import PayloadError, parse_webhook
from diag.serve.metrics import CONTENT_TYPE
from diag.serve.service import Service

log = logging.getLogger("llmdiag.serve")
MAX_BODY_BYTES = 1024 * 1024
JSON = "application/json"
CONTENT_TYPES = {"json": JSON, "md": "text/markdown; charset=utf-8", "html": "text/html; charset=utf-8"}


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], service: Service, token: str | None) -> None:
        super().__init__(address, Handler)
        self.service = service
        self.token = token


class Handler(BaseHTTPRequestHandler):
    server: Server
    server_version = "llmdiag"
    sys_version = ""
    timeout = 30  # a client that opens a connection and sends nothing holds a thread this long at most

    def do_GET(self) -> None:  # http.server's naming
        url = urlsplit(self.path)
        service = self.server.service
        if url.path == "/healthz":
            ok = service.healthy()
            self._send(200 if ok else 503, b"ok\n" if ok else b"the schedule loop is not ticking\n")
        elif url.path == "/readyz":
            ready = service.ready.is_set()
            self._send(200 if ready else 503, b"ready\n" if ready else b"starting\n")
        elif url.path == "/metrics":
            self._send(200, service.exposition().encode(), CONTENT_TYPE)
        elif url.path == "/reports":
            self._json(200, {"reports": service.store.listing()})
        elif url.path.startswith("/reports/"):
            asked = parse_qs(url.query).get("format", ["json"])[-1]
            form = "md" if asked == "markdown" else asked
            if form not in CONTENT_TYPES:
                self._json(400, {"error": f"format {asked!r}: json, md or html"})
                return
            body = service.store.body(url.path.removeprefix("/reports/"), form)
            if body is not None:
                self._send(200, body, CONTENT_TYPES[form])
            elif form == "html" and not service.settings.html:
                self._json(404, {"error": "reports are kept without HTML (serve --html keeps it)"})
            else:
                self._json(404, {"error": "no such report is kept"})
        else:
            self._json(404, {"error": "not found"})

    def do_POST(self) -> None:
        if urlsplit(self.path).path != "/alertmanager":
            self._json(404, {"error": "not found"})
            return
        if self.server.token is None:
            self._json(403, {"error": "no token is configured for /alertmanager (--alert-token-file)"})
            return
        given = self.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {self.server.token}".encode()):
            self._json(401, {"error": "a bearer token is needed"}, {"WWW-Authenticate": "Bearer"})
            return
        body = self._body()
        if body is None:
            return
        try:
            alerts = parse_webhook(body)
        except PayloadError as e:
            self._json(400, {"error": str(e)})
            return
        self._json(202, self.server.service.receive(alerts))

    def _body(self) -> bytes | None:
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self._json(411, {"error": "a Content-Length is needed"})
            return None
        if int(length) > MAX_BODY_BYTES:
            self._json(413, {"error": f"the body is over {MAX_BODY_BYTES} bytes"})
            return None
        return self.rfile.read(int(length))

    def _json(self, status: int, value: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, (json.dumps(value, indent=1) + "\n").encode(), JSON, headers)

    def _send(self, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8",
              headers: dict[str, str] | None = None) -> None:  # fmt: skip
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if status in (411, 413) or (self.command == "POST" and status in (401, 403, 404)):  # a body left unread
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # http.server's signature
        log.debug("%s %s", self.address_string(), format % args)


def run(service: Service, host: str, port: int, token: str | None, started: Any = None) -> None:
    """Serve until SIGTERM or SIGINT; `started(address)` is called once the port is bound."""
    try:
        server = Server((host, port), service, token)
    except OSError as e:
        raise UserError(f"--listen: cannot listen on {host}:{port}: {e.strerror or e}") from None
    service.start()

    def stop(signum: int, frame: object) -> None:
        service.stop()
        threading.Thread(target=server.shutdown, daemon=True).start()

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        if started is not None:
            started(server.server_address)
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()
        for s, handler in previous.items():
            signal.signal(s, handler)
