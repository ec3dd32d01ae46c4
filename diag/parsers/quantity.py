"""The resource quantities the Kubernetes parser reads, under the name it imports them by: they live in
diag.snapshot.quantity, beside the model they measure (one import line in diag/parsers/kubernetes.py
to change, and this module goes)."""

from diag.snapshot.quantity import GPU_RESOURCE, MIG_RESOURCE_PREFIX, gpu_count, parse_quantity, whole_count

__all__ = ["GPU_RESOURCE", "MIG_RESOURCE_PREFIX", "gpu_count", "parse_quantity", "whole_count"]
