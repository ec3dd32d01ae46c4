"""`ray status` text, and the dashboard's /api/cluster_status answer, as a RayStatus.

Node lists hold one entry per node: "2 gpu-group" under Active reads as two "gpu-group" entries.
"""

from __future__ import annotations

import ast
import re
from datetime import datetime, timezone
from typing import Any

from diag.core.errors import ParseError
from diag.parsers.json_fields import Fields, type_name
from diag.parsers.ray_common import (
    dashboard_data,
    is_number,
    load_ray_json,
    number_map,
    optional_child,
    original_resources,
    parse_usage_line,
    raw_list,
)
from diag.snapshot.model import RayDemand, RayStatus

_HEADER = re.compile(r"^=+ Autoscaler status: (?P<time>.+?) =+$")
_NODE_COUNT = re.compile(r"^(?P<count>\d+) (?P<type>\S.*)$")
_LAUNCHING = re.compile(r"^(?P<type>.+), (?P<count>\d+) launching$")
_TASK_DEMAND = re.compile(
    r"^(?P<bundle>\{.*\}): (?P<count>\d+)\+ pending tasks/actors(?: \(\d+\+ using placement groups\))?$"
)
_PG_DEMAND = re.compile(r"^(?P<shapes>\{.*\} \* \d+) \((?P<strategy>\w+)\): (?P<count>\d+)\+ pending placement groups$")
_PG_SHAPE = re.compile(r"(\{[^{}]*\}) \* (\d+)")
# v1 prints "100+ from request_resources()", v2 "100 from request_resources()"
_REQUEST_DEMAND = re.compile(r"^(?P<bundle>\{.*\}): (?P<count>\d+)\+? from request_resources\(\)$")

_MOST_NODES = 100_000  # far above any Ray cluster; a larger count is a corrupt file, not a list to build
_ACTIVE_SECTIONS = {"active", "healthy"}  # "Healthy:" in older autoscalers
_USAGE_SECTIONS = {"usage", "total usage"}
_DEMAND_SECTIONS = {"demands", "total demands", "pending demands", "from request_resources"}


def parse_ray_status(text: str) -> RayStatus:
    """`ray status` or `ray status -v`, autoscaler v1 (Usage:/Demands:) or v2 (Total Usage:/Pending Demands:).

    Usage is (used, total) per resource, memory and object_store_memory in bytes. The per-node blocks
    of the verbose form repeat what the totals say and are not read.
    """
    lines = [line.rstrip() for line in text.splitlines()]
    headers = ((i, _HEADER.match(line.strip())) for i, line in enumerate(lines))
    start, header = next(((i, m) for i, m in headers if m is not None), (0, None))
    if header is None:
        first = next((line.strip() for line in lines if line.strip()), None)
        if first is None:
            raise ParseError("empty file, expected `ray status` output")
        raise ParseError(f"not `ray status` output: no 'Autoscaler status' header (first line: {first[:80]!r})")
    status = RayStatus(timestamp=header["time"])
    section: str | None = None
    for number, line in enumerate(lines[start + 1 :], start + 2):
        item = line.strip()
        if not item or set(item) == {"-"}:
            continue
        if not line.startswith(" "):
            if line.startswith("Node: "):
                break
            section = line[:-1].lower() if line.endswith(":") else None
            continue
        if item.startswith("(") and item.endswith(")"):
            continue  # "(no pending nodes)", "(none)", "(no resource demands)" ...
        _read_item(status, section, item, number)
    return status


