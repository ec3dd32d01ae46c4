"""Record real vLLM (CPU build) bundles for fixtures/real/vllm-cpu/<scenario>/.

For each scenario of tests/live/vllm_server.py: start the server with the scenario's flags, run its
load, take plain GETs of /metrics a few seconds apart while the load runs, then /health and
/v1/models, and write them in the bundle layout (docs/bundle-format.md) with the server's argv
(vllm/<name>.cmdline.txt), a manifest with the scrape times, the server log, expected.json and a
README. <name> is 127.0.0.1_<port>, as `llmdiag triage --vllm-url` names the same server.

Needs the venv and model of ci/vllm_cpu/setup.sh. Standard library only:
    python ci/vllm_cpu/record.py [--out DIR] [--scrapes N] [--interval S] [SCENARIO ...]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "live"))

from live_services import ServiceUnavailable, http_get  # noqa: E402  (tests/live is not a package)
from vllm_server import (  # noqa: E402
    DEFAULT_VENV,
    SCENARIOS,
    LoadGenerator,
    LoadResult,
    RunningServer,
    Scenario,
    require_vllm,
    start_server,
    vllm_python,
)

DEFAULT_OUT = REPO / "fixtures" / "real" / "vllm-cpu"
WARMUP_S = 5.0  # load runs this long before the first scrape, so queues have built
# Gauges and counters the README quotes per scrape; all are in the CPU build's /metrics.
QUOTED_SERIES = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:num_preemptions_total",
    "vllm:generation_tokens_total",
)


@dataclass
class Recording:
    server: RunningServer
    scrapes: list[tuple[float, bytes]]  # (unix time the GET was sent, body)
    health: str
    models: bytes
    load: LoadResult
    duration_s: float


def vllm_version() -> str:
    out = subprocess.run(
        [str(vllm_python(DEFAULT_VENV)), "-c", "import vllm; print(vllm.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def record(scenario: Scenario, log_path: Path, scrapes: int, interval_s: float) -> Recording:
    started = time.monotonic()
    with start_server(log_path, scenario.server_args, scenario.server_env) as server:
        with LoadGenerator(server.url, scenario.load) as load:
            time.sleep(WARMUP_S)
            taken: list[tuple[float, bytes]] = []
            for n in range(scrapes):
                if n:
                    time.sleep(interval_s)
                when = time.time()
                status, body = http_get(f"{server.url}/metrics")
                if status != 200:
                    raise RuntimeError(f"GET /metrics answered {status} during scenario {scenario.name}")
                taken.append((when, body))
            health_status, _ = http_get(f"{server.url}/health")
            models_status, models = http_get(f"{server.url}/v1/models")
            if models_status != 200:
                raise RuntimeError(f"GET /v1/models answered {models_status}")
            load.stop()  # nothing new is sent; leaving the block waits for the requests in flight
    return Recording(
        server=server,
        scrapes=taken,
        health="timeout" if health_status is None else str(health_status),
        models=models,
        load=load.result,
        duration_s=time.monotonic() - started,
    )


def series_value(exposition: str, name: str) -> str:
    """The value of the first sample of `name` (all quoted series have one sample per engine)."""
    match = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", exposition, re.MULTILINE)
    return match.group(1) if match else "absent"


def write_bundle(scenario: Scenario, rec: Recording, out: Path, version: str) -> None:
    shutil.rmtree(out, ignore_errors=True)
    vllm_dir = out / "vllm"
    vllm_dir.mkdir(parents=True)
    name = f"127.0.0.1_{rec.server.port}"
    for n, (_, body) in enumerate(rec.scrapes):
        suffix = "metrics.txt" if n == 0 else f"metrics.{n}.txt"
        (vllm_dir / f"{name}.{suffix}").write_bytes(body)
    (vllm_dir / f"{name}.health.txt").write_text(rec.health + "\n")
    (vllm_dir / f"{name}.models.json").write_bytes(rec.models)
    (vllm_dir / f"{name}.cmdline.txt").write_text("".join(arg + "\n" for arg in rec.server.argv))
    collected_at = datetime.fromtimestamp(rec.scrapes[0][0], timezone.utc).isoformat(timespec="seconds")
    manifest = {
        "tool": "llmdiag-recorder",
        "collected_at": collected_at,
        "scrapes": {name: [round(when, 3) for when, _ in rec.scrapes]},
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    expected = {  # the catalogue's format (tests/rules/test_catalogue.py)
        "description": scenario.description,
        "verdict": {"layer": "vllm" if scenario.expected_rule else None, "rule": scenario.expected_rule},
        "fires": [scenario.expected_rule] if scenario.expected_rule else [],
    }
    (out / "expected.json").write_text(json.dumps(expected, indent=2) + "\n")
    shutil.copyfile(rec.server.log_path, out / "server.log")
    (out / "README.md").write_text(readme(scenario, rec, name, version, collected_at))


def readme(scenario: Scenario, rec: Recording, name: str, version: str, collected_at: str) -> str:
    first = rec.scrapes[0][0]
    rows = [
        f"| {n} | +{when - first:.1f} s | "
        + " | ".join(series_value(body.decode(), series) for series in QUOTED_SERIES)
        + " |"
        for n, (when, body) in enumerate(rec.scrapes)
    ]
    env = " ".join(f"{k}={v}" for k, v in scenario.server_env.items()) or "(none)"
    errors = "; ".join(rec.load.errors) or "none"
    expected = scenario.expected_rule or "none (no critical finding)"
    return f"""# {scenario.name}

