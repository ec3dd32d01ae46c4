"""What the model says of GPUs on the Kubernetes side: the nodes that have them, the pods that ask for
them, the NVIDIA daemonsets that hand them out. Facts, the gaps and the serving path all read these."""

from __future__ import annotations

from collections.abc import Sequence

from diag.snapshot.model import Node, Pod
from diag.snapshot.quantity import GPU_RESOURCE, MIG_RESOURCE_PREFIX, gpu_count, mig_counts

# Labels that mark a node as having NVIDIA GPUs even when the device plugin advertises none: GPU
# feature discovery's, and Node Feature Discovery's PCI vendor label (10de = NVIDIA).
GPU_NODE_LABELS = (
    "nvidia.com/gpu.present",
    "nvidia.com/gpu.product",
    "nvidia.com/gpu.count",
    "feature.node.kubernetes.io/pci-10de.present",
)
# GPU-operator / device-plugin daemonsets that put GPUs into pods, recognised by name or image.
GPU_COMPONENTS: dict[str, tuple[str, ...]] = {
    "device-plugin": ("nvidia-device-plugin",),  # by name: GPU feature discovery ships in the same image
    "driver": ("nvidia-driver-daemonset", "nvcr.io/nvidia/driver"),
    "container-toolkit": ("nvidia-container-toolkit", "container-toolkit"),
}


def is_gpu_node(node: Node) -> bool:
    return (
        any(k in node.labels for k in GPU_NODE_LABELS)
        or GPU_RESOURCE in node.capacity
        or any(k.startswith(MIG_RESOURCE_PREFIX) for k in node.capacity)
    )


def pod_gpu_request(pod: Pod) -> int:
    return sum(gpu_count(c.limits, c.requests) for c in pod.containers)


def wants_gpus(pod: Pod) -> bool:
    return pod_gpu_request(pod) > 0 or any(mig_counts(c.limits, c.requests) for c in pod.containers)


def gpu_component(name: str, images: Sequence[str] = ()) -> str | None:
    """The GPU component a daemonset of this name (and these images) is, if it is one."""
    for component, marks in GPU_COMPONENTS.items():
        if any(mark in name or any(mark in image for image in images) for mark in marks):
            return component
    return None
