from __future__ import annotations

import json
from pathlib import Path

import pytest

from diag.core.errors import ParseError
from diag.parsers.ray_state import (
    parse_actors,
    parse_logical_actors,
    parse_nodes,
    parse_nodes_summary,
    parse_placement_groups,
)

LIVE = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "ray-live"
GiB = 2**30

ALIVE_ID = "fb73d5e17515814be5d3132f01000000"
PENDING_ID = "4049cdd66cf25389f34d42bf01000000"
LIVE_NODE = "77043298181f657d2307df1277a7bfd7baa2e7b49998843770c413ce"

NODE = "9d2e41c07b5a3f68e1d4c2b9a07f5e3d1c8b6a4f2e0d9c7b5a3f1e8d"
PG = "5c1e9a7d3b0f2e4c6a8d0b1f3e5c02000000"


def live(name: str) -> str:
    return (LIVE / name).read_text()


def by_id(actors: list) -> dict:
    return {actor.actor_id: actor for actor in actors}


def envelope(rows: list) -> str:
    """Rows wrapped the way the dashboard's /api/v0/<x> answers them."""
    total = len(rows)
    result = {
        "total": total,
        "num_after_truncation": total,
        "num_filtered": total,
        "result": rows,
        "partial_failure_warning": "",
        "warnings": None,
    }
    return json.dumps({"result": True, "msg": "", "data": {"result": result}})


def actor_row(**fields: object) -> dict:
    """An actor as `ray list actors --detail --format json` prints it."""
    row = {
        "actor_id": "b71c0e5a93d24f8e6a1c7d2e02000000",
        "class_name": "LLMWorker",
        "state": "ALIVE",
        "job_id": "02000000",
        "name": "",
        "node_id": NODE,
        "pid": 4121,
        "ray_namespace": "serve",
        "serialized_runtime_env": "{}",
        "required_resources": {"GPU": 1.0},
        "death_cause": None,
        "is_detached": False,
        "placement_group_id": None,
        "repr_name": "",
        "num_restarts": 0,
        "num_restarts_due_to_lineage_reconstruction": 0,
        "num_restarts_due_to_node_preemption": 0,
        "call_site": None,
        "label_selector": {},
        "fallback_strategy": None,
    }
    return row | fields


# --------------------------------------------------------------------------- actors


@pytest.mark.parametrize(
    "name",
    [
        "ray_list_actors.json",
        "ray_list_actors_detail.json",
        "http_api_v0_actors.json",
        "http_api_v0_actors_detail.json",
    ],
)
def test_actors_in_every_shape(name: str):
    actors = by_id(parse_actors(live(name)))
    assert set(actors) == {ALIVE_ID, PENDING_ID}
    alive, pending = actors[ALIVE_ID], actors[PENDING_ID]
    assert (alive.name, alive.class_name, alive.state, alive.namespace) == (
        "gpu1_actor",
        "GpuWorker",
        "ALIVE",
        "ray-live",
    )
    assert (alive.node_id, alive.pid) == (LIVE_NODE, 7535)
    assert pending.state == "PENDING_CREATION"
    assert (pending.node_id, pending.pid) == (None, None)  # pid 0: no process yet
    assert alive.gpu_ids == [] and alive.death_cause is None


def test_detail_fills_resources_and_restarts_in_both_shapes():
    for name in ("ray_list_actors_detail.json", "http_api_v0_actors_detail.json"):  # 0 and "0"
        actors = by_id(parse_actors(live(name)))
        assert actors[PENDING_ID].required_resources == {"GPU": 4.0}
        assert actors[ALIVE_ID].required_resources == {"GPU": 1.0}
        assert actors[ALIVE_ID].num_restarts == 0


def test_without_detail_restarts_are_unknown():
    actors = by_id(parse_actors(live("ray_list_actors.json")))
    assert actors[ALIVE_ID].num_restarts is None
    assert actors[ALIVE_ID].required_resources == {}


