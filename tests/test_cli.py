"""The command line as users and runbooks meet it: exit codes, the JSON contract, damaged input."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REFERENCE = Path(__file__).resolve().parent.parent / "fixtures" / "real" / "h200"
LAYERS = {"kubernetes", "ray", "vllm", "gpu", None}


def llmdiag(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "diag.cli", *args], capture_output=True, text=True, cwd=cwd, timeout=120
    )


@pytest.fixture
def gpu_bundle(tmp_path: Path) -> Path:
    """A bundle holding one real H200 `nvidia-smi -q -x` capture (idle) and nothing else."""
    bundle = tmp_path / "bundle"
    (bundle / "gpu").mkdir(parents=True)
    xml = next((REFERENCE / "idle").rglob("*.xml"))
    (bundle / "gpu" / "node-a.xml").write_bytes(xml.read_bytes())
    return bundle


def user_rule(tmp_path: Path, severity: str) -> Path:
    """A user's rule folder with one rule that fires on every GPU, at the given severity."""
    folder = tmp_path / f"rules-{severity}"
    folder.mkdir()
    (folder / "site.yaml").write_text(
        f"""rules:
  - id: SITE-001
    layer: gpu
    severity: {severity}
    title: Site policy check on every GPU
    scope: gpu
    when: gpu.memory_total_mib != null
    evidence: ["{{{{ gpu.name }}}} with {{{{ gpu.memory_total_mib }}}} MiB"]
    remediation: nothing to do
"""
    )
    return folder


def assert_report_contract(report: dict) -> None:
    """The shape of docs/bundle-format.md, "The JSON report"."""
    assert report["schema"] == "llmdiag/report/v1"
    verdict = report["verdict"]
    assert set(verdict) >= {"layer", "rule", "summary"}
    assert verdict["layer"] in LAYERS and isinstance(verdict["summary"], str) and verdict["summary"]
    for f in report["findings"]:
        assert f["layer"] in LAYERS - {None}
        assert f["severity"] in ("critical", "warning", "info")
        assert isinstance(f["rule"], str) and isinstance(f["subject"], str)
        assert isinstance(f["evidence"], list) and all(isinstance(e, str) for e in f["evidence"])
        assert isinstance(f["remediation"], str)
        assert f["explained_by"] is None or isinstance(f["explained_by"], str)
    for name, source in report["sources"].items():
        assert source["status"] in ("ok", "failed", "missing", "skipped"), name
        assert isinstance(source["detail"], str)


def test_healthy_bundle_exits_0_and_says_so(gpu_bundle: Path) -> None:
    result = llmdiag("analyze", str(gpu_bundle), "--output", "json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert_report_contract(report)
    assert report["verdict"]["layer"] is None and report["findings"] == []
    assert report["sources"]["gpu/node-a.xml"]["status"] == "ok"
    assert report["sources"]["k8s/pods.json"]["status"] == "missing"


@pytest.mark.parametrize(("severity", "code"), [("info", 0), ("warning", 1), ("critical", 2)])
def test_exit_code_follows_the_worst_finding(gpu_bundle: Path, tmp_path: Path, severity: str, code: int) -> None:
    result = llmdiag("analyze", str(gpu_bundle), "--rules", str(user_rule(tmp_path, severity)), "--output", "json")
    assert result.returncode == code, result.stderr
    report = json.loads(result.stdout)
    assert_report_contract(report)
    assert [f["rule"] for f in report["findings"]] == ["SITE-001"]
    assert report["findings"][0]["evidence"] == ["NVIDIA H200 with 143771 MiB"]
    assert report["verdict"]["rule"] == (None if severity == "info" else "SITE-001")


def test_min_severity_and_config_suppression(gpu_bundle: Path, tmp_path: Path) -> None:
    rules = user_rule(tmp_path, "warning")
    assert llmdiag("analyze", str(gpu_bundle), "--rules", str(rules), "--min-severity", "critical").returncode == 0
    config = tmp_path / "llmdiag.yaml"
    config.write_text("suppress:\n  - rule: SITE-*\n    subject: gpu/node-a/*\n")
    assert llmdiag("analyze", str(gpu_bundle), "--rules", str(rules), "--config", str(config)).returncode == 0
    config.write_text("severity:\n  SITE-001: critical\n")
    assert llmdiag("analyze", str(gpu_bundle), "--rules", str(rules), "--config", str(config)).returncode == 2


def test_tar_gz_bundle_reads_like_the_folder(gpu_bundle: Path, tmp_path: Path) -> None:
    archive = tmp_path / "case.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(gpu_bundle, arcname="case")
    report = json.loads(llmdiag("analyze", str(archive), "--output", "json").stdout)
    assert report["sources"]["gpu/node-a.xml"]["status"] == "ok"


@pytest.mark.parametrize(
    ("rel", "content", "says"),
    [
        ("k8s/pods.json", '{"apiVersion": "v1", "kind": "List", "items": [{"metadata": {"na', "JSON"),
        ("k8s/nodes.json", '{"apiVersion": "v1", "kind": "List", "items": [{"metadata": {"name": 7}}]}', "name"),
        ("ray/status.txt", "", "empty"),
        ("ray/actors.json", "<html><body>502 Bad Gateway</body></html>", "JSON"),
        ("gpu/node-b.xml", "Failed to initialize NVML: Driver/library version mismatch\n", "XML"),
        ("vllm/llama-0.models.json", "[1, 2, 3]", ""),
    ],
)
def test_a_damaged_file_is_one_line_and_the_rest_is_analyzed(
    gpu_bundle: Path, rel: str, content: str, says: str
) -> None:
    target = gpu_bundle / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content)
    result = llmdiag("analyze", str(gpu_bundle), "--output", "json")
    assert "Traceback" not in result.stderr
    report = json.loads(result.stdout)
    assert_report_contract(report)
    source = report["sources"][rel]
    assert source["status"] == "failed"
    assert source["detail"].startswith(rel) and "\n" not in source["detail"]
    assert says.lower() in source["detail"].lower()
    assert report["sources"]["gpu/node-a.xml"]["status"] == "ok"  # the rest went on


