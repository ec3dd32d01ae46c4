"""`kubectl get ingresses.networking.k8s.io -o json` (networking.k8s.io/v1) to model objects."""

from __future__ import annotations

from diag.core.errors import ParseError
from diag.parsers.json_fields import Fields, load_json, type_name
from diag.snapshot.model import Ingress, IngressBackend


def parse_ingresses(text: str) -> list[Ingress]:
    """Ingresses and the Services they route to: the default backend first, then each rule's paths."""
    if not text.strip():
        raise ParseError("empty file: expected an Ingress list (kubectl get -o json)")
    doc = load_json(text)
    if not isinstance(doc, dict):
        raise ParseError(f"expected an Ingress list (kubectl get -o json), found {type_name(doc)}")
    top = Fields(doc, "")
    kind = top.text("kind")
    if "items" not in doc:
        if kind != "Ingress":
            raise ParseError(f"expected an Ingress list, found {kind or 'an object with no kind and no items'}")
        return [_ingress(top)]
    if kind not in (None, "List", "IngressList"):
        raise ParseError(f"expected an Ingress list, found {kind}")
    return [_ingress(item) for item in top.children("items")]


def _ingress(item: Fields) -> Ingress:
    if item.text("kind") not in (None, "Ingress"):
        raise ParseError(f"{item.place()} is {item.text('kind')}, not an Ingress")
    metadata, spec = item.child("metadata"), item.child("spec")
    name, namespace = metadata.text("name"), metadata.text("namespace")
    if not name or not namespace:
        raise ParseError(f"{item.place() or 'the object'}: metadata.name or metadata.namespace is missing")
    backends = []
    if (default := _backend(spec.child("defaultBackend"), None, None)) is not None:
        backends.append(default)
    for rule in spec.children("rules"):
        for path in rule.child("http").children("paths"):
            found = _backend(path.child("backend"), rule.text("host"), path.text("path") or "/")
            if found is not None:
                backends.append(found)
    tls = [secret for t in spec.children("tls") if (secret := t.text("secretName"))]
    return Ingress(namespace, name, spec.text("ingressClassName"), backends, tls)


def _backend(backend: Fields, host: str | None, path: str | None) -> IngressBackend | None:
    """A Service backend; None for a resource backend or none at all."""
    service = backend.child("service")
    name = service.text("name")
    if not name:
        return None
    port = service.child("port")
    return IngressBackend(name, port.integer("number"), port.text("name"), host, path)