def _read_item(status: RayStatus, section: str | None, item: str, number: int) -> None:
    if section in _ACTIVE_SECTIONS or section == "idle":
        m = _NODE_COUNT.match(item)
        if m is None:
            raise ParseError(f"line {number}: not a '<count> <node type>' line: {item!r}")
        nodes = status.idle_nodes if section == "idle" else status.active_nodes
        nodes.extend(_each_node(m["type"], int(m["count"]), f"line {number}"))
    elif section == "pending":
        m = _LAUNCHING.match(item)
        status.pending_nodes.extend(
            _each_node(f"{m['type']}, launching", int(m["count"]), f"line {number}") if m else [item]
        )
    elif section == "recent failures":
        status.recent_failures.append(item)
    elif section in _USAGE_SECTIONS:
        usage = parse_usage_line(item)
        if usage is None:
            raise ParseError(f"line {number}: not a 'used/total resource' line: {item!r}")
        name, used, total = usage
        status.usage[name] = (used, total)
    elif section in _DEMAND_SECTIONS:
        status.demands.extend(_demand_line(item, f"line {number}"))
    # Any other section is a newer Ray's addition that the model has no place for.


def _each_node(name: str, count: float, where: str) -> list[str]:
    """`name` once per node of a "<count> <name>" entry."""
    if not (0 <= count <= _MOST_NODES and float(count).is_integer()):
        raise ParseError(f"{where}: {count} is not a node count")
    return [name] * int(count)


def _demand_line(item: str, where: str) -> list[RayDemand]:
    if m := _TASK_DEMAND.match(item):
        return [RayDemand(_bundle_literal(m["bundle"], where), int(m["count"]), "task_or_actor")]
    if m := _PG_DEMAND.match(item):
        # One demand per bundle shape: "{'GPU': 1.0} * 4, {'CPU': 2.0} * 1 (PACK): 2+ pending placement groups"
        return [
            RayDemand(_bundle_literal(shape, where), int(m["count"]), "placement_group", m["strategy"], int(n))
            for shape, n in _PG_SHAPE.findall(m["shapes"])
        ]
    if m := _REQUEST_DEMAND.match(item):
        return [RayDemand(_bundle_literal(m["bundle"], where), int(m["count"]), "request_resources")]
    raise ParseError(f"{where}: not a resource demand line: {item!r}")


def _bundle_literal(literal: str, where: str) -> dict[str, float]:
    """A bundle as `ray status` prints it, a Python dict literal: {'GPU': 4.0, 'CPU': 1.0}."""
    try:
        value = ast.literal_eval(literal)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise ParseError(f"{where}: not a resource bundle: {literal[:80]!r}") from None
    return _bundle(value, where)


def _bundle(value: Any, where: str) -> dict[str, float]:
    if not isinstance(value, dict):
        raise ParseError(f"{where}: expected a resource bundle, found {type_name(value)}")
    bundle: dict[str, float] = {}
    for name, amount in value.items():
        if not isinstance(name, str) or not is_number(amount):
            raise ParseError(f"{where}: resource bundle entry {name!r}: {amount!r} is not a name and an amount")
        bundle[name] = float(amount)
    return bundle


def parse_cluster_status_json(text: str) -> RayStatus:
    """The dashboard's /api/cluster_status answer; with ?format=1 it carries the `ray status` text instead.

    The dashboard camelCases the keys of every JSON object it sends, so the resource names in `usage`
    (and node type names in the node counts) are not Ray's own: `llama3_8b_gpu` arrives as
    `llama38BGpu`, `object_store_memory` as `objectStoreMemory`. They are kept as sent. Demands sit in
    lists, which the dashboard leaves alone, so their resource names are Ray's. Memory is in bytes.
    Node names are written the way `ray status` prints them. The timestamp is ISO 8601, UTC.
    """
    answer = load_ray_json(text, "the Ray dashboard's /api/cluster_status answer")
    data = dashboard_data(answer, "/api/cluster_status")
    if "clusterStatus" not in data.data:
        raise ParseError("data has no clusterStatus: not the Ray dashboard's /api/cluster_status answer")
    formatted = data.data["clusterStatus"]
    if isinstance(formatted, str):
        return parse_ray_status(formatted)
    report = optional_child(data, "clusterStatus")
    if report is None:
        raise ParseError("the Ray dashboard had no cluster status yet (clusterStatus is null)")
    status = RayStatus(timestamp=_utc_time(report, "time"))
    if (autoscaler := optional_child(report, "autoscalerReport")) is not None:
        _read_autoscaler_report(status, autoscaler)
    if (load := optional_child(report, "loadMetricsReport")) is not None:
        _read_load_metrics(status, load)
    return status


