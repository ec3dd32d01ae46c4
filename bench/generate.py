"""Write fleet-size bundles (S, M, L, 2xL) in the real bundle layout, tiled from the fixtures.

Each bundle is `cells` copies of fixtures/healthy-k8s-vllm (2 GPU nodes of 8 H100s, 2 vLLM servers,
22 pods), every object renamed per copy, plus one copy of each fault fixture of FAULTS, so that the
rules do real work and the driver can check that each fault is still found. Events are padded to
EVENTS_PER_CELL per copy with renamed copies of the cell's own events; the Ray state is the Ray
fault fixture's, its actors repeated to ACTORS_PER_CELL per copy. Names, pod and GPU UUIDs are made
unique per copy, in file contents and file names alike, so joins see as many distinct subjects as a
real fleet would have.

What `llmdiag collect` adds to a real fleet's bundle is there too: each vLLM server's log is the tail
collect reads (LOG_LINES, its own serving lines repeated after the start-up), and each GPU node has
`nvidia-smi -q -x` beside its CSV, the GPU blocks of our H200 capture (fixtures/real/h200) carrying
the CSV's GPUs (UUID, name, memory, utilization, temperature) so the two agree.

    python bench/generate.py OUT [--size S|M|L|2xL ...]
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"
CELL = "healthy-k8s-vllm"
# fault fixture -> the rule that must fire in every generated bundle
FAULTS = {"vllm-kv-cache-saturated": "VLLM-101", "k8s-gpu-cluster-full": "K8S-101", "gpu-xid-application": "GPU-103"}
RAY = ("ray-infeasible-actor", "RAY-102")
SIZES = {"S": 2, "M": 25, "L": 250, "2xL": 500}  # copies of the cell: 22 pods, 2 GPU nodes, 2 vLLM servers each
EVENTS_PER_CELL = 200
ACTORS_PER_CELL = 8
LOG_LINES = 500  # llmdiag collect's --tail per container (diag/collect/base.py)
NVIDIA_SMI_XML = FIXTURES / "real" / "h200" / "earlier" / "h200-idle.xml"
_SERVING_FROM = "Application startup complete."
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
# Renamed per copy; daemonsets are not: a cluster has one of each, on every node (see _merged_daemonsets).
_NAMED_LISTS = ("pods", "nodes", "services", "deployments", "statefulsets", "hpa", "endpoints", "events")
_DAEMONSET_COUNTS = (
    "desiredNumberScheduled",
    "currentNumberScheduled",
    "numberReady",
    "numberAvailable",
    "updatedNumberScheduled",
)


@dataclass(frozen=True)
class Renamer:
    """Renames every object a fixture lists (and every UUID) for one copy of it, in any text."""

    tag: str
    pattern: re.Pattern[str] | None

    @classmethod
    def of(cls, fixture: Path, tag: str) -> Renamer:
        names: set[str] = set()
        for kind in _NAMED_LISTS:
            path = fixture / "k8s" / f"{kind}.json"
            if path.is_file():
                names |= {item["metadata"]["name"] for item in json.loads(path.read_text()).get("items", [])}
        alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
        return cls(tag, re.compile(rf"(?<![\w-])({alternatives})(?![\w-])") if names else None)

    def __call__(self, text: str) -> str:
        if self.pattern is not None:
            text = self.pattern.sub(lambda m: f"{m.group(1)}-{self.tag}", text)
        return _UUID.sub(lambda m: str(uuid.uuid5(uuid.NAMESPACE_OID, f"{m.group(0)}/{self.tag}")), text)


class BundleWriter:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.lists: dict[str, list] = {}
        self.sources: dict[str, dict] = {}
        self.scrapes: dict[str, list] = {}

    def add_copy(self, fixture: Path, tag: str, events_per_copy: int = 0) -> None:
        rename = Renamer.of(fixture, tag)
        for path in sorted(p for p in fixture.rglob("*") if p.is_file()):
            rel = path.relative_to(fixture).as_posix()
            if rel in ("expected.json", "README.md") or rel.startswith("ray/"):
                continue
            text = rename(path.read_text())
            if rel == "manifest.json":
                manifest = json.loads(text)
                self.sources |= manifest.get("sources", {})
                self.scrapes |= manifest.get("scrapes", {})
            elif rel.startswith("k8s/") and rel.endswith(".json") and "/" not in rel[4:]:
                items = json.loads(text).get("items", [])
                if rel == "k8s/events.json":
                    items = _padded(items, events_per_copy)
                self.lists.setdefault(rel, []).extend(items)
            else:
                if fixture.name == CELL and rel.startswith("k8s/logs/"):
                    text = serving_tail(text)
                target = self.out / rename(rel)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
                if fixture.name == CELL and rel.startswith("gpu/") and rel.endswith(".csv"):
                    target.with_suffix(".xml").write_text(nvidia_smi_xml(text))

    def add_ray(self, fixture: Path, actors: int) -> None:
        shutil.copytree(fixture / "ray", self.out / "ray")
        listed = json.loads((fixture / "ray" / "actors.json").read_text())
        repeated = [dict(a) for a in listed]
        for n in range(max(0, actors - len(listed))):
            actor = dict(listed[n % len(listed)])
            actor["actor_id"] = f"{n:024x}01000000"
            actor["name"] = f"{actor['name']}-{n}" if actor.get("name") else ""
            repeated.append(actor)
        (self.out / "ray" / "actors.json").write_text(json.dumps(repeated, indent=1))

    def finish(self) -> None:
        if "k8s/daemonsets.json" in self.lists:
            self.lists["k8s/daemonsets.json"] = _merged_daemonsets(self.lists["k8s/daemonsets.json"])
        for rel, items in self.lists.items():
            (self.out / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.out / rel).write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
        manifest = json.loads((FIXTURES / "vllm-kv-cache-saturated" / "manifest.json").read_text())
        manifest["sources"] = {}  # what the files say; the fault fixture's own statuses come in below
        manifest["sources"] |= self.sources
        manifest["scrapes"] = self.scrapes
        (self.out / "manifest.json").write_text(json.dumps(manifest, indent=1))


def serving_tail(log: str) -> str:
    """The log as a --tail of LOG_LINES reads it from a server that has served a while: its start-up,
    then its own serving lines repeated."""
    lines = log.splitlines()
    start = next((n + 1 for n, line in enumerate(lines) if _SERVING_FROM in line), len(lines))
    serving = lines[start:]
    while serving and len(lines) < LOG_LINES:
        lines.extend(serving[: LOG_LINES - len(lines)])
    return "\n".join(lines) + "\n"


@functools.cache
def _xml_template() -> str:
    return NVIDIA_SMI_XML.read_text()


def nvidia_smi_xml(csv_text: str) -> str:
    """`nvidia-smi -q -x` of the GPUs a --query-gpu CSV lists, in the shape of our H200 capture."""
    template = _xml_template()
    head, _, rest = template.partition("\t<gpu id=")
    block, _, tail = rest.partition("</gpu>\n")
    block = "\t<gpu id=" + block + "</gpu>\n"
    bus_id = re.search(r"<pci_bus_id>([^<]+)</pci_bus_id>", block).group(1)
    rows = [[cell.strip() for cell in line.split(",")] for line in csv_text.splitlines()[1:] if line.strip()]
    gpus = []
    for index, gpu_uuid, name, used, total, utilization, temperature in rows:
        used_mib, total_mib = int(used.split()[0]), int(total.split()[0])
        gpu = block.replace(bus_id, f"00000000:{0x18 + 0x10 * int(index):02X}:00.0")
        gpu = re.sub(r"<uuid>[^<]*</uuid>", f"<uuid>{gpu_uuid}</uuid>", gpu)
        gpu = re.sub(r"<product_name>[^<]*</product_name>", f"<product_name>{name}</product_name>", gpu)
        gpu = re.sub(r"<minor_number>[^<]*</minor_number>", f"<minor_number>{index}</minor_number>", gpu)
        gpu = re.sub(r"<gpu_util>[^<]*</gpu_util>", f"<gpu_util>{utilization}</gpu_util>", gpu)
        gpu = re.sub(r"<gpu_temp>[^<]*</gpu_temp>", f"<gpu_temp>{temperature} C</gpu_temp>", gpu)
        gpu = re.sub(
            r"<fb_memory_usage>.*?</fb_memory_usage>",
            f"<fb_memory_usage>\n\t\t\t<total>{total_mib} MiB</total>\n\t\t\t<reserved>0 MiB</reserved>\n"
            f"\t\t\t<used>{used_mib} MiB</used>\n\t\t\t<free>{total_mib - used_mib} MiB</free>\n\t\t</fb_memory_usage>",
            gpu,
            flags=re.DOTALL,
        )
        gpus.append(gpu)
    head = re.sub(r"<attached_gpus>\d+</attached_gpus>", f"<attached_gpus>{len(rows)}</attached_gpus>", head)
    return head + "".join(gpus) + tail


def _merged_daemonsets(copies: list[dict]) -> list[dict]:
    """One daemonset per name, its node counts summed over the copies."""
    merged: dict[tuple[str, str], dict] = {}
    for ds in copies:
        key = (ds["metadata"].get("namespace", ""), ds["metadata"]["name"])
        if key not in merged:
            merged[key] = json.loads(json.dumps(ds))
            continue
        status = merged[key].setdefault("status", {})
        for count in _DAEMONSET_COUNTS:
            if count in ds.get("status", {}):
                status[count] = status.get(count, 0) + ds["status"][count]
    return list(merged.values())


def _padded(events: list[dict], count: int) -> list[dict]:
    if not events or len(events) >= count:
        return events
    padded = list(events)
    for n in range(count - len(events)):
        event = json.loads(json.dumps(events[n % len(events)]))
        event["metadata"]["name"] = f"{event['metadata']['name']}.{n:x}"
        padded.append(event)
    return padded


def expected_rules() -> dict[str, str]:
    """The faults every generated bundle holds: fixture -> the rule that must fire."""
    return FAULTS | {RAY[0]: RAY[1]}


def generate(out: Path, cells: int) -> None:
    """Write one bundle of `cells` copies of the cell and one of each fault."""
    shutil.rmtree(out, ignore_errors=True)
    writer = BundleWriter(out)
    for n in range(cells):
        writer.add_copy(FIXTURES / CELL, f"c{n}", EVENTS_PER_CELL)
    for n, fault in enumerate(FAULTS):
        writer.add_copy(FIXTURES / fault, f"f{n}")
    writer.add_ray(FIXTURES / RAY[0], ACTORS_PER_CELL * cells)
    writer.finish()


def make_pending(bundle: Path, every: int) -> int:
    """Every `every`-th pod of the bundle made unscheduled, as a pod the scheduler has not placed is
    listed (no spec.nodeName, phase Pending, PodScheduled False/Unschedulable): the shape of a full
    cluster's pending replicas, whose placement reads every node. Returns how many."""
    path = bundle / "k8s" / "pods.json"
    pods = json.loads(path.read_text())
    pending = pods["items"][::every]
    for pod in pending:
        pod["spec"].pop("nodeName", None)
        pod["status"] = {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        }
    path.write_text(json.dumps(pods))
    return len(pending)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--size", action="append", choices=list(SIZES), help="default: all")
    parser.add_argument(
        "--pending-every", type=int, metavar="N", help="then make every N-th pod pending (make_pending)"
    )
    args = parser.parse_args()
    for size in args.size or SIZES:
        generate(args.out / size, SIZES[size])
        pending = f", {make_pending(args.out / size, args.pending_every)} pods pending" if args.pending_every else ""
        print(f"{size}: {args.out / size}{pending}")


if __name__ == "__main__":
    main()
