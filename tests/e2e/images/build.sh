#!/usr/bin/env bash
# Builds the node tier's images with buildah (no Docker daemon) and saves each as a
# docker-archive for `ctr images import`, in a cache folder keyed by every input. Prints one
# archive path a line. Usage: build.sh BIN_DIR (the folder tests/e2e/k8sbins/build.sh prints).
#   base            debootstrap of a minimal Debian with python3: the Dockerfile's PYTHON_IMAGE
#   hami-py:0.1.0   the repository's Dockerfile, built with the README's buildah command
#   kube-scheduler  the built binary, tagged as the chart's default reference
#   pause, workload FROM scratch + Debian's static busybox, under the names the chart and the
#                   labs use (registry.k8s.io/pause:3.10, Lab 14's and Lab 12's CUDA images)
#   hami-core       the same busybox with a placeholder libvgpu.so where HAMi's image keeps it,
#                   named as the README's Lab 12 install names HAMi's image (a test double: the
#                   chart's libvgpuInstaller copies it; nothing loads it, no container here has
#                   a dynamic loader)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
bin_dir=$1
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

# hami-py: the README's command, on that base.
context_key=$(cd "$repo" && find Dockerfile .dockerignore pyproject.toml README.md hami webhook scheduler certs \
  -type f ! -name '*.pyc' | LC_ALL=C sort | xargs sha256sum | { cat; echo "$base_ref"; } | hash)
save hami-py "$context_key" localhost/hami-py:0.1.0 "$repo" --build-arg "PYTHON_IMAGE=$base_ref"

# kube-scheduler, pause and workload: static binaries in FROM scratch images.
mkdir -p "$work/scheduler" "$work/busybox"
cp "$bin_dir/kube-scheduler" "$work/scheduler/"
printf 'FROM scratch\nCOPY kube-scheduler /usr/local/bin/kube-scheduler\nENV PATH=/usr/local/bin\nUSER 65532:65532\n' \
  > "$work/scheduler/Containerfile"
save kube-scheduler "$(hash_dir "$work/scheduler")" registry.k8s.io/kube-scheduler:v1.35.4 "$work/scheduler"
cp /bin/busybox "$work/busybox/"
printf 'FROM scratch\nCOPY busybox /bin/busybox\nRUN ["/bin/busybox", "--install", "-s", "/bin"]\nENV PATH=/bin\nCMD ["sleep", "infinity"]\n' \
  > "$work/busybox/Containerfile"
busybox_key=$(hash_dir "$work/busybox")
save pause "$busybox_key" localhost/hami-e2e-pause:1 "$work/busybox"
save chart-pause "$busybox_key" registry.k8s.io/pause:3.10 "$work/busybox"
save workload "$busybox_key" docker.io/nvidia/cuda:12.4.1-base-ubuntu22.04 "$work/busybox"
save lab12-workload "$busybox_key" docker.io/nvidia/cuda:12.4.1-devel-ubuntu22.04 "$work/busybox"
mkdir -p "$work/hami-core"
cp /bin/busybox "$work/hami-core/"
echo "hami-e2e placeholder for HAMi-core's libvgpu.so" > "$work/hami-core/libvgpu.so"
printf 'FROM scratch\nCOPY busybox /bin/busybox\nRUN ["/bin/busybox", "--install", "-s", "/bin"]\nCOPY libvgpu.so /k8s-vgpu/lib/nvidia/libvgpu.so\nENV PATH=/bin\n' \
  > "$work/hami-core/Containerfile"
save hami-core "$(hash_dir "$work/hami-core")" docker.io/projecthami/hami:v2.10.0 "$work/hami-core"
