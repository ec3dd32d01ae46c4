"""Facts for the vllm layer: one subject per vLLM server, its metrics read under old and new names."""

from __future__ import annotations

import dataclasses

from diag.facts.common import link, plain
from diag.model import Snapshot, VllmServer
from diag.parsers.vllm_metrics import summarize


def scopes(snap: Snapshot) -> dict[str, list[dict]]:
    return {"vllm_server": [_server(s, snap) for s in snap.vllm_servers]}


def _server(server: VllmServer, snap: Snapshot) -> dict:
    metrics = dataclasses.asdict(summarize(server.scrapes)) if server.scrapes else None
    service = next((s for s in snap.services if f"{s.namespace}/{s.name}" == server.service), None)
    gpus = [g for g in snap.gpus if (g.uuid or f"{g.host}/{g.index}") in server.gpus]
    return plain(server, drop=("scrapes",)) | {
        "metrics": metrics,
        "has_metrics": metrics is not None,
        "service_ready_endpoints": len(service.ready_addresses) if service and service.endpoints_seen else None,
        "gpu_count": len(gpus) if gpus else None,
        "gpu_utilization_pct": max(g.utilization_gpu_pct for g in gpus if g.utilization_gpu_pct is not None)
        if any(g.utilization_gpu_pct is not None for g in gpus) else None,
        "_subject": f"vllm/{server.namespace + '/' if server.namespace else ''}{server.name}",
        "_links": link("vllm", server.name) + link("pod", server.pod) + link("node", server.node)
        + link("ray_node", server.ray_node_id) + link("service", server.service) + [f"gpu:{g}" for g in server.gpus],
    }