def test_garbage_line_in_metrics_fails_the_file_but_keeps_its_samples(gpu_bundle: Path) -> None:
    (gpu_bundle / "vllm").mkdir()
    (gpu_bundle / "vllm" / "llama-0.metrics.txt").write_text(
        "# TYPE vllm:num_requests_waiting gauge\n"
        'vllm:num_requests_waiting{engine="0",model_name="m"} 3.0\n'
        "this line is not a sample\n"
    )
    report = json.loads(llmdiag("analyze", str(gpu_bundle), "--output", "json").stdout)
    detail = report["sources"]["vllm/llama-0.metrics.txt"]["detail"]
    assert report["sources"]["vllm/llama-0.metrics.txt"]["status"] == "failed"
    assert "line 3" in detail and "1 samples were used" in detail


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["analyze", "/no/such/bundle"], "no such file or folder"),
        (["analyze"], "Missing argument"),
        (["analyze", ".", "--min-severity", "loud"], "--min-severity"),
        (["rules", "show", "NOPE-999"], "no rule"),
    ],
)
def test_cannot_analyze_is_exit_3_with_one_line(args: list[str], message: str) -> None:
    result = llmdiag(*args)
    assert result.returncode == 3
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_bundle_with_nothing_readable_cannot_be_analyzed(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = llmdiag("analyze", str(tmp_path / "empty"), "--output", "json")
    assert result.returncode == 3
    assert json.loads(result.stdout)["exit_code"] == 3


def test_markdown_report_leads_with_the_verdict(gpu_bundle: Path, tmp_path: Path) -> None:
    out = llmdiag(
        "analyze", str(gpu_bundle), "--rules", str(user_rule(tmp_path, "critical")), "--output", "markdown"
    ).stdout
    lines = out.splitlines()
    assert lines[0] == "# llmdiag report"
    header = out.split("\n\n")[1].splitlines()  # what the report is about, the verdict last
    assert header[0].startswith("- Bundle: ") and header[-1].startswith("- Verdict: gpu layer at fault (`SITE-001`")
    assert out.split("\n\n")[2].startswith("**Verdict: gpu layer**")
    assert "## Root cause: `SITE-001`" in out


def test_bad_user_rule_is_one_line(gpu_bundle: Path, tmp_path: Path) -> None:
    folder = tmp_path / "bad-rules"
    folder.mkdir()
    (folder / "x.yaml").write_text("rules:\n  - id: X-001\n    layer: network\n")
    result = llmdiag("analyze", str(gpu_bundle), "--rules", str(folder))
    assert result.returncode == 3
    assert "x.yaml: X-001: missing" in result.stderr


def test_triage_returns_at_its_deadline_when_a_server_never_answers(tmp_path: Path) -> None:
    """A vLLM URL that accepts connections and never answers: the report still comes out on time."""
    import socket
    import time

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)  # accepted by the kernel, never read: every GET hangs until its own timeout
    port = listener.getsockname()[1]
    try:
        started = time.monotonic()
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "diag.cli",
                "triage",
                "--vllm-url",
                f"http://127.0.0.1:{port}",
                "--no-local-gpu",
                "--kubeconfig",
                str(tmp_path / "none"),
                "--scrapes",
                "3",
                "--scrape-interval",
                "1",
                "--timeout",
                "3",
                "--source-timeout",
                "15",
                "--output",
                "json",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env={**__import__("os").environ, "KUBECONFIG": str(tmp_path / "none")},
        )
        elapsed = time.monotonic() - started
    finally:
        listener.close()
    report = json.loads(result.stdout)
    assert_report_contract(report)
    assert elapsed < 12, f"triage took {elapsed:.1f}s past a 3 s deadline (reads block for 15 s each)"
    failed = [name for name, s in report["sources"].items() if name.startswith("vllm") and s["status"] == "failed"]
    assert failed, report["sources"]


