from diag.snapshot.gpu_resources import gpu_component, is_gpu_node, pod_gpu_request, wants_gpus
from diag.snapshot.model import Container, Node, Pod


def test_a_gpu_node_by_its_labels_or_by_whole_or_mig_gpus_in_its_capacity() -> None:
    assert is_gpu_node(Node(name="a", labels={"nvidia.com/gpu.present": "true"}))
    assert is_gpu_node(Node(name="b", capacity={"nvidia.com/gpu": "0"}))
    assert is_gpu_node(Node(name="c", capacity={"nvidia.com/mig-1g.10gb": "7"}))
    assert not is_gpu_node(Node(name="d", labels={"kubernetes.io/os": "linux"}, capacity={"cpu": "64"}))


def test_a_pod_wants_gpus_by_whole_gpus_or_mig_devices_of_any_container() -> None:
    whole = Pod(
        namespace="llm", name="a", containers=[Container(name="c"), Container(name="v", limits={"nvidia.com/gpu": "2"})]
    )
    mig = Pod(namespace="llm", name="b", containers=[Container(name="v", requests={"nvidia.com/mig-1g.10gb": "1"})])
    none = Pod(namespace="llm", name="c", containers=[Container(name="v", limits={"nvidia.com/gpu": "0", "cpu": "4"})])
    assert (pod_gpu_request(whole), wants_gpus(whole)) == (2, True)
    assert (pod_gpu_request(mig), wants_gpus(mig)) == (0, True)
    assert (pod_gpu_request(none), wants_gpus(none)) == (0, False)


def test_a_gpu_component_by_its_name_or_an_image() -> None:
    assert gpu_component("nvidia-device-plugin-daemonset") == "device-plugin"
    assert gpu_component("driver", ["nvcr.io/nvidia/driver:550.54.15"]) == "driver"
    assert gpu_component("node-exporter", ["quay.io/prometheus/node-exporter"]) is None
