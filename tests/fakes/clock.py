"""A clock a test sets: what the product reads as the time is `now`, moved by the test."""


class Clock:
    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
