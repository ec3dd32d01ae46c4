"""The serving path past the pod: a Service's target ports against its pods' container ports, the
Services an Ingress or a Gateway API route sends to (and an Ingress's TLS Secrets, a route's
Gateways), the workload an HPA scales, the ConfigMaps and Secrets a pod names."""

from __future__ import annotations

import difflib

from diag.facts.common import link, plain
from diag.snapshot.clock import Clock
from diag.snapshot.model import HPA, Ingress, Pod, Route, RouteRef, Service, ServicePort, Snapshot

VLLM_DEFAULT_PORT = 8000  # vLLM's OpenAI-compatible server without --port


def target_port_facts(svc: Service, selected: list[Pod]) -> dict:
    """Where the Service's targetPorts lead on the pods it selects.

    A named targetPort is resolved per pod against its containers' named ports; where it resolves on
    none, the Endpoints list no pod for it. A number needs no declared containerPort (many pods declare
    none, or only a metrics port), so it is judged only on vLLM pods, against the port their server
    listens on (its --port) and the ports they declare.
    """
    problems, fixes = [], []
    for i, sp in enumerate(svc.ports):
        target = sp.target_port if sp.target_port is not None else sp.port
        if isinstance(target, str):
            wrong = bool(selected) and not any(target in c.ports for p in selected for c in p.containers)
            pods = selected
        else:
            pods = [p for p in selected if p.vllm_server]
            wrong = bool(pods) and all(
                target not in c.ports.values() and target not in _vllm_ports(p) for p in pods for c in p.containers
            )
        if wrong:
            problems.append(_problem(sp, target, pods))
            fixes.append(f"spec.ports[{i}].targetPort: {_fix(sp, pods)}")
    return {"target_port_problems": problems, "target_port_fixes": fixes}


def _vllm_ports(pod: Pod) -> list[int]:
    """The ports vLLM's server listens on in this pod, from its command line (--port, else 8000)."""
    found = []
    for c in pod.containers:
        argv = c.command + c.args
        if not any("vllm" in word for word in argv):
            continue
        port = VLLM_DEFAULT_PORT
        for i, word in enumerate(argv):
            value = argv[i + 1] if word == "--port" and i + 1 < len(argv) else word.removeprefix("--port=")
            if (word == "--port" or word.startswith("--port=")) and value.isdigit():
                port = int(value)
        found.append(port)
    return found


def _container_ports(pods: list[Pod]) -> dict[str, int]:
    """Every declared container port of these pods: name (or the number's text) -> number."""
    return {name: number for p in pods for c in p.containers for name, number in c.ports.items()}


def _ports_text(pods: list[Pod]) -> str:
    shown = [name if name == str(n) else f"{name}={n}" for name, n in sorted(_container_ports(pods).items())]
    return ", ".join(shown) or "none declared"


def _problem(sp: ServicePort, target: int | str, pods: list[Pod]) -> str:
    port = f"port {sp.name} ({sp.port})" if sp.name else f"port {sp.port}"
    names = ", ".join(p.name for p in pods[:3]) + (f" and {len(pods) - 3} more" if len(pods) > 3 else "")
    if isinstance(target, str):
        lacks = f"no container of {names} has a port named {target}"
    else:
        listens = ", ".join(str(n) for n in sorted({n for p in pods for n in _vllm_ports(p)}))
        lacks = f"no container of {names} declares containerPort {target}, and vLLM listens on {listens}"
    shown = target if isinstance(target, int) else f'"{target}"'
    return f"{port} -> targetPort {shown}: {lacks} (their ports: {_ports_text(pods)})"


def _fix(sp: ServicePort, pods: list[Pod]) -> str:
    """The container port to target: the only one the pods declare, or the one numbered as the Service's port."""
    ports = _container_ports(pods) or {str(n): n for p in pods for n in _vllm_ports(p)}
    same = [name for name, n in ports.items() if n == sp.port]
    chosen = same if len(same) == 1 else list(ports) if len(ports) == 1 else []
    if not chosen:
        return f"one of {_ports_text(pods)}"
    name = chosen[0]
    return name if not name.isdigit() else str(ports[name])


# the HPA controller's Warning events for a metric it could not read (pkg/controller/podautoscaler)
HPA_METRIC_EVENTS = (
    "FailedGetResourceMetric",
    "FailedGetContainerResourceMetric",
    "FailedGetPodsMetric",
    "FailedGetObjectMetric",
    "FailedGetExternalMetric",
    "FailedComputeMetricsReplicas",
)
_WORKLOAD_FILES = {"Deployment": "k8s/deployments.json", "StatefulSet": "k8s/statefulsets.json"}


