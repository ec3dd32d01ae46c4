"""File names the Kubernetes collector gives pods: always <namespace>.<pod>, so that a pod name other
namespaces share (StatefulSet names like vllm-0) never lends one pod's files to another."""

from diag.collect.kubernetes import _log_requests, file_stems, vllm_server_pods
from diag.snapshot.model import Container, Pod


def vllm_pod(namespace: str) -> Pod:
    container = Container(
        name="vllm",
        image="vllm/vllm-openai:v0.11.0",
        command=["vllm", "serve"],
        args=["meta-llama/Llama-3.1-8B-Instruct", "--port", "8000"],
        state="running",
    )
    return Pod(namespace=namespace, name="vllm-0", phase="Running", node_name="gpu-1", containers=[container])


def test_every_file_stem_names_the_namespace():
    pods = [vllm_pod("llm-serving"), vllm_pod("other-team")]
    assert file_stems(pods) == {"llm-serving/vllm-0": "llm-serving.vllm-0", "other-team/vllm-0": "other-team.vllm-0"}
    # a pod name no other namespace has is qualified too: the list read may not show every namespace
    assert file_stems(pods[:1]) == {"llm-serving/vllm-0": "llm-serving.vllm-0"}


def test_logs_and_vllm_files_are_named_by_namespace_and_pod():
    pods = [vllm_pod("llm-serving"), vllm_pod("other-team")]
    requests, skipped = _log_requests(pods)
    assert skipped == []
    assert [r.rel for r in requests] == ["k8s/logs/llm-serving.vllm-0.log", "k8s/logs/other-team.vllm-0.log"]
    assert [p.file_stem for p in vllm_server_pods(pods)] == ["llm-serving.vllm-0", "other-team.vllm-0"]
