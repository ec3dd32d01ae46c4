"""`kubectl cluster-info dump --output-directory DIR`, read as a bundle: its files onto the bundle layout.

What kubectl writes there (k8s.io/kubectl/pkg/cmd/clusterinfo/clusterinfo_dump.go, `-o json`, the default):

  nodes.json                      the NodeList
  <namespace>/events.json         one typed list each (EventList, ServiceList, DaemonSetList,
  <namespace>/services.json       DeploymentList, PodList; their items carry no kind of their own),
  <namespace>/daemonsets.json     for kube-system and the context's namespace, the namespaces of
  <namespace>/deployments.json    --namespaces, or every namespace with -A
  <namespace>/pods.json
  <namespace>/replication-controllers.json, replicasets.json   (not read by llmdiag)
  <namespace>/<pod>/logs.txt      the current log of each init container, then each container, of the pod:
                                  "==== START logs for container C of pod NS/P ====" line, the log,
                                  "==== END logs for container C of pod NS/P ====" line (kubectl writes the
                                  END line right after the log, on the log's last line when that has no line
                                  break); a log kubectl could not get is one "Create log request error: ..."
                                  or "Request log error: ..." line between the two

The per-namespace lists of one kind become one k8s/<kind>.json List; each container's log becomes
k8s/logs/<namespace>.<pod>.<container>.log. A dump has no --previous logs, no StatefulSets, HPAs or
endpoints: those sources are simply not there.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from diag.core.errors import ParseError
from diag.parsers.json_fields import load_json
from diag.parsers.kubernetes import recover_truncated_list

LAYOUT = "kubectl cluster-info dump"

# the dump's list of each kind -> the bundle file, with the kind of list kubectl prints
_LISTS = {
    "events": ("k8s/events.json", "EventList"),
    "services": ("k8s/services.json", "ServiceList"),
    "daemonsets": ("k8s/daemonsets.json", "DaemonSetList"),
    "deployments": ("k8s/deployments.json", "DeploymentList"),
    "pods": ("k8s/pods.json", "PodList"),
}
_NOT_USED = {
    "replication-controllers": "ReplicationControllers",
    "replicasets": "ReplicaSets",
}
_DUMP_ONLY = {f"{name}.json" for name in _NOT_USED}
_DNS_LABEL = r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?"  # a namespace's or a container's name
_NAMESPACE = re.compile(_DNS_LABEL)
_START = re.compile(
    rb"^==== START logs for container (" + _DNS_LABEL.encode() + rb") of pod ([^/\s]+)/(\S+) ====\n", re.MULTILINE
)
# all kubectl writes between the two lines when it could not get the log (the error's text may hold line breaks)
_LOG_ERROR = re.compile(rb"(?:Create log request error|Request log error): .*", re.DOTALL)
_SHOWN_FILES = 3  # a source names this many dump files, then counts the rest


@dataclass(frozen=True)
class Derived:
    """A bundle file made from files of another layout; `problem` when part of them could not be used."""

    made_from: tuple[str, ...]
    problem: str | None = None

    @property
    def words(self) -> str:
        shown = ", ".join(self.made_from[:_SHOWN_FILES])
        more = len(self.made_from) - _SHOWN_FILES
        return f"from {LAYOUT}'s {shown}" + (f" and {more} more" if more > 0 else "")


@dataclass
class Converted:
    files: dict[str, bytes] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)  # dump files that could not be used: path -> why
    skipped: dict[str, str] = field(default_factory=dict)  # files or logs of the dump that are not read
    derived: dict[str, Derived] = field(default_factory=dict)


def is_cluster_dump(names: Iterable[str]) -> bool:
    """nodes.json at the top, where a bundle has k8s/nodes.json; a bundle with a stray nodes.json beside
    its own layout stays a bundle."""
    names = set(names)
    return "nodes.json" in names and "manifest.json" not in names and "k8s/nodes.json" not in names


def convert(files: dict[str, bytes], refused: dict[str, str], bundle_folders: frozenset[str]) -> Converted:
    """The dump's files (relative paths, read under the bundle's limits) in the bundle layout. Nothing
    here grows the data: lists of several namespaces are merged, logs are cut at kubectl's lines.
    A list the reading `refused` (a link, over the size limit) fails the bundle file it would have
    gone into. Files of the bundle layout added beside the dump (gpu/<node>.xml, k8s/statefulsets.json
    ...: a folder of `bundle_folders` that is no namespace of the dump) are used as they are."""
    out = Converted()
    lists: dict[str, list[tuple[str, bytes]]] = {}
    not_used: dict[str, list[str]] = {}
    # kubectl writes these two for each namespace; no folder of a bundle has them
    namespaces = {rel.split("/")[0] for rel in files if rel.count("/") == 1 and rel.split("/")[1] in _DUMP_ONLY}
    added: dict[str, bytes] = {}
    for rel in sorted(files):
        parts = rel.split("/")
        if parts[0] in bundle_folders and parts[0] not in namespaces and len(parts) > 1:
            added[rel] = files[rel]
        elif rel == "nodes.json":
            out.files["k8s/nodes.json"] = files[rel]
            out.derived["k8s/nodes.json"] = Derived((rel,))
        elif len(parts) == 1 or not _NAMESPACE.fullmatch(parts[0]):
            out.skipped[rel] = f"{rel}: not part of {LAYOUT}'s layout"
        elif len(parts) == 2 and parts[1].endswith(".json") and parts[1][:-5] in _LISTS:
            lists.setdefault(parts[1][:-5], []).append((rel, files[rel]))
        elif len(parts) == 2 and parts[1].endswith(".json") and parts[1][:-5] in _NOT_USED:
            not_used.setdefault(parts[1][:-5], []).append(rel)
        elif len(parts) == 3 and parts[2] == "logs.txt":
            _split_logs(parts[0], parts[1], rel, files[rel], out)
        else:
            out.skipped[rel] = f"{rel}: not part of {LAYOUT}'s layout"
    not_read: dict[str, list[str]] = {}  # bundle file -> the dump's lists for it that were not read
    for rel, why in refused.items():
        target = _target_of(rel) if rel.split("/")[0] not in bundle_folders - namespaces else None
        if target is None:
            out.refused[rel] = why
        else:
            not_read.setdefault(target, []).append(f"{rel}: {why}")
    for kind, listed in lists.items():
        target, list_kind = _LISTS[kind]
        out.files[target], problem = _merge(listed, list_kind)
        problems = [p for p in (problem, *not_read.pop(target, ())) if p]
        out.derived[target] = Derived(tuple(rel for rel, _ in listed), "; ".join(problems) or None)
    for target, whys in not_read.items():  # no list of its kind was read at all
        out.refused[target] = "; ".join(whys)
    for kind, names in not_used.items():
        out.skipped[f"*/{kind}.json"] = f"{LAYOUT}'s {_NOT_USED[kind]} ({_counted(names)}): not read by llmdiag"
    for rel, data in added.items():
        if rel in out.files:
            out.skipped[f"{rel} (added)"] = (
                f"{rel}: made from {LAYOUT}'s files already; the file added beside it was not read"
            )
        else:
            out.files[rel] = data
    return out


def _target_of(rel: str) -> str | None:
    """The bundle file a list of the dump goes into; None for other files."""
    if rel == "nodes.json":
        return "k8s/nodes.json"
    namespace, _, name = rel.partition("/")
    kind = name.removesuffix(".json")
    if _NAMESPACE.fullmatch(namespace) and name.endswith(".json") and kind in _LISTS:
        return _LISTS[kind][0]
    return None


def _counted(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{len(names)} namespaces"


def _merge(parts: list[tuple[str, bytes]], list_kind: str) -> tuple[bytes, str | None]:
    """One namespace's list is used as written; several become one List. A list cut off part-way gives
    its complete items; one that is not a list gives none. Either is a problem of the merged file."""
    if len(parts) == 1:
        return parts[0][1], None
    items: list = []
    problems: list[str] = []
    for rel, raw in parts:
        text = raw.decode("utf-8", errors="replace")
        try:
            items += _items(text, list_kind)
            continue
        except ParseError as e:
            why = str(e)
        cut = recover_truncated_list(text)
        if cut is not None:
            items += _items(cut.text, list_kind)
            problems.append(
                f"{rel} truncated after {cut.items} complete item{'' if cut.items == 1 else 's'} (those were used)"
            )
        else:
            problems.append(f"{rel}: {why} (its items were not used)")
    merged = {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items}
    return json.dumps(merged).encode(), "; ".join(problems) or None


def _items(text: str, list_kind: str) -> list:
    doc = load_json(text)
    if not isinstance(doc, dict) or not isinstance(doc.get("items"), list):
        raise ParseError(f"not a {list_kind} (kubectl cluster-info dump -o json)")
    if doc.get("kind") not in (list_kind, "List"):
        raise ParseError(f"a {doc.get('kind')}, not a {list_kind}")
    return doc["items"]


def _split_logs(namespace: str, pod: str, rel: str, data: bytes, out: Converted) -> None:
    """<namespace>/<pod>/logs.txt -> k8s/logs/<namespace>.<pod>.<container>.log, one per START line of
    this pod. A log kubectl could not get is skipped with kubectl's own error line; a log whose END line
    is missing (the dump was cut off) is used, and is a problem."""
    pos, found = 0, False
    while (start := _START.search(data, pos)) is not None:
        pos = start.end()
        if start[2].decode() != namespace or start[3].decode("utf-8", errors="replace") != pod:
            continue
        found = True
        container = start[1].decode()
        end_line = f"==== END logs for container {container} of pod {namespace}/{pod} ====\n".encode()
        end = data.find(end_line, start.end())
        body = data[start.end() : end if end >= 0 else len(data)]
        pos = end + len(end_line) if end >= 0 else len(data)
        target = f"k8s/logs/{namespace}.{pod}.{container}.log"
        if _LOG_ERROR.fullmatch(body):
            out.skipped[target] = (
                f"{target}: {LAYOUT} has no log of container {container}: "
                f"{' '.join(body.decode('utf-8', errors='replace').split())}"
            )
            continue
        out.files[target] = body
        out.derived[target] = Derived(
            (rel,), None if end >= 0 else f"{rel} ends inside this log (no END line): the dump was cut off"
        )
    if not found:
        if data.strip():
            out.refused[rel] = (
                f"no '==== START logs for container ... of pod {namespace}/{pod} ====' line: not a log file of {LAYOUT}"
            )
        else:
            out.skipped[rel] = f"{rel}: empty"
