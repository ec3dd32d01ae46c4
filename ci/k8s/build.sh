#!/usr/bin/env bash
# Builds the control plane the live Kubernetes tests start, once per machine:
#   kube-apiserver, kube-scheduler, kube-controller-manager  from k8s.io/kubernetes (ci/k8s/go.mod)
#   kwok                                                     from sigs.k8s.io/kwok
#   etcd                                                     Debian's etcd-server package
#   kwok-stages.yaml  kwok's own published "fast" node and pod stages (kwok has none built in),
#                     taken from the module download, not kept in this repository
# into $LLMDIAG_K8S_DIR (default /opt/llmdiag-k8s/<release>/bin). A folder that already holds every
# binary is reused as it is. Prints the folder's path on its last line.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
release="$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' "$here/go.mod")"
kwok_version="v0.8.0"
dir="${LLMDIAG_K8S_DIR:-/opt/llmdiag-k8s/$release}"
bin="$dir/bin"
components=(kube-apiserver kube-scheduler kube-controller-manager)

have_all() {
  local name
  for name in "${components[@]}" kwok etcd; do
    [ -x "$bin/$name" ] || return 1
  done
  [ -s "$dir/kwok-stages.yaml" ]
}

if have_all; then
  echo "control plane $release already built in $bin" >&2
  echo "$bin"
  exit 0
fi

source "$here/../go-build-env.sh"  # 4.2 GB of module downloads and cache for 0.3 GB of binaries
mkdir -p "$bin"
ldflags="-s -w"

if [ ! -x "$bin/etcd" ]; then
  if ! command -v etcd >/dev/null 2>&1 && [ ! -x /usr/bin/etcd ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends etcd-server >/dev/null
  fi
  # The package may start its own etcd; the tests start theirs on free ports.
  (systemctl stop etcd || service etcd stop || true) >/dev/null 2>&1
  ln -sf "$(command -v etcd || echo /usr/bin/etcd)" "$bin/etcd"
fi

packages=()
for name in "${components[@]}"; do
  [ -x "$bin/$name" ] || packages+=("k8s.io/kubernetes/cmd/$name")
done
if [ "${#packages[@]}" -gt 0 ]; then
  echo "building ${packages[*]} at $release" >&2
  # One go build for all three: they share most packages, so each is compiled once.
  (cd "$here" && go build -ldflags="$ldflags" -o "$bin/" "${packages[@]}")
fi

if [ ! -x "$bin/kwok" ]; then
  echo "building kwok $kwok_version" >&2
  GOBIN="$bin" go install -ldflags="$ldflags" "sigs.k8s.io/kwok/cmd/kwok@$kwok_version"
fi

if [ ! -s "$dir/kwok-stages.yaml" ]; then
  kwok_src="$(go mod download -json "sigs.k8s.io/kwok@$kwok_version" | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')"
  stages="$kwok_src/kustomize/stage"
  for file in node/fast/node-initialize.yaml node/heartbeat/node-heartbeat.yaml \
              pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    cat "$stages/$file"
    echo "---"
  done > "$dir/kwok-stages.yaml.tmp"
  mv "$dir/kwok-stages.yaml.tmp" "$dir/kwok-stages.yaml"
fi

have_all
echo "$bin"