{scenario.description}

Recorded {collected_at} by `ci/vllm_cpu/record.py` from a real vLLM {version} server (the
`vllm-cpu` build, V1 engine) serving the tiny random-weight Llama of `ci/vllm_cpu/make_tiny_model.py`
on a 2-core x86 machine, bound to 127.0.0.1.

- Flags: `{" ".join(scenario.server_args) or "(defaults)"}`; environment: `{env}`.
  Full argv: `vllm/{name}.cmdline.txt`.
- Load: {scenario.load.describe()}. /metrics was read {len(rec.scrapes)} times while it ran,
  the first {WARMUP_S:.0f} s after it started.
- Load outcome: sending stopped after the last read and the requests in flight were let finish:
  {rec.load.sent} sent, {rec.load.succeeded} answered, {rec.load.failed} failed (first errors: {errors}).
- Server ready after {rec.server.started_in_s:.0f} s; whole scenario {rec.duration_s:.0f} s.
- GET /health: {rec.health}.
- Expected triage: {expected} (`expected.json`).
- `server.log` is the server's own output (not part of the bundle layout).

| read | time | {" | ".join(QUOTED_SERIES)} |
| --- | --- | {" | ".join("---" for _ in QUOTED_SERIES)} |
{chr(10).join(rows)}
"""


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenarios", nargs="*", metavar="SCENARIO", help=f"default: all of {', '.join(SCENARIOS)}")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--scrapes", type=int, default=4)
    parser.add_argument("--interval", type=float, default=3.0, help="seconds between /metrics reads")
    args = parser.parse_args(argv)
    unknown = [name for name in args.scenarios if name not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(SCENARIOS)}")
    try:
        require_vllm()
    except ServiceUnavailable as e:
        print(f"cannot record: {e}", file=sys.stderr)
        return 1
    version = vllm_version()
    for scenario_name in args.scenarios or list(SCENARIOS):
        scenario = SCENARIOS[scenario_name]
        out = args.out / scenario.name
        log_path = Path("/tmp") / f"llmdiag-vllm-{scenario.name}.log"
        rec = record(scenario, log_path, args.scrapes, args.interval)
        write_bundle(scenario, rec, out, version)
        print(
            f"{scenario.name}: server ready in {rec.server.started_in_s:.0f} s, "
            f"scenario {rec.duration_s:.0f} s -> {out.relative_to(REPO) if out.is_relative_to(REPO) else out}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