def test_death_causes_read_as_one_line():
    worker_died = (
        "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: "
        "Worker exits unexpectedly. Worker exits with an exit code "
        "None. The worker may have exceeded K8s pod memory limits."
    )
    traceback = (
        "\x1b[36mray::LLMWorker.__init__()\x1b[39m (pid=4121, ip=10.0.3.4, actor_id=b71c0e5a93d24f8e6a1c7d2e02000000)\n"
        '  File "/app/serve/worker.py", line 41, in __init__\n'
        "    self.engine = build_engine(args)\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "79.19 GiB of which 1.12 GiB is free.\n"
    )
    rows = [
        actor_row(
            actor_id="a1" * 16,
            state="DEAD",
            pid=0,
            death_cause={
                "actor_died_error_context": {
                    "error_message": worker_died,
                    "reason": "WORKER_DIED",
                    "never_started": False,
                    "node_ip_address": "10.0.3.4",
                    "pid": 4121,
                    "class_name": "LLMWorker",
                }
            },
        ),
        actor_row(
            actor_id="a2" * 16,
            state="DEAD",
            death_cause={
                "actor_died_error_context": {
                    "error_message": "The actor is dead because `ray.kill` killed it.",
                    "never_started": True,
                }
            },
        ),
        actor_row(
            actor_id="a3" * 16,
            state="DEAD",
            num_restarts="3",
            death_cause={"creation_task_failure_context": {"formatted_exception_string": traceback}},
        ),
        actor_row(
            actor_id="a4" * 16,
            state="DEAD",
            death_cause={
                "runtime_env_failed_context": {"error_message": "Failed to set up runtime environment.\nNo such file"}
            },
        ),
    ]
    actors = by_id(parse_actors(json.dumps(rows)))
    assert actors["a1" * 16].death_cause == f"actor died (WORKER_DIED): {worker_died}"
    assert actors["a1" * 16].pid is None
    assert actors["a2" * 16].death_cause == "actor died: The actor is dead because `ray.kill` killed it."
    assert actors["a3" * 16].death_cause == (
        "creation task failed: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
        "GPU 0 has a total capacity of 79.19 GiB of which 1.12 GiB is free."
    )
    assert actors["a3" * 16].num_restarts == 3
    assert (
        actors["a4" * 16].death_cause == "runtime env setup failed: Failed to set up runtime environment. No such file"
    )


def test_placement_group_resource_names_read_as_plain_resources():
    row = actor_row(
        placement_group_id=PG, required_resources={f"GPU_group_{PG}": 1.0, f"GPU_group_0_{PG}": 1.0, "CPU": 1.0}
    )
    (actor,) = parse_actors(envelope([row]))
    assert actor.required_resources == {"GPU": 1.0, "CPU": 1.0}
    assert actor.placement_group_id == PG
    assert actor.name is None  # "" is an unnamed actor


# --------------------------------------------------------------------------- placement groups


@pytest.mark.parametrize("name", ["ray_list_placement_groups_detail.json", "http_api_v0_placement_groups.json"])
def test_placement_groups_detail(name: str):
    (pg,) = parse_placement_groups(live(name))
    assert pg.placement_group_id == "852e50ec2f8c266b24584700b48901000000"
    assert (pg.name, pg.state, pg.creator_job_id) == ("pg_infeasible_4gpu", "PENDING", "01000000")
    assert pg.bundles == [{"CPU": 1.0, "GPU": 4.0}]
    assert pg.scheduling_state == "INFEASIBLE"
    assert pg.strategy is None  # the state API does not report it


def test_placement_groups_without_detail():
    (pg,) = parse_placement_groups(live("ray_list_placement_groups.json"))
    assert (pg.state, pg.bundles, pg.scheduling_state) == ("PENDING", [], None)


