"""Reading the DRA claims and templates a GPU pod names, at admission (hami.engine.claims).

The webhook reads each one from the API server while kube-apiserver waits for its answer, all
at once and each within `within` seconds (well inside the webhook's own timeout), so a slow or failed
read costs a refusal naming the claim, never the review. Only a GPU pod's claims are read; a
pod naming none costs nothing.
"""

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from hami.engine import kai
from hami.engine.claims import NO_CLAIMS, ClaimSources, Ref, claim_refs
from hami.engine.requests import ResourceNames, names_gpu
from hami.kube.errors import KubeError

# (namespace, kind, name) -> the object, or None when there is none.
ClaimReader = Callable[[str, str, str], Awaitable[Mapping[str, Any] | None]]
READ_TIMEOUT = 3.0


def claims_to_read(request: Mapping[str, Any], names: ResourceNames) -> list[Ref]:
    """The claims and templates a pod created by this review names, where it is a GPU pod."""
    if request.get("operation") != "CREATE" or request["kind"].get("kind") != "Pod":
        return []
    pod = request.get("object") or {}
    spec = pod.get("spec") or {}
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if not (names_gpu(spec, names) or kai.wants_kai_sharing(annotations)):
        return []
    return claim_refs(spec)


async def read_claims(
    reader: ClaimReader, namespace: str, refs: list[Ref], within: float = READ_TIMEOUT
) -> ClaimSources:
    """Each of `refs` in `namespace`: the object, or why it could not be read."""
    if not refs:
        return NO_CLAIMS

    async def one(kind: str, name: str) -> Mapping[str, Any] | str:
        try:
            found = await asyncio.wait_for(reader(namespace, kind, name), within)
        except TimeoutError:
            return f"no answer from the API server within {within:g} s"
        except KubeError as e:
            return f"the API server answered: {e}"
        return found if found is not None else "there is none in the namespace yet"

    unique = list(dict.fromkeys(refs))
    found = await asyncio.gather(*(one(kind, name) for kind, name in unique))
    return dict(zip(unique, found, strict=True))
