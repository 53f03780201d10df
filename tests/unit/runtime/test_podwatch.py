"""The pod informer's listeners: who hears the first list's first page, and in what order."""

from typing import Any

from hami.runtime.podwatch import PodWatchers
from hami.service.labels import missing_label

Obj = dict[str, Any]


def _pod(name: str, node: str = "") -> Obj:
    """A pod of ours bound to `node` whose Binding's label did not reach it (API servers
    before 1.35 drop it): what LabelMender mends."""
    return {
        "metadata": {"name": name, "namespace": "ns", "annotations": {"hami.io/vgpu-node": node}},
        "spec": {"nodeName": node},
        "status": {"phase": "Running"},
    }


def _recording() -> tuple[PodWatchers, list[tuple[str, Any]]]:
    heard: list[tuple[str, Any]] = []

    def listener(name: str) -> Any:
        return lambda value: heard.append((name, value))

    watchers = PodWatchers(
        replace=[listener("cache.replace"), listener("facts.replace")],
        upsert=[listener("cache.upsert"), listener("facts.upsert")],
        delete=[listener("cache.delete")],
        seen=[listener("labels.seen"), listener("refusals.seen")],
    )
    return watchers, heard


def test_the_first_page_is_taken_whole_then_each_of_its_pods_observed() -> None:
    watchers, heard = _recording()
    a, b = _pod("a", "n1"), _pod("b", "n2")
    watchers.sink().replace([a, b])
    assert heard == [
        ("cache.replace", [a, b]),
        ("facts.replace", [a, b]),
        ("labels.seen", a),
        ("refusals.seen", a),
        ("labels.seen", b),
        ("refusals.seen", b),
    ]


def test_a_later_pod_event_reaches_the_cache_before_the_observers() -> None:
    watchers, heard = _recording()
    c = _pod("c", "n1")
    sink = watchers.sink()
    sink.upsert(c)
    sink.delete(c)
    assert heard == [
        ("cache.upsert", c),
        ("facts.upsert", c),
        ("labels.seen", c),
        ("refusals.seen", c),
        ("cache.delete", c),
    ]


def test_a_pod_listed_at_start_without_its_label_is_found_to_be_mended() -> None:
    """In a cluster of fewer pods than a page every pod comes in the first page: the label
    observer must see it there, not at the pod's next event."""
    due: list[str] = []
    watchers = PodWatchers(
        replace=[lambda pods: None],
        upsert=[],
        delete=[],
        seen=[lambda pod: due.extend(n for n in [missing_label(pod)] if n)],
    )
    watchers.sink().replace([_pod("a", "n1"), _pod("b", "n2")])
    assert due == ["n1", "n2"]
