"""Prometheus's text format as prometheus_client writes it: Go float formatting, label values
escaped, labels sorted by name, HAMi's `zone` label on every sample."""

from collections.abc import Callable, Iterable, Iterator
from typing import cast

from prometheus_client import utils

ZONE = "vGPU"

# Go's float formatting, as prometheus_client writes every sample (the library is untyped).
_go_format = cast(Callable[[float], str], utils.floatToGoString)
_seen: dict[float, str] = {}


def go_float(value: float) -> str:
    # Most samples repeat a few values (card sizes, common shares): formatted once each.
    text = _seen.get(value)
    if text is None:
        if len(_seen) > 100_000:
            _seen.clear()
        text = _seen[value] = _go_format(value)
    return text


def escape(value: str) -> str:
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return value


def label_text(pairs: Iterable[tuple[str, str]]) -> str:
    """`{a="1",b="2",zone="vGPU"}` with the names sorted, as prometheus_client writes them."""
    body = ",".join(f'{n}="{escape(v)}"' for n, v in sorted([*pairs, ("zone", ZONE)]))
    return "{" + body + "}"


def chunks(lines: Iterable[str], per_chunk: int = 2000) -> Iterator[bytes]:
    batch: list[str] = []
    for line in lines:
        batch.append(line)
        if len(batch) == per_chunk:
            yield "".join(batch).encode()
            batch.clear()
    if batch:
        yield "".join(batch).encode()


def header(name: str, help_text: str) -> str:
    return f"# HELP {name} {help_text}\n# TYPE {name} gauge\n"
