# Sourced by ci/*/build.sh before a Go build (never run alone): module downloads and the compile
# cache live in a temporary folder for this build only (GBs, against the MBs of binaries kept: the
# binaries themselves are the cache between runs), static binaries without local paths.
command -v go >/dev/null || { echo "$0: Go is needed for this build" >&2; exit 1; }
go_work="$(mktemp -d)"
export GOMODCACHE="$go_work/mod" GOCACHE="$go_work/cache"
trap 'go clean -modcache >/dev/null 2>&1; rm -rf "$go_work"' EXIT
export GOFLAGS="-trimpath -buildvcs=false"
export CGO_ENABLED=0
