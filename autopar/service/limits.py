"""Request-size limit of the service: a body over the limit is refused with 413 before it is read whole.

A pure ASGI middleware (no dependency beyond what FastAPI brings): a declared Content-Length over the limit is
refused at once; a body sent without one (chunked) is read as it arrives, at most the limit kept, and refused
when it passes the limit: the application sees a body only once it is whole, so nothing acts on a part of it.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


async def _refuse(send: Send, max_bytes: int) -> None:
    body = json.dumps(
        {
            "detail": [
                {
                    "loc": ["body"],
                    "msg": f"the request body is over the service's limit of {max_bytes:,} bytes",
                    "type": "too_large",
                }
            ]
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """Refuse request bodies over `max_bytes` with 413."""

    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await _refuse(send, self.max_bytes)
            return
        chunks, seen = [], 0
        while True:  # read the whole body first (at most max_bytes kept), so nothing acts on a part of it
            message = await receive()
            if message["type"] != "http.request":
                break
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                await _refuse(send, self.max_bytes)
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)
