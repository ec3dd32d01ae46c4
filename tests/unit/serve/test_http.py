"""diag/serve/http.py over real HTTP on loopback: every endpoint, the token, the bounds on a body."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from diag.collect.base import Target
from diag.engine.config import Config
from diag.serve.http import MAX_BODY_BYTES, Server
from diag.serve.service import Service, Settings
from diag.serve.store import Limits, ReportStore

TOKEN = "s3cret-token"
PAYLOAD = {
    "version": "4", "groupKey": "{}:{alertname=\"VLLMQueueBuilding\"}", "truncatedAlerts": 0, "status": "firing",
    "receiver": "llmdiag", "groupLabels": {"alertname": "VLLMQueueBuilding"}, "commonLabels": {},
    "commonAnnotations": {}, "externalURL": "http://alertmanager:9093",
    "alerts": [{"status": "firing", "labels": {"alertname": "VLLMQueueBuilding", "namespace": "llm"},
                "annotations": {"summary": "queue"}, "startsAt": "2026-12-07T00:00:00Z",
                "endsAt": "0001-01-01T00:00:00Z", "generatorURL": "http://prometheus/graph",
                "fingerprint": "1a30ba71cca2921f"}],
}  # fmt: skip


@pytest.fixture
def server(tmp_path: Path, fault_report) -> Iterator[tuple[Server, Service]]:
    settings = Settings(every_s=60, deadline_s=30, target=Target(), config=Config())
    service = Service(settings, ReportStore(tmp_path, Limits()), lambda t: fault_report)
    service.run_triage("schedule", settings.target)
    srv = Server(("127.0.0.1", 0), service, TOKEN)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv, service
    srv.shutdown()
    srv.server_close()


def request(srv: Server, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", srv.server_address[1], timeout=10)
    conn.request(method, path, body=body, headers=headers or {})
    answer = conn.getresponse()
    data = answer.read()
    conn.close()
    return answer.status, answer.getheader("Content-Type"), data


def post(srv: Server, body: bytes, token: str | None = TOKEN):
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {token}"} if token else {})
    return request(srv, "POST", "/alertmanager", body, headers)


def test_health_readiness_and_metrics(server) -> None:
    srv, service = server
    assert request(srv, "GET", "/healthz")[0] == 503  # the loop has not started
    assert request(srv, "GET", "/readyz")[0] == 503
    service.ready.set()
    service.last_tick = __import__("time").monotonic()
    assert request(srv, "GET", "/healthz")[0] == 200 and request(srv, "GET", "/readyz")[0] == 200
    status, kind, body = request(srv, "GET", "/metrics")
    assert status == 200 and kind.startswith("text/plain; version=0.0.4")
    assert b'llmdiag_verdict{trigger="schedule",status="fault"' in body


def test_reports_list_and_each_as_json_or_markdown(server) -> None:
    srv, service = server
    status, _, body = request(srv, "GET", "/reports")
    (listed,) = json.loads(body)["reports"]
    assert status == 200 and listed["verdict"]["rule"] == "K8S-505"
    status, kind, body = request(srv, "GET", f"/reports/{listed['id']}")
    assert status == 200 and kind == "application/json" and json.loads(body)["verdict"]["rule"] == "K8S-505"
    status, kind, body = request(srv, "GET", f"/reports/{listed['id']}?format=md")
    assert status == 200 and kind.startswith("text/markdown") and b"K8S-505" in body
    status, _, body = request(srv, "GET", f"/reports/{listed['id']}?format=html")
    assert status == 404 and b"serve --html" in body  # kept without its page: says how to keep it
    assert request(srv, "GET", f"/reports/{listed['id']}?format=pdf")[0] == 400
    assert request(srv, "GET", "/reports/20261207T000000000Z-schedule")[0] == 404
    assert request(srv, "GET", "/reports/..%2F..%2Fetc%2Fpasswd")[0] == 404
    assert request(srv, "GET", "/nothing")[0] == 404


def test_the_webhook_takes_a_payload_with_the_token_and_answers_at_once(server) -> None:
    srv, _ = server
    status, _, body = post(srv, json.dumps(PAYLOAD).encode())
    assert status == 202 and json.loads(body) == {"triaged": ["1a30ba71cca2921f"]}
    status, _, body = post(srv, json.dumps(PAYLOAD).encode())
    assert status == 202 and json.loads(body) == {"deduplicated": ["1a30ba71cca2921f"]}


@pytest.mark.parametrize("token", [None, "wrong", TOKEN + "x"])
def test_the_webhook_refuses_without_the_token(server, token: str | None) -> None:
    srv, service = server
    status, _, _ = post(srv, json.dumps(PAYLOAD).encode(), token)
    assert status == 401
    assert service.counters.series("llmdiag_alerts_received_total") == []


def test_without_a_configured_token_the_webhook_is_shut(tmp_path: Path, fault_report) -> None:
    settings = Settings(every_s=60, deadline_s=30, target=Target(), config=Config())
    srv = Server(("127.0.0.1", 0), Service(settings, ReportStore(tmp_path, Limits()), lambda t: fault_report), None)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        assert post(srv, json.dumps(PAYLOAD).encode(), "anything")[0] == 403
    finally:
        srv.shutdown()
        srv.server_close()


def test_bodies_are_bounded_and_must_be_alertmanagers(server) -> None:
    srv, _ = server
    for length, status in ((str(MAX_BODY_BYTES + 1), 413), (None, 411)):
        # the answer comes before any body is read (a client still sending would meet a closed socket)
        conn = http.client.HTTPConnection("127.0.0.1", srv.server_address[1], timeout=10)
        conn.putrequest("POST", "/alertmanager")
        conn.putheader("Authorization", f"Bearer {TOKEN}")
        if length is not None:
            conn.putheader("Content-Length", length)
        conn.endheaders()
        assert conn.getresponse().status == status
        conn.close()
    for bad, why in [(b"{", b"not JSON"), (json.dumps(PAYLOAD | {"version": "3"}).encode(), b"version"),
                     (json.dumps(PAYLOAD | {"alerts": [{"status": "firing", "labels": {"a": 1}}]}).encode(),
                      b"labels")]:  # fmt: skip
        status, _, body = post(srv, bad)
        assert status == 400 and why in body


def test_with_html_each_kept_report_is_served_as_its_page(tmp_path: Path, fault_report) -> None:
    settings = Settings(every_s=60, deadline_s=30, target=Target(), config=Config(), html=True)
    service = Service(settings, ReportStore(tmp_path, Limits()), lambda t: fault_report)
    meta = service.run_triage("schedule", settings.target)
    assert meta is not None
    srv = Server(("127.0.0.1", 0), service, TOKEN)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        status, kind, body = request(srv, "GET", f"/reports/{meta['id']}?format=html")
    finally:
        srv.shutdown()
    assert status == 200 and kind == "text/html; charset=utf-8"
    assert body.startswith(b"<!DOCTYPE html>") and b"K8S-505" in body
    assert service.store.totals()[1] == sum(p.stat().st_size for p in tmp_path.iterdir())
