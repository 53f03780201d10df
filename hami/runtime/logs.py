"""Logs as Kubernetes components write them: klog's text by default, JSON with
`--logging-format=json`; structured key/value pairs (the `extra=` fields) in both.

Text, one line per record (klog's header, then the message):

    I0818 11:39:13.896863       1 reporting.py:84] "filter chose node" pod="policy-tenant" node="n1"
    I0818 11:39:13.896863       1 reporting.py:79] device GPU-77b9... computer score is 0.000000

A call with `%` arguments is printf-style, as klog's Infof: its message is printed bare (HAMi's
score lines read exactly as HAMi prints them). Any other message is quoted, as klog's InfoS, and
followed by its pairs: strings quoted, numbers and booleans bare, mappings and lists as JSON, a
multi-line string (a traceback) as klog's `key=<` block.
"""

import json
import logging
import math
import os
import sys
import time
from typing import Any

import orjson

FORMATS = ("text", "json")
_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}
_SEVERITY = {"DEBUG": "I", "INFO": "I", "WARNING": "W", "ERROR": "E", "CRITICAL": "F"}


def fields(record: logging.LogRecord) -> dict[str, Any]:
    """The record's key/value pairs (its `extra=`), a traceback as `exc`."""
    pairs = {k: v for k, v in record.__dict__.items() if k not in _STANDARD}
    if record.exc_info:
        pairs["exc"] = logging.Formatter().formatException(record.exc_info)
    return pairs


def _caller(record: logging.LogRecord) -> str:
    return f"{record.filename}:{record.lineno}"


def _quote(text: str) -> str:
    return orjson.dumps(text).decode()


def _value(value: Any) -> str:
    if isinstance(value, str):
        if "\n" in value:
            body = "".join(f"\t{line}\n" for line in value.split("\n"))
            return f"<\n{body} >"
        return _quote(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)):
        return repr(value)
    return _json(value)


def _json(value: Any) -> str:
    try:
        return orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:  # an integer past 64 bits
        return json.dumps(value, default=str)


class KlogFormatter(logging.Formatter):
    def __init__(self, pid: int | None = None) -> None:
        super().__init__()
        self.pid = os.getpid() if pid is None else pid

    def format(self, record: logging.LogRecord) -> str:
        seconds, micros = divmod(round(record.created * 1_000_000), 1_000_000)
        t = time.localtime(seconds)
        header = (
            f"{_SEVERITY.get(record.levelname, 'I')}{t.tm_mon:02d}{t.tm_mday:02d} "
            f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}.{micros:06d} "
            f"{self.pid:7d} {_caller(record)}] "
        )
        message = record.getMessage()
        text = message if record.args else _quote(message)
        pairs = "".join(f" {k}={_value(v)}" for k, v in fields(record).items())
        return header + text + pairs


class JsonFormatter(logging.Formatter):
    """Kubernetes' JSON format (`ts` in seconds since the epoch, `caller`, `msg`), with the
    level and the logger's name beside the pairs."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": record.created,
            "caller": _caller(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            **fields(record),
        }
        return _json(doc)


def formatter(fmt: str) -> logging.Formatter:
    if fmt not in FORMATS:
        raise ValueError(f"logging format must be {' or '.join(FORMATS)}, got {fmt!r}")
    return JsonFormatter() if fmt == "json" else KlogFormatter()


def one_line(error: BaseException) -> str:
    """An error as one line for the terminal (YAML and library errors span several)."""
    return " ".join(str(error).split()) or type(error).__name__


def setup(level: str, fmt: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(fmt))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiohttp logs every request at INFO; the extender is called per pod.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
