"""A Pending pod's claims: what the cluster said of them is quoted, and a StorageClass the claim's own
event says does not exist is named in the fix (issue 36: k8sgpt quoted it, llmdiag did not)."""

from __future__ import annotations

from pathlib import Path

from diag.analyze import analyze_bundle
from diag.bundle.files import Bundle
from diag.parsers.scheduler import missing_storage_class

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"


def test_the_missing_storage_class_is_read_from_the_controllers_words() -> None:
    assert missing_storage_class('storageclass.storage.k8s.io "premium-rwo" not found') == "premium-rwo"
    assert missing_storage_class("no persistent volumes available for this claim and no storage class is set") is None


def test_the_fix_names_the_storage_class_and_reads_nothing_already_read() -> None:
    report = analyze_bundle(Bundle.open(FIXTURES / "k8s-pvc-storageclass-missing"))
    [finding] = [f for f in report.findings if f.rule == "K8S-506"]
    assert 'storageclass.storage.k8s.io "premium-rwo" not found' in " ".join(finding.evidence)
    assert "StorageClass premium-rwo, which does not exist" in finding.remediation
    assert "describe pvc" not in finding.remediation


def test_without_the_claims_event_the_fix_says_where_to_look() -> None:
    report = analyze_bundle(Bundle.open(FIXTURES / "incident-k8s-pvc-unbound"))
    [finding] = [f for f in report.findings if f.rule == "K8S-506"]
    assert "no event about them was read" in " ".join(finding.evidence)
    assert "premium-rwo" not in finding.remediation and "kubectl -n llm get pvc" in finding.remediation
