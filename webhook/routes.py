"""aiohttp route for POST /webhook: decode, ask the admission service, encode.

A review costs time in proportion to its size (decoding, the shape check, copying and diffing
the pod). Pods kube-apiserver sends are a few KiB; anything much larger is reviewed on a worker
thread, one at a time, so that a body of several MiB (the webhook port is reachable from the
pod network) delays only itself and its like, never the extender, the probes or other reviews:
the interpreter hands the loop the GIL every few milliseconds while the worker runs.
"""

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from hami.engine.claims import NO_CLAIMS, ClaimSources
from hami.service.admission import AdmissionOutcome, AdmissionService
from hami.webhook.review import MalformedReviewError, decode, encode, encode_error

log = logging.getLogger(__name__)

JSON = "application/json"
Observe = Callable[[str, float], None]  # (result, seconds): feeds the latency histogram
# Larger bodies are reviewed off the event loop. Real pods stay far below it; a review this
# size takes about a millisecond inline.
OFFLOAD_BYTES = 64 * 2**10
CLAIMS_FIELD = b'"resourceClaims"'


@dataclass(slots=True)
class Answer:
    body: bytes
    result: str  # allowed, denied, malformed, error: the histogram's label
    message: str = ""
    ctx: dict[str, Any] = field(default_factory=dict)
    patch_ops: int = 0


def review_body(service: AdmissionService, body: bytes, claims: ClaimSources = NO_CLAIMS) -> Answer:
    """The whole review of one request body, with the DRA claims read for it (claims_of): CPU
    only, safe to run on a worker thread."""
    try:
        version, review = decode(body)
    except MalformedReviewError as e:
        return Answer(encode_error(e), "malformed", str(e))
    uid = review["uid"]
    obj = review.get("object")
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    ctx = {
        "uid": uid,
        "namespace": review.get("namespace", ""),
        "pod": meta.get("name") or meta.get("generateName", ""),
        "dry_run": bool(review.get("dryRun")),
    }
    try:
        outcome = service.review(review, claims)
    except RecursionError:
        # orjson decodes 1024 levels; copying and diffing them recurses deeper than Python may.
        outcome = AdmissionOutcome(False, message="request.object is nested too deeply", code=400)
    except Exception as e:
        # A review the service cannot handle still gets an answer kube-apiserver can show.
        log.exception("admission review failed", extra=ctx)
        outcome = AdmissionOutcome(
            False, message=f"cannot review this request: {type(e).__name__}: {e}", code=500
        )
        return Answer(encode(version, uid, outcome), "error", outcome.message, ctx)
    result = "allowed" if outcome.allowed else "denied"
    return Answer(encode(version, uid, outcome), result, outcome.message, ctx, len(outcome.patch))


async def claims_of(service: AdmissionService, body: bytes) -> ClaimSources:
    """The DRA claims the pod of a review names, read from the API server: only a body that
    mentions them is decoded for it (review_body decodes it again, on its own terms)."""
    if CLAIMS_FIELD not in body:
        return NO_CLAIMS
    try:
        if len(body) <= OFFLOAD_BYTES:
            _, review = decode(body)
        else:
            _, review = await asyncio.to_thread(decode, body)
    except MalformedReviewError:
        return NO_CLAIMS  # review_body answers it
    try:
        return await service.read_claims(review)
    except Exception:
        # The review still gets its answer: each claim then counts as unread, and is refused.
        log.exception("reading a pod's DRA claims failed")
        return NO_CLAIMS


def routes(service: AdmissionService, observe: Observe) -> list[web.RouteDef]:
    # Large reviews queue behind each other instead of sharing the GIL with the loop in parallel.
    one_large = asyncio.Semaphore(1)

    async def handle(request: web.Request) -> web.Response:
        started = time.perf_counter()
        body = await request.read()
        claims = await claims_of(service, body)
        if len(body) <= OFFLOAD_BYTES:
            answer = review_body(service, body, claims)
        else:
            async with one_large:
                answer = await asyncio.to_thread(review_body, service, body, claims)
        if answer.result == "malformed":
            log.warning("malformed admission review", extra={"error": answer.message})
        elif answer.result == "allowed":
            log.debug("admitted", extra={**answer.ctx, "patch_ops": answer.patch_ops})
        elif answer.result == "denied":
            log.info("admission denied", extra={**answer.ctx, "reason": answer.message})
        observe(answer.result, time.perf_counter() - started)
        return web.Response(body=answer.body, content_type=JSON)

    return [web.post("/webhook", handle)]
