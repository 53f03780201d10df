"""Blindness that ends by itself: a relist when the pods watch lags, and giving up when the
process stays blind.

Refusing to decide on a stale cache protects the cards (hami.cache.freshness); it must not
last longer than its cause. Two ways out, checked every second:

* The pods watch lags (a pod this process bound has not shown up within
  --watch-lag-limit-seconds): a healthy-looking watch may never send the 410 that would make
  the informer list again (a restarted API server whose new watch cache still covers our
  resourceVersion resumes it as if nothing happened). The pods informer lists again at once;
  a complete list settles every Binding that landed before it began (hami.cache.store).
* Blind without a break for longer than --blind-give-up-seconds (a watch that cannot reach
  the API server, lists that keep failing): /healthz and /healthz/pair fail, so the kubelet
  restarts this process and the kube-scheduler beside it, whose Lease the other replica then
  takes; a single replica starts over from a fresh list. One log line and one Event say why.

From the end of a fault, then, scheduling resumes within the watch's reconnect pause (5 s at
most) plus one list of the pods; a lag is noticed --watch-lag-limit-seconds after the Binding
that showed it, and then costs one list.
"""

import asyncio
import contextlib
import logging
from collections.abc import Callable

from hami.cache.freshness import Freshness

log = logging.getLogger(__name__)

CHECK_INTERVAL = 1.0


class Sight:
    def __init__(
        self,
        freshness: Freshness,
        relist: Callable[[str], bool],
        synced: Callable[[], bool],
        *,
        give_up: float,
        clock: Callable[[], float],
        relisted: Callable[[], None] = lambda: None,
        gave_up: Callable[[str], None] = lambda why: None,
    ) -> None:
        """`relist(why)` asks the pods informer for a list (Informer.relist); `give_up` 0:
        never. `relisted` is told of each relist asked for, `gave_up` once each time the
        process gives up, with why."""
        self.freshness = freshness
        self.relist = relist
        self.synced = synced
        self.give_up = give_up
        self.clock = clock
        self.relisted = relisted
        self.gave_up = gave_up
        self._blind_since: float | None = None
        self._why = ""
        self._told = False

    def blind_for(self) -> float:
        """Seconds blind without a break, as of the last check (0 when not blind)."""
        return 0.0 if self._blind_since is None else self.clock() - self._blind_since

    def hopeless(self) -> str | None:
        """Why this process should be restarted (/healthz fails), or None."""
        if not self.give_up or self.blind_for() <= self.give_up:
            return None
        return (
            f"blind for {self.blind_for():.0f}s (limit {self.give_up:g}s, "
            f"--blind-give-up-seconds): {self._why}"
        )

    def check(self) -> None:
        """One look: ask for a relist on lag, follow how long blindness lasts."""
        if self.freshness.lag() > self.freshness.limits.lag and self.relist(
            f"a pod bound {self.freshness.lag():.0f}s ago is not on the pods watch yet"
        ):
            self.relisted()
        why = self.freshness.blind() if self.synced() else None
        if why is None:
            self._blind_since, self._told = None, False
            return
        self._why = why
        if self._blind_since is None:
            self._blind_since = self.clock()
        hopeless = self.hopeless()
        if hopeless is not None and not self._told:
            self._told = True
            log.error("giving up: restarting to see again", extra={"why": hopeless})
            self.gave_up(hopeless)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self.check()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), CHECK_INTERVAL)
