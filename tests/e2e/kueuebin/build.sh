#!/usr/bin/env bash
# Builds Kueue's manager from the Go module pinned in go.mod (served by the Go module proxy) into
# a cache folder keyed by a hash of every input, beside its CRDs and webhook manifest from the same
# module, and prints that folder. Kept apart from ../k8sbins/ (its hash keys the shared Kubernetes
# binaries): Kueue brings its own k8s.io/* versions, and changing it must not rebuild those.
# A warm cache costs nothing; a cold one builds into a temporary folder renamed into place only
# when complete, under a lock that parallel callers wait on.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export GOTOOLCHAIN=local GOFLAGS=-mod=readonly CGO_ENABLED=0

module=sigs.k8s.io/kueue
version=$(cd "$here" && go list -m -f '{{.Version}}' "$module")
key=$( { go version; cd "$here" && sha256sum go.mod go.sum build.sh; } | sha256sum | cut -c1-16)
cache=${HAMI_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hami-e2e}/kueue/$key
if [ -x "$cache/kueue" ]; then
  echo "$cache"
  exit 0
fi

mkdir -p "$(dirname "$cache")"
exec 9>"$(dirname "$cache")/.build.lock"
flock 9
if [ -x "$cache/kueue" ]; then
  echo "$cache"
  exit 0
fi

tmp=$(mktemp -d "$(dirname "$cache")/.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
(cd "$here" && go mod download "$module") >&2
source_dir=$(cd "$here" && go list -m -f '{{.Dir}}' "$module")
(cd "$here" && go build -trimpath -ldflags "-s -w -X $module/pkg/version.GitVersion=$version" \
  -o "$tmp/kueue" "$module/cmd/kueue") >&2
mkdir "$tmp/crds"
cp "$source_dir"/config/components/crd/bases/*.yaml "$tmp/crds/"
cp "$source_dir/config/components/webhook/manifests.yaml" "$tmp/webhooks.yaml"
chmod -R u+w,go+rX "$tmp"
echo "built Kueue $version in $(( $(date +%s) - start ))s" >&2
mv "$tmp" "$cache"
trap - EXIT
echo "$cache"
