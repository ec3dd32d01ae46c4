"""The helm binary ci/helm/build.sh builds: $LLMDIAG_HELM, else /opt/llmdiag-helm/<version>/bin/helm."""

from __future__ import annotations

import os
import re
from pathlib import Path

from live_services import ServiceUnavailable

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "ci" / "helm" / "build.sh"


def _version() -> str:
    found = re.search(r'^version="(v[0-9.]+)"$', BUILD.read_text(), re.MULTILINE)
    if found is None:
        raise RuntimeError(f"{BUILD} names no helm version")
    return found.group(1)


def helm_binary() -> Path:
    """Raises ServiceUnavailable when helm is not built here."""
    path = Path(os.environ.get("LLMDIAG_HELM") or f"/opt/llmdiag-helm/{_version()}/bin/helm")
    if not os.access(path, os.X_OK):
        raise ServiceUnavailable(f"no helm at {path} (run ci/helm/build.sh or set LLMDIAG_HELM)")
    return path