def test_created_placement_group_with_two_bundles():
    row = {
        "placement_group_id": PG,
        "name": "",
        "creator_job_id": "02000000",
        "state": "CREATED",
        "bundles": [
            {
                "bundle_id": {"placement_group_id": PG, "bundle_index": i},
                "unit_resources": {"GPU": 1.0, "CPU": 2.0},
                "node_id": NODE,
                "label_selector": {},
            }
            for i in range(2)
        ],
        "is_detached": False,
        "stats": {"scheduling_attempt": 1, "scheduling_state": "FINISHED"},
    }
    (pg,) = parse_placement_groups(json.dumps([row]))
    assert pg.bundles == [{"GPU": 1.0, "CPU": 2.0}] * 2
    assert (pg.state, pg.scheduling_state, pg.name) == ("CREATED", "FINISHED", "")


# --------------------------------------------------------------------------- nodes


@pytest.mark.parametrize("name", ["ray_list_nodes.json", "ray_list_nodes_detail.json", "http_api_v0_nodes.json"])
def test_nodes_in_every_shape(name: str):
    (node,) = parse_nodes(live(name))
    assert node.node_id == LIVE_NODE
    assert (node.node_ip, node.node_name, node.state, node.is_head) == ("127.0.0.1", "127.0.0.1", "ALIVE", True)
    assert node.resources_total["GPU"] == 2.0
    assert node.resources_total["llama3_8b_gpu"] == 1.0
    # `ray list` prints "16.165 GiB"; the dashboard sends 17357360743.0 bytes
    assert node.resources_total["memory"] == pytest.approx(17357360743.0, rel=1e-4)
    assert node.resources_total["object_store_memory"] == pytest.approx(7438868889.0, rel=1e-4)
    assert node.labels == {"ray.io/node-id": LIVE_NODE}
    assert node.resources_available is None and node.state_message is None


def test_dead_node():
    row = {
        "node_id": NODE,
        "node_ip": "10.0.3.9",
        "is_head_node": False,
        "state": "DEAD",
        "state_message": "Terminated due to idle (no Ray activity)",
        "node_name": "10.0.3.9",
        "resources_total": {"CPU": 8.0, "GPU": 1.0, "memory": "30.000 GiB", "object_store_memory": "512.000 MiB"},
        "labels": {"ray.io/node-id": NODE},
        "start_time_ms": None,
        "end_time_ms": None,
    }
    (node,) = parse_nodes(json.dumps([row]))
    assert (node.state, node.is_head, node.state_message) == ("DEAD", False, "Terminated due to idle (no Ray activity)")
    assert node.resources_total == {"CPU": 8.0, "GPU": 1.0, "memory": 30 * GiB, "object_store_memory": 512 * 2**20}


# --------------------------------------------------------------------------- /nodes?view=summary


def test_nodes_summary_live_capture():
    (node,) = parse_nodes_summary(live("http_nodes_view_summary.json"))
    assert node.node_id == LIVE_NODE
    assert (node.node_ip, node.node_name, node.state, node.is_head) == ("127.0.0.1", "127.0.0.1", "ALIVE", True)
    # from nodeLogicalResources: Ray's own names, and what is free
    assert node.resources_total["llama3_8b_gpu"] == 1.0
    assert node.resources_total["GPU"] == 2.0
    assert node.resources_available["GPU"] == 1.0
    assert node.resources_available["CPU"] == 2.0
    assert (node.object_store_used_bytes, node.object_store_total_bytes) == (0.0, 7438868889.0)
    assert node.gpu_processes == []  # fake GPUs: the reporter saw no device
    assert node.ray_version is None


