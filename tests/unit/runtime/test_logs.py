"""Both log formats: klog's text line as HAMi's and Kubernetes' components print it, JSON as
Kubernetes' `--logging-format=json`, and the same pairs read back from either."""

import logging
import sys
import time
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami.runtime.logs import JsonFormatter, KlogFormatter, formatter
from tests.applog import records


def record(msg: str, *args: object, level: int = logging.INFO, **extra: Any) -> logging.LogRecord:
    r = logging.LogRecord("hami.scheduler", level, "/x/reporting.py", 84, msg, args or None, None)
    r.created = time.mktime((2026, 8, 18, 11, 39, 13, 0, 0, -1)) + 0.896863
    r.__dict__.update(extra)
    return r


def test_a_printf_style_line_reads_as_hamis_klog_infof() -> None:
    line = KlogFormatter(pid=1).format(
        record("device %s computer score is %f", "GPU-77b9c63c-e3cb-8207-c355-5f65d684d2d8", 0.0)
    )
    # The lab's Step 8 line, but for the caller (HAMi's gpu_policy.go:221).
    assert line == (
        "I0818 11:39:13.896863       1 reporting.py:84] "
        "device GPU-77b9c63c-e3cb-8207-c355-5f65d684d2d8 computer score is 0.000000"
    )


@pytest.mark.parametrize(
    ("level", "severity"),
    [(logging.DEBUG, "I"), (logging.INFO, "I"), (logging.WARNING, "W"), (logging.ERROR, "E")],
)
def test_structured_lines_quote_the_message_and_follow_it_with_pairs(
    level: int, severity: str
) -> None:
    line = KlogFormatter(pid=7).format(
        record(
            "filter chose node",
            level=level,
            pod="policy-tenant",
            cards=2,
            ok=True,
            failed={"n1": "1/4 CardInsufficientMemory"},
        )
    )
    assert line == (
        f'{severity}0818 11:39:13.896863       7 reporting.py:84] "filter chose node" '
        'pod="policy-tenant" cards=2 ok=true failed={"n1":"1/4 CardInsufficientMemory"}'
    )


def test_a_traceback_is_a_block_and_reads_back_whole() -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        r = record("watch failed", level=logging.ERROR, resource="pods")
        r.exc_info = sys.exc_info()
    text = KlogFormatter().format(r)
    first, *rest = text.split("\n")
    assert first.endswith('] "watch failed" resource="pods" exc=<')
    assert rest[-1] == " >" and all(line.startswith("\t") for line in rest[:-1])
    (back,) = records(text + "\n" + KlogFormatter().format(record("next")))[:1]
    assert back["resource"] == "pods" and back["exc"].endswith("RuntimeError: boom")


def test_json_is_kubernetes_shape_with_the_pairs() -> None:
    doc = orjson.loads(JsonFormatter().format(record("bound", pod="p", node="n")))
    assert doc["caller"] == "reporting.py:84" and isinstance(doc["ts"], float)
    assert {k: doc[k] for k in ("msg", "level", "logger", "pod", "node")} == {
        "msg": "bound",
        "level": "info",
        "logger": "hami.scheduler",
        "pod": "p",
        "node": "n",
    }


def test_an_unknown_format_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="logging format must be text or json, got 'xml'"):
        formatter("xml")


_KEYS = st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True).filter(
    lambda k: (
        k not in logging.LogRecord("", 0, "", 0, "", None, None).__dict__
        and k not in ("message", "asctime", "msg", "level", "caller", "pid")
    )
)
_VALUES = st.one_of(
    st.text(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.lists(st.text(max_size=5), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(min_value=0, max_value=2**32), max_size=3),
)


@given(
    msg=st.text(min_size=1).filter(lambda m: "\n" not in m),
    pairs=st.dictionaries(_KEYS, _VALUES, max_size=5),
)
def test_every_pair_reads_back_from_both_formats(msg: str, pairs: dict[str, Any]) -> None:
    r = record(msg.replace("%", "%%"), **pairs)
    r.args = None  # structured, not printf-style
    for fmt in (KlogFormatter(), JsonFormatter()):
        (back,) = records(fmt.format(r))
        assert back["msg"] == r.getMessage()
        assert {k: back[k] for k in pairs} == pairs, fmt
