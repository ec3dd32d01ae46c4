"""ConfigMaps and Secrets by name: `kubectl get configmaps|secrets -o json` lists to names, and the
ones a pod's spec names. A Secret's data is never kept: a hand-made secrets.json holds it, the
collector's holds metadata only (diag/collect/kubernetes.py), and only the names are read here."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from diag.core.errors import ParseError
from diag.parsers.json_fields import Fields, load_json, type_name
from diag.snapshot.model import ConfigRef, ObjectName

_Kind = Literal["ConfigMap", "Secret"]
_ENV_REFS: tuple[tuple[str, _Kind], ...] = (("configMapKeyRef", "ConfigMap"), ("secretKeyRef", "Secret"))
_ENV_FROM: tuple[tuple[str, _Kind], ...] = (("configMapRef", "ConfigMap"), ("secretRef", "Secret"))
_PROJECTED: tuple[tuple[str, _Kind], ...] = (("configMap", "ConfigMap"), ("secret", "Secret"))

# The API's metadata-only answer (Accept: ...;as=PartialObjectMetadataList) names its items so
_METADATA_ONLY = ("PartialObjectMetadata", "PartialObjectMetadataList")


def parse_configmaps(text: str) -> list[ObjectName]:
    return _names(text, "ConfigMap")


def parse_secrets(text: str) -> list[ObjectName]:
    return _names(text, "Secret")


def _names(text: str, kind: str) -> list[ObjectName]:
    if not text.strip():
        raise ParseError(f"empty file: expected a {kind} list (kubectl get -o json)")
    doc = load_json(text)
    if not isinstance(doc, dict):
        raise ParseError(f"expected a {kind} list (kubectl get -o json), found {type_name(doc)}")
    top = Fields(doc, "")
    found = top.text("kind")
    if "items" not in doc:
        if found not in (kind, _METADATA_ONLY[0]):
            raise ParseError(f"expected a {kind} list, found {found or 'an object with no kind and no items'}")
        return [_name(top, kind)]
    if found not in (None, "List", f"{kind}List", _METADATA_ONLY[1]):
        raise ParseError(f"expected a {kind} list, found {found}")
    return [_name(item, kind) for item in top.children("items")]


def _name(item: Fields, kind: str) -> ObjectName:
    if item.text("kind") not in (None, kind, _METADATA_ONLY[0]):
        raise ParseError(f"{item.place()} is {item.text('kind')}, not a {kind}")
    metadata = item.child("metadata")
    name, namespace = metadata.text("name"), metadata.text("namespace")
    if not name or not namespace:
        raise ParseError(f"{item.place() or 'the object'}: metadata.name or metadata.namespace is missing")
    return ObjectName(namespace, name)


def pod_config_refs(spec: Fields) -> list[ConfigRef]:
    """The ConfigMaps and Secrets a pod spec names: its containers' (init containers too) env valueFrom
    and envFrom, its volumes (projected sources too), its imagePullSecrets."""
    refs: list[ConfigRef] = []
    for key, label in (("initContainers", "init container"), ("containers", "container")):
        for c in spec.children(key):
            of = f"{label} {c.text('name')}"
            for var in c.children("env"):
                source = var.child("valueFrom")
                for ref_key, kind in _ENV_REFS:
                    if ref_key in source:
                        refs += _ref(source.child(ref_key), "name", kind, f"env {var.text('name')} of {of}")
            for source in c.children("envFrom"):
                for ref_key, kind in _ENV_FROM:
                    if ref_key in source:
                        refs += _ref(source.child(ref_key), "name", kind, f"envFrom of {of}")
    for volume in spec.children("volumes"):
        where = f"volume {volume.text('name')}"
        if "configMap" in volume:
            refs += _ref(volume.child("configMap"), "name", "ConfigMap", where)
        if "secret" in volume:
            refs += _ref(volume.child("secret"), "secretName", "Secret", where)
        for source in volume.child("projected").children("sources"):
            for src_key, kind in _PROJECTED:
                if src_key in source:
                    refs += _ref(source.child(src_key), "name", kind, f"{where} (projected)")
    for pull in spec.children("imagePullSecrets"):
        refs += _ref(pull, "name", "Secret", "imagePullSecrets")
    return refs


def _ref(obj: Fields, name_key: str, kind: _Kind, where: str) -> Sequence[ConfigRef]:
    name = obj.text(name_key)
    return [ConfigRef(kind, name, where, bool(obj.flag("optional")))] if name else []
