"""Nodes registered from GPU Feature Discovery labels (no HAMi device plugin on the node)."""

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami.engine.gfd import card_id, gfd_cards, visible_device
from hami.engine.injection import config_data
from hami.engine.inventory import node_inventory
from hami.engine.model import ContainerDevice, DeviceInfo, NodeInventory, Unregistered
from tests.builders import FAMILIES

LAB12_NODE = "gke-kai-hami-test-default-pool-370c394b-pm4j"
# Lab 12, Step 2, and what GKE's device plugin leaves on a one-T4 node.
LAB12_LABELS = {
    "cloud.google.com/gke-accelerator": "nvidia-tesla-t4",
    "nvidia.com/gpu.memory": "15360",
    "nvidia.com/gpu.product": "NVIDIA-Tesla-T4",
    "nvidia.com/gpu.count": "1",
    "nvidia.com/gpu.present": "true",
}


def gke_node(
    labels: dict[str, str], allocatable: str | None = "1", name: str = LAB12_NODE
) -> dict[str, Any]:
    status = {"allocatable": {"nvidia.com/gpu": allocatable}} if allocatable is not None else {}
    return {"metadata": {"name": name, "labels": labels}, "status": status}


def test_lab12_node_registers_one_t4_with_the_split_count() -> None:
    inv = node_inventory(gke_node(LAB12_LABELS), gfd_split=10, families=FAMILIES)
    assert inv == NodeInventory(
        LAB12_NODE,
        (
            DeviceInfo(
                id=f"GFD-{LAB12_NODE}-0",
                index=0,
                count=10,
                devmem=15360,
                devcore=100,
                type="NVIDIA-Tesla-T4",
            ),
        ),
        handshake=False,
        advertised=1,  # GKE's plugin, one per card: the kubelet admits one pod
    )


def test_without_the_opt_in_such_a_node_stays_unregistered() -> None:
    inv = node_inventory(gke_node(LAB12_LABELS), families=FAMILIES)
    assert isinstance(inv, Unregistered)
    assert "hami.io/node-nvidia-register" in inv.why


def test_hami_registration_wins_over_the_labels() -> None:
    node = gke_node(LAB12_LABELS, allocatable="10")
    node["metadata"]["annotations"] = {
        "hami.io/node-nvidia-register": (
            '[{"id":"GPU-real","count":10,"devmem":15360,"devcore":100,'
            '"type":"NVIDIA-Tesla T4","health":true}]'
        )
    }
    inv = node_inventory(node, gfd_split=4, families=FAMILIES)
    assert isinstance(inv, NodeInventory) and inv.handshake
    assert [(d.id, d.count) for d in inv.devices] == [("GPU-real", 10)]


@pytest.mark.parametrize(
    ("labels", "allocatable", "why"),
    [
        (
            {**LAB12_LABELS, "nvidia.com/gpu.memory": ""},
            "1",
            "nvidia.com/gpu.memory='' is not a positive whole number of MiB",
        ),
        (
            {k: v for k, v in LAB12_LABELS.items() if k != "nvidia.com/gpu.memory"},
            "1",
            "no nvidia.com/gpu.memory label (MiB per card, as nvidia-smi reports it)",
        ),
        (
            {**LAB12_LABELS, "nvidia.com/gpu.memory": "15Gi"},
            "1",
            "nvidia.com/gpu.memory='15Gi' is not a positive whole number of MiB",
        ),
        (
            {**LAB12_LABELS, "nvidia.com/gpu.count": "0"},
            "1",
            "nvidia.com/gpu.count='0' is not a positive whole number",
        ),
        (LAB12_LABELS, "0", "node allocatable nvidia.com/gpu is 0"),
        (LAB12_LABELS, None, "node allocatable nvidia.com/gpu is 0"),
        ({}, "1", "no nvidia.com/gpu.memory label"),
    ],
    ids=["empty-memory", "no-memory", "memory-with-unit", "zero-count", "zero", "absent", "bare"],
)
def test_nodes_the_labels_do_not_describe_are_refused_with_the_reason(
    labels: dict[str, str], allocatable: str | None, why: str
) -> None:
    inv = node_inventory(gke_node(labels, allocatable), gfd_split=10, families=FAMILIES)
    assert isinstance(inv, Unregistered)
    assert inv.why.startswith("no hami.io/node-nvidia-register annotation and ")
    assert why in inv.why


@pytest.mark.parametrize(
    ("labels", "allocatable", "expected"),
    [
        # KAI: a value of 1 TiB or more is bytes (GPU Feature Discovery issue 26).
        ({"nvidia.com/gpu.memory": str(16106127360)}, 1, [(15360, "NVIDIA")]),
        # KAI: without the count label, allocatable counts the cards.
        ({"nvidia.com/gpu.memory": "81920"}, 2, [(81920, "NVIDIA")] * 2),
        # The vendor word is what HAMi's type match looks for.
        (
            {"nvidia.com/gpu.memory": "24576", "nvidia.com/gpu.product": "Tesla-A10"},
            1,
            [(24576, "NVIDIA-Tesla-A10")],
        ),
        # Exact MiB, not KAI's floor to a multiple of 100.
        ({"nvidia.com/gpu.memory": "16384", "nvidia.com/gpu.count": "1"}, 1, [(16384, "NVIDIA")]),
    ],
)
def test_labels_are_read_as_kai_reads_them(
    labels: dict[str, str], allocatable: int, expected: list[tuple[int, str]]
) -> None:
    cards = gfd_cards("n", labels, allocatable, 10)
    assert not isinstance(cards, str)
    assert [(c.devmem, c.type) for c in cards] == expected
    assert [c.id for c in cards] == [f"GFD-n-{i}" for i in range(len(expected))]


@given(
    node=st.from_regex(r"[a-z0-9]([a-z0-9.-]{0,60}[a-z0-9])?", fullmatch=True),
    index=st.integers(0, 63),
)
def test_synthetic_ids_are_stable_and_name_the_card_by_index(node: str, index: int) -> None:
    uuid = card_id(node, index)
    assert uuid == card_id(node, index)
    assert visible_device(uuid) == str(index)
    # The separators of HAMi's allocation strings never appear in an id.
    assert not set(uuid) & set(",:;")


def test_real_uuids_are_passed_to_the_runtime_unchanged() -> None:
    assert visible_device("GPU-9acc8878-3967-5fb4-c534-43d6fd820fa6") == (
        "GPU-9acc8878-3967-5fb4-c534-43d6fd820fa6"
    )


def test_standalone_limits_for_a_gfd_card_name_it_by_index() -> None:
    devices = ((ContainerDevice(card_id(LAB12_NODE, 0), 4096, 0),),)
    data = config_data(["cuda"], devices)
    assert data["cuda.CUDA_DEVICE_MEMORY_LIMIT_0"] == "4096m"
    assert data["cuda.NVIDIA_VISIBLE_DEVICES"] == "0"
