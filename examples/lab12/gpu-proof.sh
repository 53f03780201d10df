#!/usr/bin/env bash
# Lab 12, Steps 7-8, on a GPU machine without Kubernetes: the cudaMalloc proof the lab's pods run,
# with what hami-py gives each of them. Two processes share GPU 0 at the same time, each under
# HAMi-core (LD_PRELOAD of libvgpu.so) with CUDA_DEVICE_MEMORY_LIMIT_0=4096m, the exact limit
# hami-py's webhook writes for `gpu-memory: "4096"` (KAI's isolator writes 4147m). Each must
# allocate 3 GiB, then be refused 2 GiB more, while the other holds its 3 GiB.
#
#   LIBVGPU=/path/to/libvgpu.so examples/lab12/gpu-proof.sh
#
# Needs nvidia-smi, nvcc and HAMi-core's libvgpu.so (built from Project-HAMi/HAMi-core, or
# copied out of projecthami/hami:v2.10.0 at /k8s-vgpu/lib/nvidia/libvgpu.so). Without one of
# them it prints why and exits 77 (skipped); 0 when both processes pass, 1 otherwise.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
skip() { echo "SKIP: $*"; exit 77; }
command -v nvidia-smi >/dev/null 2>&1 || skip "no nvidia-smi: this needs a machine with an NVIDIA GPU"
nvidia-smi --query-gpu=uuid --format=csv,noheader >/dev/null 2>&1 || skip "nvidia-smi finds no GPU"
command -v nvcc >/dev/null 2>&1 || skip "no nvcc: install the CUDA toolkit"
[ -n "${LIBVGPU:-}" ] && [ -f "$LIBVGPU" ] || skip "set LIBVGPU to HAMi-core's libvgpu.so"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
nvcc -o "$work/memory-limit" "$here/memory-limit.cu" || { echo "FAIL: nvcc"; exit 1; }

# One "pod": the lab's start-up log, less the hold phase (nothing scrapes it here).
pod() {
  local name=$1
  env LD_PRELOAD="$LIBVGPU" CUDA_DEVICE_MEMORY_LIMIT_0=4096m \
    CUDA_DEVICE_MEMORY_SHARED_CACHE="$work/$name.cache" sh -c '
      echo "limit=$CUDA_DEVICE_MEMORY_LIMIT_0"
      nvidia-smi --query-gpu=uuid,memory.total --format=csv,noheader -i 0
      echo "test_start=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
      "$1/memory-limit" proof
      status=$?
      echo "test_end=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
      exit $status' sh "$work" > "$work/$name.log" 2>&1
}
pod kai-hami-lab12-a & a=$!
pod kai-hami-lab12-b & b=$!
wait $a; ra=$?
wait $b; rb=$?
for name in kai-hami-lab12-a kai-hami-lab12-b; do
  echo "=== $name ==="
  cat "$work/$name.log"
done
[ "$ra" = 0 ] && [ "$rb" = 0 ] || { echo "FAIL: a process did not pass"; exit 1; }
# The two 30-second intervals overlap: each was refused while the other held its 3 GiB.
start() { sed -n 's/^test_start=//p' "$work/$1.log"; }
end() { sed -n 's/^test_end=//p' "$work/$1.log"; }
if [[ "$(start kai-hami-lab12-a)" < "$(end kai-hami-lab12-b)" && "$(start kai-hami-lab12-b)" < "$(end kai-hami-lab12-a)" ]]; then
  echo "PASS: both processes held 3 GiB at once and were each refused 2 GiB more"
  exit 0
fi
echo "FAIL: the two proofs did not overlap"
exit 1
