"""Reads `hami serve`'s log back into records, whichever format it was written in (klog text,
the default, or JSON): each record is a dict with `msg`, `level`, `caller` and the pairs."""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any

_HEADER = re.compile(
    r"(?P<sev>[IWEF])\d{4} \d{2}:\d{2}:\d{2}\.\d{6} +(?P<pid>\d+) (?P<caller>[^ \]]+)\] "
)
_KEY = re.compile(r" ([A-Za-z_][A-Za-z0-9_]*)=")
_LEVEL = {"I": "info", "W": "warning", "E": "error", "F": "critical"}
_DECODER = json.JSONDecoder()


def records(text: str) -> list[dict[str, Any]]:
    """Every record in ``text`` (lines end with \\n only, as the process writes them)."""
    out = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line, i = lines[i], i + 1
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
            continue
        header = _HEADER.match(line)
        if header is None:
            continue
        # A multi-line value (key=<) continues on tab-indented lines, closed by " >" (which
        # more pairs may follow): the record is all of them.
        while line.endswith("=<") and i < len(lines):
            while i < len(lines) and lines[i].startswith("\t"):
                line += "\n" + lines[i]
                i += 1
            if i < len(lines) and lines[i].startswith(" >"):
                line += "\n" + lines[i]
                i += 1
        record: dict[str, Any] = {
            "level": _LEVEL[header["sev"]],
            "caller": header["caller"],
            "pid": int(header["pid"]),
        }
        record.update(_message_and_pairs(line[header.end() :]))
        out.append(record)
    return out


def about(text: str, **pairs: Any) -> list[dict[str, Any]]:
    """The records whose pairs include all of ``pairs``."""
    return [r for r in records(text) if all(r.get(k) == v for k, v in pairs.items())]


def _message_and_pairs(rest: str) -> dict[str, Any]:
    if not rest.startswith('"'):
        return {"msg": rest}  # printf-style: the whole line is the message
    msg, end = _DECODER.raw_decode(rest)
    out: dict[str, Any] = {"msg": msg}
    while end < len(rest):
        key = _KEY.match(rest, end)
        if key is None:
            raise ValueError(f"not a key=value pair at {rest[end:]!r}")
        end = key.end()
        if rest.startswith("<\n", end):
            close = rest.index("\n >", end)
            block = rest[end + 2 : close + 1].split("\n")[:-1]
            value: Any = "\n".join(b[1:] for b in block)
            end = close + 3
        elif rest[end] in '"{[':
            value, end = _DECODER.raw_decode(rest, end)
        else:
            stop = rest.find(" ", end)
            stop = len(rest) if stop < 0 else stop
            value = json.loads(rest[end:stop])  # numbers, true, false, null
            end = stop
        out[key.group(1)] = value
    return out
