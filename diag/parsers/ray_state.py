"""Ray's state lists (actors, placement groups, nodes) and the dashboard's node and actor views.

`parse_actors`, `parse_placement_groups` and `parse_nodes` each take either shape of the same list:
`ray list <x> [--detail] --format json` (a JSON list) or the dashboard's /api/v0/<x> answer (the list
inside a {"result", "msg", "data": {"result": {"result": [...]}}} envelope). Without --detail / ?detail=1
the detail columns are null, and read as unknown.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from diag.core.errors import ParseError
from diag.parsers.json_fields import Fields, type_name
from diag.parsers.ray_common import (
    dashboard_data,
    last_line,
    load_ray_json,
    number_map,
    one_line,
    optional_child,
    original_resource_name,
    original_resources,
    parse_usage_line,
    proto_integer,
    raw_list,
    required_proto_integer,
    required_text,
    resource_map,
)
from diag.snapshot.clock import iso, parse_time
from diag.snapshot.model import PlacementGroup, RayActor, RayNode

# ActorDeathCause (common.proto): exactly one of these contexts is set.
_DEATH_CONTEXTS = {
    "actor_died_error_context": "actor died",
    "creation_task_failure_context": "creation task failed",
    "runtime_env_failed_context": "runtime env setup failed",
    "actor_unschedulable_context": "actor unschedulable",
    "oom_context": "out of memory",
}


def parse_actors(text: str) -> list[RayActor]:
    return [_actor(row) for row in _state_rows(text, "actors", "actors")]


def parse_placement_groups(text: str) -> list[PlacementGroup]:
    """Placement groups. The state API does not report a group's strategy: `strategy` stays None
    (`ray status` names it in its placement-group demands)."""
    return [_placement_group(row) for row in _state_rows(text, "placement-groups", "placement_groups")]


def parse_nodes(text: str) -> list[RayNode]:
    """Ray nodes. `ray list nodes` humanises memory resources ("16.165 GiB"): read back as bytes."""
    return [_node(row) for row in _state_rows(text, "nodes", "nodes")]


def _state_rows(text: str, cli_noun: str, api_noun: str) -> list[Fields]:
    expected = f"`ray list {cli_noun} --format json` or the Ray dashboard's /api/v0/{api_noun} answer"
    data = load_ray_json(text, expected)
    if isinstance(data, list):
        rows, where = data, cli_noun
    elif isinstance(data, dict):
        listing = optional_child(dashboard_data(data, f"/api/v0/{api_noun}"), "result")
        if listing is None or "result" not in listing:
            raise ParseError(f"data has no result.result list: not the Ray dashboard's /api/v0/{api_noun} answer")
        rows, where = raw_list(listing, "result"), "data.result.result"
    else:
        raise ParseError(f"expected {expected}, found {type_name(data)}")
    return [Fields(row, "", f"{where}[{i}]") for i, row in enumerate(rows)]


def _actor(row: Fields) -> RayActor:
    return RayActor(
        actor_id=required_text(row, "actor_id"),
        class_name=row.text("class_name") or "",
        name=row.text("name") or None,
        state=row.text("state") or "",
        node_id=row.text("node_id") or None,
        pid=_process_id(row.integer("pid")),
        namespace=row.text("ray_namespace") or None,
        required_resources=original_resources(number_map(row, "required_resources")),
        placement_group_id=row.text("placement_group_id") or None,
        death_cause=_death_cause(row.child("death_cause")),
        num_restarts=proto_integer(row, "num_restarts"),
    )


def _process_id(pid: int | None) -> int | None:
    return pid or None  # the state API says pid 0 for an actor not created yet


def _death_cause(cause: Fields) -> str | None:
    """The nested ActorDeathCause as one line: what kind of death, the reason when given, the message."""
    if not cause.data:
        return None
    for key, label in _DEATH_CONTEXTS.items():
        if key not in cause:
            continue
        context = cause.child(key)
        if key == "creation_task_failure_context":  # a traceback: its last line names the exception
            message = last_line(context.text("formatted_exception_string") or "")
        else:
            message = one_line(context.text("error_message") or "")
        reason = context.text("reason")
        head = f"{label} ({reason})" if reason else label
        return f"{head}: {message}" if message else head
    return f"death cause of an unknown kind: {', '.join(sorted(cause.data))}"


def _placement_group(row: Fields) -> PlacementGroup:
    return PlacementGroup(
        placement_group_id=required_text(row, "placement_group_id"),
        name=row.text("name") or "",
        state=row.text("state") or "",
        bundles=[number_map(bundle, "unit_resources") for bundle in row.children("bundles")],
        scheduling_state=row.child("stats").text("scheduling_state"),
        creator_job_id=row.text("creator_job_id") or None,
    )


def _node(row: Fields) -> RayNode:
    return RayNode(
        node_id=required_text(row, "node_id"),
        node_ip=row.text("node_ip") or None,
        state=row.text("state") or None,
        is_head=bool(row.flag("is_head_node")),
        node_name=row.text("node_name") or None,
        resources_total=resource_map(row, "resources_total"),
        labels=row.string_map("labels"),
        state_message=row.text("state_message") or None,
        start_time=_ms_time(row, "start_time_ms"),
        end_time=_ms_time(row, "end_time_ms"),
    )


def _ms_time(row: Fields, key: str) -> str | None:
    """A Ray time in milliseconds since the epoch, as ISO 8601 UTC; None when not given or 0 (not ended).

    The dashboard sends a number (a string of digits in /nodes?view=summary); `ray list --detail`
    humanises it in the local time of the machine that ran it ("2026-12-02 16:50:40.925000"), read
    here as UTC, and the epoch itself ("1970-01-01 00:00:00") for 0.
    """
    value = row.data.get(key)
    if value is None:
        return None
    if isinstance(value, bool):
        raise row.error(key, "a time in milliseconds", value)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, (int, float)):
        if value <= 0:
            return None
        try:
            return iso(datetime.fromtimestamp(value / 1000, tz=timezone.utc))
        except (OverflowError, OSError, ValueError):
            raise row.error(key, "a time in milliseconds", value) from None
    moment = parse_time(value) if isinstance(value, str) else None
    if moment is None:
        raise row.error(key, "a time in milliseconds or a date", value)
    return None if moment.timestamp() <= 0 else iso(moment)


def parse_nodes_summary(text: str) -> list[RayNode]:
    """The dashboard's /nodes?view=summary answer: per node its raylet, object store and GPU processes.

    Resources come from `nodeLogicalResources` (Ray's names, `ray status` units: memory in bytes,
    rounded as printed), which also gives what is available; when a node is missing there, from the
    raylet's `resourcesTotal`, whose names the dashboard camelCased (`llama3_8b_gpu` -> `llama38BGpu`).
    The summary carries no Ray version. A node whose reporter has sent nothing has no object store
    figures (unknown) and no GPU list.
    """
    answer = load_ray_json(text, "the Ray dashboard's /nodes?view=summary answer")
    data = dashboard_data(answer, "/nodes?view=summary")
    if "summary" not in data:
        raise ParseError("data has no summary list: not the Ray dashboard's /nodes?view=summary answer")
    logical = data.string_map("nodeLogicalResources")
    return [_summary_node(row, logical) for row in data.children("summary")]


def _summary_node(row: Fields, logical: dict[str, str]) -> RayNode:
    if "raylet" not in row:
        raise ParseError(f"{row.place('raylet')} is missing")
    raylet = row.child("raylet")
    node = RayNode(
        node_id=required_text(raylet, "nodeId"),
        node_ip=raylet.text("nodeManagerAddress") or row.text("ip") or None,
        state=raylet.text("state") or None,
        is_head=bool(raylet.flag("isHeadNode")),
        node_name=raylet.text("nodeName") or None,
        hostname=row.text("hostname") or raylet.text("nodeManagerHostname") or None,
        labels=raylet.string_map("labels"),
        state_message=raylet.text("stateMessage") or None,
        gpu_processes=_gpu_processes(row),
        workers=[_core_worker(w) for w in raylet.children("coreWorkersStats")]
        if "coreWorkersStats" in raylet
        else None,
        start_time=_ms_time(raylet, "startTimeMs"),
        end_time=_ms_time(raylet, "endTimeMs"),
    )
    if node.node_id in logical:
        usage = _usage_lines(logical[node.node_id], f"data.nodeLogicalResources.{node.node_id}")
        node.resources_total = {name: total for name, (_, total) in usage.items()}
        node.resources_available = {name: total - used for name, (used, total) in usage.items()}
    else:
        node.resources_total = number_map(raylet, "resourcesTotal")
    if "storeStats" in raylet:  # without it the dashboard fills in zeros, which would read as empty
        used = raylet.number("objectStoreUsedMemory")
        available = raylet.number("objectStoreAvailableMemory")
        node.object_store_used_bytes = used
        node.object_store_total_bytes = used + available if used is not None and available is not None else None
    return node


def _usage_lines(text: str, where: str) -> dict[str, tuple[float, float]]:
    usage: dict[str, tuple[float, float]] = {}
    for line in filter(None, (line.strip() for line in text.splitlines())):
        parsed = parse_usage_line(line)
        if parsed is None:
            raise ParseError(f"{where}: not a 'used/total resource' line: {line[:80]!r}")
        name, used, total = parsed
        usage[name] = (used, total)
    return usage


def _gpu_processes(row: Fields) -> list[dict[str, Any]]:
    """{pid, gpu_index, memory_used_mib} for every process the node's reporter saw on a GPU."""
    found: list[dict[str, Any]] = []
    for gpu in row.children("gpus"):
        index = gpu.integer("index")
        processes = gpu.data.get("processesPids")
        # Depending on the Ray version the reporter sends a list of processes or a map keyed by pid.
        if isinstance(processes, dict):
            processes = list(processes.values())
        elif processes is not None and not isinstance(processes, list):
            raise gpu.error("processesPids", "a list or an object", processes)
        for i, entry in enumerate(processes or []):
            process = Fields(entry, gpu.where, f"{gpu.path}.processesPids[{i}]")
            found.append(
                {
                    "pid": required_proto_integer(process, "pid"),
                    "gpu_index": index,
                    "memory_used_mib": process.number("gpuMemoryUsage"),
                }
            )
    return found


