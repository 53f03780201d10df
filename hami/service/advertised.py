"""A node's kubelet count against what the scheduler placed there (hami.engine.advertised), as
the bind reports it and `hami explain` shows it."""

from hami.cache.store import ClusterCache
from hami.engine.advertised import shortfall


def node_shortfall(cache: ClusterCache, node: str) -> str | None:
    state, inventory = cache.view.get(node), cache.inventory(node)
    if state is None or inventory is None:
        return None
    return shortfall(state, inventory.advertised)
