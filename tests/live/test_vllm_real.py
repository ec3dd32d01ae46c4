"""`llmdiag triage --vllm-url` against a REAL vLLM server (the CPU build), under real load.

Each scenario of vllm_server.SCENARIOS starts its own server (one at a time: the machine has two
cores), drives its load, runs the CLI as an on-call engineer would, and stops everything. Needs
ci/vllm_cpu/setup.sh; without it the tests skip, or fail under LLMDIAG_REQUIRE_LIVE=1.
"""

from __future__ import annotations

import dataclasses
import json
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from live_services import LOOPBACK
from vllm_server import SCENARIOS, LoadGenerator, LoadResult, LoadShape, start_server

pytestmark = pytest.mark.live

REPO = Path(__file__).resolve().parents[2]
LOAD_WARMUP_S = 5.0  # queues build before the CLI's first read
CLI_TIMEOUT_S = 180.0
TRIAGE_DEADLINE_S = 60  # the CLI's own deadline, well inside CLI_TIMEOUT_S
# Real load is sampled: three reads 2 s apart can all fall in a lull between batches. Each attempt is
# a full, fresh triage; the assertions below still hold on the report of the last one.
TRIAGE_ATTEMPTS = 2
# Scenarios whose recorded load can end before the CLI's scrapes; here it must outlast the CLI's run
# (many more requests, still capped, stopped right after).
SUSTAINED_LOAD = {"max-num-seqs-2", "kv-cache-small"}
EXIT_CODES = {"healthy": 0, "warning": 1, "critical": 2}


@dataclass
class Triage:
    exit_code: int
    report: dict
    stderr: str
    server_argv: list[str]
    load: LoadResult

    def findings(self, rule: str) -> list[dict]:
        return [f for f in self.report["findings"] if f["rule"] == rule]

    def finding(self, rule: str) -> dict:
        found = self.findings(rule)
        assert len(found) == 1, f"expected one {rule} finding; {self.explain()}"
        return found[0]

    def explain(self) -> str:
        """What to print when an assertion fails: the verdict, the findings, and the CLI's stderr."""
        brief = [(f["rule"], f["severity"], f["layer"], f["evidence"]) for f in self.report.get("findings", [])]
        return (
            f"exit {self.exit_code}; verdict {self.report.get('verdict')}; findings {brief}; "
            f"load {self.load}; stderr: {self.stderr[-2000:]}"
        )


def run_triage(url: str) -> tuple[int, dict, str]:
    command = [
        sys.executable,
        "-m",
        "diag.cli",
        "triage",
        "--vllm-url",
        url,
        "--scrapes",
        "3",
        "--scrape-interval",
        "2",
        "--output",
        "json",
        "--timeout",
        str(TRIAGE_DEADLINE_S),
    ]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        pytest.fail(
            f"triage (exit {done.returncode}) printed no JSON report:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        )
    return done.returncode, report, done.stderr


def triage_under_load(scenario_name: str, work: Path) -> Triage:
    scenario = SCENARIOS[scenario_name]
    with start_server(work / "server.log", scenario.server_args, scenario.server_env) as server:
        load_shape = scenario.load
        if scenario_name in SUSTAINED_LOAD:
            load_shape = dataclasses.replace(
                scenario.load,
                total_requests=scenario.load.total_requests * 20,
                max_duration_s=TRIAGE_ATTEMPTS * CLI_TIMEOUT_S,
            )
        with LoadGenerator(server.url, load_shape) as load:
            time.sleep(LOAD_WARMUP_S)
            for _ in range(TRIAGE_ATTEMPTS):
                exit_code, report, stderr = run_triage(server.url)
                if scenario.expected_rule is None or any(
                    f["rule"] == scenario.expected_rule for f in report["findings"]
                ):
                    break
            load.stop()
    return Triage(exit_code, report, stderr, server.argv, load.result)


@pytest.fixture(scope="module")
def triaged(vllm_cpu: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], Triage]]:
    """`triaged(scenario)`: the scenario's triage, run once per module whichever test asks first."""
    done: dict[str, Triage] = {}

    def run(name: str) -> Triage:
        if name not in done:
            done[name] = triage_under_load(name, tmp_path_factory.mktemp(name))
        return done[name]

    yield run


def assert_report_consistent(run: Triage) -> None:
    """The contract of bundle-format.md: schema, exit code from the worst severity, vLLM sources read."""
    report = run.report
    assert report["schema"] == "llmdiag/report/v1", run.explain()
    severities = {f["severity"] for f in report["findings"]}
    worst = "critical" if "critical" in severities else "warning" if "warning" in severities else "healthy"
    assert run.exit_code == EXIT_CODES[worst], run.explain()
    vllm_sources = {name: s for name, s in report["sources"].items() if name.startswith("vllm/")}
    assert vllm_sources, run.explain()
    assert all(s["status"] == "ok" for s in vllm_sources.values()), vllm_sources
    # the collector found the listening process and read its argv: that is how the flags are known
    assert any(".cmdline" in name for name in vllm_sources), vllm_sources
    assert run.load.succeeded > 0, run.explain()


def mentions_number(evidence: list, number: int) -> bool:
    pattern = re.compile(rf"(?<![\d.]){number}(?![\d.])")
    return any(pattern.search(item if isinstance(item, str) else json.dumps(item)) for item in evidence)


def test_healthy_server_has_no_critical_finding(triaged: Callable[[str], Triage]) -> None:
    run = triaged("healthy")
    assert_report_consistent(run)
    assert [f for f in run.report["findings"] if f["severity"] == "critical"] == [], run.explain()
    assert run.exit_code in (0, 1), run.explain()


def test_max_num_seqs_cap_is_named_with_its_real_value(triaged: Callable[[str], Triage]) -> None:
    run = triaged("max-num-seqs-2")
    assert_report_consistent(run)
    assert run.server_argv[run.server_argv.index("--max-num-seqs") + 1] == "2"
    finding = run.finding("VLLM-102")
    assert finding["layer"] == "vllm", run.explain()
    assert mentions_number(finding["evidence"], 2), finding["evidence"]
    # the cap, not memory: KV-cache saturation must not be what triage reports here
    assert run.findings("VLLM-101") == [], run.explain()
    assert run.report["verdict"]["layer"] == "vllm", run.explain()
    assert run.report["verdict"]["rule"] == SCENARIOS["max-num-seqs-2"].expected_rule, run.explain()


def test_small_kv_cache_is_reported_saturated(triaged: Callable[[str], Triage]) -> None:
    run = triaged("kv-cache-small")
    assert_report_consistent(run)
    finding = run.finding("VLLM-101")
    assert finding["layer"] == "vllm", run.explain()
    assert run.report["verdict"]["layer"] == "vllm", run.explain()
    assert run.report["verdict"]["rule"] == SCENARIOS["kv-cache-small"].expected_rule, run.explain()


def test_load_generator_stops_at_its_wall_clock_cap() -> None:
    """Against a socket that accepts but never answers, the load ends by its cap, not by its count."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as silent:
        silent.bind((LOOPBACK, 0))
        silent.listen(64)
        shape = LoadShape(total_requests=1000, concurrency=4, prompt_tokens=8, max_tokens=8, max_duration_s=2.0)
        started = time.monotonic()
        result = LoadGenerator(f"http://{LOOPBACK}:{silent.getsockname()[1]}", shape).start().join()
        elapsed = time.monotonic() - started
    assert 1.5 < elapsed < 8.0
    assert (result.sent, result.succeeded, result.failed) == (4, 0, 4)
    assert result.errors and all("timed out" in e for e in result.errors), result.errors
