"""`kubectl get <kind> -o json` answers -> model objects.

Each parser takes the file's text: a v1 List (`{"kind": "List", "items": [...]}`, or `<Kind>List`
as the API server itself answers), or a single object of that kind (`kubectl get pod X -o json`).
Anything else, and any field of the wrong type, is a ParseError of one line naming the object.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from diag.core.errors import ParseError
from diag.parsers.json_fields import Fields, load_json, type_name
from diag.parsers.kubernetes_config import pod_config_refs
from diag.parsers.logs import xid_in_message
from diag.parsers.quantity import GPU_RESOURCE, MIG_RESOURCE_PREFIX, gpu_count, parse_quantity, whole_count
from diag.parsers.workloads import is_ray_pod, ray_node_type, spec_engine_args, vllm_recognition
from diag.snapshot.model import (
    HPA,
    Container,
    DaemonSet,
    Event,
    Node,
    Pod,
    Probe,
    RayClusterSpec,
    RayWorkerGroup,
    ServeStatus,
    Service,
    ServicePort,
    Workload,
)

RAY_CLUSTER_LABEL = "ray.io/cluster"
RAY_NODE_TYPE_LABEL = "ray.io/node-type"
RAY_GROUP_LABEL = "ray.io/group"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"  # on every EndpointSlice the control plane makes
HPA_V1_CONDITIONS_ANNOTATION = "autoscaling.alpha.kubernetes.io/conditions"  # autoscaling/v1 keeps them here

_PROBES = (("liveness", "livenessProbe"), ("readiness", "readinessProbe"), ("startup", "startupProbe"))
_PROBE_HANDLERS = ("httpGet", "tcpSocket", "exec", "grpc")
_CONTAINER_STATES = ("running", "waiting", "terminated")

Addresses = dict[tuple[str, str], tuple[list[str], list[str]]]


@dataclass(slots=True)
class _Object:
    """One API object of the answer, with its identity read and its fields labelled by it."""

    kind: str
    namespace: str | None
    name: str
    where: str  # e.g. "pod ml/vllm-0", the start of every error message about the object
    data: dict[str, Any]
    metadata_data: dict[str, Any]

    @property
    def fields(self) -> Fields:
        return Fields(self.data, self.where)

    @property
    def metadata(self) -> Fields:
        return Fields(self.metadata_data, self.where, "metadata")

    def require_namespace(self) -> str:
        if not self.namespace:
            raise ParseError(f"{self.where}: metadata.namespace is missing")
        return self.namespace


class _Wrong(Exception):
    """A field of another type than its reading takes. The readers below work on plain dicts (a fleet's
    answer holds hundreds of thousands of fields, a `Fields` for each object would cost more than the
    reading) and know only the field's path inside the dict they were given; the reader of the
    object, which knows where that dict sits, makes it the one-line ParseError (`_Wrong.error`)."""

    def __init__(self, path: str, expected: str, value: object) -> None:
        super().__init__(path)
        self.path, self.expected, self.value = path, expected, value

    def error(self, fields: Fields, at: str = "") -> ParseError:
        """The error, for the dict at path `at` inside `fields` (worded as `Fields.error` words it)."""
        return fields.error(f"{at}.{self.path}" if at else self.path, self.expected, self.value)


def _text(data: dict[str, Any], key: str, at: str = "") -> str | None:
    """`Fields.text` of a plain dict; `at`: the dict's path, for the error."""
    value = data.get(key)
    if value is None or type(value) is str:
        return value
    raise _Wrong(f"{at}.{key}" if at else key, "a string", value)


def _present_text(data: dict[str, Any], key: str, at: str = "") -> str:
    value = _text(data, key, at)
    if value is None:
        raise _Wrong(f"{at}.{key}" if at else key, "a string", None)
    return value


def _integer(data: dict[str, Any], key: str, at: str = "") -> int | None:
    value = data.get(key)
    if value is None or type(value) is int:
        return value
    raise _Wrong(f"{at}.{key}" if at else key, "an integer", value)


