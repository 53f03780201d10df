"""How HAMi reads a container's sGPU ask (sdevice.go GenerateResourceRequests).

Only limits count. `vcore` defaults to 100 (the whole card's compute); `vmemory` is GiB
when the value shows no unit and bytes when it does, as Go prints the quantity: the API
server stores `2000` as `2k`, which HAMi then reads as 2000 bytes (0 MiB, so the whole
card). That is HAMi's bug, kept so that a pod is placed as HAMi places it; it needs a
bare vmemory of 1000 GiB or more, which no card has.
"""

from collections.abc import Mapping
from typing import Any

from hami.engine.families.base import FamilyRequest, FamilyWire
from hami.engine.quantity import QuantityError, as_int64
from hami.engine.requests import INT32_MAX, MAX_GPUS_PER_CONTAINER, LimitError, RequestError

GIB_IN_MIB = 1024  # HAMi's MemoryFactor for the sGPU
_BINARY_SUFFIXES = ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


def shows_unit(raw: Any, value: int) -> bool:
    """Whether Go's Quantity.String() of this whole-number quantity has a letter in it.

    Decimal quantities print with a k/M/G... suffix exactly when the value is a nonzero
    multiple of 1000; binary ones (written with Ki, Mi...) from 1024 up with a Ki/Mi...
    suffix when they are a multiple of 1024, below that as decimal."""
    if value == 0:
        return False
    binary = isinstance(raw, str) and raw.strip().endswith(_BINARY_SUFFIXES)
    if binary and abs(value) >= 1024:
        return value % 1024 == 0
    return value % 1000 == 0


def _go_div(a: int, b: int) -> int:
    """Go's integer division, which truncates toward zero."""
    q = abs(a) // b
    return -q if a < 0 else q


def _whole(raw: Any, resource: str, cname: str) -> int | None:
    try:
        return as_int64(raw)
    except QuantityError as e:
        raise RequestError(f"container {cname}: {resource}: {e}") from e


def read(container: Mapping[str, Any], wire: FamilyWire, *, strict: bool) -> FamilyRequest | None:
    """The container's sGPU request; None where HAMi reads none. `strict` (the webhook)
    refuses, naming it, a value HAMi would silently ignore or drop the request for."""
    names = wire.resources
    cname = str(container.get("name", "?"))
    limits = (container.get("resources") or {}).get("limits") or {}
    raw = limits.get(names.count)
    if raw is None:
        return None
    try:
        return _read(limits, raw, wire, cname, strict)
    except RequestError as e:
        if strict or isinstance(e, LimitError):
            raise
        return None


def _read(
    limits: Mapping[str, Any], raw: Any, wire: FamilyWire, cname: str, strict: bool
) -> FamilyRequest | None:
    names = wire.resources
    count = _whole(raw, names.count, cname)
    if count is None or count < 0:
        raise RequestError(f"container {cname}: {names.count} must be a whole number, got {raw!r}")
    if count == 0:
        return None
    if count > MAX_GPUS_PER_CONTAINER:
        raise LimitError(
            f"container {cname} asks for {count} {names.count}; at most "
            f"{MAX_GPUS_PER_CONTAINER} per container are supported"
        )
    cores = 100
    raw_cores = limits.get(names.cores)
    if raw_cores is not None:
        value = _whole(raw_cores, names.cores, cname)
        if value is None:
            # HAMi ignores a vcore that is not a whole number: the whole card's compute.
            if strict:
                raise RequestError(f"container {cname}: {names.cores} must be a whole number")
        elif not 0 <= value <= INT32_MAX:
            raise RequestError(f"container {cname}: {names.cores} {raw_cores!r} is out of range")
        else:
            cores = value
    mem = 0
    raw_mem = limits.get(names.memory)
    if raw_mem is not None:
        value = _whole(raw_mem, names.memory, cname)
        if value is None:
            # HAMi ignores it too: the whole card's memory.
            if strict:
                raise RequestError(f"container {cname}: {names.memory} must be a whole number")
        elif shows_unit(raw_mem, value):
            mem = _go_div(_go_div(value, 1024), 1024)
        elif 0 <= value <= INT32_MAX // GIB_IN_MIB:
            mem = value * GIB_IN_MIB
        else:
            raise RequestError(f"container {cname}: {names.memory} {raw_mem!r} is out of range")
        if not 0 <= mem <= INT32_MAX:  # a negative quantity with a unit
            raise RequestError(f"container {cname}: {names.memory} {raw_mem!r} is out of range")
    # No memory named (or 0): the whole card's memory, as a percentage.
    return FamilyRequest(wire.type, count, mem, 100 if mem == 0 else 0, cores)