def _summary_row(node_id: str, gpus: list, **raylet: object) -> dict:
    return {
        "hostname": "raycluster-gpu-worker-7x2lq",
        "ip": "10.0.3.4",
        "gpus": gpus,
        "tpus": [],
        "raylet": {
            "nodeId": node_id,
            "nodeManagerAddress": "10.0.3.4",
            "nodeName": "10.0.3.4",
            "isHeadNode": False,
            "state": "ALIVE",
            "stateMessage": None,
            "labels": {"ray.io/node-group": "gpu-group"},
            "resourcesTotal": {"CPU": 16.0, "GPU": 2.0, "llama38BGpu": 2.0},
        }
        | raylet,
    }


def test_nodes_summary_gpu_processes_as_list_or_map():
    listed = [
        {
            "index": 0,
            "name": "NVIDIA H100 80GB HBM3",
            "uuid": "GPU-1f0b3c5e-7a9d-4e2f-8b6c-0d1e2f3a4b5c",
            "utilizationGpu": 97,
            "memoryUsed": 75112,
            "memoryTotal": 81559,
            "processesPids": [{"pid": 4121, "gpuMemoryUsage": 74980}],
        }
    ]
    mapped = [
        {
            "index": 1,
            "name": "NVIDIA H100 80GB HBM3",
            "uuid": "GPU-9e8d7c6b-5a4f-4e3d-8c2b-1a0f9e8d7c6b",
            "utilizationGpu": 95,
            "memoryUsed": 74990,
            "memoryTotal": 81559,
            "processesPids": {"4122": {"pid": 4122, "gpuMemoryUsage": 74860, "gpuUtilization": 93}},
        }
    ]
    store = {
        "storeStats": {"objectStoreBytesUsed": "1048576", "objectStoreBytesAvail": "4294967296"},
        "objectStoreUsedMemory": 1048576,
        "objectStoreAvailableMemory": 4293918720,
    }
    answer = {
        "result": True,
        "msg": "Node summary fetched.",
        "data": {
            "summary": [_summary_row(NODE, listed + mapped, **store), _summary_row("e" * 56, [])],
            "nodeLogicalResources": {NODE: "2.0/16.0 CPU\n2.0/2.0 GPU\n2.0/2.0 llama3_8b_gpu\n0B/60.00GiB memory"},
        },
    }
    with_gpus, without = parse_nodes_summary(json.dumps(answer))
    assert with_gpus.gpu_processes == [
        {"pid": 4121, "gpu_index": 0, "memory_used_mib": 74980.0},
        {"pid": 4122, "gpu_index": 1, "memory_used_mib": 74860.0},
    ]
    assert with_gpus.resources_available == {"CPU": 14.0, "GPU": 0.0, "llama3_8b_gpu": 0.0, "memory": 60 * GiB}
    assert (with_gpus.object_store_used_bytes, with_gpus.object_store_total_bytes) == (1048576.0, 4294967296.0)
    assert with_gpus.labels == {"ray.io/node-group": "gpu-group"}
    # Not in nodeLogicalResources: the raylet's totals, names as the dashboard sent them; no store stats: unknown.
    assert without.resources_total == {"CPU": 16.0, "GPU": 2.0, "llama38BGpu": 2.0}
    assert without.resources_available is None
    assert (without.object_store_used_bytes, without.object_store_total_bytes) == (None, None)


# --------------------------------------------------------------------------- /logical/actors


def test_logical_actors_give_gpu_ids():
    actors = by_id(parse_logical_actors(live("http_logical_actors.json")))
    alive, pending = actors[ALIVE_ID], actors[PENDING_ID]
    assert alive.gpu_ids == ["0"]  # the actor saw CUDA_VISIBLE_DEVICES=0
    assert (alive.node_id, alive.pid, alive.state, alive.num_restarts) == (LIVE_NODE, 7535, "ALIVE", 0)
    assert alive.required_resources == {"GPU": 1.0}
    assert (pending.node_id, pending.pid, pending.gpu_ids) == (None, None, [])  # nil node id, pid 0
    assert pending.death_cause is None  # exitDetail "-"