def _object(data: dict[str, Any], key: str) -> dict[str, Any]:
    """`Fields.child` of a plain dict: an object, or {} where the field is missing or null."""
    value = data.get(key)
    if isinstance(value, dict):
        return value
    if value is None:
        return {}
    raise _Wrong(key, "an object", value)


def _objects_of(data: dict[str, Any], key: str) -> list[dict[str, Any]]:
    """`Fields.children` of a plain dict: a list of objects, a null item read as {}."""
    items = data.get(key)
    if items is None:
        return []
    if type(items) is not list:
        raise _Wrong(key, "a list", items)
    if all(isinstance(item, dict) for item in items):
        return items
    for i, item in enumerate(items):
        if item is not None and not isinstance(item, dict):
            raise _Wrong(f"{key}[{i}]", "an object", item)
    return [{} if item is None else item for item in items]


def _objects(text: str, *kinds: str) -> list[_Object]:
    """The objects of one `kubectl get -o json` answer whose kind is one of `kinds`."""
    if not text.strip():
        raise ParseError(f"empty file: expected {_a(kinds[0])} list (kubectl get -o json)")
    return _objects_in(load_json(text), *kinds)


def _objects_in(doc: object, *kinds: str) -> list[_Object]:
    """The objects of one `kubectl get -o json` answer, as json.loads returned it."""
    wanted = kinds[0]
    if not isinstance(doc, dict):
        raise ParseError(f"expected {_a(wanted)} list (kubectl get -o json), found {type_name(doc)}")
    top = Fields(doc, "")
    kind = top.text("kind")
    if "items" in doc:
        if kind not in (None, "List") and kind.removesuffix("List") not in kinds:
            raise ParseError(f"expected {_a(wanted)} list, found {_a(kind)}")
        items = doc["items"]
        if items is not None and type(items) is not list:
            raise top.error("items", "a list", items)
        return [_identify(item, i, kinds) for i, item in enumerate(items or ())]
    if kind in kinds:
        return [_identify(doc, None, kinds)]
    raise ParseError(f"expected {_a(wanted)} list, found {_a(kind) if kind else 'an object with no kind and no items'}")


def _identify(item: Any, index: int | None, kinds: tuple[str, ...]) -> _Object:
    """The identity of the list's item `index` (None: the document is the object itself)."""
    if not isinstance(item, dict):
        if item is not None:
            raise Fields({}, "").error(_item_path(index), "an object", item)
        item = {}
    try:
        item_kind = _text(item, "kind")
        if item_kind is not None and item_kind not in kinds:
            raise ParseError(f"{_item_path(index) or 'the object'} is {_a(item_kind)}, not {_a(kinds[0])}")
        metadata = _object(item, "metadata")
        name = _text(metadata, "name", "metadata")
        if not name:
            raise ParseError(f"{_item_path(index) or 'the object'}: metadata.name is missing")
        namespace = _text(metadata, "namespace", "metadata") or None
    except _Wrong as wrong:
        raise wrong.error(Fields({}, "", _item_path(index))) from None
    return _new_object(item_kind or kinds[0], namespace, name, item, metadata)


def _item_path(index: int | None) -> str:
    return "" if index is None else f"items[{index}]"


def _new_object(kind: str, namespace: str | None, name: str, data: dict[str, Any], metadata: dict[str, Any]) -> _Object:
    where = f"{kind.lower()} {namespace}/{name}" if namespace else f"{kind.lower()} {name}"
    return _Object(kind, namespace, name, where, data, metadata)


def _a(kind: str) -> str:
    return f"an {kind}" if kind and kind[0] in "AEIOU" else f"a {kind}"


def _required_text(fields: Fields, key: str) -> str:
    value = fields.text(key)
    if value is None:
        raise fields.error(key, "a string", None)
    return value


def _required_int(fields: Fields, key: str) -> int:
    value = fields.integer(key)
    if value is None:
        raise fields.error(key, "an integer", None)
    return value


def _int_or_name(fields: Fields, key: str) -> int | str | None:
    """An IntOrString field (a port number or a named port)."""
    value = fields.data.get(key)
    if value is None or (isinstance(value, (int, str)) and not isinstance(value, bool)):
        return value
    raise fields.error(key, "a number or a name", value)


