"""Receivers: data and alerts pushed to the engine by other systems.

- ``POST /api/receive/prometheus/{name}``: Prometheus remote write (a snappy-compressed
  protobuf ``WriteRequest``) into the ``prometheus`` source ``name``
  (:mod:`moirae.sources.prometheus`); answers 204 once the samples are on disk.
- ``POST /api/receive/alertmanager/{name}``: an Alertmanager webhook notification (JSON,
  version 4) into the ``alertmanager`` source ``name`` (:mod:`moirae.sources.alerts_in`);
  answers 200 with how many new alert states it stored.

Both need the bearer token (``access.machine``: a machine, no console session): the
configured ``api.token``, else the engine's local token in ``<data_dir>/api.token``,
which Prometheus and Alertmanager read with ``authorization: {credentials_file: ...}``.
A name no source registered is 404, a body that is not the protocol's 400 with the
reason; a sender retries a 5xx (the file could not be written), so nothing it was told
is stored is lost.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Request, Response

from moirae.api.models import Received
from moirae.runtime.metrics import RECEIVE_ERRORS, RECEIVED
from moirae.sources.alerts_in import AlertPayloadError, AlertReceiver
from moirae.sources.inbox import InboxError
from moirae.sources.prometheus import RemoteWriteError, RemoteWriteReceiver


def router(engine, machine) -> APIRouter:
    """The receivers of ``engine``; ``machine`` is the bearer-token dependency."""
    r = APIRouter(dependencies=[Depends(machine)], tags=["receivers"])
    data_dir = engine.settings.data_dir

    @r.post("/api/receive/prometheus/{name}", status_code=204, response_class=Response,
            openapi_extra={"requestBody": {"content": {"application/x-protobuf": {"schema": {
                "type": "string", "format": "binary"}}}, "required": True}})
    async def prometheus(name: str, request: Request) -> Response:
        try:
            receiver = RemoteWriteReceiver.open(data_dir, name)
        except InboxError as exc:
            raise HTTPException(404, str(exc)) from None
        body = await request.body()
        try:
            n = receiver.receive(body)
        except RemoteWriteError as exc:
            RECEIVE_ERRORS.labels("prometheus", name).inc()
            raise HTTPException(400, str(exc)) from None
        RECEIVED.labels("prometheus", name).inc(n)
        return Response(status_code=204)

    @r.post("/api/receive/alertmanager/{name}", response_model=Received)
    async def alertmanager(name: str, request: Request) -> dict[str, Any]:
        try:
            receiver = AlertReceiver.open(data_dir, name)
        except InboxError as exc:
            raise HTTPException(404, str(exc)) from None
        try:
            body = json.loads(await request.body())
        except ValueError as exc:
            RECEIVE_ERRORS.labels("alertmanager", name).inc()
            raise HTTPException(400, f"body is not JSON: {exc}") from None
        try:
            n = receiver.receive(body)
        except AlertPayloadError as exc:
            RECEIVE_ERRORS.labels("alertmanager", name).inc()
            raise HTTPException(400, str(exc)) from None
        RECEIVED.labels("alertmanager", name).inc(n)
        return {"stored": n}

    return r
