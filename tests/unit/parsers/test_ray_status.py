from __future__ import annotations

import json
from pathlib import Path

import pytest

from diag.core.errors import ParseError
from diag.parsers.ray_status import parse_cluster_status_json, parse_ray_status
from diag.snapshot.model import RayDemand

LIVE = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "ray-live"
GiB = 2**30


def live(name: str) -> str:
    return (LIVE / name).read_text()


# Autoscaler v1 layout ("Usage:" / "Demands:"), older "Healthy:" heading, placement-group notes.
V1_STATUS = """\
======== Autoscaler status: 2024-05-14 09:30:12.004211 ========
Node status
---------------------------------------------------------------
Healthy:
 1 ray.head.default
 3 gpu-a100
Pending:
 gpu-a100, 2 launching
 10.4.7.21: gpu-a100, setting-up
Recent failures:
 gpu-a100: NodeTerminated (ip: 10.4.7.9)

Resources
---------------------------------------------------------------
Usage:
 96.0/104.0 CPU
 8.0/8.0 GPU (8.0 used of 8.0 reserved in placement groups)
 512.00MiB/1.50TiB memory
 21.40GiB/400.00GiB object_store_memory

Demands:
 {'GPU': 1.0, 'CPU': 4.0}: 6+ pending tasks/actors (6+ using placement groups)
 {'GPU': 1.0} * 4, {'CPU': 2.0} * 1 (STRICT_SPREAD): 2+ pending placement groups
 {'GPU': 8}: 1+ from request_resources()
"""

# Autoscaler v2, verbose: per-node blocks after the totals must not change them.
V2_VERBOSE_STATUS = """\
======== Autoscaler status: 2025-03-02 11:00:41.771902 ========
GCS request time: 0.001812s

Node status
---------------------------------------------------------------
Active:
 1 headgroup
Idle:
 2 gpu-group
Pending:
 (no pending nodes)
Recent failures:
 gpu-group: LaunchFailed (latest_attempt: 10:58:02) - no capacity in zone

Resources
---------------------------------------------------------------
Total Usage:
 4.0/24.0 CPU
 0.0/2.0 GPU
 0B/96.00GiB memory
 1.25GiB/28.00GiB object_store_memory

From request_resources:
 {'GPU': 2.0}: 3 from request_resources()
Pending Demands:
 {'GPU': 4.0}: 1+ pending tasks/actors

Node: 10.0.3.4 (headgroup)
 Id: 5b0e7c2d9a41f3e8b6d0c1a2f4e5d6c7b8a9f0e1d2c3b4a5f6e7d8c9
 Usage:
  4.0/8.0 CPU
  0B/32.00GiB memory
 Activity:
  Resource: CPU currently in use.
"""


def test_v2_live_capture():
    status = parse_ray_status(live("ray_status.txt"))
    assert status.timestamp == "2026-12-02 16:51:50.542797"
    assert status.active_nodes == ["node_77043298181f657d2307df1277a7bfd7baa2e7b49998843770c413ce"]
    assert status.idle_nodes == [] and status.pending_nodes == [] and status.recent_failures == []
    assert status.usage["GPU"] == (1.0, 2.0)
    assert status.usage["llama3_8b_gpu"] == (0.0, 1.0)
    assert status.usage["memory"] == (0.0, pytest.approx(16.17 * GiB))
    assert status.usage["object_store_memory"] == (0.0, pytest.approx(6.93 * GiB))
    assert status.demands == [
        RayDemand({"GPU": 4.0}, 1, "task_or_actor"),
        RayDemand({"GPU": 4.0, "CPU": 1.0}, 1, "placement_group", "STRICT_PACK", 1),
    ]


def test_verbose_live_capture_reads_the_same_as_plain():
    assert parse_ray_status(live("ray_status_v.txt")) == parse_ray_status(live("ray_status.txt"))


