"""Whether the cache can be trusted to decide: how long since each watch was in touch, and
whether the pods watch shows the Bindings this process wrote.

Two ways of going blind, each with its own bound:

* Silence. Every watch hears from the API server at least once per watch
  period (the server sends a bookmark just before it ends a watch, and the
  next one starts at once), so a watch silent for longer than a period and a
  half, plus the longest reconnect pause, has lost touch.
* Lag. A Binding this process wrote shows up on the pods watch within
  moments. One still missing after `lag_limit` seconds means the watch is
  stalled or far behind, though it may look alive (a relist refused, a watch
  cut while writes still pass). This catches, within seconds, the one case
  where deciding blind over-commits cards: writes that land while the watch
  does not show them.

Reservations keep every landed bind counted either way (hami.cache.reservations);
refusing to decide while blind is what keeps pods from being placed on a view
that misses other writers' pods.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass

# (resource, when it last heard from the API server on the monotonic clock, or None before
# its first list)
Contact = tuple[str, Callable[[], float | None]]


@dataclass(frozen=True)
class Limits:
    silence: float  # seconds without any contact
    lag: float  # seconds a landed Binding may wait for the watch


def limits(watch_timeout: float, reconnect_cap: float, lag: float) -> Limits:
    """The bounds that follow from the informers' settings."""
    return Limits(silence=1.5 * watch_timeout + reconnect_cap, lag=lag)


class Freshness:
    def __init__(
        self,
        contacts: Sequence[Contact],
        unconfirmed_since: Callable[[], float | None],
        bounds: Limits,
        clock: Callable[[], float],
    ) -> None:
        self._contacts = contacts
        self._unconfirmed_since = unconfirmed_since
        self.limits = bounds
        self._clock = clock

    def staleness(self) -> float:
        """Seconds since the stalest watch was last in touch (inf before its first list)."""
        now = self._clock()
        seen = [last() for _, last in self._contacts]
        if any(s is None for s in seen):
            return float("inf")
        return max((now - s for s in seen if s is not None), default=0.0)

    def lag(self) -> float:
        """Seconds the longest-waiting landed Binding has waited for the pods watch."""
        since = self._unconfirmed_since()
        return 0.0 if since is None else max(0.0, self._clock() - since)

    def blind(self) -> str | None:
        """Why the cache must not be decided on now, or None."""
        now = self._clock()
        for resource, last in self._contacts:
            seen = last()
            if seen is not None and now - seen > self.limits.silence:
                return (
                    f"the {resource} watch has not heard from the API server for "
                    f"{now - seen:.0f}s (limit {self.limits.silence:.0f}s): the scheduler's "
                    "cache may miss what changed meanwhile; kube-scheduler will retry"
                )
        waited = self.lag()
        if waited > self.limits.lag:
            return (
                f"a pod bound {waited:.0f}s ago has not shown up on the pods watch yet "
                f"(limit {self.limits.lag:.0f}s): the watch is stalled or far behind, and "
                "the scheduler's cache may miss other pods too; kube-scheduler will retry"
            )
        return None
