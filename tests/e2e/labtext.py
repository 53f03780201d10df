"""Reading what the labs' commands print, so that it can be compared with the write-ups."""

from __future__ import annotations

import re

EventRow = tuple[str, str, str, str]
_CELLS = re.compile(r"\s{2,}")


def event_rows(describe: str) -> set[EventRow]:
    """The Events table of `kubectl describe` as (Type, Reason, From, Message) rows: the Age
    (and the count kubectl writes beside it) left out, identical rows counted once. Cells are
    split at two or more spaces, so the write-ups' hand-aligned tables read the same."""
    lines = describe[describe.index("Events:") :].splitlines()[1:]
    rows: set[EventRow] = set()
    for line in lines:
        cells = _CELLS.split(line.strip(), maxsplit=4)
        if not line.strip() or cells[0] in ("Type", "----"):
            continue
        kind, reason, _age, source, message = cells
        rows.add((kind, reason, source, message))
    return rows
