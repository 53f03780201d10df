"""What every query of the Grafana dashboard must return from a Prometheus that scraped the
chart's scheduler pods through Lab 14 up to Step 7 (tests/e2e/test_node_chart.py).

The cluster values are the lab's: the cards each pod holds come from Step 7's lab-card table,
the cards' memory, cores and split count from the node tier's stand-in device plugin (the node
spec), which registers the lab's four T4s. The scheduler's own series (latencies, rates, the
leader) come from the run itself, so for those the checks are on shape and range.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.e2e.nodespec import NodeSpec
from tests.e2e.prometheus import Prometheus
from tests.reference.lab14 import STEP_7
from tests.unit.monitoring.dashboard import Query

MIB = 2**20
Vector = list[dict[str, Any]]


def keyed(result: Vector, *labels: str) -> dict[tuple[str, ...], float]:
    out = {
        tuple(r["metric"].get(name, "") for name in labels): float(r["value"][1]) for r in result
    }
    assert len(out) == len(result), f"series repeat {labels}: {result}"
    return out


@dataclass(frozen=True)
class Lab:
    node: NodeSpec
    namespace: str
    instances: frozenset[str]  # the scheduler pods scraped now, as Prometheus' instance label

    def step_7(self) -> list[tuple[str, str]]:
        """(pod, card) per line of Step 7's table; each pod holds 1000 MiB and 0 cores."""
        return [(line.split()[0], line.split()[1].split(",")[0]) for line in STEP_7.splitlines()]

    def per_card(self, value: Callable[[Any, int], float]) -> dict[tuple[str, ...], float]:
        """(node, uuid) -> value(card spec, pods on it)."""
        pods = Counter(card for _, card in self.step_7())
        return {(self.node.name, c.uuid): value(c, pods[c.uuid]) for c in self.node.cards}

    def expectations(self) -> dict[tuple[str, str], Callable[[Vector], None]]:
        """(panel title, refId) -> a check of that query's instant vector."""
        cards = self.node.cards
        split = self.node.split
        memory = self.per_card(lambda c, n: n * 1000 * MIB)
        total = sum(c.devmem for c in cards) * MIB
        used = sum(memory.values())
        card_keys = ("node", "device_uuid")

        def exactly(
            expected: dict[tuple[str, ...], float], *labels: str
        ) -> Callable[[Vector], None]:
            def check(result: Vector) -> None:
                got = keyed(result, *labels)
                assert got.keys() == expected.keys(), (got, expected)
                for key, value in expected.items():
                    assert math.isclose(got[key], value, rel_tol=1e-9), (key, got, expected)

            return check

        def scalar(value: float) -> Callable[[Vector], None]:
            return exactly({(): value})

        def by_card(value: Callable[[Any, int], float]) -> Callable[[Vector], None]:
            return exactly(self.per_card(value), *card_keys)

        def per_type(value: Callable[[Any, int], float]) -> dict[tuple[str, ...], float]:
            pods = Counter(card for _, card in self.step_7())
            out: dict[tuple[str, ...], float] = {}
            for c in cards:
                out[(c.type,)] = out.get((c.type,), 0.0) + value(c, pods[c.uuid])
            return out

        def by_type(value: Callable[[Any, int], float]) -> Callable[[Vector], None]:
            return exactly(per_type(value), "device_type")

        type_memory = per_type(lambda c, n: n * 1000 * MIB)
        type_total = per_type(lambda c, n: c.devmem * MIB)

        def table(value: Callable[[Any, int], float]) -> Callable[[Vector], None]:
            pods = Counter(card for _, card in self.step_7())
            expected: dict[tuple[str, ...], float] = {
                (self.node.name, c.uuid, str(c.index), c.type): value(c, pods[c.uuid])
                for c in cards
            }
            return exactly(expected, "node", "device_uuid", "device_index", "device_type")

        slices: dict[tuple[str, ...], float] = {
            (self.namespace, pod, "0", self.node.name, card): 1000.0 * MIB
            for pod, card in self.step_7()
        }
        slice_keys = ("namespace", "pod", "container_index", "node", "device_uuid")

        def latency(result: Vector) -> None:
            (series,) = result
            assert 0 < float(series["value"][1]) <= 10, result

        def rates(present: str) -> Callable[[Vector], None]:
            def check(result: Vector) -> None:
                got = keyed(result, "result")
                assert got.get((present,), 0) > 0, got
                assert all(v >= 0 for v in got.values()), got

            return check

        def per_instance(bound: float, current_only: bool) -> Callable[[Vector], None]:
            def check(result: Vector) -> None:
                got = keyed(result, "instance")
                # Series of the replaced leader stay in the rate window; only the live ones are
                # in an instant query of a gauge.
                assert self.instances <= {i for (i,) in got}, got
                if current_only:
                    assert {i for (i,) in got} == self.instances, got
                assert all(0 <= v < bound for v in got.values()), got

            return check

        def leader(result: Vector) -> None:
            got = keyed(result, "instance")
            assert {i for (i,) in got} == self.instances and sorted(got.values()) == [0.0, 1.0], got

        def all_zero(result: Vector) -> None:
            assert result and all(float(r["value"][1]) == 0 for r in result), result

        def counter_total(result: Vector) -> None:
            (series,) = result
            assert float(series["value"][1]) >= 0, result

        def bind_failures(result: Vector) -> None:
            # Lab 14's binds all succeed: a failure series, if one exists, counts none lately.
            got = keyed(result, "reason")
            assert all(v >= 0 for v in got.values()), got

        zero: dict[tuple[str, ...], float] = {(i,): 0.0 for i in self.instances}

        def certificate(result: Vector) -> None:
            (series,) = result
            days = float(series["value"][1]) / 86400
            assert 89 < days <= 90, days  # the pods made it at start-up, for 90 days

        return {
            ("GPU cards", "A"): scalar(len(cards)),
            ("GPU memory allocated", "A"): scalar(used),
            ("GPU memory allocated", "B"): scalar(total),
            ("Memory allocated %", "A"): scalar(used / total),
            ("Cores allocated %", "A"): scalar(0.0),
            ("Split slots used", "A"): scalar(len(self.step_7())),
            ("Split slots used", "B"): scalar(split * len(cards)),
            ("GPU pods waiting for a card", "A"): scalar(0.0),
            # The lab's cards are all of one type.
            ("Device types", "A"): by_type(lambda c, n: 1.0),
            ("Device types", "B"): by_type(lambda c, n: n * 1000 * MIB),
            ("Device types", "C"): by_type(lambda c, n: c.devmem * MIB),
            ("Device types", "D"): by_type(lambda c, n: 0.0),
            ("Device types", "E"): by_type(lambda c, n: float(n)),
            ("Device types", "F"): by_type(lambda c, n: float(split)),
            ("Memory allocated by device type", "A"): exactly(
                {t: type_memory[t] / type_total[t] for t in type_total}, "device_type"
            ),
            ("Cores allocated by device type", "A"): by_type(lambda c, n: 0.0),
            ("Cards", "A"): table(lambda c, n: n * 1000 * MIB),
            ("Cards", "B"): table(lambda c, n: c.devmem * MIB),
            ("Cards", "C"): table(lambda c, n: 0.0),
            ("Cards", "D"): table(lambda c, n: float(c.devcore)),
            ("Cards", "E"): table(lambda c, n: float(n)),
            ("Cards", "F"): table(lambda c, n: float(split)),
            ("Memory allocated per card", "A"): by_card(lambda c, n: n * 1000 * MIB),
            ("Memory allocated share per card", "A"): by_card(lambda c, n: n * 1000 / c.devmem),
            ("Cores allocated per card", "A"): by_card(lambda c, n: 0.0),
            ("Split slots used per card", "A"): by_card(lambda c, n: float(n)),
            # Lab 14's cards are all the device plugin's: no DRA driver publishes any.
            ("Cards by world", "A"): exactly({("device-plugin",): float(len(cards))}, "source"),
            **{("DRA cards", ref): exactly({}) for ref in "ABCDE"},
            ("GPU memory by namespace", "A"): exactly({(self.namespace,): used}, "namespace"),
            ("GPU cores by namespace", "A"): exactly({(self.namespace,): 0.0}, "namespace"),
            # HAMi's quota series exist for every namespace holding GPUs; no ResourceQuota here.
            ("GPU quotas", "A"): exactly(
                {
                    (self.namespace, "nvidia.com/gpumem"): 4000.0,
                    (self.namespace, "nvidia.com/gpucores"): 0.0,
                },
                "namespace",
                "quota_name",
            ),
            ("GPU quotas", "B"): exactly({}),
            ("GPU quotas", "C"): exactly({}),
            ("Container slices", "A"): exactly(slices, *slice_keys),
            ("Container slices", "B"): exactly(dict.fromkeys(slices, 0.0), *slice_keys),
            ("Filter latency", "A"): latency,
            ("Filter latency", "B"): latency,
            ("Bind latency", "A"): latency,
            ("Bind latency", "B"): latency,
            ("Admission latency", "A"): latency,
            ("Admission latency", "B"): latency,
            ("Requests by result", "A"): rates("fit"),
            ("Requests by result", "B"): rates("bound"),
            ("Requests by result", "C"): rates("allowed"),
            ("Bind failures", "A"): bind_failures,
            ("Requeues, expired reservations, preemptions", "A"): counter_total,
            ("Requeues, expired reservations, preemptions", "B"): counter_total,
            # Preemption is off (the chart's default): every outcome's series is there, at 0.
            ("Requeues, expired reservations, preemptions", "C"): all_zero,
            ("Event loop lag (p99)", "A"): per_instance(2.5, current_only=False),
            ("Cache staleness and watch lag", "A"): per_instance(180.0, current_only=True),
            # No pod bound lately waits for the watch: 0, or moments (the blind bound is 10 s).
            ("Cache staleness and watch lag", "B"): per_instance(10.0, current_only=True),
            ("Waiting GPU pods and the longest wait", "A"): scalar(0.0),
            ("Waiting GPU pods and the longest wait", "B"): scalar(0.0),
            # Lab 14 meets a sound API server: no replica blind, no bind left unknown.
            ("Blindness and unknown bind outcomes", "A"): exactly(zero, "instance"),
            ("Blindness and unknown bind outcomes", "B"): exactly(zero, "instance"),
            ("Blindness and unknown bind outcomes", "C"): all_zero,
            ("Leader and readiness", "A"): leader,
            ("Leader and readiness", "B"): exactly({(i,): 1.0 for i in self.instances}, "instance"),
            ("Serving certificate expires in", "A"): certificate,
        }


def check_every_query(server: Prometheus, lab: Lab, queries: list[Query]) -> None:
    """Each query with every node and namespace ("All"), then with the lab's node and namespace
    chosen (the same answer: nothing else holds GPUs), with $__rate_interval covering the lab."""
    expected = lab.expectations()
    assert {(q.panel, q.ref) for q in queries} == expected.keys()
    for q in queries:
        for node, namespace in ((".*", ".*"), (lab.node.name, lab.namespace)):
            promql = q.promql(rate_interval="1h", node=node, namespace=namespace)
            try:
                expected[(q.panel, q.ref)](server.query(promql))
            except AssertionError as e:
                raise AssertionError(f"{q.panel} {q.ref}: {promql}\n{e}") from e