def _conditions(fields: Fields) -> dict[str, dict]:
    """status.conditions[] as type -> {status, reason, message}."""
    found: dict[str, dict] = {}
    try:
        conditions = _objects_of(fields.data, "conditions")
    except _Wrong as wrong:
        raise wrong.error(fields) from None
    for i, c in enumerate(conditions):
        try:
            kind = _present_text(c, "type")
            found[kind] = {"status": _text(c, "status"), "reason": _text(c, "reason"), "message": _text(c, "message")}
        except _Wrong as wrong:
            raise wrong.error(fields, f"conditions[{i}]") from None
    return found


def _resources(fields: Fields, key: str) -> dict[str, str]:
    """A resource list (requests, limits, capacity ...), each amount checked to be a quantity."""
    amounts = fields.string_map(key)
    for name, value in amounts.items():
        try:
            if name == GPU_RESOURCE or name.startswith(MIG_RESOURCE_PREFIX):
                whole_count(value, name)
            else:
                parse_quantity(value)
        except ParseError as e:
            raise ParseError(f"{fields.place(f'{key}.{name}')}: {e}") from None
    return amounts


def _owner(metadata: Fields) -> tuple[str | None, str | None]:
    """The controller among metadata.ownerReferences (the first owner when none is marked)."""
    owners = metadata.children("ownerReferences")
    controller = next((o for o in owners if o.flag("controller")), owners[0] if owners else None)
    if controller is None:
        return None, None
    return controller.text("kind"), controller.text("name")


# --------------------------------------------------------------------------- truncated lists


@dataclass(frozen=True)
class TruncatedList:
    """What survives of a `kubectl get -o json` list cut off part-way (a collector killed at its
    timeout, a copy-paste): its complete items, as a List document the parsers read like any other."""

    text: str
    items: int


# A cut-off JSON document ends inside a token: the decoder stops at the end of the text, in a string
# that never closes, or before a literal or number that lost its tail ("tr", "1.", "-").
_PARTIAL_TOKEN = re.compile(r"[-+.\w]*")


def recover_truncated_list(text: str) -> TruncatedList | None:
    """The complete items of a list cut off part-way, or None when the text is not such a list (not
    JSON at all, damaged in the middle, whole, or cut before its items began)."""
    reader = _ListReader(text.removeprefix("\ufeff"))
    try:
        reader.read()
    except (_Damaged, RecursionError):
        return None
    if not reader.cut or reader.items is None:
        return None
    kind = reader.head.get("kind")
    document = {
        "apiVersion": reader.head.get("apiVersion"),
        "kind": kind if isinstance(kind, str) else "List",
        "items": reader.items,
    }
    return TruncatedList(json.dumps(document), len(reader.items))


class _Damaged(Exception):
    """The text breaks the JSON grammar before its end: damaged, not merely cut short."""


class _Ended(Exception):
    """The text ended part-way through the document."""


