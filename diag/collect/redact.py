"""Secrets out before anything is written: one layer that every writer goes through.

The Sink runs every raw file through `redact`, the manifest goes through it, and the progress lines
and one-line failures on stderr go through `redact_text`. A bundle is attached to tickets, so what
could carry a credential is replaced with "<redacted>":
- values of secret-looking names: env entries (`env`; `envFrom` holds names only), Ray runtime envs'
  `env_vars`, Ray job `metadata`, JSON and Python-literal dict keys (`{'api_key': ['sk-...']}` as vLLM
  logs its non-default args), annotations, `--api-key`-style flags, `NAME=value` / `name: value`;
- `Authorization:` headers of every scheme (Bearer, Basic, Token, Digest, AWS4-HMAC-SHA256 ...);
- URLs: the userinfo (`user:password@`, a token as the user), and query parameters of secret-looking
  names (`access_token`, `X-Amz-Signature`, `X-Amz-Credential`, `sig`, ...);
- PEM private key blocks, and the regex detectors of detect-secrets (AWS key ids, JWTs, GitHub,
  GitLab, Slack, Stripe, ... tokens) beside our own token formats (Hugging Face `hf_`, `sk-` keys);
- high-entropy values where names say nothing (env entries, `env_vars`): random-looking strings of
  16+ characters, UUIDs (GPU-..., MIG-...) excepted;
- kubeconfig credentials, and managedFields (noise);
- a Secret object's data and stringData, wherever one is (a hand-made secrets.json, a last-applied
  annotation): the collector lists Secrets as metadata only, and llmdiag reads their names alone.
JSON files stay valid JSON: they are parsed, cleaned field by field and written back (YAML files
too); JSON held in a string (the last-applied-configuration annotation, Ray's serialized runtime env)
is cleaned the same way, and YAML in text loses the block under a secret-named `name: |`.
The limits are in docs/security.md.
"""

from __future__ import annotations

import functools
import json
import math
import re
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from diag.collect import json_text

REDACTED = "<redacted>"
ARGV_FILE_SUFFIX = ".cmdline.txt"
YAML_SUFFIXES = (".yaml", ".yml")  # vllm/<server>.cmdline.txt: a process's argv, one element a line

# The rules, by the name the manifest reports.
ENV_SECRET = "env-secret-value"
CLI_FLAG = "secret-cli-flag"
BEARER = "bearer-token"
TOKEN_FORMAT = "token-format"
ASSIGNMENT = "secret-assignment"
KUBECONFIG = "kubeconfig-credential"
URL_PASSWORD = "url-password"
MANAGED_FIELDS = "managed-fields-dropped"
AUTH_HEADER = "authorization-header"
URL_QUERY = "url-secret-parameter"
PRIVATE_KEY = "private-key-block"
DETECTOR = "secret-detector"
SECRET_FIELD = "secret-field"
HIGH_ENTROPY = "high-entropy-value"
SECRET_DATA = "secret-data-dropped"
RULES = (
    ENV_SECRET, CLI_FLAG, BEARER, TOKEN_FORMAT, ASSIGNMENT, KUBECONFIG, URL_PASSWORD, MANAGED_FIELDS,
    AUTH_HEADER, URL_QUERY, PRIVATE_KEY, DETECTOR, SECRET_FIELD, HIGH_ENTROPY, SECRET_DATA,
)  # fmt: skip
_SECRET_DATA_KEYS = frozenset({"data", "stringData"})  # of a kind: Secret object

