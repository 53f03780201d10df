"""A point in time a piece of work must be done by, on the event loop's clock."""

import asyncio


class Deadline:
    def __init__(self, seconds: float) -> None:
        self._loop = asyncio.get_running_loop()
        self.at = self._loop.time() + seconds

    def left(self, keep: float = 0.0) -> float:
        """Seconds left, less `keep` seconds held back for later steps."""
        return self.at - keep - self._loop.time()

    def step(self, keep: float = 0.0) -> asyncio.Timeout:
        """A timeout for one step that must end `keep` seconds before the deadline."""
        return asyncio.timeout(max(0.0, self.left(keep)))
