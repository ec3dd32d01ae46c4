"""The outgoing webhook: a report's verdict POSTed as JSON to the one URL the configuration sets (a file
or the environment, never a request). The body is Slack-compatible (`text`) and carries the verdict's
fields beside it for a generic receiver. The URL is a secret (a Slack webhook's is a credential): it is
never printed, and a failure names only its host."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

TIMEOUT_S = 10.0


def message(meta: dict[str, Any], report_url: str) -> dict[str, Any]:
    verdict = meta["verdict"]
    alerts = ", ".join(sorted({a["alertname"] for a in meta.get("alerts", []) if a["alertname"]}))
    about = f" for {alerts}" if alerts else ""
    text = f"llmdiag {verdict['status']}{about}: {verdict['summary']} ({report_url})"
    return {
        "text": text,
        "report": meta["id"],
        "trigger": meta["trigger"],
        "verdict": verdict,
        "exit_code": meta["exit_code"],
        "scope": meta.get("scope", {}),
        "fingerprints": [a["fingerprint"] for a in meta.get("alerts", [])],
    }


def post(url: str, body: dict[str, Any]) -> str | None:
    """None when the receiver took it (2xx), else one line saying why not."""
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    host = urlsplit(url).hostname or "?"
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
            answer.read(64 * 1024)
            return None
    except urllib.error.HTTPError as e:
        return f"the webhook at {host} answered {e.code}"
    except (OSError, ValueError) as e:
        return f"the webhook at {host} could not be reached ({type(e).__name__})"


def read_url(path: str | None, env_value: str | None) -> str | None:
    """The webhook URL from its file (first line) or the environment; a scheme other than http(s) is refused."""
    url = None
    if path:
        with open(path, encoding="utf-8") as f:
            url = f.readline().strip()
    elif env_value:
        url = env_value.strip()
    if url and urlsplit(url).scheme not in ("http", "https"):
        raise ValueError("the outgoing webhook's URL must be http:// or https://")
    return url or None
