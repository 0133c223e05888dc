"""Helpers of the broker tests: the machine's real NATS (JetStream) and Mosquitto."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest

NATS_URL = "nats://127.0.0.1:4222"


def answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def need(port: int, what: str) -> None:
    if not answers(port):
        pytest.skip(f"no {what} at 127.0.0.1:{port} (.ci/run starts one)")


async def _fresh_stream(name: str, subjects: list[str]) -> None:
    import nats
    from nats.js.api import StreamConfig
    from nats.js.errors import NotFoundError

    nc = await nats.connect(NATS_URL)
    try:
        js = nc.jetstream()
        try:
            await js.delete_stream(name)
        except NotFoundError:
            pass
        await js.add_stream(StreamConfig(name=name, subjects=subjects))
    finally:
        await nc.close()


def fresh_stream(name: str, subjects: list[str]) -> None:
    """A new, empty JetStream stream ``name`` (an old one of that name is deleted)."""
    asyncio.run(_fresh_stream(name, subjects))


async def _publish(subject: str, payloads: list[dict]) -> list[int]:
    import nats

    nc = await nats.connect(NATS_URL)
    try:
        js = nc.jetstream()
        return [(await js.publish(subject, json.dumps(p).encode())).seq for p in payloads]
    finally:
        await nc.close()


def publish(subject: str, payloads: list[dict]) -> list[int]:
    """Publish to JetStream, each acknowledged; their stream sequences."""
    return asyncio.run(_publish(subject, payloads))


def delete_stream(name: str) -> None:
    async def go():
        import nats

        nc = await nats.connect(NATS_URL)
        try:
            await nc.jetstream().delete_stream(name)
        except Exception:  # already gone
            pass
        finally:
            await nc.close()

    asyncio.run(go())
