"""NVIDIA (HAMi's pkg/device/nvidia: hami-core, MIG and MPS cards) behind the family seam.

`wire` holds its FamilyWire, `family` the NvidiaFamily over NVIDIA's own engine, `claim` the
webhook's rule. The wire strings are hami.engine.nvidianames', which the engine's NVIDIA
modules import from below this package (see that module for why).
"""
