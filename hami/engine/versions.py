"""Comparing resourceVersions.

They are formally opaque, but the API server's are etcd revisions and Kubernetes lets clients
compare them (comparable resource versions, GA in 1.35): that is what tells a pod read after a
Binding from the pod that Binding was sent for.
"""


def later(resource_version: str, than: str) -> bool:
    """Whether `resource_version` is later than `than`; False when either is not a number (an
    empty `than`: nothing known to compare with)."""
    try:
        return int(resource_version) > int(than)
    except ValueError:
        return False