def test_v1_layout():
    status = parse_ray_status(V1_STATUS)
    assert status.active_nodes == ["ray.head.default"] + ["gpu-a100"] * 3
    assert status.pending_nodes == ["gpu-a100, launching", "gpu-a100, launching", "10.4.7.21: gpu-a100, setting-up"]
    assert status.recent_failures == ["gpu-a100: NodeTerminated (ip: 10.4.7.9)"]
    assert status.usage["CPU"] == (96.0, 104.0)
    assert status.usage["GPU"] == (8.0, 8.0)
    assert status.usage["memory"] == (512 * 2**20, 1.5 * 2**40)
    assert status.usage["object_store_memory"] == (pytest.approx(21.4 * GiB), 400 * GiB)
    assert status.demands == [
        RayDemand({"GPU": 1.0, "CPU": 4.0}, 6, "task_or_actor"),
        RayDemand({"GPU": 1.0}, 2, "placement_group", "STRICT_SPREAD", 4),
        RayDemand({"CPU": 2.0}, 2, "placement_group", "STRICT_SPREAD", 1),
        RayDemand({"GPU": 8.0}, 1, "request_resources"),
    ]


def test_v2_verbose_layout_ignores_per_node_blocks():
    status = parse_ray_status(V2_VERBOSE_STATUS)
    assert status.active_nodes == ["headgroup"]
    assert status.idle_nodes == ["gpu-group", "gpu-group"]
    assert status.pending_nodes == []
    assert status.recent_failures == ["gpu-group: LaunchFailed (latest_attempt: 10:58:02) - no capacity in zone"]
    assert status.usage == {
        "CPU": (4.0, 24.0),
        "GPU": (0.0, 2.0),
        "memory": (0.0, 96 * GiB),
        "object_store_memory": (1.25 * GiB, 28 * GiB),
    }
    assert status.demands == [
        RayDemand({"GPU": 2.0}, 3, "request_resources"),
        RayDemand({"GPU": 4.0}, 1, "task_or_actor"),
    ]


def test_ray_1x_memory_unit_after_the_total_applies_to_both_numbers():
    text = V1_STATUS.replace(" 512.00MiB/1.50TiB memory", " 0.50/1.250 GiB memory")
    assert parse_ray_status(text).usage["memory"] == (0.5 * GiB, 1.25 * GiB)


def test_lines_before_the_header_are_skipped():
    text = "2025-03-02 11:00:40,001\tWARNING config.py:12 -- something\n" + V2_VERBOSE_STATUS
    assert parse_ray_status(text).idle_nodes == ["gpu-group", "gpu-group"]


def test_empty_cluster():
    text = V2_VERBOSE_STATUS.split("Node status")[0] + (
        "Node status\n----\nActive:\n (no active nodes)\nIdle:\n (no idle nodes)\nPending:\n (no pending nodes)\n"
        "Recent failures:\n (no failures)\n\nResources\n----\nTotal Usage:\n (no resources)\n\n"
        "From request_resources:\n (none)\nPending Demands:\n (no resource demands)\n"
    )
    status = parse_ray_status(text)
    assert (status.active_nodes, status.usage, status.demands) == ([], {}, [])
    assert status.timestamp == "2025-03-02 11:00:41.771902"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "empty file"),
        ("   \n\n", "empty file"),
        ('Error from server (NotFound): pods "raycluster-head-xk2p9" not found\n', "not `ray status` output"),
        ('{"kind": "List", "items": []}', "not `ray status` output"),
        (V1_STATUS.replace(" 96.0/104.0 CPU", " 96.0/104.0"), "line 16: not a 'used/total resource' line"),
        (V1_STATUS.replace(" 96.0/104.0 CPU", " ninety-six of 104 CPU"), "not a 'used/total resource' line"),
        (V1_STATUS.replace(" 3 gpu-a100", " three gpu-a100"), "line 6: not a '<count> <node type>' line"),
        (V1_STATUS.replace(" 3 gpu-a100", " 30000000000 gpu-a100"), "line 6: 30000000000 is not a node count"),
        (V1_STATUS.replace("{'GPU': 8}", "{'GPU': 'eight'}"), "not a name and an amount"),
        (V1_STATUS.replace("{'GPU': 8}", "{'GPU': 8"), "not a resource demand line"),
        (V1_STATUS.replace("{'GPU': 8}", "{'GPU': __import__('os')}"), "not a resource bundle"),
        (V1_STATUS.replace("{'GPU': 8}", "[('GPU', 8)]"), "not a resource demand line"),
        (V2_VERBOSE_STATUS[: V2_VERBOSE_STATUS.index("0.0/2.0 GPU") + 5], "not a 'used/total resource' line"),
    ],
)
def test_bad_text_is_one_line_parse_error(text: str, says: str):
    with pytest.raises(ParseError) as caught:
        parse_ray_status(text)
    assert says in str(caught.value)
    assert "\n" not in str(caught.value)


