"""A namespace's GPU quota as the webhook's quota check reads it, for the admission tests."""

from hami.cache.quota import QuotaBook
from hami.engine.quota import QuotaUsage
from tests.builders import FAMILIES


def team_a_book() -> QuotaBook:
    """team-a may use 8000 MiB of GPU memory and uses 5000."""
    book = QuotaBook(families=FAMILIES)
    book.upsert(
        {
            "metadata": {"uid": "q", "namespace": "team-a", "name": "gpu"},
            "spec": {"hard": {"limits.nvidia.com/gpumem": "8000"}},
        }
    )
    book.add("team-a", QuotaUsage(5000))
    return book