def test_logical_actor_in_a_placement_group_and_dead():
    slots = {"resourceSlots": [{"allocation": 1.0, "slot": "2"}, {"allocation": 1.0, "slot": "3"}]}
    actors = {
        "result": True,
        "msg": "All actors fetched.",
        "data": {
            "actors": {
                "c9" * 16: {
                    "actorId": "c9" * 16,
                    "jobId": "02000000",
                    "name": "",
                    "className": "RayWorkerWrapper",
                    "state": "ALIVE",
                    "address": {"nodeId": NODE, "ipAddress": "10.0.3.4", "port": 10012, "workerId": "ab" * 28},
                    "numRestarts": "0",
                    "pid": 4121,
                    "placementGroupId": PG,
                    "exitDetail": "-",
                    "requiredResources": {"GPU": 2.0},
                    "usedResources": {
                        f"GPU_group_{PG}": slots,
                        f"GPU_group_0_{PG}": slots,
                        f"CPU_group_{PG}": {"resourceSlots": [{"allocation": 1.0, "slot": "0"}]},
                    },
                },
                "d8" * 16: {
                    "actorId": "d8" * 16,
                    "jobId": "02000000",
                    "name": "vllm_engine",
                    "className": "LLMWorker",
                    "state": "DEAD",
                    "address": {"nodeId": NODE, "ipAddress": "10.0.3.4", "port": 10013, "workerId": "cd" * 28},
                    "numRestarts": "1",
                    "pid": 0,
                    "exitDetail": "The actor is dead because `ray.kill` killed it.",
                    "requiredResources": {"GPU": 1.0},
                },
            }
        },
    }
    actors = by_id(parse_logical_actors(json.dumps(actors)))
    assert actors["c9" * 16].gpu_ids == ["2", "3"]
    assert actors["c9" * 16].placement_group_id == PG
    assert actors["d8" * 16].death_cause == "The actor is dead because `ray.kill` killed it."
    assert (actors["d8" * 16].num_restarts, actors["d8" * 16].gpu_ids, actors["d8" * 16].name) == (1, [], "vllm_engine")


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("parse", "text", "says"),
    [
        (parse_actors, "", "empty file"),
        (parse_actors, '[{"actor_id": "4049cdd66cf25389f34d42bf01000000", "class_name": "GpuW', "not valid JSON"),
        (parse_actors, '"ALIVE"', "found a string"),
        (parse_actors, live("ray_list_nodes.json"), "actors[0].actor_id is missing"),
        (parse_actors, json.dumps([actor_row(pid="seven")]), "actors[0].pid: expected an integer, found a string"),
        (
            parse_actors,
            json.dumps([actor_row(required_resources={"GPU": "one"})]),
            "required_resources.GPU: expected a number",
        ),
        (
            parse_actors,
            json.dumps([actor_row(death_cause="killed")]),
            "death_cause: expected an object, found a string",
        ),
        (parse_actors, json.dumps([actor_row(state=3)]), "actors[0].state: expected a string, found an integer"),
        (
            parse_actors,
            json.dumps(["4049cdd66cf25389f34d42bf01000000"]),
            "actors[0]: expected an object, found a string",
        ),
        (
            parse_actors,
            envelope([actor_row(num_restarts=True)]),
            "data.result.result[0].num_restarts: expected an integer",
        ),
        (
            parse_actors,
            '{"result": false, "msg": "Failed to query actors:\\nTimeout", "data": {}}',
            "with an error: Failed to query actors: Timeout",
        ),
        (parse_actors, '{"apiVersion": "v1", "kind": "List", "items": []}', "no result/data envelope"),
        (parse_actors, live("http_api_cluster_status.json"), "data has no result.result list"),
        (parse_placement_groups, live("ray_list_actors.json"), "placement-groups[0].placement_group_id is missing"),
        (
            parse_placement_groups,
            json.dumps([{"placement_group_id": PG, "bundles": {"GPU": 1}}]),
            "bundles: expected a list",
        ),
        (
            parse_placement_groups,
            json.dumps([{"placement_group_id": PG, "bundles": [{"unit_resources": {"GPU": None}}]}]),
            "unit_resources.GPU: expected a number, found null",
        ),
        (
            parse_nodes,
            json.dumps([{"node_id": NODE, "resources_total": {"memory": "lots"}}]),
            "resources_total.memory: expected an amount",
        ),
        (parse_nodes, json.dumps([{"node_id": NODE, "is_head_node": "yes"}]), "is_head_node: expected a boolean"),
        (
            parse_nodes,
            json.dumps([{"node_id": NODE, "labels": {"zone": ["a"]}}]),
            "labels.zone: expected a string, found a list",
        ),
        (parse_nodes_summary, live("http_api_v0_nodes.json"), "data has no summary list"),
        (
            parse_nodes_summary,
            json.dumps({"result": True, "msg": "", "data": {"summary": [{"ip": "10.0.3.4"}]}}),
            "summary[0].raylet is missing",
        ),
        (
            parse_nodes_summary,
            json.dumps(
                {
                    "result": True,
                    "msg": "",
                    "data": {"summary": [_summary_row(NODE, [{"index": 0, "processesPids": 4121}])]},
                }
            ),
            "processesPids: expected a list or an object",
        ),
        (
            parse_nodes_summary,
            json.dumps(
                {
                    "result": True,
                    "msg": "",
                    "data": {"summary": [_summary_row(NODE, [])], "nodeLogicalResources": {NODE: "two of 16 CPU"}},
                }
            ),
            "not a 'used/total resource' line",
        ),
        (parse_logical_actors, live("http_api_v0_actors.json"), "data has no actors map"),
        (
            parse_logical_actors,
            json.dumps(
                {
                    "result": True,
                    "msg": "",
                    "data": {
                        "actors": {
                            "x": {"actorId": "x", "usedResources": {"GPU": {"resourceSlots": [{"slot": "zero"}]}}}
                        }
                    },
                }
            ),
            "slot: expected an integer",
        ),
    ],
)
def test_bad_input_is_one_line_parse_error(parse, text: str, says: str):
    with pytest.raises(ParseError) as caught:
        parse(text)
    assert says in str(caught.value)
    assert "\n" not in str(caught.value)


