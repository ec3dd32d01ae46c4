#!/bin/sh
# Builds the two peers bench/bench_live.py runs beside llmdiag, from source, outside the repository:
# k8sgpt v0.4.36 and Popeye v0.22.1, into $PEERS/bin (default /opt/llmdiag-peers/bin). Nothing fetched
# is committed. The Go module proxy serves exact versions but refuses version lists, so each module is
# downloaded at its version and built in its folder of the module cache (read-only there: -o elsewhere).
# Gentle on a shared machine: one Go thread, lowest priority. Usage: sh bench/build_peers.sh
set -eu
PEERS=${PEERS:-/opt/llmdiag-peers}
mkdir -p "$PEERS/bin" "$PEERS/logs"
export GOFLAGS=-mod=mod GOMAXPROCS=1 CGO_ENABLED=0 GOTOOLCHAIN=local
build() {  # module version binary-name
  dir=$(go mod download -json "$1@$2" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  [ -n "$dir" ] || { echo "$1@$2: download failed" >&2; return 1; }
  echo "building $1@$2 in $dir"
  # -ldflags: the version each prints, as their own release builds set it
  (cd "$dir" && nice -n 19 go build -trimpath -ldflags "$4" -o "$PEERS/bin/$3" .) \
    >"$PEERS/logs/$3.log" 2>&1 || { echo "$1@$2: build failed, see $PEERS/logs/$3.log" >&2; return 1; }
  echo "built $PEERS/bin/$3"
}
status=0
build github.com/k8sgpt-ai/k8sgpt v0.4.36 k8sgpt "-X main.version=v0.4.36" || status=1
build github.com/derailed/popeye v0.22.1 popeye "-X github.com/derailed/popeye/cmd.version=v0.22.1" || status=1
exit $status
