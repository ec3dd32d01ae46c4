from diag.facts.kubernetes_dra import dra_refusals
from diag.snapshot.model import Event


def _event(reason: str, message: str) -> Event:
    return Event(
        namespace="llm", involved_kind="Pod", involved_name="p", reason=reason, message=message, type="Warning"
    )


def _scheduling(message: str | None) -> dict:
    return {"seen": message is not None, "message": message}


def test_scheduler_reasons_and_the_names_they_carry() -> None:
    message = (
        "0/3 nodes are available: request gpu: device class gpu.example.com does not exist. preemption: "
        "0/3 nodes are available: 3 Preemption is not helpful for scheduling."
    )
    facts = dra_refusals(_scheduling(message), [], events_read=True)
    assert facts["scheduler"] == ["device_class_missing"]
    assert facts["device_classes"] == ["gpu.example.com"]
    assert facts["scheduler_message"] == message


def test_claim_in_flight_and_not_created() -> None:
    facts = dra_refusals(
        _scheduling("0/2 nodes are available: resource claim llm/c-1 is in the process of being allocated."), [], True
    )
    assert facts["scheduler"] == ["allocation_in_progress"] and facts["claims"] == ["llm/c-1"]
    facts = dra_refusals(_scheduling('pod "llm/p": ResourceClaim not created yet'), [], True)
    assert facts["scheduler"] == ["claim_not_created"]


def test_kubelet_and_controller_events() -> None:
    events = [
        _event(
            "FailedPrepareDynamicResources",
            "Failed to prepare dynamic resources: prepare dynamic "
            "resources: DRA driver gpu.nvidia.com is not registered",
        ),
        _event(
            "FailedResourceClaimCreation",
            'PodResourceClaim gpus: resource claim template "t1": resourceclaimtemplate.resource.k8s.io "t1" not found',
        ),
    ]
    facts = dra_refusals(_scheduling(None), events, events_read=True)
    assert facts["scheduler"] == []
    assert facts["driver_not_registered"] == ["gpu.nvidia.com"]
    assert facts["templates"] == ["t1"]
    assert len(facts["node_prepare"]) == 1 and len(facts["claim_creation"]) == 1


def test_other_scheduler_reasons_are_not_dra() -> None:
    facts = dra_refusals(_scheduling("0/5 nodes are available: 5 Insufficient nvidia.com/gpu."), [], True)
    assert facts["scheduler"] == [] and facts["scheduler_message"] is None


def test_unknown_without_events_or_verdict() -> None:
    assert dra_refusals(None, [], events_read=False) is None
    facts = dra_refusals(_scheduling("0/2 nodes are available: 2 cannot allocate all claims."), [], events_read=False)
    assert facts["scheduler"] == ["cannot_allocate"] and facts["node_prepare"] is None
