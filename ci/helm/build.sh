#!/usr/bin/env bash
# Builds helm, which the chart test (tests/live/test_helm_chart.py) renders deploy/helm/llmdiag with,
# once per machine: `go install helm.sh/helm/v4/cmd/helm@<version>` into $LLMDIAG_HELM_DIR (default
# /opt/llmdiag-helm/<version>/bin). A folder that already holds the binary is reused as it is.
# Prints the binary's path on its last line.
set -euo pipefail
version="v4.3.2"
bin="${LLMDIAG_HELM_DIR:-/opt/llmdiag-helm/$version}/bin"
helm="$bin/helm"

if [ -x "$helm" ]; then
  echo "helm $version already built in $bin" >&2
  echo "$helm"
  exit 0
fi

source "$(dirname "$0")/../go-build-env.sh"
mkdir -p "$bin"

echo "building helm $version" >&2
GOBIN="$bin" go install -ldflags="-s -w" "helm.sh/helm/v4/cmd/helm@$version"
"$helm" version >&2
echo "$helm"
