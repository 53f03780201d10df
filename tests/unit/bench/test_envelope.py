"""The envelope bench's table: each figure against its target, met or missed by how much."""

import pytest

from tests.bench.envelope import Row, filter_rows, memory_rows, throughput_rows

MIB = 1024 * 1024


@pytest.mark.parametrize(
    ("row", "verdict"),
    [
        (Row("cold start", 19.9, "s", 20.0), "met"),
        (Row("cold start", 20.0, "s", 20.0), "met"),
        (Row("cold start", 29.1, "s", 20.0), "missed by 9.1 s"),
        (Row("pods/s", 30.0, "pods/s", 40.0, at_most=False), "missed by 10 pods/s"),
        (Row("pods/s", 45.0, "pods/s", 40.0, at_most=False), "met"),
        (Row("context only", 3.0, "ms"), ""),
    ],
)
def test_a_row_says_met_or_by_how_much_it_missed(row: Row, verdict: str) -> None:
    assert row.verdict() == verdict


def _sample(pods: int, ready_s: float, steady_mib: float) -> dict[str, object]:
    return {
        "pods": pods,
        "ready_s": ready_s,
        "ready_cpu": ready_s / 2,
        "ready_rss": int(steady_mib * MIB),
        "steady_rss": int(steady_mib * MIB),
        "peak": int(steady_mib * MIB),
        "scrape_wire": 3_300_000,
        "scrape_text": 51_800_000,
        "scrape_cpu": [0.9, 0.09, 0.1],
    }


def test_memory_rows_take_the_per_pod_cost_between_the_empty_and_the_full_cluster() -> None:
    rows = {r.figure: r for r in memory_rows([_sample(0, 2.3, 177), _sample(150_000, 29.1, 381)])}
    small = {r.figure for r in memory_rows([_sample(0, 2.3, 177), _sample(1_000, 2.5, 178)])}
    assert "RSS per 10,000 pods" not in small
    assert rows["cold start to /readyz, 150000 pods"].verdict() == "missed by 9.1 s"
    assert rows["RSS per 10,000 pods"].value == pytest.approx(13.6, abs=0.01)
    assert rows["a scrape's CPU, p50"].value == pytest.approx(100)
    assert rows["a scrape's CPU, the most (the first)"].verdict() == "missed by 700 ms"


def _series(fits: int, policy: str, count: int, p50: float, p99: float) -> dict[str, object]:
    return {
        "fits": fits,
        "node_policy": policy,
        "candidate_count": count,
        "process_cpu_p50_ms": p50,
        "process_cpu_p99_ms": p99,
        "process_cpu_per_request_ms": p99 + 1,
    }


def test_filter_rows_hold_the_5_ms_cpu_target_for_each_series() -> None:
    series = [_series(300, "spread", 5000, 1.0, 4.0), _series(0, "binpack", 500, 4.0, 9.0)]
    rows = filter_rows(150_000, series)
    verdicts = {r.figure: r.verdict() for r in rows}
    assert verdicts == {
        "/filter CPU p50, fits, spread, 5000 candidates, 150000 pods": "",
        "/filter CPU p99, fits, spread, 5000 candidates, 150000 pods": "met",
        "/filter CPU per request, fits, spread, 5000 candidates, 150000 pods": "",
        "/filter CPU p50, fits nowhere, binpack, 500 candidates, 150000 pods": "",
        "/filter CPU p99, fits nowhere, binpack, 500 candidates, 150000 pods": "missed by 4 ms",
        "/filter CPU per request, fits nowhere, binpack, 500 candidates, 150000 pods": "",
    }
    assert rows[2].value == 5.0


def _run(label: str, ours: float, failed: float = 0.0) -> dict[str, object]:
    return {
        "label": label,
        "rate": 40.0,
        "failed_binds_per_pod": failed,
        "cpu_ms_per_pod": {"hami-serve": ours, "kube-apiserver": 27.0},
    }


def test_cpu_per_pod_at_the_large_size_is_compared_with_the_small_one() -> None:
    small = [_run("gpu-1000-spread", 4.0), _run("gpu-1000-binpack", 5.0)]
    large = [_run("gpu-1000-spread", 5.5), _run("gpu-1000-binpack", 4.5, failed=0.2)]
    rows = throughput_rows(1000, small, 5000, large)
    ratio = rows[-1]
    # The worst large run against the best small one: 5.5 / 4.0.
    assert ratio.figure == "our CPU per pod, 5000 nodes over 1000"
    assert ratio.value == pytest.approx(137.5)
    assert ratio.verdict() == "missed by 12.5 %"
    failed = [r for r in rows if r.figure.endswith("failed binds per pod")]
    assert [r.verdict() for r in failed] == ["met", "met", "met", "missed by 0.1"]
    # 3 ms is the aim at the small size; the large one is held to the ratio.
    ours = {r.figure: r.verdict() for r in rows if r.figure.endswith("our CPU per pod")}
    assert ours == {
        "1000 nodes, gpu-1000-spread our CPU per pod": "missed by 1 ms",
        "1000 nodes, gpu-1000-binpack our CPU per pod": "missed by 2 ms",
        "5000 nodes, gpu-1000-spread our CPU per pod": "",
        "5000 nodes, gpu-1000-binpack our CPU per pod": "",
    }


def test_the_dra_series_are_named_beside_the_device_plugin_ones() -> None:
    series = [_series(300, "spread", 5000, 1.0, 4.0)]
    figures = [r.figure for r in filter_rows(150_000, series, dra=True)]
    assert figures == [
        "/filter CPU p50, fits, spread, 5000 candidates, 150000 DRA claims",
        "/filter CPU p99, fits, spread, 5000 candidates, 150000 DRA claims",
        "/filter CPU per request, fits, spread, 5000 candidates, 150000 DRA claims",
    ]


def test_the_dra_bursts_are_named_beside_the_device_plugin_ones() -> None:
    rows = throughput_rows(1000, [_run("gpu-1000-spread", 2.5)], 5000, [], world="DRA, ")
    assert [(r.figure, r.verdict()) for r in rows] == [
        ("DRA, 1000 nodes, gpu-1000-spread pods/s", ""),
        ("DRA, 1000 nodes, gpu-1000-spread failed binds per pod", "met"),
        ("DRA, 1000 nodes, gpu-1000-spread our CPU per pod", "met"),
    ]


def test_one_size_for_both_throughput_steps_gives_its_rows_once() -> None:
    """--nodes equal to --small-nodes runs the throughput bench once: its runs are the small
    and the large ones at the same time, listed once and not compared with themselves."""
    runs = [_run("gpu-500-spread", 6.7)]
    rows = throughput_rows(1000, runs, 1000, runs)
    assert [r.figure for r in rows] == [
        "1000 nodes, gpu-500-spread pods/s",
        "1000 nodes, gpu-500-spread failed binds per pod",
        "1000 nodes, gpu-500-spread our CPU per pod",
    ]