def _no_cluster_env(tmp_path: Path) -> dict[str, str]:
    import os

    return {**os.environ, "KUBECONFIG": str(tmp_path / "none"), "COLUMNS": "200"}


KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c1, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u1, user: {token: not-a-secret}}]
contexts: [{name: prod, context: {cluster: c1, user: u1}}, {name: staging, context: {cluster: c1, user: u1}}]
current-context: prod
"""


@pytest.mark.parametrize("command", ["triage", "collect"])
@pytest.mark.parametrize(
    ("args", "line"),
    [
        ([], "llmdiag: no kubeconfig: ~/.kube/config does not exist, and this is not a pod in a cluster"),
        (["--kubeconfig", "{tmp}/nowhere"], "llmdiag: kubeconfig {tmp}/nowhere: no such file"),
        (
            ["--kubeconfig", "{tmp}/kubeconfig", "--context", "nope"],
            "llmdiag: context 'nope' is not in the kubeconfig {tmp}/kubeconfig (its contexts: prod, staging)",
        ),
    ],
)
def test_a_kubeconfig_or_context_that_cannot_be_used_is_one_line(
    tmp_path: Path, command: str, args: list[str], line: str
) -> None:
    """Where the cluster is all there is to read, as kubectl says it: not a report of every source."""
    import os

    (tmp_path / "kubeconfig").write_text(KUBECONFIG)
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    out = ["--out", str(tmp_path / "case")] if command == "collect" else []
    result = subprocess.run(
        [sys.executable, "-m", "diag.cli", command, "--no-local-gpu", *out, *(a.format(tmp=tmp_path) for a in args)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**env, "HOME": str(tmp_path / "home")},
    )
    assert result.returncode == 3 and result.stdout == ""
    assert result.stderr.splitlines() == [line.format(tmp=tmp_path)] or (
        not args and result.stderr.startswith(line) and len(result.stderr.splitlines()) == 1
    ), result.stderr
    assert not (tmp_path / "case").exists()  # collect wrote nothing


def test_collect_that_gathered_nothing_exits_3_with_one_line(tmp_path: Path) -> None:
    """A usable kubeconfig whose API server is not there: the manifest says why each source failed."""
    (tmp_path / "kubeconfig").write_text(KUBECONFIG)
    out = tmp_path / "case"
    result = subprocess.run(
        [sys.executable, "-m", "diag.cli", "collect", "--kubeconfig", str(tmp_path / "kubeconfig"), "--no-local-gpu",
         "--timeout", "10", "--request-timeout", "2s", "--out", str(out)],
        capture_output=True, text=True, timeout=120, env=_no_cluster_env(tmp_path),
    )  # fmt: skip
    assert result.returncode == 3
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("llmdiag: collected nothing (") and "127.0.0.1:1" in last, last
    assert (out / "manifest.json").exists()


def test_with_a_source_outside_kubernetes_the_unusable_kubeconfig_is_one_named_gap(tmp_path: Path) -> None:
    args = ["triage", "--kubeconfig", str(tmp_path / "none"), "--no-local-gpu", "--timeout", "10"]
    args += ["--vllm-url", "http://127.0.0.1:1", "-o", "json"]
    result = subprocess.run(
        [sys.executable, "-m", "diag.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=_no_cluster_env(tmp_path),
    )
    report = json.loads(result.stdout)
    assert_report_contract(report)
    assert report["sources"]["kubernetes"] == {
        "status": "failed",
        "detail": f"kubeconfig {tmp_path}/none: no such file",
    }


def test_an_inconclusive_bundle_never_shows_a_healthy_panel(tmp_path: Path) -> None:
    bundle = tmp_path / "b"
    (bundle / "k8s").mkdir(parents=True)
    (bundle / "k8s" / "pods.json").write_text('{"apiVersion": "v1", "kind": "List", "items": []}')
    result = llmdiag("analyze", str(bundle))
    assert result.returncode == 3
    assert "healthy" not in result.stdout.lower()
    assert "no pod matched" in result.stdout and "kubectl get nodes -o json" in result.stdout
    markdown = llmdiag("analyze", str(bundle), "-o", "markdown").stdout
    assert "**Verdict: inconclusive.**" in markdown and "healthy" not in markdown.lower()


def test_an_archive_that_is_not_a_bundle_is_never_healthy(tmp_path: Path) -> None:
    photos = tmp_path / "photos"
    photos.mkdir()
    (photos / "holiday.txt").write_text("not a bundle\n")
    archive = tmp_path / "case.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(photos, arcname="photos")
    result = llmdiag("analyze", str(archive))
    assert result.returncode == 3
    assert "healthy" not in result.stdout.lower() and "inconclusive" in result.stdout


def _run_loading(argv: list[str], then: str = "") -> tuple[subprocess.CompletedProcess, set[str]]:
    """`llmdiag ARGV` in a fresh interpreter, then the Python `then`: its output, and the modules it loaded."""
    probe = (
        "import os, sys\n"
        f"sys.argv = ['llmdiag', *{argv!r}]\n"
        "os._exit = sys.exit  # main() ends an analysis with os._exit: this process goes on\n"
        "from diag import cli\n"
        "try:\n"
        "    cli.main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(' '.join(sorted(sys.modules)), file=sys.stderr)\n"
    ) + then
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=REFERENCE.parents[2]
    )
    return done, set(done.stderr.split())


@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_help_and_version_paths_load_nothing_heavy(flag: str) -> None:
    """`llmdiag --help` and `--version` start in a fraction of a second: the analysis (CEL, YAML, rules)
    and the collectors' clients load when a command runs."""
    done, loaded = _run_loading([flag])
    assert ("analyze" if flag == "--help" else "llmdiag 0.") in done.stdout
    heavy = {
        "cel",
        "yaml",
        "kubernetes",
        "ray",
        "pynvml",
        "prometheus_api_client",
        "requests",
        "diag.engine.rules",
        "diag.collect",
        *(["rich.console"] if flag == "--help" else []),  # the help is click's text: no console to make
    }
    assert sorted(loaded & heavy) == []


