#!/usr/bin/env bash
# Builds the node tier's images with buildah (no Docker daemon) and saves each as a
# docker-archive for `ctr images import`, in a cache folder keyed by every input. Prints one
# archive path a line. Usage: build.sh BIN_DIR PROTO_DIR (the folder tests/e2e/k8sbins/build.sh
# prints; the kubelet's device-plugin API compiled for Python), with HAMI_E2E_GRPCIO and
# HAMI_E2E_PROTOBUF the versions it was compiled with.
#   base            debootstrap of a minimal Debian with python3: the Dockerfile's PYTHON_IMAGE
#   hami-py:0.1.0   the repository's Dockerfile, built with the README's buildah command, also
#                   under the chart's default reference (docker.io/library/hami-py:0.1.0, which
#                   an install without image.repository, Lab 14's, runs)
#   kube-scheduler  the built binary, tagged as the chart's default reference
#   pause, workload FROM scratch + Debian's static busybox, under the names the chart and the
#                   labs use (registry.k8s.io/pause:3.10, Lab 14's and Lab 12's CUDA images)
#   standin         a test double for HAMi's image projecthami/hami:v2.10.0, under that name
#                   (standin/Containerfile): its device plugin, monitor and vgpu-init.sh, a
#                   placeholder libvgpu.so where HAMi keeps it (the chart's libvgpuInstaller
#                   copies it; nothing loads it); GKE's plugin stand-in runs from it too
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
bin_dir=$1
proto_dir=$2
cache=${HAMI_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hami-e2e}/images
buildah=(buildah --root "$cache/storage" --runroot "$cache/run" --storage-driver vfs)
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
work=$(mktemp -d "$cache/.work.XXXXXX")
trap 'rm -rf "$work"' EXIT
hash() { sha256sum | cut -c1-16; }
# A folder's key: its files' names and contents, not where the scratch folder happens to be.
hash_dir() { (cd "$1" && sha256sum -- * | hash); }

# save NAME KEY REF CONTEXT [bud args...]: build CONTEXT once per KEY, print the archive.
save() {
  local name=$1 key=$2 ref=$3 context=$4; shift 4
  local archive="$cache/$name-$key.tar"
  if [ ! -s "$archive" ]; then
    local start=$(date +%s)
    "${buildah[@]}" bud --isolation chroot --layers=false "$@" -t "$ref" "$context" >&2
    "${buildah[@]}" push "$ref" "docker-archive:$work/image.tar:$ref" >&2
    mv "$work/image.tar" "$archive"
    # Keep one build per image: older archives and the untagged images they came from go.
    find "$cache" -maxdepth 1 -name "$name-*.tar" ! -name "$name-$key.tar" -delete
    "${buildah[@]}" rmi --prune >/dev/null 2>&1 || true
    echo "built $ref in $(( $(date +%s) - start ))s" >&2
  fi
  echo "$archive"
}

# base: Debian's python3 and pip, like python:3.11-slim (pip may install into it: no
# EXTERNALLY-MANAGED marker), plus this machine's CA bundle and pip settings, so that pip inside
# the build reaches the package index the way pip on this machine does.
suite=bookworm packages=python3,python3-venv,python3-pip,python-is-python3,ca-certificates
base_key=$(echo "$suite $packages $(cat /etc/ssl/certs/ca-certificates.crt /etc/pip.conf 2>/dev/null | sha256sum)" | hash)
base_ref=localhost/hami-e2e-base:$base_key
if ! "${buildah[@]}" inspect --type image "$base_ref" >/dev/null 2>&1; then
  start=$(date +%s)
  debootstrap --variant=minbase --include="$packages" "$suite" "$work/rootfs" \
    "${HAMI_E2E_DEBIAN_MIRROR:-http://deb.debian.org/debian}" >&2
  rm -rf "$work"/rootfs/var/cache/apt/archives/*.deb "$work"/rootfs/var/lib/apt/lists/* \
    "$work"/rootfs/usr/lib/python3*/EXTERNALLY-MANAGED
  cp /etc/ssl/certs/ca-certificates.crt "$work/rootfs/etc/ssl/certs/ca-certificates.crt"
  printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' > "$work/rootfs/etc/pip.conf"
  tar -C "$work/rootfs" -cf "$work/rootfs.tar" .
  rm -rf "$work/rootfs"
  printf 'FROM scratch\nADD rootfs.tar /\nCMD ["python3"]\n' > "$work/Containerfile"
  "${buildah[@]}" bud --isolation chroot -t "$base_ref" -f "$work/Containerfile" "$work" >&2
  rm -f "$work/rootfs.tar"
  echo "built $base_ref in $(( $(date +%s) - start ))s" >&2
  "${buildah[@]}" images --format '{{.Name}}:{{.Tag}}' | grep '^localhost/hami-e2e-base:' |
    grep -v ":$base_key\$" | xargs -r "${buildah[@]}" rmi >/dev/null || true