class _ListReader:
    """Reads a `{..., "items": [...], ...}` document one value at a time with the real JSON decoder,
    keeping every complete item, and notes whether the text ended before the document did."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.decoder = json.JSONDecoder()
        self.head: dict[str, object] = {}
        self.items: list[object] | None = None  # None: the items list was never reached
        self.cut = False

    def read(self) -> None:
        try:
            self._document()
        except _Ended:
            self.cut = True

    def _document(self) -> None:
        self._expect("{")
        if self._peek() == "}":
            return
        while True:
            key = self._value()
            self._expect(":")
            if key == "items":
                self._items()
            else:
                self.head[str(key)] = self._value()
            if self._peek() == "}":
                return
            self._expect(",")

    def _items(self) -> None:
        self._expect("[")
        self.items = []
        if self._peek() == "]":
            self.pos += 1
            return
        while True:
            self.items.append(self._value())
            if self._peek() == "]":
                self.pos += 1
                return
            self._expect(",")

    def _value(self) -> object:
        self._peek()
        try:
            value, self.pos = self.decoder.raw_decode(self.text, self.pos)
        except json.JSONDecodeError as e:
            raise _Ended() if _cut_short(self.text, e) else _Damaged() from None
        except ValueError:  # an integer of more digits than Python converts: the whole read said so
            raise _Damaged() from None
        return value

    def _peek(self) -> str:
        """The next character after white space; _Ended when there is none."""
        while self.pos < len(self.text) and self.text[self.pos] in " \t\r\n":
            self.pos += 1
        if self.pos >= len(self.text):
            raise _Ended()
        return self.text[self.pos]

    def _expect(self, char: str) -> None:
        if self._peek() != char:
            raise _Damaged()
        self.pos += 1


def _cut_short(text: str, error: json.JSONDecodeError) -> bool:
    """Whether the decoder failed because the text ended, not because it is damaged in the middle."""
    if error.msg.startswith("Unterminated string"):
        return True
    return _PARTIAL_TOKEN.fullmatch(text[error.pos :].rstrip()) is not None


# --------------------------------------------------------------------------- pods


def parse_pods(text: str) -> list[Pod]:
    return [_pod(obj) for obj in _objects(text, "Pod")]


def parse_pods_document(doc: object) -> list[Pod]:
    """`parse_pods` of a list already read from JSON (the live collector has it): no second encoding."""
    return [_pod(obj) for obj in _objects_in(doc, "Pod")]


def _pod(obj: _Object) -> Pod:
    spec, status = obj.fields.child("spec"), obj.fields.child("status")
    labels = obj.metadata.string_map("labels")
    owner_kind, owner_name = _owner(obj.metadata)
    containers = _containers(spec.children("containers"), status.children("containerStatuses"))
    pod = Pod(
        namespace=obj.require_namespace(),
        name=obj.name,
        uid=obj.metadata.text("uid") or "",
        labels=labels,
        annotations=obj.metadata.string_map("annotations"),
        owner_kind=owner_kind,
        owner_name=owner_name,
        node_name=spec.text("nodeName"),
        phase=status.text("phase"),
        reason=status.text("reason"),
        message=status.text("message"),
        pod_ip=status.text("podIP"),
        conditions=_conditions(status),
        containers=containers,
        init_containers=_containers(spec.children("initContainers"), status.children("initContainerStatuses")),
        node_selector=spec.string_map("nodeSelector"),
        affinity=spec.raw_object("affinity"),
        tolerations=spec.raw_objects("tolerations"),
        topology_spread_constraints=spec.raw_objects("topologySpreadConstraints"),
        volumes=spec.raw_objects("volumes"),
        resource_claims=spec.raw_objects("resourceClaims"),
        config_refs=pod_config_refs(spec),
        ray_cluster=labels.get(RAY_CLUSTER_LABEL),
        ray_node_type=labels.get(RAY_NODE_TYPE_LABEL) or ray_node_type(containers),  # a Ray pod KubeRay did not make
        ray_group=labels.get(RAY_GROUP_LABEL),
    )
    ray_pod = is_ray_pod(pod)
    for container in containers:
        container.engine_args = spec_engine_args(container, ray_pod)
    return pod


def _containers(specs: Sequence[Fields], statuses: Sequence[Fields]) -> list[Container]:
    by_name = {_required_text(s, "name"): s for s in statuses}
    containers = []
    for spec in specs:
        container = _container(spec)
        if (status := by_name.get(container.name)) is not None:
            _apply_status(container, status)
        containers.append(container)
    return containers


def _container(c: Fields) -> Container:
    resources = c.child("resources")
    return Container(
        name=_required_text(c, "name"),
        image=c.text("image") or "",
        command=c.strings("command"),
        args=c.strings("args"),
        env=_env(c),
        ports=_ports(c),
        requests=_resources(resources, "requests"),
        limits=_resources(resources, "limits"),
        probes=[_probe(c.child(key), kind) for kind, key in _PROBES if key in c],
        mounts={m.text("mountPath") or "": m.text("name") or "" for m in c.children("volumeMounts")},
    )


def _env(c: Fields) -> dict[str, str]:
    env: dict[str, str] = {}
    for var in c.children("env"):
        name = _required_text(var, "name")
        if "valueFrom" in var:
            sources = [k for k, v in var.child("valueFrom").data.items() if v is not None]
            env[name] = f"<from:{sources[0] if sources else 'unknown'}>"
        else:
            env[name] = var.text("value") or ""  # the API leaves out an empty value
    return env


def _ports(c: Fields) -> dict[str, int]:
    ports: dict[str, int] = {}
    for port in c.children("ports"):
        number = _required_int(port, "containerPort")
        ports[port.text("name") or str(number)] = number
    return ports


def _probe(p: Fields, kind: str) -> Probe:
    handler = next((h for h in _PROBE_HANDLERS if h in p), None)
    if handler is None:
        raise ParseError(f"{p.place()}: no handler (one of {', '.join(_PROBE_HANDLERS)})")
    action = p.child(handler)
    return Probe(
        kind=kind,  # type: ignore[arg-type]  # one of _PROBES
        handler=handler,  # type: ignore[arg-type]
        path=action.text("path") if handler == "httpGet" else None,
        port=_int_or_name(action, "port") if handler != "exec" else None,
        initial_delay_seconds=_int_or_default(p, "initialDelaySeconds", 0),
        period_seconds=_int_or_default(p, "periodSeconds", 10),
        timeout_seconds=_int_or_default(p, "timeoutSeconds", 1),
        failure_threshold=_int_or_default(p, "failureThreshold", 3),
    )


def _int_or_default(fields: Fields, key: str, api_default: int) -> int:
    """A field the API server defaults when it stores the object (so only hand-made input lacks it)."""
    value = fields.integer(key)
    return api_default if value is None else value


def _apply_status(container: Container, status: Fields) -> None:
    container.ready = status.flag("ready")
    container.restart_count = status.integer("restartCount") or 0
    state = status.child("state")
    current = next((s for s in _CONTAINER_STATES if s in state), None)
    if current is not None:
        detail = state.child(current)
        container.state = current
        container.state_reason = detail.text("reason")
        container.state_message = detail.text("message")
        container.started_at = detail.text("startedAt")
        container.finished_at = detail.text("finishedAt")
    last = status.child("lastState").child("terminated")
    container.last_terminated_reason = last.text("reason")
    container.last_exit_code = last.integer("exitCode")
    container.last_finished_at = last.text("finishedAt")


# --------------------------------------------------------------------------- events


@dataclass(frozen=True)
class _EventFields:
    """Where each Event field lives: core/v1 and events.k8s.io/v1 name them differently."""

    regarding: str
    note: str
    count: str
    last_timestamp: str
    first_timestamp: str
    reporter: str
    source: str


_CORE_EVENT = _EventFields(
    "involvedObject", "message", "count", "lastTimestamp", "firstTimestamp", "reportingComponent", "source"
)
_EVENTS_API_EVENT = _EventFields(
    "regarding",
    "note",
    "deprecatedCount",
    "deprecatedLastTimestamp",
    "deprecatedFirstTimestamp",
    "reportingController",
    "deprecatedSource",
)


def parse_events(text: str) -> list[Event]:
    """core/v1 Events and events.k8s.io/v1 Events (regarding/note/series/reportingController)."""
    return [_event(obj) for obj in _objects(text, "Event")]


def parse_events_document(doc: object) -> list[Event]:
    """`parse_events` of a list already read from JSON (the live collector has it)."""
    return [_event(obj) for obj in _objects_in(doc, "Event")]


def _event_names(api_version: str, regarding: object) -> _EventFields:
    new_api = api_version.startswith("events.k8s.io/") or (not api_version and regarding is not None)
    return _EVENTS_API_EVENT if new_api else _CORE_EVENT


def _event(obj: _Object) -> Event:
    e = obj.data
    try:
        names = _event_names(_text(e, "apiVersion") or "", e.get("regarding"))
        about, series, source = _object(e, names.regarding), _object(e, "series"), _object(e, names.source)
        event = Event(
            namespace=_text(about, "namespace", names.regarding) or obj.namespace,
            involved_kind=_present_text(about, "kind", names.regarding),
            involved_name=_present_text(about, "name", names.regarding),
            reason=_text(e, "reason") or "",
            message=_text(e, names.note) or "",
            type=_text(e, "type") or "",
            # an event recorded through events.k8s.io counts repeats in series, not in count
            count=_integer(series, "count", "series") or _integer(e, names.count) or 1,
            last_seen=_text(series, "lastObservedTime", "series")
            or _text(e, names.last_timestamp)
            or _text(e, "eventTime")
            or _text(e, names.first_timestamp),
            source=_text(e, names.reporter)
            or _text(source, "component", names.source)
            or _text(source, "host", names.source),
            involved_uid=_text(about, "uid", names.regarding) or None,
        )
    except _Wrong as wrong:
        raise wrong.error(obj.fields) from None
    event.xid = xid_in_message(event.message)
    return event


# --------------------------------------------------------------------------- nodes, services, endpoints


def parse_nodes(text: str) -> list[Node]:
    return [_node(obj) for obj in _objects(text, "Node")]


def parse_nodes_document(doc: object) -> list[Node]:
    """`parse_nodes` of a list already read from JSON (the live collector has it)."""
    return [_node(obj) for obj in _objects_in(doc, "Node")]


def _node(obj: _Object) -> Node:
    spec, status = obj.fields.child("spec"), obj.fields.child("status")
    return Node(
        name=obj.name,
        labels=obj.metadata.string_map("labels"),
        taints=[
            {"key": _required_text(t, "key"), "value": t.text("value"), "effect": t.text("effect")}
            for t in spec.children("taints")
        ],
        unschedulable=bool(spec.flag("unschedulable")),
        conditions=_conditions(status),
        capacity=_resources(status, "capacity"),
        allocatable=_resources(status, "allocatable"),
    )


def parse_services(text: str) -> list[Service]:
    services = []
    for obj in _objects(text, "Service"):
        spec = obj.fields.child("spec")
        services.append(
            Service(
                namespace=obj.require_namespace(),
                name=obj.name,
                selector=spec.string_map("selector"),
                ports=[
                    ServicePort(
                        port=_required_int(p, "port"), target_port=_int_or_name(p, "targetPort"), name=p.text("name")
                    )
                    for p in spec.children("ports")
                ],
                type=spec.text("type") or "ClusterIP",
            )
        )
    return services


def parse_endpoints(text: str) -> Addresses:
    """core/v1 Endpoints: (namespace, service) -> (ready addresses, not-ready addresses), each the
    target pod's name where the address names one, else the IP."""
    found: Addresses = {}
    for obj in _objects(text, "Endpoints"):
        ready, not_ready = found.setdefault((obj.require_namespace(), obj.name), ([], []))
        for subset in obj.fields.children("subsets"):
            ready.extend(_address(a) for a in subset.children("addresses"))
            not_ready.extend(_address(a) for a in subset.children("notReadyAddresses"))
    return found