def test_an_analysis_loads_no_client_of_a_live_source() -> None:
    """`analyze` reads files: the Kubernetes client (a few hundred milliseconds to import) and the
    collectors load only where a live read happens."""
    done, loaded = _run_loading(["analyze", "fixtures/demo", "--output", "json"])
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(m for m in loaded if m.split(".")[0] in ("kubernetes", "requests") or m == "diag.collect") == []


def test_a_triage_loads_only_what_it_reads_with(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The `kubernetes` package (with pydantic, oauthlib, requests), rich for a JSON report and, once its
    detectors are cached, detect-secrets cost a triage more than its reads: none of them loads."""
    import socket

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{closed}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": "ml"}}],
    }))  # fmt: skip
    argv = ["triage", "--kubeconfig", str(kubeconfig), "--output", "json", "--timeout", "5"]
    _, first = _run_loading(argv)
    assert "detect_secrets" in first  # the first run builds the detectors and caches them
    done, loaded = _run_loading(argv)
    assert json.loads(done.stdout)["verdict"]["status"] == "inconclusive"  # it did try to read
    heavy = ("kubernetes", "pydantic", "oauthlib", "requests", "rich", "detect_secrets", "argparse")
    assert sorted(m for m in loaded if m.split(".")[0] in heavy) == []


def test_pydantic_loads_only_where_a_configuration_file_is_read(tmp_path: Path) -> None:
    """Its import is a fifth of an analysis' start-up: only a .llmdiag.yaml to check needs it."""
    done, loaded = _run_loading(["analyze", "fixtures/demo", "--output", "json"])
    assert done.returncode == 0 and "pydantic" not in loaded, done.stderr[-2000:]
    config = tmp_path / "llmdiag.yaml"
    config.write_text("min_severity: warning\n")
    done, loaded = _run_loading(["analyze", "fixtures/demo", "--output", "json", "--config", str(config)])
    assert done.returncode == 0 and "pydantic" in loaded, done.stderr[-2000:]


def test_an_analysis_loads_the_cel_evaluator_without_its_repl() -> None:
    """The `cel` package's __init__ imports its REPL (prompt_toolkit, pygments): ten times the evaluator's
    start-up. diag.engine.cel_evaluator loads the evaluator alone; a later `import cel` gets the same one."""
    shared = (
        "from diag.engine.cel_evaluator import cel as ours\n"
        "import cel\n"
        "assert cel.compile is ours.compile and cel.compile('1 + 1').execute(cel.Context({})) == 2\n"
    )
    done, loaded = _run_loading(["analyze", "fixtures/demo", "--output", "json"], then=shared)
    assert done.returncode == 0, done.stderr[-2000:]
    assert '"verdict"' in done.stdout
    assert "cel.cel" in loaded and not loaded & {"cel", "cel.cli", "prompt_toolkit", "pygments"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--prometheus-url", "http://127.0.0.1:9", "--prometheus-selector", "job=vllm"],
            "llmdiag: --prometheus-selector: 'job=vllm' is not",
        ),
        (
            ["--prometheus-selector", 'job="vllm"'],
            "llmdiag: --prometheus-selector needs --prometheus-url or --prometheus-service",
        ),
        (
            ["--prometheus-service", "monitoring"],
            "llmdiag: --prometheus-service: 'monitoring' is not NAMESPACE/NAME[:PORT]",
        ),
        (
            ["--prometheus-url", "http://127.0.0.1:9", "--prometheus-service", "mon/prom"],
            "llmdiag: give --prometheus-url or --prometheus-service, not both",
        ),
        (
            [
                "--prometheus-url",
                "http://127.0.0.1:9",
                "--prometheus-user",
                "u",
                "--prometheus-token",
                "tok-s3cr3t",
                "--prometheus-password",
                "pw-s3cr3t",
            ],
            "llmdiag: give a bearer token (--prometheus-token) or a user",
        ),
        (
            ["--prometheus-url", "http://127.0.0.1:9", "--prometheus-header", "X-Scope-OrgID"],
            "llmdiag: --prometheus-header: expected 'Name: value'",
        ),
        (
            ["--prometheus-url", "http://127.0.0.1:9", "--since", "a while"],
            "llmdiag: --since: 'a while' is not a duration",
        ),
    ],
)
@pytest.mark.parametrize("command", ["collect", "triage"])
def test_prometheus_flag_mistakes_are_one_line_before_anything_is_collected(
    tmp_path: Path, command: str, args: list[str], message: str
) -> None:
    out = tmp_path / "case"
    extra = ["--out", str(out)] if command == "collect" else []
    result = subprocess.run(
        [sys.executable, "-m", "diag.cli", command, "--kubeconfig", str(tmp_path / "none"), "--no-local-gpu", *args,
         *extra],
        capture_output=True, text=True, timeout=120, env=_no_cluster_env(tmp_path),
    )  # fmt: skip
    assert result.returncode == 3
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]  # one line, no progress: nothing ran
    assert result.stderr.startswith(message), result.stderr
    assert "s3cr3t" not in result.stderr + result.stdout
    assert not out.exists()