# --------------------------------------------------------------------------- times


@pytest.mark.parametrize(
    ("name", "start"),
    [
        ("ray_list_nodes.json", None),  # without --detail the times are null: unknown
        ("ray_list_nodes_detail.json", "2026-12-02T16:50:40Z"),  # humanised, read as UTC
        ("http_api_v0_nodes.json", "2026-12-02T16:50:40Z"),  # milliseconds
    ],
)
def test_node_times_in_every_shape(name: str, start: str | None):
    (node,) = parse_nodes(live(name))
    assert node.start_time == start
    assert node.end_time is None  # alive: 0, or the epoch humanised, means not ended


def test_node_times_from_the_summary_and_a_dead_node():
    (node,) = parse_nodes_summary(live("http_nodes_view_summary.json"))
    assert (node.start_time, node.end_time) == ("2026-12-02T16:50:40Z", None)
    row = {"node_id": NODE, "state": "DEAD", "start_time_ms": 1796230240925, "end_time_ms": 1796233840925}
    assert parse_nodes(json.dumps([row]))[0].end_time == "2026-12-02T17:50:40Z"


def test_node_time_that_is_no_time():
    row = {"node_id": NODE, "state": "DEAD", "end_time_ms": "yesterday"}
    with pytest.raises(ParseError, match=r"end_time_ms: expected a time in milliseconds or a date"):
        parse_nodes(json.dumps([row]))


def test_logical_actor_end_time():
    actors = parse_logical_actors(live("http_logical_actors.json"))
    assert [a.end_time for a in actors] == [None, None]  # endTime 0: alive or never created
