"""Secrets out before anything is written: the Sink runs every raw file through `redact`.

A bundle is attached to tickets, so what could carry a credential is replaced with "<redacted>":
env values whose names look secret, `--api-key`-style flag values, bearer tokens, well-known token
formats (Hugging Face `hf_`, OpenAI `sk-`, GitHub, AWS key ids, JWTs such as service-account tokens),
`NAME=value` assignments of secret-looking names, kubeconfig credentials, passwords in URLs, and
managedFields (noise).
JSON files stay valid JSON: they are parsed, cleaned field by field and written back; JSON held in a
string (the last-applied-configuration annotation) is cleaned the same way.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

REDACTED = "<redacted>"
ARGV_FILE_SUFFIX = ".cmdline.txt"  # vllm/<server>.cmdline.txt: a process's argv, one element a line

# The rules, by the name the manifest reports.
ENV_SECRET = "env-secret-value"
CLI_FLAG = "secret-cli-flag"
BEARER = "bearer-token"
TOKEN_FORMAT = "token-format"
ASSIGNMENT = "secret-assignment"
KUBECONFIG = "kubeconfig-credential"
URL_PASSWORD = "url-password"
MANAGED_FIELDS = "managed-fields-dropped"
RULES = (ENV_SECRET, CLI_FLAG, BEARER, TOKEN_FORMAT, ASSIGNMENT, KUBECONFIG, URL_PASSWORD, MANAGED_FIELDS)

# Words that make a name secret. Whole words only: "max_num_batched_tokens" and "--tokenizer" keep
# their values, "HF_TOKEN" and "--api-key" do not.
_SECRET_WORDS = frozenset(
    {
        "token", "key", "apikey", "secret", "password", "passwd", "pass", "pwd", "credential",
        "credentials", "auth", "authorization", "cookie", "privatekey",
    }
)  # fmt: skip
_KUBECONFIG_FIELDS = frozenset(
    {"client-key-data", "client-certificate-data", "token", "password", "id-token", "refresh-token", "access-token"}
)
_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")

_BEARER = re.compile(r"(?i)\b(bearer|basic)(\s+)[A-Za-z0-9\-._~+/]{8,}=*")
_TOKEN_FORMATS = re.compile(
    r"\bhf_[A-Za-z0-9]{20,}"  # Hugging Face
    r"|\bsk-(?:proj-|ant-)?[A-Za-z0-9_\-]{20,}"  # OpenAI / Anthropic style API keys
    r"|\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{30,}|\bgithub_pat_[A-Za-z0-9_]{30,}"  # GitHub
    r"|\bxox[abposr]-[A-Za-z0-9-]{10,}"  # Slack
    r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"  # AWS access key ids
    r"|\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"  # JWT (service-account tokens)
)
_URL_PASSWORD = re.compile(r"(?P<lead>\b[A-Za-z][A-Za-z0-9+.\-]*://[^/\s:@]*:)(?P<password>[^/\s@]+)@")
_FLAG = re.compile(r"(?P<flag>--?[A-Za-z][A-Za-z0-9_\-]*)(?P<sep>=|[ \t]+)(?P<value>\"[^\"]*\"|'[^']*'|[^\s\"']+)")
_ASSIGNMENT = re.compile(
    r"(?P<name>\b[A-Za-z_][A-Za-z0-9_.\-]*)(?P<sep>[ \t]*[=:][ \t]*)(?P<value>\"[^\"]*\"|'[^']*'|[^\s,;\"'}\]]+)"
)
_KUBECONFIG_LINE = re.compile(
    r"(?m)^(?P<lead>[ \t\-]*\"?(?:" + "|".join(map(re.escape, sorted(_KUBECONFIG_FIELDS))) + r")\"?[ \t]*:[ \t]*)(?P<value>\S.*)$"
)


def secret_name(name: str, last_word_only: bool = False) -> bool:
    """Does a variable or flag name look like it holds a secret? ("HF_TOKEN", "--api-key", "apiKey")."""
    words = [w.lower() for w in _WORD_SPLIT.split(name) if w]
    if not words:
        return False
    return words[-1] in _SECRET_WORDS if last_word_only else any(w in _SECRET_WORDS for w in words)


class Redactor:
    """`redact` that also counts which rules fired, for the manifest."""

    def __init__(self) -> None:
        self.applied: Counter[str] = Counter()

    def __call__(self, rel_path: str, raw: bytes) -> bytes:
        return _redact_file(rel_path, raw, self.applied)


def redact(rel_path: str, raw: bytes) -> bytes:
    """The bytes of bundle file `rel_path` with secrets replaced by "<redacted>"."""
    return _redact_file(rel_path, raw, Counter())


def _redact_file(rel_path: str, raw: bytes, hits: Counter[str]) -> bytes:
    text = raw.decode("utf-8", errors="surrogateescape")
    if rel_path.endswith(".json"):
        try:
            data = json.loads(text)
        except ValueError:
            pass  # not JSON after all: clean it as text, the loader will say what it is
        else:
            found: Counter[str] = Counter()
            cleaned = _clean_json(data, found)
            if not found:
                return raw  # nothing to hide: the file stays byte for byte as the source sent it
            hits.update(found)
            return json.dumps(cleaned, indent=4, ensure_ascii=False).encode("utf-8", "surrogateescape")
    if rel_path.endswith(ARGV_FILE_SUFFIX):  # one argument a line: `--api-key` and its value are apart
        text = "\n".join(_clean_argv(text.split("\n"), hits))
    return redact_text(text, hits).encode("utf-8", errors="surrogateescape")


def redact_text(text: str, hits: Counter[str] | None = None) -> str:
    """Apply the text rules to a log, a command line, or any string."""
    counter = hits if hits is not None else Counter()
    text = _sub(_KUBECONFIG_LINE, text, counter, KUBECONFIG, lambda m: f"{m['lead']}{REDACTED}")
    text = _sub(_URL_PASSWORD, text, counter, URL_PASSWORD, lambda m: f"{m['lead']}{REDACTED}@")
    text = _sub(_BEARER, text, counter, BEARER, lambda m: f"{m[1]}{m[2]}{REDACTED}")
    text = _sub(_TOKEN_FORMATS, text, counter, TOKEN_FORMAT, lambda m: REDACTED)
    text = _sub(
        _FLAG, text, counter, CLI_FLAG, lambda m: f"{m['flag']}{m['sep']}{REDACTED}" if _secret_flag(m) else None
    )
    return _sub(
        _ASSIGNMENT,
        text,
        counter,
        ASSIGNMENT,
        lambda m: f"{m['name']}{m['sep']}{REDACTED}" if _secret_assignment(m) else None,
    )


def _secret_flag(m: re.Match[str]) -> bool:
    return secret_name(m["flag"].lstrip("-")) and m["value"] != REDACTED and not m["value"].startswith("-")


def _secret_assignment(m: re.Match[str]) -> bool:
    value = m["value"].strip("\"'")
    # "Authorization: Bearer x" is the bearer rule's; the scheme word itself is no secret
    return secret_name(m["name"], last_word_only=True) and value not in (REDACTED, "") and value.lower() not in ("bearer", "basic")


def _sub(
    pattern: re.Pattern[str], text: str, hits: Counter[str], rule: str, replace: Callable[[re.Match[str]], str | None]
) -> str:
    def one(m: re.Match[str]) -> str:
        new = replace(m)
        if new is None or new == m[0]:
            return m[0]
        hits[rule] += 1
        return new

    return pattern.sub(one, text)


# ----------------------------------------------------------------------------- JSON


def _clean_json(value: Any, hits: Counter[str], key: str | None = None) -> Any:
    if isinstance(value, dict):
        return _clean_object(value, hits)
    if isinstance(value, list):
        if key in ("command", "args"):
            value = _clean_argv(value, hits)
        elif key == "env":
            value = [_clean_env_entry(v, hits) for v in value]
        return [_clean_json(v, hits) for v in value]
    if isinstance(value, str):
        return _clean_string(value, hits)
    return value


def _clean_object(obj: dict, hits: Counter[str]) -> dict:
    out: dict = {}
    for k, v in obj.items():
        if k == "managedFields":
            hits[MANAGED_FIELDS] += 1
            continue
        if k in _KUBECONFIG_FIELDS and isinstance(v, str) and v and v != REDACTED:
            hits[KUBECONFIG] += 1
            out[k] = REDACTED
            continue
        out[k] = _clean_json(v, hits, key=k)
    return out


def _clean_env_entry(entry: Any, hits: Counter[str]) -> Any:
    """{"name": "HF_TOKEN", "value": "..."} -> value redacted; valueFrom references stay (no secret in them)."""
    if (
        isinstance(entry, dict)
        and isinstance(entry.get("name"), str)
        and isinstance(entry.get("value"), str)
        and secret_name(entry["name"])
        and entry["value"] not in ("", REDACTED)
    ):
        hits[ENV_SECRET] += 1
        return {**entry, "value": REDACTED}
    return entry


def _clean_argv(argv: list, hits: Counter[str]) -> list:
    """["--api-key", "X"] -> ["--api-key", "<redacted>"]; "--api-key=X" is left to the text rules."""
    out = list(argv)
    for i in range(len(out) - 1):
        flag, value = out[i], out[i + 1]
        if (
            isinstance(flag, str)
            and isinstance(value, str)
            and flag.startswith("-")
            and "=" not in flag
            and secret_name(flag.lstrip("-"))
            and not value.startswith("-")
            and value != REDACTED
        ):
            hits[CLI_FLAG] += 1
            out[i + 1] = REDACTED
    return out


def _clean_string(text: str, hits: Counter[str]) -> str:
    stripped = text.strip()
    if stripped.startswith(("{", "[")) and stripped.endswith(("}", "]")):
        try:
            embedded = json.loads(stripped)
        except ValueError:
            pass
        else:  # e.g. kubectl.kubernetes.io/last-applied-configuration: a whole manifest, env included
            return json.dumps(_clean_json(embedded, hits), ensure_ascii=False) + ("\n" if text.endswith("\n") else "")
    return redact_text(text, hits)