@pytest.mark.parametrize("command", ["collect", "triage"])
def test_help_lists_the_prometheus_flags(tmp_path: Path, command: str) -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "diag.cli", command, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env=_no_cluster_env(tmp_path),
    ).stdout
    for flag in ("--prometheus-url", "--prometheus-service", "--prometheus-selector", "--prometheus-token",
                 "--prometheus-user",
                 "--prometheus-password", "--prometheus-ca-file", "--prometheus-header", "--since"):  # fmt: skip
        assert flag in shown


def test_colour_only_on_a_terminal_and_never_with_no_color_or_NO_COLOR(tmp_path) -> None:
    import os
    import subprocess
    import sys

    demo = str(Path(__file__).resolve().parent.parent / "fixtures" / "demo")

    def run(*args: str, env: dict[str, str] | None = None) -> str:
        return subprocess.run([sys.executable, "-m", "diag.cli", *args], capture_output=True, text=True,
                              env={**os.environ, **(env or {})}).stdout  # fmt: skip

    forced = {"FORCE_COLOR": "1", "TTY_COMPATIBLE": "1"}
    assert "\x1b[" in run("analyze", demo, env=forced)  # a terminal (forced): colours
    assert "\x1b[" not in run("analyze", demo)  # a pipe: none
    assert "\x1b[" not in run("--no-color", "analyze", demo, env=forced)
    assert "\x1b[" not in run("analyze", demo, "--no-color", env=forced)  # after the command too, as kubectl
    assert "\x1b[" not in run("rules", "list", "--no-color", env=forced)
    assert "\x1b[" not in run("analyze", demo, env={**forced, "NO_COLOR": "1"})
