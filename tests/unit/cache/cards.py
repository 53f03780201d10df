"""What the cache holds of one card of node n."""

from hami.cache.store import ClusterCache
from hami.engine.model import (
    Usage,
)


def usage(cache: ClusterCache, uuid: str) -> Usage:
    return next(c.usage for c in cache.view["n"].cards if c.info.id == uuid)
