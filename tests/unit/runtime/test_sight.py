"""Blindness that ends by itself (hami.runtime.sight), on a clock the test turns."""

from hami.cache.freshness import Freshness, Limits
from hami.runtime.sight import Sight
from tests.fakes.clock import Clock


class Scene:
    """One informer's contact and one landed Binding the watch has not shown, as the cache
    would report them; the relists asked for and the give-ups told."""

    def __init__(self, give_up: float = 120.0) -> None:
        self.clock = Clock(1000.0)
        self.contact: float | None = self.clock.now
        self.landed: float | None = None
        self.relists: list[str] = []
        self.gave_up: list[str] = []
        freshness = Freshness(
            [("pods", lambda: self.contact)],
            lambda: self.landed,
            Limits(silence=95.0, lag=10.0),
            self.clock,
        )
        self.sight = Sight(
            freshness,
            self.relist,
            lambda: True,
            give_up=give_up,
            clock=self.clock,
            gave_up=self.gave_up.append,
        )

    def relist(self, why: str) -> bool:
        self.relists.append(why)
        return True

    def at(self, seconds: float) -> None:
        self.clock.now += seconds
        self.sight.check()


def test_a_lagging_pods_watch_is_listed_again_without_waiting_for_a_410() -> None:
    s = Scene()
    s.landed = s.clock.now
    s.at(5.0)
    assert s.relists == []  # within the lag limit
    s.at(6.0)
    assert len(s.relists) == 1 and "not on the pods watch" in s.relists[0]


def test_blind_past_the_bound_fails_health_and_says_why_once() -> None:
    s = Scene(give_up=120.0)
    s.contact = s.clock.now
    s.at(100.0)  # silent past 95 s: blind from here
    assert s.sight.blind_for() == 0.0 and s.sight.hopeless() is None
    s.at(60.0)
    assert s.sight.blind_for() == 60.0 and s.sight.hopeless() is None
    s.at(61.0)
    why = s.sight.hopeless()
    assert why is not None and "blind for 121s" in why and "pods watch" in why
    s.at(5.0)
    assert len(s.gave_up) == 1  # one line and one Event, not one a second
    s.contact = s.clock.now  # in touch again
    s.at(1.0)
    assert s.sight.hopeless() is None and s.sight.blind_for() == 0.0


def test_zero_never_gives_up() -> None:
    s = Scene(give_up=0.0)
    s.at(1000.0)
    s.at(1000.0)
    assert s.sight.blind_for() > 0 and s.sight.hopeless() is None and s.gave_up == []
