"""A vLLM server in a custom image is a vLLM server however it shows it (its env, its arguments, or only its
log): the same facts and rules as one recognised from its command. And servers on port 8000 that are not
vLLM stay out of the vLLM rules."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from diag.analyze import analyze_bundle
from diag.bundle.files import Bundle
from diag.bundle.load import load_bundle
from diag.collect.kubernetes import vllm_server_pods
from diag.core.rules_dir import builtin_rules_dir
from diag.engine.rules import load_rules, render
from diag.facts import build_facts
from diag.link.join import join
from diag.parsers import kubernetes
from diag.parsers.logs import scan_log
from diag.parsers.workloads import VLLM_LOG_SIGNAL
from diag.verdict.relevance import serving_pods

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
CUSTOM = "incident-vllm-custom-image-bf16"
POD = "mistral-7b-5c9d7f8b6-fxbfs"  # the replica on the T4 node
LOG = f"k8s/logs/{POD}.previous.log"


def _custom(edit_container=None, log: str | None = None) -> Bundle:
    """The fixture as kubectl alone collects it: no vllm/ file names a server, so each is one only by
    what its pod runs. `edit_container` changes the spec of both replicas; `log` replaces the crash's."""
    fixture = Bundle.open(FIXTURES / CUSTOM)
    bundle = Bundle({rel: fixture.text(rel).encode() for rel in fixture.files if not rel.startswith("vllm/")})
    if edit_container is not None:
        pods = json.loads(bundle.text("k8s/pods.json"))
        for pod in pods["items"]:
            if pod["metadata"]["name"].startswith("mistral-7b-"):
                edit_container(pod["spec"]["containers"][0])
        bundle.add("k8s/pods.json", json.dumps(pods))
    if log is not None:
        bundle.add(LOG, log)
    return bundle


def _no_vllm_env(container: dict) -> None:
    container["env"] = [e for e in container["env"] if not e["name"].startswith("VLLM_")]


def _verdict(bundle: Bundle) -> tuple[str | None, str | None, list[str]]:
    report = analyze_bundle(bundle)
    return report.verdict.layer, report.verdict.rule, sorted({f.rule for f in report.findings})


def test_recognised_from_its_env_the_bf16_rule_is_the_verdict() -> None:
    snap = join(load_bundle(_custom()))
    assert sorted((s.pod, s.engine_args) for s in snap.vllm_servers) == [  # their flags are the entrypoint's: unknown
        ("llm/mistral-7b-5c9d7f8b6-fxbfs", None),
        ("llm/mistral-7b-5c9d7f8b6-pfnp5", None),
    ]
    assert _verdict(_custom()) == ("vllm", "VLLM-201", ["K8S-213", "VLLM-201"])


def test_recognised_only_from_its_log_it_gets_the_same_rules() -> None:
    assert _verdict(_custom(_no_vllm_env)) == ("vllm", "VLLM-201", ["K8S-213", "VLLM-201"])


def test_without_any_sign_of_vllm_it_stays_a_plain_crash_loop() -> None:
    """The control: the same crash with neither env nor a line of vLLM's own is no vLLM server."""
    log = Bundle.open(FIXTURES / CUSTOM).text(LOG)
    bare = "".join(line for line in log.splitlines(keepends=True) if VLLM_LOG_SIGNAL not in scan_log(line))
    assert "Bfloat16 is only supported" in bare
    layer, rule, fired = _verdict(_custom(_no_vllm_env, bare))
    assert (layer, rule) == ("kubernetes", "K8S-213")
    assert "VLLM-201" not in fired


