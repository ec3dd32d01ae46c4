"""How each bundle file's text enters the snapshot: one reader per kind of file, named by its row in
diag/bundle/layout.py. A reader parses (diag/parsers) and puts the result in place; the loader
(diag/bundle/load.py) runs it, turns a `ParseError` into a failed source, and finishes what needs
every file first (logs joined to their pods, scrapes read in order, endpoints to their Services).
A reader returns the source's detail when it has one to say ("ray/status.txt used instead")."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from diag.core.errors import ParseError
from diag.parsers import engine_args, logs, nvidia_smi, nvml, prometheus_api, ray_state, ray_status, vllm
from diag.parsers.json_fields import load_json
from diag.snapshot.model import GPU, Pod, Snapshot, VllmServer


@dataclass
class Loading:
    """A snapshot being built, and what its readers keep until every file is read."""

    snap: Snapshot
    parsed: dict[str, list] = field(default_factory=dict)  # Bundle.parsed
    endpoints: dict[tuple[str, str], tuple[list[str], list[str]]] = field(default_factory=dict)
    log_files: list[tuple[str, str, bool]] = field(default_factory=list)  # (stem, text, previous)
    scrapes: dict[str, dict[int, str]] = field(default_factory=dict)  # server -> n -> file
    servers: dict[str, VllmServer] = field(default_factory=dict)
    gpus_by_key: dict[tuple[str, int], GPU] = field(default_factory=dict)  # snap.gpus by (host, index)

    def server(self, name: str) -> VllmServer:
        return self.servers.setdefault(name, VllmServer(name=name))


# (the snapshot being built, the file's path, its path's named parts, its text) -> a detail or None
Reader = Callable[[Loading, str, "re.Match[str]", str], "str | None"]


def kube_list(parse: Callable[[Snapshot, str], None], into: str | None = None) -> Reader:
    """`into`: the snapshot's list that the parse extends, which takes the file's objects where the
    bundle has them parsed already (`Bundle.parsed`)."""

    def read(state: Loading, rel: str, found: re.Match[str], text: str) -> None:
        if into is not None and (made := state.parsed.get(rel)) is not None:
            getattr(state.snap, into).extend(made)
        else:
            parse(state.snap, text)

    return read


def node_pods(parse: Callable[[str], list[Pod]]) -> Reader:
    """k8s/node-pods/<node>.json: the pods of every namespace on one node, kept apart from the pods."""

    def read(state: Loading, rel: str, found: re.Match[str], text: str) -> None:
        state.snap.node_pods.setdefault(found["node"], []).extend(parse(text))

    return read


def endpoints(parse: Callable[[str], dict]) -> Reader:
    def read(state: Loading, rel: str, found: re.Match[str], text: str) -> None:
        state.endpoints.update(parse(text))

    return read


def pod_log(state: Loading, rel: str, found: re.Match[str], text: str) -> None:
    state.log_files.append((found["stem"], text, rel.endswith(".previous.log")))


def ray_status_text(state: Loading, rel: str, found: re.Match[str], text: str) -> None:
    state.snap.ray_status = ray_status.parse_ray_status(text)


def ray_cluster_status(state: Loading, rel: str, found: re.Match[str], text: str) -> str | None:
    if state.snap.ray_status is not None:  # `ray status` text, when present too, is the richer one
        return "ray/status.txt used instead"
    state.snap.ray_status = ray_status.parse_cluster_status_json(text)
    return None


def ray_actors(state: Loading, rel: str, found: re.Match[str], text: str) -> None:
    state.snap.ray_actors.extend(ray_state.parse_actors(text))


def ray_placement_groups(state: Loading, rel: str, found: re.Match[str], text: str) -> None:
    state.snap.placement_groups.extend(ray_state.parse_placement_groups(text))


def ray_nodes(state: Loading, rel: str, found: re.Match[str], text: str) -> None:
    _merge_ray_nodes(state.snap, ray_state.parse_nodes(text))


def ray_nodes_summary(state: Loading, rel: str, found: re.Match[str], text: str) -> None:
    _merge_ray_nodes(state.snap, ray_state.parse_nodes_summary(text))


def ray_logical_actors(state: Loading, rel: str, found: re.Match[str], text: str) -> None:
    """/logical/actors knows which GPU slots each actor holds and when it died; the state API does not."""
    by_id = {a.actor_id: a for a in ray_state.parse_logical_actors(text)}
    for actor in state.snap.ray_actors:
        known = by_id.get(actor.actor_id)
        if known is not None:
            actor.gpu_ids = actor.gpu_ids or known.gpu_ids
            actor.end_time = actor.end_time or known.end_time


def ray_version(state: Loading, rel: str, found: re.Match[str], text: str) -> None:
    """/api/version names the head's Ray version."""
    data = load_json(text)
    if not isinstance(data, dict) or not isinstance(data.get("ray_version"), str):
        raise ParseError("no 'ray_version' string: not a Ray dashboard /api/version answer")
    state.snap.ray_head_version = data["ray_version"]