def _address(address: Fields) -> str:
    return address.child("targetRef").text("name") or _required_text(address, "ip")


def parse_endpointslices(text: str) -> Addresses:
    """discovery.k8s.io/v1 EndpointSlices, merged per service (label kubernetes.io/service-name).
    An endpoint is ready unless conditions.ready is false (the API reads "unset" as ready)."""
    found: Addresses = {}
    for obj in _objects(text, "EndpointSlice"):
        service = obj.metadata.string_map("labels").get(SERVICE_NAME_LABEL)
        if service is None:  # a slice nobody's Service controller owns: no service to report it under
            continue
        ready, not_ready = found.setdefault((obj.require_namespace(), service), ([], []))
        for endpoint in obj.fields.children("endpoints"):
            addresses = endpoint.strings("addresses")
            name = endpoint.child("targetRef").text("name") or (addresses[0] if addresses else None)
            if name is None:
                raise ParseError(f"{endpoint.place()}: neither targetRef.name nor addresses")
            (not_ready if endpoint.child("conditions").flag("ready") is False else ready).append(name)
    return found


# --------------------------------------------------------------------------- workloads, HPAs, daemonsets


def parse_workloads(text: str, kind: str) -> list[Workload]:
    """Deployments or StatefulSets (`kind` says which the file holds)."""
    workloads = []
    for obj in _objects(text, kind):
        spec, status = obj.fields.child("spec"), obj.fields.child("status")
        template = spec.child("template")
        containers = [_container(c) for c in template.child("spec").children("containers")]
        template_labels = template.child("metadata").string_map("labels")
        ray = RAY_NODE_TYPE_LABEL in template_labels or ray_node_type(containers) is not None
        workloads.append(
            Workload(
                kind=kind,
                namespace=obj.require_namespace(),
                name=obj.name,
                replicas=spec.integer("replicas"),
                ready_replicas=status.integer("readyReplicas") or 0,  # the API leaves out zero counts
                available_replicas=status.integer("availableReplicas") or 0,
                selector=spec.child("selector").string_map("matchLabels"),
                conditions=_conditions(status),
                template_labels=template_labels,
                template_gpus=sum(gpu_count(c.limits, c.requests) for c in containers),
                template_runs_vllm=any(vllm_recognition(c, ray) is not None for c in containers),
            )
        )
    return workloads