def hpa_target_facts(hpa: HPA, snap: Snapshot, scales_vllm: bool) -> dict:
    """Whether the HPA's scaleTargetRef exists (None: a kind llmdiag does not list, or its list was not
    read), and whether it is a serving workload: vLLM runs in it, or a Service selects its pods."""
    read = _read(snap, _WORKLOAD_FILES.get(hpa.target_kind, ""))
    target = next(
        (
            w
            for w in snap.workloads
            if (w.kind, w.namespace, w.name) == (hpa.target_kind, hpa.namespace, hpa.target_name)
        ),
        None,
    )
    able = hpa.conditions.get("AbleToScale", {})
    names = sorted(w.name for w in snap.workloads if (w.kind, w.namespace) == (hpa.target_kind, hpa.namespace))
    serves = scales_vllm or (
        target is not None
        and (
            target.template_runs_vllm
            or any(
                s.namespace == hpa.namespace
                and s.selector
                and all(target.template_labels.get(k) == v for k, v in s.selector.items())
                for s in snap.services
            )
        )
    )
    return {
        "target_missing": target is None if read else None,
        "target_serves": serves,
        "namespace_workloads": names,
        # the workload it was most likely meant for (a rename, a typo): named in the fix, and on its path
        "target_lookalike": _lookalike(hpa.target_name, names) if target is None else None,
        "able_to_scale": f"AbleToScale={able.get('status')} {able.get('reason')}: {able.get('message')}"
        if able
        else None,
    }


def _lookalike(name: str, candidates: list[str]) -> str | None:
    found = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    return found[0] if found else None


def _read(snap: Snapshot, name: str) -> bool:
    status = snap.sources.get(name)
    return status is not None and status.status == "ok"


# a controller takes a Gateway of its class within seconds: one still at the API's default status this long
# after its creation has none
GATEWAY_UNCLAIMED_S = 120.0


def scopes(snap: Snapshot) -> dict[str, list[dict]]:
    services = {(s.namespace, s.name): s for s in snap.services}
    secrets = names_read(snap, "Secret")
    clock = Clock.of(snap)
    return {
        "ingress": [_ingress(i, services, secrets, snap) for i in snap.ingresses],
        "route": [_route(r, services, snap) | _gateway_state(r, snap, clock) for r in snap.routes],
    }


def _gateway_state(route: Route, snap: Snapshot, clock: Clock) -> dict:
    """What the Gateways a route is attached to say of themselves: refused by their controller
    (Accepted or Programmed False), or never taken by one (still the API's default, Accepted Unknown
    Pending "Waiting for controller", GATEWAY_UNCLAIMED_S after its creation: no controller runs for its
    GatewayClass). A Gateway with no condition at all is left unknown."""
    gateways = {(g.namespace, g.name): g for g in snap.gateways}
    problems, classes, refs = [], [], []
    for parent in route.parents:
        g = gateways.get((parent.namespace, parent.name)) if parent.kind == "Gateway" else None
        if g is None:
            continue
        said = [
            f"{kind}={c.get('status')} {c.get('reason')}: {c.get('message')}"
            for kind, c in sorted(g.conditions.items())
            if kind in ("Accepted", "Programmed") and c.get("status") == "False"
        ]
        accepted = g.conditions.get("Accepted") or {}
        age = clock.age(g.created)
        if not said and accepted.get("status") == "Unknown" and age is not None and age >= GATEWAY_UNCLAIMED_S:
            waiting = f"Accepted=Unknown {accepted.get('reason')}: {accepted.get('message')}"
            said = [f"{waiting}, {_span(age)} after its creation"]
        if said:
            problems.append(f"gateway {g.namespace}/{g.name} (gatewayClassName {g.gateway_class}): {'; '.join(said)}")
            classes.append(g.gateway_class or "")
            refs.append({"namespace": g.namespace, "name": g.name})
    return {"gateway_problems": problems, "gateway_classes": sorted(set(classes)), "problem_gateways": refs}


def _span(seconds: float) -> str:
    minutes = seconds / 60
    if minutes < 120:
        return f"{round(minutes)} min"
    return f"{round(minutes / 60)} h" if minutes < 48 * 60 else f"{round(minutes / 1440)} days"


_NAME_LISTS = {"ConfigMap": "k8s/configmaps.json", "Secret": "k8s/secrets.json"}


