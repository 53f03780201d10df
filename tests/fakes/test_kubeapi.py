"""The in-memory API server keeps the real one's rules the services rely on (tests/fakes)."""

import asyncio

import pytest

from hami.kube.errors import Conflict, Gone, NotFound, Unavailable
from tests.fakes.kubeapi import FakeKube, Fault, lost


def node(name: str = "n") -> dict[str, object]:
    """Any object for the fake to store; what it holds does not matter here."""
    return {"metadata": {"name": name, "annotations": {"a": "1"}}}


async def test_a_write_with_a_stale_resource_version_is_a_conflict() -> None:
    api = FakeKube()
    stored = api.add("nodes", node())
    rv = stored["metadata"]["resourceVersion"]
    patched = await api.patch_node_annotations("n", {"b": "2"}, rv)
    assert patched["metadata"]["annotations"] == {"a": "1", "b": "2"}
    assert int(patched["metadata"]["resourceVersion"]) > int(rv)
    with pytest.raises(Conflict):
        await api.patch_node_annotations("n", {"a": None}, rv)
    with pytest.raises(NotFound):
        await api.patch_node_annotations("ghost", {}, rv)
    assert await api.get_node("ghost") is None


async def test_a_binding_lands_once_and_only_on_the_pod_it_names() -> None:
    api = FakeKube()
    api.add("pods", {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}})
    with pytest.raises(Conflict, match="UID in precondition"):
        await api.bind_pod("ns", "p", "u2", "n", {}, {})
    await api.bind_pod("ns", "p", "u1", "n", {"k": "v"}, {"l": "w"})
    pod = await api.get_pod("ns", "p")
    assert pod is not None and pod["spec"]["nodeName"] == "n"
    assert (pod["metadata"]["annotations"], pod["metadata"]["labels"]) == ({"k": "v"}, {"l": "w"})
    with pytest.raises(Conflict, match="already assigned"):
        await api.bind_pod("ns", "p", "u1", "m", {}, {})


async def test_faults_go_wrong_as_asked_and_then_stop() -> None:
    api = FakeKube()
    api.add("nodes", node())
    api.fail(Fault("get_node", error=lost(), lands=True, times=2))
    for _ in range(2):
        with pytest.raises(Unavailable):
            await api.get_node("n")
    assert await api.get_node("n") is not None
    api.fail(Fault("get_node", delay=1.0))
    api.timeout = 0.01  # the client's request timeout, shorter than the answer takes
    with pytest.raises(Unavailable, match="TimeoutError"):
        await api.get_node("n")
    assert [c[0] for c in api.calls].count("get_node") == 4


async def test_a_watch_sees_every_change_after_its_list_once_and_gone_after_compaction() -> None:
    api = FakeKube()
    api.add("nodes", node("a"))
    pages = [page async for page in api.list_pages("nodes")]
    (items, rv) = pages[0]
    assert [i["metadata"]["name"] for i in items] == ["a"]
    watch = api.watch_objects("nodes", rv, timeout_seconds=60, inactivity=5)
    api.add("nodes", node("b"))
    api.remove("nodes", "a")
    first = await anext(watch)
    second = await anext(watch)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in (first, second)] == [
        ("ADDED", "b"),
        ("DELETED", "a"),
    ]
    later = asyncio.ensure_future(anext(watch))
    await asyncio.sleep(0)
    api.edit("nodes", "b", lambda n: n["metadata"]["annotations"].update({"c": "3"}))
    assert (await later)["type"] == "MODIFIED"
    await watch.aclose()
    api.compact()
    with pytest.raises(Gone):
        await anext(api.watch_objects("nodes", rv, timeout_seconds=60, inactivity=5))
