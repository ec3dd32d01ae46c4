"""diag/serve/alerts.py: Alertmanager's payload, the scope of an alert, the gate."""

from __future__ import annotations

import json

import pytest

from diag.collect.base import Target
from diag.serve import alerts
from diag.serve.alerts import Alert, Gate, PayloadError, parse_rate, parse_webhook, scoped_target


def test_a_payload_without_fingerprints_is_identified_by_its_labels() -> None:
    body = {"version": "4", "alerts": [{"status": "firing", "labels": {"alertname": "A", "pod": "p"}, "startsAt": "t"}]}
    (alert,) = parse_webhook(json.dumps(body).encode())
    (again,) = parse_webhook(json.dumps(body).encode())
    assert alert.fingerprint == again.fingerprint and len(alert.fingerprint) == 16 and alert.name == "A"


@pytest.mark.parametrize("body", [b"[]", b'{"version": "4"}', b'{"version": "4", "alerts": [{"status": "x"}]}'])
def test_what_is_not_a_payload_is_one_line(body: bytes) -> None:
    with pytest.raises(PayloadError):
        parse_webhook(body)


def test_the_labels_narrow_the_target_and_an_instance_picks_its_server() -> None:
    base = Target(all_namespaces=True, vllm_urls=["http://10.0.0.1:8000", "http://10.0.0.2:8000"])
    scoped = scoped_target(base, {"namespace": "llm", "pod": "p-0", "instance": "10.0.0.2:8000"})
    assert (scoped.namespace, scoped.all_namespaces, scoped.pod) == ("llm", False, "p-0")
    assert scoped.vllm_urls == ["http://10.0.0.2:8000"]
    assert scoped.scrape_beside_history and not base.scrape_beside_history  # the storm is now
    assert scoped_target(base, {"instance": "10.9.9.9:9400"}).vllm_urls == base.vllm_urls
    assert base.all_namespaces and base.pod is None


def test_an_alert_about_a_pod_reads_no_server_given_by_url_that_its_instance_does_not_name() -> None:
    """Prometheus' instance of a pod is the pod's address: Kubernetes finds the server in it."""
    base = Target(namespace="llm", vllm_urls=["http://10.0.0.1:8000"])
    assert scoped_target(base, {"namespace": "llm", "pod": "p-0", "instance": "10.244.0.7:8000"}).vllm_urls == []
    assert scoped_target(base, {"namespace": "llm", "pod": "p-0"}).vllm_urls == []
    assert scoped_target(base, {"namespace": "llm"}).vllm_urls == base.vllm_urls


def test_the_gate_forgets_the_oldest_past_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(alerts, "SEEN_KEPT", 2)
    gate = Gate(limit=100, window_s=60)
    for name in "abc":
        assert gate.admit([Alert(name, "firing", "", "t", {})])[0] == "triaged"
    assert gate.admit([Alert("c", "firing", "", "t", {})])[0] == "deduplicated"
    assert gate.admit([Alert("a", "firing", "", "t", {})])[0] == "triaged"


def test_the_rate_window_slides() -> None:
    gate = Gate(limit=1, window_s=60)
    assert gate.admit([Alert("a", "firing", "", "t", {})], now=0)[0] == "triaged"
    assert gate.admit([Alert("b", "firing", "", "t", {})], now=59)[0] == "rate_limited"
    assert gate.admit([Alert("b", "firing", "", "t", {})], now=60)[0] == "triaged"


def test_an_alert_that_fires_again_within_the_window_of_a_fault_is_the_same_storm() -> None:
    """Prometheus resolves a flapping alert and fires it again: the same fingerprint, a new startsAt."""
    gate = Gate(limit=100, window_s=60)
    kv = Alert("kv", "firing", "", "t0", {})
    assert gate.admit([kv], now=0)[0] == "triaged"
    # its triage found nothing yet (the storm had not shown): firing again, it is triaged again
    assert gate.admit([Alert("kv", "firing", "", "t1", {})], now=10)[0] == "triaged"
    gate.faulted([kv], now=12)
    assert gate.admit([Alert("kv", "firing", "", "t2", {})], now=40) == ("deduplicated", [])
    assert gate.admit([Alert("queue", "firing", "", "t2", {})], now=40)[0] == "triaged"
    assert gate.admit([Alert("kv", "firing", "", "t3", {})], now=72)[0] == "triaged"
    # after a restart, from the kept reports that found a fault
    again = Gate(limit=100, window_s=60, seen={("kv", "t3")}, faulted_ago={"kv": 10.0})
    assert again.admit([Alert("kv", "firing", "", "t4", {})])[0] == "deduplicated"


def test_rates_are_n_over_a_duration() -> None:
    assert parse_rate("6/10m") == (6, 600.0)
    for bad in ("6", "0/1m", "x/1m", "6/0s"):
        with pytest.raises(ValueError):
            parse_rate(bad)


def test_a_services_selector_is_added_to_the_one_given() -> None:
    assert scoped_target(Target(), {"namespace": "llm"}, "app=qwen").selector == "app=qwen"
    assert scoped_target(Target(selector="tier=serving"), {}, "app=qwen").selector == "tier=serving,app=qwen"
    assert scoped_target(Target(selector="tier=serving"), {}).selector == "tier=serving"