def test_recognised_from_its_arguments_the_flags_given_are_known_and_no_others() -> None:
    def args_only(container: dict) -> None:
        _no_vllm_env(container)
        container["args"] = ["--max-model-len", "16384", "--tensor-parallel-size", "2"]

    bundle = _custom(args_only)
    servers = join(load_bundle(bundle)).vllm_servers
    args = next(s.engine_args for s in servers if s.pod == f"llm/{POD}")
    assert args is not None and not args.complete
    assert (args.max_model_len, args.tensor_parallel_size, args.gpu_memory_utilization, args.port) == (
        16384,
        2,
        None,
        None,
    )
    report = analyze_bundle(bundle)
    assert (report.verdict.layer, report.verdict.rule) == ("vllm", "VLLM-201")
    finding = next(f for f in report.findings if f.rule == "VLLM-201")
    assert "flags: --max-model-len 16384 --tensor-parallel-size 2" in finding.evidence


def test_the_collector_probes_a_custom_image_server_and_the_workload_fronts_vllm() -> None:
    bundle = _custom()
    pods = kubernetes.parse_pods(bundle.text("k8s/pods.json"))
    assert [(p.pod, p.container, p.port) for p in vllm_server_pods(pods)] == [
        ("mistral-7b-5c9d7f8b6-pfnp5", "server", 8000),
        (POD, "server", 8000),
    ]
    (deployment,) = kubernetes.parse_workloads(bundle.text("k8s/deployments.json"), "Deployment")
    assert deployment.template_runs_vllm


def test_servers_on_port_8000_that_are_not_vllm_are_not_vllm_servers() -> None:
    bundle = Bundle.open(FIXTURES / "healthy-triton-and-client-on-port-8000")
    snap = join(load_bundle(bundle))
    assert sorted(s.pod or "" for s in snap.vllm_servers) == [
        "llm/llama-70b-7f8d9c6b5d-8q7hc",
        "llm/llama-70b-7f8d9c6b5d-pfnp5",
    ]
    assert [p.pod for p in vllm_server_pods(snap.pods)] == ["llama-70b-7f8d9c6b5d-pfnp5", "llama-70b-7f8d9c6b5d-8q7hc"]


def test_a_flag_the_arguments_do_not_give_is_never_said_to_be_vllm_default() -> None:
    def args_only(container: dict) -> None:
        _no_vllm_env(container)
        container["args"] = ["--max-model-len", "16384"]

    snap = join(load_bundle(_custom(args_only)))
    facts = build_facts(snap)
    server = next(s for s in facts.scopes["vllm_server"] if s["pod"] == f"llm/{POD}")
    assert (server["flags_complete"], server["flag"]["gpu_memory_utilization"]) == (
        False,
        "unknown (not among the arguments; the image's entrypoint may set it)",
    )
    (rule,) = [r for r in load_rules([builtin_rules_dir()]) if r.id == "VLLM-114"]
    assert render(rule.evidence[0], {"vllm_server": server}) == (
        "--max-num-seqs is not among the arguments handed to the entrypoint of the image, which may set it "
        f"(argv from the container args of pod llm/{POD} (the image's entrypoint may add flags))"
    )


def test_a_ray_node_kuberay_did_not_make_is_on_the_serving_path_and_its_env_makes_no_server() -> None:
    pods = json.loads(Bundle.open(FIXTURES / CUSTOM).text("k8s/pods.json"))
    head = copy.deepcopy(next(p for p in pods["items"] if p["metadata"]["name"] == "mistral-7b-5c9d7f8b6-pfnp5"))
    head["metadata"].update(name="ray-head-6c8d9f7b5-q4m2z", labels={"app": "ray-head"})
    container = head["spec"]["containers"][0]
    container.update(
        command=["/bin/bash", "-c", "--"], args=["ray start --head --port=6379 --dashboard-host=0.0.0.0 --block"]
    )
    head["spec"]["containers"][0]["resources"] = {}
    bundle = _custom()
    bundle.add("k8s/pods.json", json.dumps(pods | {"items": [*pods["items"], head]}))
    snap = join(load_bundle(bundle))
    pod = snap.pod("llm/ray-head-6c8d9f7b5-q4m2z")
    assert pod is not None and pod.ray_node_type == "head" and pod.vllm_server is None  # VLLM_* env, but a Ray node
    assert pod in serving_pods(snap)
