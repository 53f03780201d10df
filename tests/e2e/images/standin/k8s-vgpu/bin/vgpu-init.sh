#!/bin/sh
# As HAMi's: copy HAMi-core (a placeholder here) and its preload file into the host folder $1.
set -e
cp -f /k8s-vgpu/lib/nvidia/libvgpu.so "$1/libvgpu.so"
cp -f /k8s-vgpu/lib/nvidia/ld.so.preload "$1/ld.so.preload"