def parse_hpas(text: str) -> list[HPA]:
    """HorizontalPodAutoscalers, autoscaling/v2 or v1 (v1: one CPU target, conditions in an annotation)."""
    hpas = []
    for obj in _objects(text, "HorizontalPodAutoscaler"):
        spec, status = obj.fields.child("spec"), obj.fields.child("status")
        target = spec.child("scaleTargetRef")
        is_v1 = obj.fields.text("apiVersion") == "autoscaling/v1" or "targetCPUUtilizationPercentage" in spec
        hpas.append(
            HPA(
                namespace=obj.require_namespace(),
                name=obj.name,
                target_kind=target.text("kind") or "",
                target_name=target.text("name") or "",
                min_replicas=spec.integer("minReplicas"),
                max_replicas=spec.integer("maxReplicas"),
                current_replicas=status.integer("currentReplicas"),
                desired_replicas=status.integer("desiredReplicas"),
                metrics=[{"type": "Resource", "name": "cpu"}] if is_v1 else _hpa_metrics(spec),
                conditions=_conditions(status) or _v1_hpa_conditions(obj),
            )
        )
    return hpas


def _hpa_metrics(spec: Fields) -> list[dict]:
    metrics = []
    for m in spec.children("metrics"):
        kind = _required_text(m, "type")
        if kind == "Resource":
            name = m.child("resource").text("name")
        elif kind == "ContainerResource":
            name = m.child("containerResource").text("name")
        elif kind in ("Pods", "Object", "External"):
            name = m.child(kind[0].lower() + kind[1:]).child("metric").text("name")
        else:
            name = None
        metrics.append({"type": kind, "name": name})
    return metrics


