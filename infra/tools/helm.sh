#!/usr/bin/env bash
# Prints the path of helm HELM_VERSION, building it first when the cache does not hold it:
# `go install helm.sh/helm/v3/cmd/helm@HELM_VERSION` from the Go module proxy (about 4 minutes on
# 2 cores, niced), into ${XDG_CACHE_HOME:-$HOME/.cache}/olstream/helm-HELM_VERSION/helm.
# Exit 3 (and one line on stderr) when it cannot: no Go; exit 1 when the build failed.
# Used by `make test` (target `tools`) and by tests/integration/deploy/test_helm_chart.py.
set -euo pipefail

version="${HELM_VERSION:-v3.21.4}"
dir="${XDG_CACHE_HOME:-$HOME/.cache}/olstream/helm-$version"
helm="$dir/helm"

# the directory is the version's (a helm built by `go install` reports only major.minor itself)
if [ -x "$helm" ]; then
  echo "$helm"
  exit 0
fi
if ! command -v go >/dev/null 2>&1; then
  echo "helm $version: not in $dir, and no Go toolchain to build it (install Go, or put a helm $version there)" >&2
  exit 3
fi
mkdir -p "$dir"
echo "building helm $version into $dir (go install, a few minutes the first time)" >&2
lock="$dir/.build.lock"
(
  flock 9
  if [ ! -x "$helm" ]; then
    # -mod=mod: helm's module is built outside a module of ours; GOFLAGS from the caller may say otherwise
    if ! GOFLAGS=-mod=mod GOBIN="$dir" nice -n 10 go install "helm.sh/helm/v3/cmd/helm@$version" >&2; then
      echo "helm $version: go install failed (is the Go module proxy reachable?)" >&2
      exit 1
    fi
  fi
) 9>"$lock"
echo "$helm"
