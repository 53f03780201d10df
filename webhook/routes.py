"""aiohttp route for POST /webhook: decode, ask the admission service, encode."""

import logging
import time
from collections.abc import Callable

from aiohttp import web

from hami.service.admission import AdmissionService
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
        outcome = service.review(review)
        obj = review.get("object") or {}
        meta = obj.get("metadata") or {} if isinstance(obj, dict) else {}
        ctx = {
            "uid": review["uid"],
            "namespace": review.get("namespace", ""),
            "pod": meta.get("name") or meta.get("generateName", ""),
            "dry_run": bool(review.get("dryRun")),
        }
        if outcome.allowed:
            log.debug("admitted", extra={**ctx, "patch_ops": len(outcome.patch)})
        else:
            log.info("admission denied", extra={**ctx, "reason": outcome.message})
        observe("allowed" if outcome.allowed else "denied", time.perf_counter() - started)
        return web.Response(body=encode(version, review["uid"], outcome), content_type=JSON)

    return [web.post("/webhook", handle)]
