"""Gateway API lists (gateway.networking.k8s.io/v1): `kubectl get gateways|httproutes|grpcroutes -o json`
to Gateways and routes, with their parentRefs, backendRefs and status.parents as the API defaults them
(a parentRef is a Gateway, a backendRef a Service, both in the route's namespace unless they say)."""

from __future__ import annotations

from diag.core.errors import ParseError
from diag.parsers.json_fields import Fields, load_json, type_name
from diag.snapshot.model import Gateway, Route, RouteParentStatus, RouteRef


def parse_gateways(text: str) -> list[Gateway]:
    return [_gateway(item) for item in _items(text, "Gateway")]


def parse_httproutes(text: str) -> list[Route]:
    return [_route(item, "HTTPRoute") for item in _items(text, "HTTPRoute")]


def parse_grpcroutes(text: str) -> list[Route]:
    return [_route(item, "GRPCRoute") for item in _items(text, "GRPCRoute")]


def _items(text: str, kind: str) -> list[Fields]:
    if not text.strip():
        raise ParseError(f"empty file: expected a {kind} list (kubectl get -o json)")
    doc = load_json(text)
    if not isinstance(doc, dict):
        raise ParseError(f"expected a {kind} list (kubectl get -o json), found {type_name(doc)}")
    top = Fields(doc, "")
    found = top.text("kind")
    if "items" not in doc:
        if found != kind:
            raise ParseError(f"expected a {kind} list, found {found or 'an object with no kind and no items'}")
        items = [top]
    elif found not in (None, "List", f"{kind}List"):
        raise ParseError(f"expected a {kind} list, found {found}")
    else:
        items = list(top.children("items"))
    for item in items:
        if item.text("kind") not in (None, kind):
            raise ParseError(f"{item.place()} is {item.text('kind')}, not a {kind}")
        metadata = item.child("metadata")
        if not metadata.text("name") or not metadata.text("namespace"):
            raise ParseError(f"{item.place() or 'the object'}: metadata.name or metadata.namespace is missing")
    return items


def _named(item: Fields) -> tuple[str, str]:
    metadata = item.child("metadata")
    return metadata.text("namespace") or "", metadata.text("name") or ""


def _conditions(fields: Fields) -> dict[str, dict]:
    return {
        c.text("type") or "": {"status": c.text("status"), "reason": c.text("reason"), "message": c.text("message")}
        for c in fields.children("conditions")
    }


def _gateway(item: Fields) -> Gateway:
    namespace, name = _named(item)
    return Gateway(
        namespace,
        name,
        item.child("spec").text("gatewayClassName"),
        _conditions(item.child("status")),
        item.child("metadata").text("creationTimestamp"),
    )


def _route(item: Fields, kind: str) -> Route:
    namespace, name = _named(item)
    spec = item.child("spec")
    parents = [_ref(p, namespace, "Gateway") for p in spec.children("parentRefs")]
    backends = [_ref(b, namespace, "Service") for rule in spec.children("rules") for b in rule.children("backendRefs")]
    status = [
        RouteParentStatus(_ref(p.child("parentRef"), namespace, "Gateway"), p.text("controllerName"), _conditions(p))
        for p in item.child("status").children("parents")
    ]
    return Route(kind, namespace, name, parents, backends, status)


def _ref(ref: Fields, namespace: str, default_kind: str) -> RouteRef:
    return RouteRef(
        ref.text("kind") or default_kind,
        ref.text("namespace") or namespace,
        ref.text("name") or "",
        ref.integer("port"),
        ref.text("sectionName"),
    )