fi

# alias NAME KEY SRC DEST: the image SRC (built above) under the name DEST too.
alias_image() {
  local name=$1 key=$2 src=$3 dest=$4
  local archive="$cache/$name-$key.tar"
  if [ ! -s "$archive" ]; then
    "${buildah[@]}" tag "$src" "$dest"
    "${buildah[@]}" push "$dest" "docker-archive:$work/image.tar:$dest" >&2
    mv "$work/image.tar" "$archive"
    find "$cache" -maxdepth 1 -name "$name-*.tar" ! -name "$name-$key.tar" -delete
  fi
  echo "$archive"
}

# hami-py: the README's command, on that base.
context_key=$(cd "$repo" && find Dockerfile .dockerignore pyproject.toml README.md hami webhook scheduler certs \
  -type f ! -name '*.pyc' | LC_ALL=C sort | xargs sha256sum | { cat; echo "$base_ref"; } | hash)
hami_archive=$(save hami-py "$context_key" localhost/hami-py:0.1.0 "$repo" --build-arg "PYTHON_IMAGE=$base_ref")
echo "$hami_archive"
# The archive may outlive the storage it was built in: the stand-in below builds on the image.
"${buildah[@]}" inspect --type image localhost/hami-py:0.1.0 >/dev/null 2>&1 ||
  "${buildah[@]}" pull "docker-archive:$hami_archive" >&2
alias_image hami-py-default "$context_key" localhost/hami-py:0.1.0 docker.io/library/hami-py:0.1.0

# kube-scheduler, pause and workload: static binaries in FROM scratch images.
mkdir -p "$work/scheduler" "$work/busybox"
cp "$bin_dir/kube-scheduler" "$work/scheduler/"
printf 'FROM scratch\nCOPY kube-scheduler /usr/local/bin/kube-scheduler\nENV PATH=/usr/local/bin\nUSER 65532:65532\n' \
  > "$work/scheduler/Containerfile"
save kube-scheduler "$(hash_dir "$work/scheduler")" registry.k8s.io/kube-scheduler:v1.36.3 "$work/scheduler"
cp /bin/busybox "$work/busybox/"
printf 'FROM scratch\nCOPY busybox /bin/busybox\nRUN ["/bin/busybox", "--install", "-s", "/bin"]\nENV PATH=/bin\nCMD ["sleep", "infinity"]\n' \
  > "$work/busybox/Containerfile"
busybox_key=$(hash_dir "$work/busybox")
save pause "$busybox_key" localhost/hami-e2e-pause:1 "$work/busybox"
save chart-pause "$busybox_key" registry.k8s.io/pause:3.10 "$work/busybox"
save workload "$busybox_key" docker.io/nvidia/cuda:12.4.1-base-ubuntu22.04 "$work/busybox"
save lab12-workload "$busybox_key" docker.io/nvidia/cuda:12.4.1-devel-ubuntu22.04 "$work/busybox"
# standin: HAMi's image's commands over tests/e2e/fake_device_plugin.py and what it imports.
standin="$work/standin"
cp -r "$here/standin" "$standin"
mkdir -p "$standin/tests/e2e" "$standin/tests/reference" "$standin/tests/builders" "$standin/proto"
for f in __init__ families_samples; do
  cp "$repo/tests/$f.py" "$standin/tests/"
done
# The builders' package without its chart helpers (they need helm and PyYAML, not in the image).
cp "$repo/tests/builders/__init__.py" "$standin/tests/builders/"
for f in __init__ fake_device_plugin nodesim nodesim_mig nodespec; do
  cp "$repo/tests/e2e/$f.py" "$standin/tests/e2e/"
done
for f in __init__ geometries hami_v210_mig; do
  cp "$repo/tests/reference/$f.py" "$standin/tests/reference/"
done
cp "$proto_dir"/api_pb2.py "$proto_dir"/api_pb2_grpc.py "$standin/proto/"
standin_key=$( (cd "$standin" && find . -type f | LC_ALL=C sort | xargs sha256sum;
  echo "$context_key ${HAMI_E2E_GRPCIO:?} ${HAMI_E2E_PROTOBUF:?}") | hash)
save standin "$standin_key" docker.io/projecthami/hami:v2.10.0 "$standin" \
  --build-arg BASE=localhost/hami-py:0.1.0 --build-arg "GRPCIO=$HAMI_E2E_GRPCIO" \
  --build-arg "PROTOBUF=$HAMI_E2E_PROTOBUF" -f "$standin/Containerfile"
