"""The simulated device plugin registers nodes exactly as HAMi's does (no cluster needed)."""

from __future__ import annotations

import json

from .nodespec import (
    CardSpec,
    NodeSpec,
    a100_mig_node,
    dump_specs,
    gke_t4_node,
    go_json,
    load_specs,
    register_annotation,
    t4_node,
)


def test_register_annotation_matches_go_omitempty_encoding() -> None:
    node = t4_node("n1", uuids=["GPU-a", "GPU-b"], numa=[0, 1])

    assert register_annotation(node) == (
        '[{"id":"GPU-a","count":10,"devmem":15360,"devcore":100,"type":"NVIDIA-Tesla T4",'
        '"mode":"hami-core","health":true},'
        '{"id":"GPU-b","index":1,"count":10,"devmem":15360,"devcore":100,'
        '"type":"NVIDIA-Tesla T4","numa":1,"mode":"hami-core","health":true}]'
    )


def test_unhealthy_card_omits_health() -> None:
    card = CardSpec(uuid="GPU-x", index=2, devmem=40960, type="NVIDIA A100-SXM4-40GB", health=False)
    [device] = json.loads(register_annotation(NodeSpec("n2", (card,), split=4)))

    assert "health" not in device
    assert device["count"] == 4


def test_go_json_escapes_like_encoding_json() -> None:
    assert go_json({"t": "a<b>&c"}) == '{"t":"a\\u003cb\\u003e\\u0026c"}'


def test_default_t4_node_has_four_named_cards() -> None:
    node = t4_node("node-a")

    assert [c.uuid for c in node.cards] == [f"GPU-node-a-{i}" for i in range(4)]
    assert node.gpu_capacity == 40


def test_specs_round_trip_through_json() -> None:
    nodes = [t4_node("a", labels={"zone": "z1"}), t4_node("b", uuids=["GPU-1"], split=3)]

    assert load_specs(dump_specs(nodes)) == nodes


def test_gke_node_carries_lab12_labels_and_whole_cards() -> None:
    node = gke_t4_node("g", ["GPU-a"], labels={"hami.run/lab-12": "true"})
    assert node.plugin == "gke" and node.gpu_capacity == 1
    assert node.labels == {
        "cloud.google.com/gke-accelerator": "nvidia-tesla-t4",
        "nvidia.com/gpu.memory": "15360",
        "nvidia.com/gpu.product": "NVIDIA-Tesla-T4",
        "nvidia.com/gpu.count": "1",
        "nvidia.com/gpu.present": "true",
        "hami.run/lab-12": "true",
    }
    assert load_specs(dump_specs([node])) == [node]


def test_a_mig_card_registers_its_profiles_as_hamis_plugin_writes_them() -> None:
    node = a100_mig_node("m")
    [device] = json.loads(register_annotation(node))
    assert list(device) == [
        "id",
        "count",
        "devmem",
        "devcore",
        "type",
        "mode",
        "migProfiles",
        "health",
    ]
    assert device["count"] == 7 and device["mode"] == "mig"
    assert device["migProfiles"][2] == {
        "name": "3g.20gb",
        "memoryMB": 19968,
        "core": 43,
        "sliceCount": 3,
        "placements": [{"start": 0, "size": 4}, {"start": 4, "size": 4}],
    }
    assert load_specs(dump_specs([node])) == [node]