def _utc_time(fields: Fields, key: str) -> str | None:
    seconds = fields.number(key)
    if seconds is None:
        return None
    try:
        return datetime.fromtimestamp(seconds, tz=timezone.utc).isoformat()
    except (OverflowError, OSError, ValueError):
        raise ParseError(f"{fields.place(key)}: {seconds} is not a time") from None


def _read_autoscaler_report(status: RayStatus, report: Fields) -> None:
    for node_type, count in number_map(report, "activeNodes").items():
        status.active_nodes.extend(_each_node(node_type, count, report.place("activeNodes")))
    for node_type, count in number_map(report, "idleNodes").items():
        status.idle_nodes.extend(_each_node(node_type, count, report.place("idleNodes")))
    for node_type, count in number_map(report, "pendingLaunches").items():
        status.pending_nodes.extend(_each_node(f"{node_type}, launching", count, report.place("pendingLaunches")))
    for ip, node_type, state in _string_rows(report, "pendingNodes", 3):
        status.pending_nodes.append(f"{ip}: {node_type}, {state.lower()}")
    for ip, node_type in _string_rows(report, "failedNodes", 2):
        status.recent_failures.append(f"{node_type}: NodeTerminated (ip: {ip})")


def _string_rows(report: Fields, key: str, width: int) -> list[list[str]]:
    rows = raw_list(report, key)
    for i, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != width or not all(isinstance(v, str) for v in row):
            raise ParseError(
                f"{report.place(f'{key}[{i}]')}: expected a list of {width} strings, found {str(row)[:80]}"
            )
    return rows


def _read_load_metrics(status: RayStatus, load: Fields) -> None:
    usage = optional_child(load, "usage")
    for name, pair in usage.data.items() if usage else ():
        if not (isinstance(pair, list) and len(pair) == 2 and all(is_number(v) for v in pair)):
            raise ParseError(f"{load.place('usage')}.{name}: expected [used, total], found {str(pair)[:80]}")
        if not name.startswith("node:"):  # per-node marker resources; `ray status` leaves them out too
            status.usage[name] = (float(pair[0]), float(pair[1]))
    for bundle, count in _bundle_counts(load, "resourceDemand"):
        if "bundle" not in bundle:  # placement-group-ready tasks; `ray status` leaves them out too
            status.demands.append(RayDemand(bundle, count, "task_or_actor"))
    for i, (group, count) in enumerate(_pairs(load, "pgDemand")):
        group_fields = Fields(group, load.where, f"{load.path}.pgDemand[{i}][0]")
        strategy = group_fields.text("strategy")
        for bundle, n in _bundle_counts(group_fields, "bundles"):
            status.demands.append(RayDemand(bundle, count, "placement_group", strategy, n))
    for bundle, count in _bundle_counts(load, "requestDemand"):
        status.demands.append(RayDemand(bundle, count, "request_resources"))


def _pairs(fields: Fields, key: str) -> list[tuple[Any, int]]:
    """A list of [something, count] pairs, the shape of every demand list."""
    pairs = []
    for i, row in enumerate(raw_list(fields, key)):
        if not (isinstance(row, list) and len(row) == 2 and is_number(row[1]) and float(row[1]).is_integer()):
            raise ParseError(f"{fields.place(f'{key}[{i}]')}: expected [bundle, count], found {str(row)[:80]}")
        pairs.append((row[0], int(row[1])))
    return pairs


def _bundle_counts(fields: Fields, key: str) -> list[tuple[dict[str, float], int]]:
    return [
        (original_resources(_bundle(bundle, fields.place(f"{key}[{i}]"))), count)
        for i, (bundle, count) in enumerate(_pairs(fields, key))
    ]