def _core_worker(row: Fields) -> dict[str, Any]:
    """{pid, actor_id, gpu_ids} of one worker process of the raylet: the GPU slots Ray gave it, whether
    it runs an actor (actor_id) or tasks (actor_id None: Ray's nil id)."""
    return {
        "pid": _process_id(row.integer("pid")),
        "actor_id": _real_id(row.text("actorId")),
        "gpu_ids": _gpu_slots(row.child("usedResources")),
    }


def parse_logical_actors(text: str) -> list[RayActor]:
    """The dashboard's /logical/actors answer. Unlike the state API it says which GPUs Ray gave each
    live actor (`usedResources` slots, the ids Ray puts in CUDA_VISIBLE_DEVICES): `gpu_ids`. It has no
    namespace, and its death cause is the dashboard's one-line `exitDetail`.
    """
    answer = load_ray_json(text, "the Ray dashboard's /logical/actors answer")
    data = dashboard_data(answer, "/logical/actors")
    if "actors" not in data:
        raise ParseError("data has no actors map: not the Ray dashboard's /logical/actors answer")
    actors = data.child("actors")
    return [_logical_actor(actors.child(key)) for key in actors.data]


def _logical_actor(row: Fields) -> RayActor:
    exit_detail = row.text("exitDetail")
    return RayActor(
        actor_id=required_text(row, "actorId"),
        class_name=row.text("className") or row.text("actorClass") or "",
        name=row.text("name") or None,
        state=row.text("state") or "",
        node_id=_real_id(row.child("address").text("nodeId")),
        pid=_process_id(row.integer("pid")),
        required_resources=original_resources(number_map(row, "requiredResources")),
        placement_group_id=_real_id(row.text("placementGroupId")),
        death_cause=one_line(exit_detail) if exit_detail and exit_detail != "-" else None,
        num_restarts=proto_integer(row, "numRestarts"),
        gpu_ids=_gpu_slots(row.child("usedResources")),
        end_time=_ms_time(row, "endTime"),
    )


def _real_id(hex_id: str | None) -> str | None:
    """None for an absent id and for Ray's nil id (all f), which the dashboard shows for an unplaced actor."""
    return hex_id if hex_id and set(hex_id) != {"f"} else None


def _gpu_slots(used: Fields) -> list[str]:
    """GPU slot ids from {"GPU": {"resourceSlots": [{"slot": "0", "allocation": 1.0}]}}; an actor in a
    placement group holds them under the group's names ("GPU_group_0_<pg id>"), often twice."""
    slots: list[str] = []
    for name in used.data:
        if original_resource_name(name) != "GPU":
            continue
        for slot in used.child(name).children("resourceSlots"):
            slot_id = str(required_proto_integer(slot, "slot"))
            if slot_id not in slots:
                slots.append(slot_id)
    return slots
