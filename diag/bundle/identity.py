"""Which pod a bundle file is about. Files name pods `<namespace>.<pod>` or, where the collector saw no
clash, `<pod>` alone (../shared/bundle-format.md). StatefulSet names like `vllm-0` repeat in every
namespace, so a bare name that two namespaces share names neither pod: joining it to one would lend that
pod another pod's logs, metrics or GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass

from diag.snapshot.model import Container, Pod


@dataclass(frozen=True)
class Ambiguous:
    """A bare pod name that more than one namespace has."""

    name: str
    pods: tuple[Pod, ...]

    @property
    def namespaces(self) -> list[str]:
        return sorted({p.namespace for p in self.pods})

    @property
    def detail(self) -> str:
        return (
            f"pod name {self.name} is in namespaces {', '.join(self.namespaces)}: joined to neither "
            f"(name the file <namespace>.{self.name} to say which)"
        )


class PodNames:
    """The pods of a snapshot, looked up by the names bundle files give them."""

    def __init__(self, pods: list[Pod]) -> None:
        self.by_key = {(p.namespace, p.name): p for p in pods}
        self.by_name: dict[str, list[Pod]] = {}
        for pod in pods:
            self.by_name.setdefault(pod.name, []).append(pod)

    def pod(self, ref: str) -> Pod | Ambiguous | None:
        """`<namespace>.<pod>` exactly, else a bare pod name that only one namespace has."""
        namespace, _, name = ref.partition(".")
        if name and (pod := self.by_key.get((namespace, name))) is not None:
            return pod
        same = self.by_name.get(ref, [])
        if len(same) > 1:
            return Ambiguous(ref, tuple(same))
        return same[0] if same else None

    def unique(self, pod: Pod) -> bool:
        """Whether the pod's bare name is its own: no other namespace has a pod of that name."""
        return len(self.by_name.get(pod.name, [])) == 1

    def container_of(self, stem: str) -> Container | Ambiguous | None:
        """The container a log file stem names: `<pod ref>.<container>`, or `<pod ref>` for the pod's
        first container (a namespace has no dots and a container name none either; a pod name may)."""
        if "." in stem:
            head, container = stem.rsplit(".", 1)
            found = self.pod(head)
            if isinstance(found, Ambiguous) and any(_container(p, container) for p in found.pods):
                return found
            if isinstance(found, Pod) and (named := _container(found, container)) is not None:
                return named
        found = self.pod(stem)
        if isinstance(found, Pod):
            return found.containers[0] if found.containers else None
        return found


def _container(pod: Pod, name: str) -> Container | None:
    return next((c for c in pod.containers + pod.init_containers if c.name == name), None)
