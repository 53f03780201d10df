"""Who hears each event of the pod informer, and in what order."""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hami.runtime.apps import each

Obj = dict[str, Any]


@dataclass(frozen=True)
class Sink:
    """One resource's informer events, delivered to the callables for that resource."""

    replace: Callable[[list[Obj]], None]
    upsert: Callable[[Obj], None]
    delete: Callable[[Obj], None]


@dataclass
class PodWatchers:
    """The pod informer's listeners, the cache first in each list since the others read it.

    `replace` takes the first page of the informer's first list whole, and that page reaches
    no `upsert`: the observers in `seen`, which look at one pod at a time (a missing node
    label, a refused device plugin), are told of each of its pods too. Without that, a
    cluster of fewer pods than a page went unobserved until each pod's next event."""

    replace: list[Callable[[list[Obj]], None]]
    upsert: list[Callable[[Obj], None]]
    delete: list[Callable[[Obj], None]]
    seen: list[Callable[[Obj], None]] = field(default_factory=list)

    def sink(self) -> Sink:
        whole = each(*self.replace)
        observe = each(*self.seen)

        def replace(objects: list[Obj]) -> None:
            whole(objects)
            for obj in objects:
                observe(obj)

        return Sink(replace, each(*self.upsert, *self.seen), each(*self.delete))