# --------------------------------------------------------------------------- /api/cluster_status


def test_cluster_status_json_live_capture():
    status = parse_cluster_status_json(live("http_api_cluster_status.json"))
    assert status.timestamp == "2026-12-02T16:52:00.561071+00:00"
    # The dashboard camelCases names in JSON objects; they are kept as sent.
    assert status.active_nodes == ["node77043298181F657D2307Df1277A7Bfd7Baa2E7B49998843770C413Ce"]
    assert status.usage == {
        "llama38BGpu": (0.0, 1.0),
        "GPU": (1.0, 2.0),
        "CPU": (0.0, 2.0),
        "objectStoreMemory": (0.0, 7438868889.0),
        "memory": (0.0, 17357360743.0),
    }
    assert status.demands == [
        RayDemand({"GPU": 4.0}, 1, "task_or_actor"),
        RayDemand({"GPU": 4.0, "CPU": 1.0}, 1, "placement_group", "STRICT_PACK", 1),
    ]


def test_cluster_status_format1_is_the_status_text():
    status = parse_cluster_status_json(live("http_api_cluster_status_format1.json"))
    assert status.timestamp == "2026-12-02 16:52:00.561071"
    assert status.usage["llama3_8b_gpu"] == (0.0, 1.0)
    assert [d.kind for d in status.demands] == ["task_or_actor", "placement_group"]


def _cluster_status(**load_metrics: object) -> dict:
    pg = "3f1c0a9d5e7b2c4a6f8e0d1b3c5a01000000"
    return {
        "result": True,
        "msg": "Got cluster status.",
        "data": {
            "autoscalingStatus": None,
            "autoscalingError": None,
            "clusterStatus": {
                "time": 1736935200.25,
                "autoscalerReport": {
                    "activeNodes": {"headgroup": 1, "gpuGroup": 2},
                    "idleNodes": {"gpuGroup": 1},
                    "pendingNodes": [["10.0.9.12", "gpu-group", "WAITING-FOR-SSH"]],
                    "pendingLaunches": {"gpu-group": 2},
                    "failedNodes": [["10.0.9.3", "gpu-group"]],
                },
                "loadMetricsReport": {
                    "usage": {"CPU": [3.0, 48.0], "GPU": [4.0, 4.0], "node:10.0.9.7": [0.0, 1.0]},
                    "resourceDemand": [
                        [{"GPU": 2.0}, 3],
                        [{f"GPU_group_{pg}": 1.0, f"GPU_group_0_{pg}": 1.0}, 1],
                        [{"bundle": 0.001}, 5],
                    ],
                    "pgDemand": [[{"bundles": [[{"GPU": 1.0}, 8]], "strategy": "PACK"}, 2]],
                    "requestDemand": [[{"GPU": 8.0}, 1]],
                }
                | load_metrics,
            },
        },
    }


