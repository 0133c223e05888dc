"""``GET /metrics``: the engine's own metrics in Prometheus's text format
(:mod:`moirae.runtime.metrics`, :mod:`moirae.engine.metrics`). Like every read, it needs
the token off loopback (:mod:`moirae.api.access`)."""

from __future__ import annotations

from fastapi import APIRouter, Response

from moirae.runtime.metrics import exposition


def router() -> APIRouter:
    r = APIRouter(tags=["metrics"])

    @r.get("/metrics", response_class=Response,
           responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format"}})
    def metrics() -> Response:
        body, content_type = exposition()
        return Response(body, media_type=content_type)

    return r
