#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-scheduler, kubectl, the node tier's
# kubelet, kube-proxy and kube-controller-manager, helm, and Prometheus with
# promtool (Debian's build lacks Kubernetes service discovery; ours has only the Kubernetes and
# file discovery the tests use: the other cloud SDKs were most of a cold build) from the Go
# modules pinned here into a cache folder keyed by a hash of every input, and
# prints that folder. A warm cache costs nothing; a cold one builds into a
# temporary folder that is renamed into place only when complete, so an
# interrupted build never leaves a half-filled cache behind.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export GOTOOLCHAIN=local GOFLAGS=-mod=readonly CGO_ENABLED=0

k8s_version=v1.36.3
key=$( { go version; echo "$k8s_version"; cd "$here" && find . -name '*.go' -o -name 'go.mod' -o -name 'go.sum' -o -name build.sh | LC_ALL=C sort | xargs sha256sum; } | sha256sum | cut -c1-16)
cache=${HAMI_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hami-e2e}/bin/$key
if [ -x "$cache/kube-apiserver" ]; then
  echo "$cache"
  exit 0
fi

mkdir -p "$(dirname "$cache")"
exec 9>"$(dirname "$cache")/.build.lock"
flock 9   # parallel callers wait for one build instead of racing
if [ -x "$cache/kube-apiserver" ]; then
  echo "$cache"
  exit 0
fi

tmp=$(mktemp -d "$(dirname "$cache")/.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=36 -X $pkg.gitTreeState=clean"
done
start=$(date +%s)
(cd "$here" && go build -trimpath -ldflags "$ldflags" -o "$tmp/" ./cmd/...) >&2
(cd "$here/helm" && go build -trimpath -ldflags "-s -w" -o "$tmp/helm" helm.sh/helm/v3/cmd/helm) >&2
(cd "$here/prometheus" && go build -trimpath -ldflags "-s -w" -tags remove_all_sd,enable_kubernetes_sd -o "$tmp/" \
  github.com/prometheus/prometheus/cmd/prometheus github.com/prometheus/prometheus/cmd/promtool) >&2
echo "built Kubernetes $k8s_version binaries in $(( $(date +%s) - start ))s" >&2
mv "$tmp" "$cache"
trap - EXIT
echo "$cache"