# Words that make a name secret. Whole words only: "max_num_batched_tokens" and "--tokenizer" keep
# their values, "HF_TOKEN" and "--api-key" do not.
_SECRET_WORDS = frozenset(
    {
        "token", "key", "apikey", "secret", "password", "passwd", "pass", "pwd", "credential",
        "credentials", "creds", "auth", "authorization", "cookie", "privatekey", "signature", "sig",
    }
)  # fmt: skip
# JSON keys that name a thing rather than hold a secret (secretKeyRef.key, tolerations[].key, ...)
_NAMING_KEYS = frozenset({"key"})
# dicts whose every value is an environment variable's (Ray runtime envs)
_ENV_DICT_KEYS = frozenset({"env_vars"})
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
_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s\"'<>`]+")
_URL_USERINFO = re.compile(r"^(?P<scheme>[^:]+://)(?P<userinfo>[^/?#@]+)@")
_URL_PARAM = re.compile(r"(?P<lead>[?&;](?P<name>[^=&#;]+)=)(?P<value>[^&#;]*)")
_PLAIN_USER = re.compile(r"[a-z][a-z0-9._\-]{0,31}")
_AUTH_HEADER = re.compile(
    r"(?P<lead>(?P<pre>[\"']?)(?i:\b(?:proxy-)?authorization)(?P<quote>[\"']?)[ \t]*[:=][ \t]*(?P<open>[\"']?)"
    r"(?:(?P<scheme>[A-Za-z][A-Za-z0-9\-]*)[ \t]+)?)(?P<value>[^\r\n]*)"
)
_PEM_BLOCK = re.compile(
    r"(?P<begin>-{4,5} ?BEGIN (?P<kind>[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?) ?-{4,5})"
    r"(?P<body>.*?)"
    r"(?P<end>-{4,5} ?END (?P=kind) ?-{4,5}|\Z)",
    re.DOTALL,
)
_QUOTED_KEY = re.compile(
    r"(?P<lead>(?P<q>['\"])(?P<name>[A-Za-z_][A-Za-z0-9_.\-]*)(?P=q)[ \t]*:[ \t]*)"
    r"(?P<value>'[^'\n]*'|\"[^\"\n]*\"|\[[^\]\n]*\]|[^\s,}\]]+)"
)
# `password: |` (or `>`) and the more-indented lines under it: a YAML block scalar
_YAML_BLOCK = re.compile(
    r"(?m)^(?P<lead>(?P<indent>[ \t]*)(?:- )?(?P<name>[A-Za-z_][A-Za-z0-9_.\-/]*)[ \t]*:[ \t]*[|>][-+0-9]*[ \t]*\n)"
    r"(?P<body>(?:(?P=indent)[ \t]+\S[^\n]*(?:\n|\Z)|[ \t]*\n)+)"
)
_BLOCK_INDICATOR = re.compile(r"[|>][-+0-9]*")
_UUID = re.compile(r"(?:[A-Z]{2,4}-)?[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_RANDOM_LOOKING = re.compile(r"[A-Za-z0-9+=_\-]{16,}")
# a flag starts a word: the "-Llama-3-8B-Instruct" of a model name is none, and must not take the
# `--api-key` after it for its value
_FLAG = re.compile(
    r"(?<![^\s\"'=(\[,])(?P<flag>--?[A-Za-z][A-Za-z0-9_\-]*)(?P<sep>=|[ \t]+)(?P<value>\"[^\"]*\"|'[^']*'|[^\s\"']+)"
)
_ASSIGNMENT = re.compile(
    r"(?P<name>\b[A-Za-z_][A-Za-z0-9_.\-]*)(?P<sep>[ \t]*[=:][ \t]*)(?P<value>\"[^\"]*\"|'[^']*'|(?!//)[^\s,;&\"'}\]]+)"
)
_KUBECONFIG_LINE = re.compile(
    r"(?m)^(?P<lead>[ \t\-]*\"?(?:"
    + "|".join(map(re.escape, sorted(_KUBECONFIG_FIELDS)))
    + r")\"?[ \t]*:[ \t]*)(?P<value>\S.*)$"
)


@functools.lru_cache(maxsize=1 << 14)  # JSON keys repeat: every object of a list has the same ones
def secret_name(name: str, last_word_only: bool = False) -> bool:
    """Does a variable or flag name look like it holds a secret? ("HF_TOKEN", "--api-key", "apiKey")."""
    words = [w.lower() for w in _WORD_SPLIT.split(name) if w]
    if not words:
        return False
    return words[-1] in _SECRET_WORDS if last_word_only else any(w in _SECRET_WORDS for w in words)


class Redactor:
    """`redact` that also counts which rules fired, for the manifest."""

    def __init__(self, per_item: PerItem | None = None) -> None:
        self.applied: Counter[str] = Counter()
        self._lock = threading.Lock()  # collectors write, and so redact, from several threads at once
        self._per_item = per_item

    def __call__(self, rel_path: str, raw: bytes) -> bytes:
        found: Counter[str] = Counter()
        cleaned = _redact_file(rel_path, raw, found)
        with self._lock:
            self.applied.update(found)
        return cleaned

    def document(self, rel_path: str, document: Any) -> bytes:
        """The bytes calling it on `document` as json_text writes it (and a line break) gives, without
        writing the document out and reading it back first: a fleet's pods.json and events.json."""
        items = document.get("items") if isinstance(document, dict) else None
        if isinstance(items, list):
            return self._list(rel_path, document, items)
        found: Counter[str] = Counter()
        cleaned = _clean_json(document, found)
        with self._lock:
            self.applied.update(found)
        if not any(found.values()):
            return (json_text.dumps(document) + "\n").encode()
        return _cleaned_json_bytes(cleaned)

    def _list(self, rel_path: str, document: dict, items: list) -> bytes:
        """What `document` gives above, made item by item: with `per_item` (serve's watched copies), an
        item is cleaned once for as long as it is unchanged."""
        lines = self._per_item(f"redacted {rel_path}", items, _item_lines) if self._per_item else _item_lines(items)
        found: Counter[str] = Counter()
        fields = _clean_object({k: v for k, v in document.items() if k != "items"}, found)
        for _, hits in lines:
            for rule, count in hits:
                found[rule] += count
        with self._lock:
            self.applied.update(found)
        ordered = {k: None if k == "items" else fields[k] for k in document if k == "items" or k in fields}
        if not any(found.values()):
            return (json_text.with_item_lines(ordered, [line for line, _ in lines]) + "\n").encode()
        # a file with something cleaned is written as UTF-8: an unchanged item's escapes are undone too
        text = [
            json.dumps(json_text.item_object(item), ensure_ascii=False) if not hits and "\\u" in line else line
            for item, (line, hits) in zip(items, lines, strict=True)
        ]
        return json_text.with_item_lines(ordered, text, ensure_ascii=False).encode("utf-8", "surrogateescape")


Hits = tuple[tuple[str, int], ...]  # (rule, count): what cleaning one item replaced
PerItem = Callable[[str, list, Callable[[list], list[tuple[str, Hits]]]], list[tuple[str, Hits]]]


def _item_lines(items: list) -> list[tuple[str, Hits]]:
    """Each item's line of JSON, cleaned, and what cleaning it replaced."""
    lines = []
    for item in map(json_text.item_object, items):
        found: Counter[str] = Counter()
        cleaned = _clean_json(item, found)
        if any(found.values()):
            lines.append((json.dumps(cleaned, ensure_ascii=False), tuple(found.items())))
        else:
            lines.append((json.dumps(item), ()))
    return lines


def redact(rel_path: str, raw: bytes) -> bytes:
    """The bytes of bundle file `rel_path` with secrets replaced by "<redacted>"."""
    return _redact_file(rel_path, raw, Counter())


def redact_object(value: Any) -> Any:
    """A copy of a JSON value as a JSON file of it is cleaned (a list's item as `Redactor.document`
    writes it): the objects parsed from it are those the bundle's file gives."""
    return _clean_json(value, Counter())


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
            hits.update(found)
            if not any(found.values()):  # (a rule that looked and found nothing counts 0)
                return raw  # nothing to hide: the file stays byte for byte as the source sent it
            return _cleaned_json_bytes(cleaned)
    if rel_path.endswith(YAML_SUFFIXES):
        cleaned_yaml = _redact_yaml(text, hits)
        if cleaned_yaml is not None:
            return cleaned_yaml.encode("utf-8", "surrogateescape")
    if rel_path.endswith(ARGV_FILE_SUFFIX):  # one argument a line: `--api-key` and its value are apart
        text = "\n".join(_clean_argv(text.split("\n"), hits))
    elif (cleaned_lines := _redact_lines(text, hits)) is not None:
        return cleaned_lines.encode("utf-8", errors="surrogateescape")
    return redact_text(text, hits).encode("utf-8", errors="surrogateescape")


# Line by line: a /metrics answer (Prometheus' text format: comments, and a series with its value and
# a timestamp after it) and nvidia-smi's XML (an element, its text and its end on one line; a text
# alone, "None", between two lines of tags). Each line's text is closed on its line (by the line's end
# in a comment, by a tag in XML), so no rule's match needs two lines of them; a value holds no secret.
_COMMENT_LINE = re.compile(r"#[^\n]*|[ \t]*")
_NUMBER = r"[+-]?(?:[Ii]nf|NaN|(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)"
_SAMPLE_LINE = re.compile(
    rf"(?P<series>[a-zA-Z_:][a-zA-Z0-9_:]*(?:\{{.*\}})?)(?P<value>[ \t]+{_NUMBER}(?:[ \t]+-?[0-9]+)?)"
)
_XML_LINE = re.compile(r"[ \t]*(?:<[!?][^<>]*>|</?[A-Za-z_][^<>]*>(?:[^<>]*</[A-Za-z_][^<>]*>)?)[ \t]*")
_XML_TEXT_LINE = re.compile(r"[ \t]*[^<>#\s][^<>]*")


def _redact_lines(text: str, hits: Counter[str]) -> str | None:
    """`redact_text` of a /metrics answer or nvidia-smi's XML, line by line: each line (a series' less
    its value) is cleaned once per process, for the same lines come back in every scrape and every
    run of nvidia-smi (a fleet's took a tenth of a serve cycle). None: a line of another shape, or a
    private key block (whose lines may be comments)."""
    if "PRIVATE KEY" in text:
        return None
    cleaned = []
    before = ""  # the shape of the line before: a text alone must have a line of tags on each side
    for line in text.split("\n"):
        if (sample := _SAMPLE_LINE.fullmatch(line)) is not None and before != "text":
            series, found = _redacted_line(sample["series"])
            cleaned.append(series + sample["value"])
            before = "sample"
        else:
            if _XML_LINE.fullmatch(line) is not None:
                before = "xml"
            elif before != "text" and _COMMENT_LINE.fullmatch(line) is not None:
                before = "comment"
            elif before == "xml" and _XML_TEXT_LINE.fullmatch(line) is not None:
                before = "text"
            else:
                return None
            new, found = _redacted_line(line)
            cleaned.append(new)
        for rule, count in found:
            hits[rule] += count
    return "\n".join(cleaned)


@functools.lru_cache(maxsize=1 << 14)
def _redacted_line(line: str) -> tuple[str, Hits]:
    found: Counter[str] = Counter()
    return redact_text(line, found), tuple(found.items())


def _cleaned_json_bytes(cleaned: Any) -> bytes:
    return json_text.dumps(cleaned, ensure_ascii=False).encode("utf-8", "surrogateescape")


def _redact_yaml(text: str, hits: Counter[str]) -> str | None:
    """A YAML file cleaned as data, as JSON is (None: not YAML after all, clean it as text)."""
    import yaml

    try:
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError:
        return None
    found: Counter[str] = Counter()
    cleaned = [_clean_json(d, found) for d in documents]
    hits.update(found)
    if not any(found.values()):
        return text
    return yaml.safe_dump_all(cleaned, sort_keys=False, allow_unicode=True)


def redact_text(text: str, hits: Counter[str] | None = None) -> str:
    """Apply the text rules to a log, a command line, or any string."""
    counter = hits if hits is not None else Counter()
    text = _sub(
        _PEM_BLOCK,
        text,
        counter,
        PRIVATE_KEY,
        lambda m: f"{m['begin']}\n{REDACTED}\n{m['end']}" if m["body"].strip() else None,
    )
    text = _sub(_YAML_BLOCK, text, counter, ASSIGNMENT, _yaml_block)
    text = _sub(_KUBECONFIG_LINE, text, counter, KUBECONFIG, lambda m: f"{m['lead']}{REDACTED}")
    text = _sub(_AUTH_HEADER, text, counter, AUTH_HEADER, _authorization)
    text = _URL.sub(lambda m: _clean_url(m[0], counter), text)
    text = _sub(_BEARER, text, counter, BEARER, lambda m: f"{m[1]}{m[2]}{REDACTED}")
    text = _sub(_TOKEN_FORMATS, text, counter, TOKEN_FORMAT, lambda m: REDACTED)
    text = _detected(text, counter)
    text = _sub(_QUOTED_KEY, text, counter, ASSIGNMENT, _quoted_key)
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


def _yaml_block(m: re.Match[str]) -> str | None:
    if not secret_name(m["name"], last_word_only=True) or m["body"].strip() == REDACTED:
        return None
    return f"{m['lead']}{m['indent']}  {REDACTED}\n"


def _authorization(m: re.Match[str]) -> str | None:
    """Everything after the scheme word: up to the quote that opened the value, else to the line's end."""
    value = m["value"]
    closing = m["open"] or m["quote"] or m["pre"]
    end = value.find(closing) if closing else -1
    secret, rest = (value[:end], value[end:]) if end >= 0 else (value, "")
    if not secret.strip() or secret.strip() == REDACTED:
        return None
    return f"{m['lead']}{REDACTED}{rest}"


def _clean_url(url: str, hits: Counter[str]) -> str:
    """user:password@ and token@ userinfo; query parameters of secret names or detected values."""
    userinfo = _URL_USERINFO.match(url)
    if userinfo is not None:
        user, colon, password = userinfo["userinfo"].partition(":")
        if colon and password and password != REDACTED:
            hits[URL_PASSWORD] += 1
            url = f"{userinfo['scheme']}{user}:{REDACTED}@{url[userinfo.end() :]}"
        elif not colon and user != REDACTED and not _PLAIN_USER.fullmatch(user):
            hits[URL_PASSWORD] += 1
            url = f"{userinfo['scheme']}{REDACTED}@{url[userinfo.end() :]}"

    def param(m: re.Match[str]) -> str:
        value = m["value"]
        if value in ("", REDACTED) or not (secret_name(m["name"]) or _detector_spans(value)):
            return m[0]
        hits[URL_QUERY] += 1
        return f"{m['lead']}{REDACTED}"

    return _URL_PARAM.sub(param, url)


def _quoted_key(m: re.Match[str]) -> str | None:
    """{'api_key': ['sk-...']} as Python prints a dict: the value of a secret-named key, whatever its type."""
    value = m["value"]
    if not secret_name(m["name"], last_word_only=True) or REDACTED in value or value in ("None", "''", '""', "[]"):
        return None
    return f"{m['lead']}'{REDACTED}'"


def _secret_flag(m: re.Match[str]) -> bool:
    return secret_name(m["flag"].lstrip("-")) and m["value"] != REDACTED and not m["value"].startswith("-")


def _secret_assignment(m: re.Match[str]) -> bool:
    if m["name"].lower().endswith("authorization"):
        return False  # the Authorization rule's, which keeps the scheme word
    value = m["value"].strip("\"'")
    if _BLOCK_INDICATOR.fullmatch(value):
        return False  # `password: |`: the block under it is the YAML block rule's
    # "Authorization: Bearer x" is the bearer rule's; the scheme word itself is no secret
    return (
        secret_name(m["name"], last_word_only=True)
        and value not in (REDACTED, "")
        and value.lower() not in ("bearer", "basic")
    )


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


# ----------------------------------------------------------------------------- detect-secrets

# IPPublicDetector: an address is no secret. KeywordDetector and the keyword-led Cloudant, IBM and
# SoftLayer ones: the name rules above know the shapes of kubectl, vLLM and Ray output (and those four
# cost more than all the others together on a log). PrivateKeyDetector matches the BEGIN line only:
# the PEM block rule replaces the key itself and keeps the line that says what it was.
_SKIPPED_DETECTORS = frozenset(
    {
        "IPPublicDetector", "KeywordDetector", "PrivateKeyDetector", "CloudantDetector", "IbmCloudIamDetector",
        "IbmCosHmacDetector", "SoftlayerDetector",
    }
)  # fmt: skip
_DELIMITERS = " \t\r\n=:\"'"


@functools.lru_cache(maxsize=1)
def _detectors() -> tuple[re.Pattern[str], ...]:
    """The denylist regexes of every regex-based detector detect-secrets ships (diag.collect.detector_cache)."""
    from diag.collect import detector_cache

    return tuple(re.compile(pattern, flags) for pattern, flags in detector_cache.denylist(_SKIPPED_DETECTORS))


@functools.lru_cache(maxsize=1)
def _any_detector() -> re.Pattern[str]:
    """All the detectors in one pattern: one search tells most strings apart (a JSON file is mostly
    short strings no detector matches), before each detector is run on the few that remain."""
    flags = {re.IGNORECASE: "i", re.MULTILINE: "m", re.DOTALL: "s", re.VERBOSE: "x"}
    parts = [f"(?{''.join(v for k, v in flags.items() if p.flags & k) or '-i'}:{p.pattern})" for p in _detectors()]
    return re.compile("|".join(parts))


def _detector_spans(text: str) -> list[tuple[int, int]]:
    """Where a detector sees a secret: its capture group when it has one, else the match less delimiters."""
    spans: list[tuple[int, int]] = []
    if _any_detector().search(text) is None:
        return spans
    for pattern in _detectors():
        for m in pattern.finditer(text):
            start, end = m.span(1) if pattern.groups else m.span()
            while start < end and text[start] in _DELIMITERS:
                start += 1
            while end > start and text[end - 1] in _DELIMITERS:
                end -= 1
            if end > start and text[start:end] != REDACTED:
                spans.append((start, end))
    return spans


def _detected(text: str, hits: Counter[str]) -> str:
    spans = _merged(_detector_spans(text))
    for start, end in reversed(spans):
        text = text[:start] + REDACTED + text[end:]
    hits[DETECTOR] += len(spans)
    return text


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def high_entropy(value: str) -> bool:
    """A random-looking string of 16+ characters (letters of both cases and digits, close to the
    highest Shannon entropy its length allows); UUIDs such as GPU-6d0e... are ids, not secrets."""
    if not _RANDOM_LOOKING.fullmatch(value) or _UUID.fullmatch(value):
        return False
    if not (any(c.isdigit() for c in value) and any(c.islower() for c in value) and any(c.isupper() for c in value)):
        return False
    counts = Counter(value)
    entropy = -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())
    return entropy >= 0.85 * math.log2(min(len(value), 64))


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
        if type(v) is str and _ordinary_key(k):  # most values (a fleet has millions): the text rules alone
            out[k], found = _cleaned_string(v)
            if found is not _NOTHING_DETECTED:  # (a zero count changes nothing: the manifest lists rules that replaced)
                for rule, count in found:
                    hits[rule] += count
            continue
        if k == "managedFields":
            hits[MANAGED_FIELDS] += 1
            continue
        if k in _SECRET_DATA_KEYS and obj.get("kind") == "Secret":
            hits[SECRET_DATA] += 1
            continue
        if isinstance(v, str):  # most values: what follows for a string, inlined (a fleet has millions)
            if k in _KUBECONFIG_FIELDS and v and v != REDACTED:
                hits[KUBECONFIG] += 1
                out[k] = REDACTED
            elif _secret_field(k, v):
                hits[SECRET_FIELD] += 1
                out[k] = REDACTED
            else:
                out[k], found = _cleaned_string(v)
                for rule, count in found:
                    hits[rule] += count
            continue
        if isinstance(v, dict) and (k in _ENV_DICT_KEYS or (k == "metadata" and "entrypoint" in obj)):
            v = _clean_env_dict(v, hits)  # a runtime env's env_vars; a Ray job's metadata
        out[k] = _clean_json(v, hits, key=k)
    return out