def _v1_hpa_conditions(obj: _Object) -> dict[str, dict]:
    raw = obj.metadata.string_map("annotations").get(HPA_V1_CONDITIONS_ANNOTATION)
    if raw is None:
        return {}
    place = f"metadata.annotations[{HPA_V1_CONDITIONS_ANNOTATION}]"
    try:
        conditions = load_json(raw)
    except ParseError as e:
        raise ParseError(f"{obj.where}: {place}: {e}") from None
    return _conditions(Fields({"conditions": conditions}, obj.where, place))


def parse_daemonsets(text: str) -> list[DaemonSet]:
    daemonsets = []
    for obj in _objects(text, "DaemonSet"):
        pod_spec = obj.fields.child("spec").child("template").child("spec")
        status = obj.fields.child("status")
        containers = pod_spec.children("containers")
        first = containers[0] if containers else Fields({}, obj.where)
        daemonsets.append(
            DaemonSet(
                namespace=obj.require_namespace(),
                name=obj.name,
                labels=obj.metadata.string_map("labels"),
                images=[image for c in containers if (image := c.text("image"))],
                desired=status.integer("desiredNumberScheduled") or 0,
                ready=status.integer("numberReady") or 0,
                available=status.integer("numberAvailable") or 0,
                unavailable=status.integer("numberUnavailable") or 0,
                node_selector=pod_spec.string_map("nodeSelector"),
                env={name: value for name, value in _env(first).items() if not value.startswith("<from:")},
                args=first.strings("args"),
            )
        )
    return daemonsets


# --------------------------------------------------------------------------- KubeRay


