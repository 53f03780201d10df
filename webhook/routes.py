"""aiohttp route for POST /webhook: decode, ask the admission service, encode."""

import logging
import time
from collections.abc import Callable

from aiohttp import web

from hami.service.admission import AdmissionOutcome, AdmissionService
from webhook.review import MalformedReviewError, decode, encode, encode_error

log = logging.getLogger(__name__)

JSON = "application/json"
Observe = Callable[[str, float], None]  # (result, seconds): feeds the latency histogram


def routes(service: AdmissionService, observe: Observe) -> list[web.RouteDef]:
    async def handle(request: web.Request) -> web.Response:
        started = time.perf_counter()
        body = await request.read()
        try:
            version, review = decode(body)
        except MalformedReviewError as e:
            log.warning("malformed admission review", extra={"error": str(e)})
            observe("malformed", time.perf_counter() - started)
            return web.Response(body=encode_error(e), content_type=JSON)
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
            outcome = service.review(review)
            answer = encode(version, uid, outcome)
        except RecursionError:
            # orjson decodes 1024 levels; copying and diffing them recurses deeper than Python may.
            outcome = AdmissionOutcome(
                False, message="request.object is nested too deeply", code=400
            )
            answer = encode(version, uid, outcome)
        except Exception as e:
            # A review the service cannot handle still gets an answer kube-apiserver can show.
            log.exception("admission review failed", extra=ctx)
            observe("error", time.perf_counter() - started)
            outcome = AdmissionOutcome(
                False, message=f"cannot review this request: {type(e).__name__}: {e}", code=500
            )
            return web.Response(body=encode(version, uid, outcome), content_type=JSON)
        if outcome.allowed:
            log.debug("admitted", extra={**ctx, "patch_ops": len(outcome.patch)})
        else:
            log.info("admission denied", extra={**ctx, "reason": outcome.message})
        observe("allowed" if outcome.allowed else "denied", time.perf_counter() - started)
        return web.Response(body=answer, content_type=JSON)

    return [web.post("/webhook", handle)]