@functools.lru_cache(maxsize=1 << 14)
def _ordinary_key(name: str) -> bool:
    """A key whose string value is cleaned by the text rules alone: not managedFields, a kubeconfig
    credential or a secret's name (what _clean_object looks at first)."""
    return (
        name != "managedFields"
        and name not in _KUBECONFIG_FIELDS
        and (name in _NAMING_KEYS or not secret_name(name, last_word_only=True))
    )


def _secret_field(name: str, value: str) -> bool:
    """ "example.com/api-token": "..." (an annotation), "password": "...": a secret-named key's string."""
    return value not in ("", REDACTED) and name not in _NAMING_KEYS and secret_name(name, last_word_only=True)


def _clean_env_dict(env: dict, hits: Counter[str]) -> dict:
    """{"HF_TOKEN": "...", "OMP_NUM_THREADS": "8"}: values of secret names, or random-looking ones, go."""
    out: dict = {}
    for name, value in env.items():
        if isinstance(value, str) and value not in ("", REDACTED) and (secret_name(str(name)) or high_entropy(value)):
            hits[ENV_SECRET if secret_name(str(name)) else HIGH_ENTROPY] += 1
            out[name] = REDACTED
        else:
            out[name] = value
    return out


def _clean_env_entry(entry: Any, hits: Counter[str]) -> Any:
    """{"name": "HF_TOKEN", "value": "..."} -> value redacted; valueFrom references stay (no secret in them)."""
    if not (isinstance(entry, dict) and isinstance(entry.get("name"), str) and isinstance(entry.get("value"), str)):
        return entry
    if entry["value"] in ("", REDACTED):
        return entry
    if secret_name(entry["name"]):
        hits[ENV_SECRET] += 1
        return {**entry, "value": REDACTED}
    if high_entropy(entry["value"]):
        hits[HIGH_ENTROPY] += 1
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
    cleaned, found = _cleaned_string(text)
    for rule, count in found:
        hits[rule] += count
    return cleaned