def test_cluster_status_json_nodes_and_demands():
    status = parse_cluster_status_json(json.dumps(_cluster_status()))
    assert status.timestamp == "2025-01-15T10:00:00.250000+00:00"
    assert status.active_nodes == ["headgroup", "gpuGroup", "gpuGroup"]
    assert status.idle_nodes == ["gpuGroup"]
    assert status.pending_nodes == [
        "gpu-group, launching",
        "gpu-group, launching",
        "10.0.9.12: gpu-group, waiting-for-ssh",
    ]
    assert status.recent_failures == ["gpu-group: NodeTerminated (ip: 10.0.9.3)"]
    assert status.usage == {"CPU": (3.0, 48.0), "GPU": (4.0, 4.0)}  # node:<ip> markers left out
    assert status.demands == [
        RayDemand({"GPU": 2.0}, 3, "task_or_actor"),
        RayDemand({"GPU": 1.0}, 1, "task_or_actor"),  # placement-group names read as the plain resource
        RayDemand({"GPU": 1.0}, 2, "placement_group", "PACK", 8),
        RayDemand({"GPU": 8.0}, 1, "request_resources"),
    ]


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        ('{"result": true, "msg": "Got cluster status.", "data": {"clusterSta', "not valid JSON"),
        ("", "empty file"),
        ("[]", "no result/data envelope"),
        (
            '{"result": false, "msg": "Failed to get cluster status:\\n  Traceback ...", "data": {}}',
            "answered /api/cluster_status with an error: Failed",
        ),
        ('{"result": true, "msg": "", "data": {"clusterStatus": null}}', "no cluster status yet"),
        ('{"result": true, "msg": "", "data": {"result": {"total": 0, "result": []}}}', "data has no clusterStatus"),
        (json.dumps(_cluster_status(usage={"CPU": "lots"})), "loadMetricsReport.usage.CPU: expected [used, total]"),
        (json.dumps(_cluster_status(usage=["CPU"])), "loadMetricsReport.usage: expected an object, found a list"),
        (json.dumps(_cluster_status(resourceDemand=[[{"GPU": "two"}, 3]])), "resourceDemand[0]: resource bundle entry"),
        (json.dumps(_cluster_status(resourceDemand=[{"GPU": 2.0}])), "resourceDemand[0]: expected [bundle, count]"),
        (json.dumps(_cluster_status(pgDemand=[[["PACK"], 2]])), "pgDemand[0][0]: expected an object"),
    ],
)
def test_bad_cluster_status_is_one_line_parse_error(answer: str, says: str):
    with pytest.raises(ParseError) as caught:
        parse_cluster_status_json(answer)
    assert says in str(caught.value)
    assert "\n" not in str(caught.value)


def test_failed_node_rows_are_checked():
    answer = _cluster_status()
    answer["data"]["clusterStatus"]["autoscalerReport"]["failedNodes"] = [["10.0.9.3"]]
    with pytest.raises(ParseError, match=r"failedNodes\[0\]: expected a list of 2 strings"):
        parse_cluster_status_json(json.dumps(answer))


def test_time_out_of_range_is_a_parse_error():
    answer = _cluster_status()
    answer["data"]["clusterStatus"]["time"] = 1e300
    with pytest.raises(ParseError, match=r"clusterStatus\.time: 1e\+300 is not a time"):
        parse_cluster_status_json(json.dumps(answer))


@pytest.mark.parametrize("count", [1e12, -1, 1.5, float("nan")])
def test_node_counts_are_checked(count: float):
    answer = _cluster_status()
    answer["data"]["clusterStatus"]["autoscalerReport"]["activeNodes"] = {"gpuGroup": count}
    # NaN is not JSON at all: refused when the document is read, before any field is
    with pytest.raises(
        ParseError, match=r"autoscalerReport\.activeNodes: .* is not a node count|NaN is not a JSON number"
    ):
        parse_cluster_status_json(json.dumps(answer))