def names_read(snap: Snapshot, kind: str) -> dict[str, set[str]] | None:
    """namespace -> the names of its ConfigMaps or Secrets, for each namespace the list covers: those
    the manifest says were collected (all, for -A), else (a hand-made bundle) those it has items in.
    None where the list was not read whole (absent, failed, or capped): a name not in it says nothing."""
    status = snap.sources.get(_NAME_LISTS[kind])
    if status is None or status.status != "ok" or "capped" in status.detail:
        return None
    by_namespace: dict[str, set[str]] = {}
    for o in snap.configmaps if kind == "ConfigMap" else snap.secrets:
        by_namespace.setdefault(o.namespace, set()).add(o.name)
    kubernetes = snap.manifest.get("kubernetes")
    collected = kubernetes.get("namespaces") if isinstance(kubernetes, dict) else None
    if isinstance(collected, list) and "*" in collected:
        collected = sorted({p.namespace for p in snap.pods} | {i.namespace for i in snap.ingresses})
    if isinstance(collected, list):
        for namespace in collected:
            by_namespace.setdefault(namespace, set())
    return by_namespace


def config_ref_facts(pod: Pod, names: dict[str, dict[str, set[str]] | None]) -> dict:
    """The ConfigMaps and Secrets the pod names that its namespace does not hold, as the kubelet would
    say it (`secret "hf-token"`), with where the spec names them; an optional reference is never one.
    imagePullSecrets apart: the kubelet pulls without a missing one, so it matters only where a pull fails."""
    missing: dict[tuple[str, str], list[str]] = {}
    pull: list[str] = []
    for ref in pod.config_refs:
        listed = (names.get(ref.kind) or {}).get(pod.namespace)
        if ref.optional or listed is None or ref.name in listed:
            continue
        if ref.where == "imagePullSecrets":
            pull.append(ref.name)
        else:
            missing.setdefault((ref.kind, ref.name), []).append(ref.where)
    return {
        "missing_config_refs": [
            f'{kind.lower()} "{name}" does not exist in namespace {pod.namespace} ({", ".join(wheres)})'
            for (kind, name), wheres in missing.items()
        ],
        "missing_config_names": [f"{kind.lower()}/{name}" for kind, name in missing],
        "missing_pull_secrets": [
            f'imagePullSecret "{name}" does not exist in namespace {pod.namespace}' for name in sorted(set(pull))
        ],
    }


def _route(route: Route, services: dict[tuple[str, str], Service], snap: Snapshot) -> dict:
    """A route's backendRefs against the Services read, its parentRefs against the Gateways read, and
    what its parents' controllers say of it (Accepted, ResolvedRefs)."""
    services_read = _read(snap, "k8s/services.json")
    gateways_read = _read(snap, "k8s/gateways.json")
    gateways = {(g.namespace, g.name) for g in snap.gateways}
    backend_problems, parent_problems, fixes, meant = [], [], [], []
    for b in route.backends:
        if b.kind != "Service" or not services_read:
            continue
        svc = services.get((b.namespace, b.name))
        if svc is None:
            backend_problems.append(f'backendRef {_ref_name(b, route)}: services "{b.name}" not found in {b.namespace}')
            names_there = sorted(name for (ns, name) in services if ns == b.namespace)
            if (other := _lookalike(b.name, names_there)) is not None:
                fixes.append(f"backendRefs name {other} in place of {b.name}")
                meant.append(services[(b.namespace, other)])
        elif b.port is not None and not any(p.port == b.port for p in svc.ports):
            ports = ", ".join(f"{p.name}={p.port}" if p.name else str(p.port) for p in svc.ports) or "none"
            backend_problems.append(
                f"backendRef {_ref_name(b, route)}: service {b.name} has no port {b.port} (its ports: {ports})"
            )
            if len(svc.ports) == 1:
                fixes.append(f"backendRefs port {svc.ports[0].port} of {b.name} in place of {b.port}")
            meant.append(svc)
    for p in route.parents:
        if p.kind == "Gateway" and gateways_read and (p.namespace, p.name) not in gateways:
            missing = f'gateways.gateway.networking.k8s.io "{p.name}" not found in {p.namespace}'
            parent_problems.append(f"parentRef {_ref_name(p, route)}: {missing}")
    status_problems = [
        f"{kind}={c.get('status')} {c.get('reason')}: {c.get('message')} (parent {_ref_name(ps.parent, route)}"
        f"{', controller ' + ps.controller if ps.controller else ''})"
        for ps in route.status
        for kind, c in sorted(ps.conditions.items())
        if kind in ("Accepted", "ResolvedRefs") and c.get("status") == "False"
    ]
    names = sorted(name for (ns, name) in services if ns == route.namespace)
    behind = [svc for b in route.backends if (svc := services.get((b.namespace, b.name))) is not None]
    return {
        "kind": route.kind,
        "namespace": route.namespace,
        "name": route.name,
        "resource": f"{route.kind.lower()}s.gateway.networking.k8s.io",
        # unknown (None), not fine, where the Services or Gateways were not read
        "backend_problems": backend_problems if services_read else None,
        "parent_problems": parent_problems if gateways_read else None,
        "status_problems": status_problems,
        # what K8S-321/322 name from the lists read: the controller's condition is then theirs to quote
        "named_problems": len(backend_problems) + len(parent_problems),
        # what to change, by name where the namespace holds a Service named like the missing one
        "backend_fix": "; ".join(fixes) or "spec.rules[].backendRefs[].name / port",
        "backends": [f"{b.kind.lower()}/{b.namespace}/{b.name}:{b.port}" for b in route.backends],
        "parents": [f"{p.kind.lower()}/{p.namespace}/{p.name}" for p in route.parents],
        "existing_services": names,
        "existing_gateways": sorted(f"{ns}/{name}" for ns, name in gateways),
        "_subject": f"{route.kind.lower()}/{route.namespace}/{route.name}",
        "_links": [x for b in route.backends if b.kind == "Service" for x in link("service", f"{b.namespace}/{b.name}")]
        # the pods behind its Services, or the ones it was meant for: its place on the serving path
        + [f"pod:{p.key}" for svc in meant + behind for p in _selected(svc, snap)],
    }


