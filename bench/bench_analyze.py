"""`llmdiag analyze` against a bare parse of the same files, at fleet sizes (bench/generate.py).

For each size: generate the bundle (unless --keep finds it), then, in separate processes so that
neither warms the other, (1) the bare parse: every .json through json.loads, every .xml through
ElementTree, every other file split into lines; (2) `llmdiag analyze BUNDLE --output json`. Each is
run --runs times; the medians of CPU seconds (user + system) and the peak RSS are printed, with the
ratio analyze / bare parse, the growth from the size before, and whether every injected fault was
found. The package's bytecode is compiled first, as an installed package has it.

    python bench/bench_analyze.py [--size S --size M ...] [--runs 3] [--work /tmp/llmdiag-fleet]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generate import SIZES, expected_rules, generate

REPO = Path(__file__).resolve().parents[1]
BARE_PARSE = """
import json, sys
from pathlib import Path
from xml.etree import ElementTree
for path in sorted(Path(sys.argv[1]).rglob("*")):
    if not path.is_file():
        continue
    data = path.read_bytes()
    if path.suffix == ".json":
        json.loads(data)
    elif path.suffix == ".xml":
        ElementTree.fromstring(data)
    else:
        data.decode(errors="replace").splitlines()
"""


@dataclass
class Run:
    cpu_s: float
    peak_rss_mb: float
    stdout: str


def measured(argv: list[str]) -> Run:
    """Run argv as a child; its CPU seconds and peak RSS, from the kernel's accounting of children."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1, 2, 3):
        raise SystemExit(f"{' '.join(argv[:4])}... exited {done.returncode}: {done.stderr[-1000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    # ru_maxrss of children is the largest child so far, in KiB; sizes run in ascending order
    return Run(cpu, after.ru_maxrss / 1024, done.stdout)


def bundle_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", action="append", choices=list(SIZES), help="default: S, M, L")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--work", type=Path, default=Path("/tmp/llmdiag-fleet"))
    parser.add_argument("--keep", action="store_true", help="reuse bundles already generated under --work")
    args = parser.parse_args()
    sizes = args.size or ["S", "M", "L"]
    # The package's bytecode, as an install has it (pip compiles at install time): with
    # PYTHONDONTWRITEBYTECODE set, as on the CI machines, every run would compile diag/ again.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "diag")], check=True)
    print(
        f"{'size':>4} {'MB':>7} {'bare s':>8} {'analyze s':>10} "
        f"{'ratio':>6} {'growth':>7} {'RSS MB':>7} {'xbundle':>7}  faults"
    )
    previous: tuple[float, float] | None = None
    for size in sizes:
        bundle = args.work / size
        if not (args.keep and bundle.is_dir()):
            generate(bundle, SIZES[size])
        megabytes = bundle_bytes(bundle) / 1e6
        bare = statistics.median(
            measured([sys.executable, "-c", BARE_PARSE, str(bundle)]).cpu_s for _ in range(args.runs)
        )
        runs = [
            measured([sys.executable, "-m", "diag.cli", "analyze", str(bundle), "--output", "json"])
            for _ in range(args.runs)
        ]
        analyze = statistics.median(r.cpu_s for r in runs)
        report = json.loads(runs[-1].stdout)
        fired = {f["rule"] for f in report["findings"]}
        missing = sorted(rule for rule in expected_rules().values() if rule not in fired)
        growth = ""
        if previous is not None:
            data_factor, time_factor = megabytes / previous[0], analyze / previous[1]
            growth = f"{time_factor / data_factor:.2f}"
        previous = (megabytes, analyze)
        rss = runs[-1].peak_rss_mb
        print(
            f"{size:>4} {megabytes:7.1f} {bare:8.2f} {analyze:10.2f} {analyze / bare:6.1f} {growth:>7} {rss:7.0f} "
            f"{rss / megabytes:7.1f}  {'all found' if not missing else 'MISSING ' + ', '.join(missing)}"
        )


if __name__ == "__main__":
    main()