@functools.lru_cache(maxsize=1 << 16)
def _cleaned_string(text: str) -> tuple[str, tuple[tuple[str, int], ...]]:
    """A JSON string value cleaned, and the rules that fired on it, worked out once per distinct value:
    a fleet's objects repeat theirs (5,000 replicas of one template; one image, one message), and
    each value runs a dozen patterns."""
    hits: Counter[str] = Counter()
    stripped = text.strip()
    if stripped.startswith(("{", "[")) and stripped.endswith(("}", "]")):
        try:
            embedded = json.loads(stripped)
        except ValueError:
            pass
        else:  # e.g. kubectl.kubernetes.io/last-applied-configuration: a whole manifest, env included
            cleaned = json.dumps(_clean_json(embedded, hits), ensure_ascii=False) + (
                "\n" if text.endswith("\n") else ""
            )
            return cleaned, tuple(hits.items())
    if _PLAIN_WORD.fullmatch(text) and _TOKEN_FORMATS.search(text) is None and not _detector_spans(text):
        return text, _NOTHING_DETECTED
    return redact_text(text, hits), tuple(hits.items())


# A name, a uid, a version: no space, quote, "=", ":" or "/", so of the text rules only the token
# formats and the detectors can match it (every other rule needs one of those); redact_text on it
# changes nothing then, and counts only the detectors' zero (diag/collect/test_redact_plain.py).
_PLAIN_WORD = re.compile(r"[A-Za-z0-9._\-]*")
_NOTHING_DETECTED = ((DETECTOR, 0),)
