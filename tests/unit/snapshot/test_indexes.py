from diag.snapshot.indexes import indexes
from diag.snapshot.model import (
    GPU,
    Event,
    Node,
    Pod,
    RayClusterSpec,
    RayNode,
    Service,
    Snapshot,
    VllmServer,
    Workload,
)


def _snap() -> Snapshot:
    return Snapshot(
        nodes=[Node(name="gpu-1", labels={"nvidia.com/gpu.present": "true"}), Node(name="cpu-1")],
        pods=[
            Pod(namespace="llm", name="a", node_name="gpu-1", labels={"app": "vllm"}, ray_cluster="rc-x1"),
            Pod(namespace="llm", name="b", node_name="cpu-1", labels={"app": "web"}),
            Pod(namespace="other", name="c", node_name="gpu-1", labels={"app": "vllm"}),
            Pod(namespace="llm", name="d"),  # not placed
        ],
        workloads=[Workload(kind="Deployment", namespace="llm", name="vllm", template_labels={"app": "vllm"})],
        events=[
            Event(namespace="llm", involved_kind="Pod", involved_name="a", reason="Pulled", message="", type="Normal"),
            Event(namespace="llm", involved_kind="Pod", involved_name="a", reason="Killing", message="", type="Normal"),
        ],
        ray_clusters=[
            RayClusterSpec(kind="RayService", namespace="llm", name="rc", worker_groups=[]),
            RayClusterSpec(kind="RayCluster", namespace="llm", name="rc-x1", worker_groups=[]),
            RayClusterSpec(kind="RayCluster", namespace="other", name="rc-x2", worker_groups=[]),
        ],
    )


def test_objects_by_name_node_label_and_what_events_are_about() -> None:
    snap = _snap()
    found = indexes(snap)
    assert list(found.nodes) == ["gpu-1", "cpu-1"] and [n.name for n in found.gpu_nodes] == ["gpu-1"]
    assert {node: [p.name for p in pods] for node, pods in found.pods_on_node.items()} == {
        "gpu-1": ["a", "c"],
        "cpu-1": ["b"],
    }
    assert [p.name for p in found.pods_by_label[("llm", "app", "vllm")]] == ["a"]
    assert [w.name for w in found.workloads_by_label[("llm", "app", "vllm")]] == ["vllm"]
    assert [e.reason for e in found.events_about[("Pod", "llm", "a")]] == ["Pulled", "Killing"]
    assert [p.name for p in found.pods_of_ray_cluster[("llm", "rc-x1")]] == ["a"]
    # KubeRay's <rayservice>-<suffix>, in the RayService's own namespace only
    assert {key: [s.name for s in owners] for key, owners in found.rayservices_owning.items()} == {
        ("llm", "rc-x1"): ["rc"]
    }


def test_built_once_and_again_when_a_list_was_replaced_or_grew() -> None:
    snap = _snap()
    first = indexes(snap)
    assert indexes(snap) is first
    snap.nodes.append(Node(name="gpu-2", capacity={"nvidia.com/gpu": "8"}))
    assert [n.name for n in indexes(snap).gpu_nodes] == ["gpu-1", "gpu-2"]
    snap.pods = [Pod(namespace="llm", name="e", node_name="gpu-2")]
    assert list(indexes(snap).pods_on_node) == ["gpu-2"]


def test_linked_indexes_read_what_the_join_filled_in() -> None:
    snap = _snap()
    snap.pods[0].workload_name = "vllm"
    snap.vllm_servers = [VllmServer(name="a", pod="llm/a"), VllmServer(name="lost", pod="llm/gone")]
    snap.ray_nodes = [RayNode(node_id="n1", pod="llm/a"), RayNode(node_id="n2", pod="llm/a")]
    found = indexes(snap)
    assert list(found.servers) == ["a", "lost"]
    assert [s.name for s in found.servers_in_pod["llm/a"]] == ["a"] and "llm/gone" not in found.servers_in_pod
    assert [s.name for s in found.servers_of_workload[("llm", "vllm")]] == ["a"]
    assert [p.name for p in found.vllm_pods_in["llm"]] == ["a"]
    assert found.ray_node_in_pod["llm/a"].node_id == "n1"


def test_the_first_of_each_name_and_gpus_by_their_host_and_by_how_servers_name_them() -> None:
    snap = _snap()
    snap.services = [
        Service(namespace="llm", name="vllm", selector={"app": "vllm"}),
        Service(namespace="llm", name="vllm"),
    ]
    snap.ray_clusters.append(RayClusterSpec(kind="RayCluster", namespace="llm", name="rc", worker_groups=[]))
    snap.gpus = [GPU(host="gpu-1", index=0, uuid="GPU-a"), GPU(host="gpu-1", index=1), GPU(host="h2", index=0)]
    found = indexes(snap)
    assert found.services["llm/vllm"].selector == {"app": "vllm"}
    assert found.ray_clusters[("llm", "rc")].kind == "RayService"
    assert found.gpu_places == {"GPU-a": [0], "gpu-1/1": [1], "h2/0": [2]}
    assert {host: [g.index for g in gpus] for host, gpus in found.gpus_of_host.items()} == {"gpu-1": [0, 1], "h2": [0]}


def test_gpus_and_servers_by_where_the_join_placed_them() -> None:
    snap = _snap()
    snap.gpus = [GPU(host="gpu-1", index=0, node="gpu-1"), GPU(host="elsewhere", index=0)]
    snap.vllm_servers = [VllmServer(name="a", pod="llm/a"), VllmServer(name="c", pod="other/c")]
    found = indexes(snap)
    assert {node: [g.host for g in gpus] for node, gpus in found.gpus_on_node.items()} == {"gpu-1": ["gpu-1"]}
    assert {key: [s.name for s in servers] for key, servers in found.servers_of_ray_cluster.items()} == {
        ("llm", "rc-x1"): ["a"]
    }