def parse_rayclusters(text: str) -> list[RayClusterSpec]:
    """KubeRay ray.io/v1 RayClusters."""
    clusters = []
    for obj in _objects(text, "RayCluster"):
        status = obj.fields.child("status")
        cluster = _ray_cluster(obj, obj.fields.child("spec"))
        cluster.state = status.text("state") or None
        cluster.reason = status.text("reason") or None
        cluster.conditions = _conditions(status)
        clusters.append(cluster)
    return clusters


def parse_rayservices(text: str) -> list[RayClusterSpec]:
    """KubeRay RayServices: the RayCluster of spec.rayClusterConfig, named after the RayService, with
    spec.serveConfigV2 (a YAML string) parsed and status.serviceStatus as its state."""
    services = []
    for obj in _objects(text, "RayService"):
        spec, status = obj.fields.child("spec"), obj.fields.child("status")
        service = _ray_cluster(obj, spec.child("rayClusterConfig"))
        service.serve_config = _serve_config(spec)
        service.state = status.text("serviceStatus") or None  # "" is KubeRay's NotRunning
        service.conditions = _conditions(status)
        service.condition_times = _condition_times(status)
        service.serve_statuses = _serve_statuses(status, "active") + _serve_statuses(status, "pending")
        service.active_cluster = status.child("activeServiceStatus").text("rayClusterName") or None
        service.pending_cluster = status.child("pendingServiceStatus").text("rayClusterName") or None
        services.append(service)
    return services


def _condition_times(status: Fields) -> dict[str, str]:
    return {
        kind: when
        for c in status.children("conditions")
        if (kind := c.text("type")) and (when := c.text("lastTransitionTime"))
    }


def _serve_statuses(status: Fields, which: str) -> list[ServeStatus]:
    """The Serve applications (and their deployments) KubeRay read from the active or pending cluster."""
    service = status.child(f"{which}ServiceStatus")
    cluster_name = service.text("rayClusterName") or None
    found = []
    apps = service.child("applicationStatuses")
    for app_name in sorted(apps.data):
        app = apps.child(app_name)
        found.append(ServeStatus(which, cluster_name, app_name, None, app.text("status"), app.text("message") or None))
        deployments = app.child("serveDeploymentStatuses")
        for name in sorted(deployments.data):
            deployment = deployments.child(name)
            found.append(
                ServeStatus(
                    which, cluster_name, app_name, name, deployment.text("status"), deployment.text("message") or None
                )
            )
    return found


def _ray_cluster(obj: _Object, spec: Fields) -> RayClusterSpec:
    head = spec.child("headGroupSpec")
    return RayClusterSpec(
        kind=obj.kind,
        namespace=obj.require_namespace(),
        name=obj.name,
        head_ray_start_params=head.string_map("rayStartParams"),
        head_gpu_limit=_ray_container_gpus(head),
        worker_groups=[
            RayWorkerGroup(
                name=_required_text(group, "groupName"),
                replicas=group.integer("replicas"),
                min_replicas=group.integer("minReplicas"),
                max_replicas=group.integer("maxReplicas"),
                ray_start_params=group.string_map("rayStartParams"),
                gpu_limit_per_pod=_ray_container_gpus(group),
            )
            for group in spec.children("workerGroupSpecs")
        ],
    )


def _ray_container_gpus(group: Fields) -> int:
    """GPUs of the group's Ray container, which KubeRay takes to be the pod template's first one."""
    containers = group.child("template").child("spec").children("containers")
    if not containers:
        return 0
    resources = containers[0].child("resources")
    return gpu_count(_resources(resources, "limits"), _resources(resources, "requests"))


def _serve_config(spec: Fields) -> dict | None:
    raw = spec.text("serveConfigV2")
    if raw is None:
        return None
    try:
        config = yaml.safe_load(raw)
    except (yaml.YAMLError, ValueError, RecursionError) as e:  # ValueError: e.g. a date with month 13
        problem = " ".join(str(getattr(e, "problem", None) or e).split())
        raise ParseError(f"{spec.place('serveConfigV2')}: not valid YAML: {problem}") from None
    if config is None:  # empty, or comments only
        return None
    if not isinstance(config, dict):
        raise ParseError(f"{spec.place('serveConfigV2')}: expected a YAML mapping, found {type_name(config)}")
    return config