def gpus(parse: Callable[[str, str], list[GPU]]) -> Reader:
    """<host>.nvml.json, .xml and .csv of one host describe the same GPUs; the first read wins per field."""

    def read(state: Loading, rel: str, found: re.Match[str], text: str) -> None:
        for gpu in parse(text, found["host"]):
            known = state.gpus_by_key.get((gpu.host, gpu.index))
            if known is None:
                state.snap.gpus.append(gpu)
                state.gpus_by_key[(gpu.host, gpu.index)] = gpu
                continue
            known_fields = vars(known)
            for field_name, value in vars(gpu).items():
                if not _blank(value) and _blank(known_fields[field_name]):
                    known_fields[field_name] = value

    return read


NVML_GPUS = gpus(nvml.parse_nvml_json)
SMI_XML_GPUS = gpus(nvidia_smi.parse_xml)
SMI_CSV_GPUS = gpus(nvidia_smi.parse_csv)


def kernel_xid_lines(state: Loading, rel: str, found: re.Match[str], text: str) -> None:
    read = (logs.xid_in_message(line) for line in text.splitlines())
    state.snap.kernel_xid_lines[found["host"]] = [line for line in read if line is not None]


def vllm_scrape(state: Loading, rel: str, found: re.Match[str], text: str) -> None:
    """Kept: a server's scrapes are read in their order once all are known (the loader's last steps)."""
    state.server(found["server"])
    state.scrapes.setdefault(found["server"], {})[int(found["n"] or 0)] = rel


def vllm_models(state: Loading, rel: str, found: re.Match[str], text: str) -> None:
    server = state.server(found["server"])
    server.models, server.max_model_len_served = vllm.parse_models(text)


def vllm_health(state: Loading, rel: str, found: re.Match[str], text: str) -> None:
    state.server(found["server"]).health = vllm.parse_health(text)


def vllm_cmdline(state: Loading, rel: str, found: re.Match[str], text: str) -> None:
    """The server's argv, one element per line (`tr '\\0' '\\n' < /proc/<pid>/cmdline`)."""
    server = state.server(found["server"])
    if text and not text.endswith("\n"):  # cut off: a flag and its value may be apart
        raise ParseError("cut off mid-line: the command line is incomplete, so its flags are not used")
    parsed = engine_args.parse_engine_args([line for line in text.splitlines() if line.strip()], [])
    if parsed is None:
        raise ParseError("the command line does not run vLLM's OpenAI server")
    server.engine_args = parsed


def prometheus_answer(state: Loading, rel: str, found: re.Match[str], text: str) -> None:
    state.snap.prometheus.append(prometheus_api.parse_prom_answer(text, PurePosixPath(rel).stem))


def _merge_ray_nodes(snap: Snapshot, nodes: list) -> None:
    """nodes.json and nodes_summary.json describe the same nodes; keep one object per node id."""
    by_id = {n.node_id: n for n in snap.ray_nodes}
    for node in nodes:
        known = by_id.get(node.node_id)
        if known is None:
            snap.ray_nodes.append(node)
            by_id[node.node_id] = node
            continue
        for field_name, value in vars(node).items():
            if value not in (None, [], {}, "") and getattr(known, field_name) in (None, [], {}, ""):
                setattr(known, field_name, value)


def _blank(value: object) -> bool:
    """None, or an empty list, map or string: a field the file did not fill (a 0 or False is a value)."""
    return value is None or (not value and type(value) in (list, dict, str))
