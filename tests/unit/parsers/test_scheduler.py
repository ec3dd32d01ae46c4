from diag.parsers.scheduler import parse_fit_error


def test_gpu_shortage_with_preemption_suffix():
    fit = parse_fit_error(
        "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) had untolerated taint "
        "{nvidia.com/gpu: present}. preemption: 0/3 nodes are available: 1 No preemption victims found "
        "for incoming pod, 2 Preemption is not helpful for scheduling."
    )
    assert fit is not None and fit.nodes == 3
    assert fit.reasons == {
        "Insufficient nvidia.com/gpu": 1,
        "node(s) had untolerated taint {nvidia.com/gpu: present}": 2,
    }
    assert fit.preemption["Preemption is not helpful for scheduling"] == 2


def test_dynamic_resources_post_filter_message_before_preemption():
    # kube-scheduler v1.34.4, captured by tests/live/test_k8s_control_plane.py
    fit = parse_fit_error(
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. no new claims to deallocate, preemption: "
        "0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    )
    assert fit is not None and fit.nodes == 2
    assert fit.reasons == {"Insufficient nvidia.com/gpu": 2}
    assert fit.preemption == {"Preemption is not helpful for scheduling": 2}


def test_single_reason_without_preemption():
    fit = parse_fit_error("0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector.")
    assert fit is not None
    assert fit.reasons == {"node(s) didn't match Pod's node affinity/selector": 1}
    assert fit.preemption == {}


def test_other_messages_are_not_fit_errors():
    assert parse_fit_error("pod has unbound immediate PersistentVolumeClaims") is None