def _ref_name(ref: RouteRef, route: Route) -> str:
    where = ref.name if ref.namespace == route.namespace else f"{ref.namespace}/{ref.name}"
    port = f":{ref.port}" if ref.port is not None else ""
    section = f" (sectionName {ref.section})" if ref.section else ""
    return f"{ref.kind} {where}{port}{section}"


def _ingress(
    ing: Ingress, services: dict[tuple[str, str], Service], secrets: dict[str, set[str]] | None, snap: Snapshot
) -> dict:
    read = _read(snap, "k8s/services.json")
    names = sorted(name for (ns, name) in services if ns == ing.namespace)
    problems, fixes, meant = [], [], []
    for b in ing.backends:
        where = "default backend" if b.host is None and b.path is None else f"{b.host or '*'}{b.path}"
        port = b.port_name if b.port_name is not None else b.port_number
        svc = services.get((ing.namespace, b.service))
        if svc is None:
            problems.append(
                f'{where} -> service {b.service}:{port}: services "{b.service}" not found in {ing.namespace}'
            )
            if (other := _lookalike(b.service, names)) is not None:
                fixes.append(f"{where}: service {other} in place of {b.service}")
                meant.append(services[(ing.namespace, other)])
        elif port is not None and not any(port in (p.name, p.port) for p in svc.ports):
            ports = ", ".join(f"{p.name}={p.port}" if p.name else str(p.port) for p in svc.ports) or "none"
            problems.append(
                f"{where} -> service {b.service}:{port}: service {b.service} has no port {port} (its ports: {ports})"
            )
            if len(svc.ports) == 1:
                fixes.append(
                    f"{where}: port {svc.ports[0].name or svc.ports[0].port} of {b.service} in place of {port}"
                )
            meant.append(svc)
    behind = [svc for b in ing.backends if (svc := services.get((ing.namespace, b.service))) is not None]
    listed = None if secrets is None else secrets.get(ing.namespace)
    tls_missing = None if listed is None else [n for n in ing.tls_secrets if n not in listed]
    return plain(ing) | {
        # unknown, not fine, when the Services were not read
        "backend_problems": problems if read else None,
        # what to change, by name where the namespace holds a Service named like the missing one
        "backend_fix": "; ".join(fixes) or "spec.rules[].http.paths[].backend.service, spec.defaultBackend.service",
        "existing_services": names,
        # spec.tls secretNames its namespace does not hold; None where the Secrets were not read
        "tls_missing": tls_missing,
        "tls_problems": None
        if tls_missing is None
        else [f'spec.tls secretName {name}: secret "{name}" not found in {ing.namespace}' for name in tls_missing],
        "_subject": f"ingress/{ing.namespace}/{ing.name}",
        # the pods behind the Services it routes (or was meant to route) to: its place on the serving path
        "_links": [x for b in ing.backends for x in link("service", f"{ing.namespace}/{b.service}")]
        + [f"pod:{p.key}" for svc in meant + behind for p in _selected(svc, snap)],
    }


def _selected(svc: Service, snap: Snapshot) -> list[Pod]:
    return [
        p
        for p in snap.pods
        if p.namespace == svc.namespace and svc.selector and all(p.labels.get(k) == v for k, v in svc.selector.items())
    ]
