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

command -v go >/dev/null || { echo "build.sh: Go is needed to build helm" >&2; exit 1; }
mkdir -p "$bin"
# Module downloads and compile cache live only for this build: the binary is the cache between runs.
work="$(mktemp -d)"
export GOMODCACHE="$work/mod" GOCACHE="$work/cache"
trap 'go clean -modcache >/dev/null 2>&1; rm -rf "$work"' EXIT
export GOFLAGS="-trimpath -buildvcs=false"
export CGO_ENABLED=0

echo "building helm $version" >&2
GOBIN="$bin" go install -ldflags="-s -w" "helm.sh/helm/v4/cmd/helm@$version"
"$helm" version >&2
echo "$helm"
