"""The receiver the seed documents describe, as the peer of hookd's ingest listener in
hookd-bench: verify the Standard Webhooks HMAC over the raw body, take an idempotency lock
with Redis SET NX (24 h), push the event on a Redis list, answer 202.

Environment: HOOKD_PEER_SECRET (whsec_...), HOOKD_PEER_REDIS (redis://127.0.0.1:PORT/0).
"""

import base64
import hashlib
import hmac
import json
import os
import time

import redis.asyncio as redis
from fastapi import FastAPI, Request, Response

SECRET = base64.b64decode(os.environ["HOOKD_PEER_SECRET"].removeprefix("whsec_"))
TOLERANCE = 300
app = FastAPI()
pool = redis.Redis.from_url(os.environ.get("HOOKD_PEER_REDIS", "redis://127.0.0.1:56379/0"))


def refused() -> Response:
    return Response(status_code=401, content=b'{"error":"bad signature"}', media_type="application/json")


@app.post("/in/{source}")
async def receive(source: str, request: Request) -> Response:
    body = await request.body()
    h = request.headers
    msg_id, ts, sigs = h.get("webhook-id"), h.get("webhook-timestamp"), h.get("webhook-signature")
    if not (msg_id and ts and sigs):
        return refused()
    try:
        if abs(time.time() - int(ts)) > TOLERANCE:
            return refused()
    except ValueError:
        return refused()
    expected = hmac.new(SECRET, f"{msg_id}.{ts}.".encode() + body, hashlib.sha256).digest()
    if not any(
        hmac.compare_digest(expected, base64.b64decode(s[3:]))
        for s in sigs.split(" ")
        if s.startswith("v1,")
    ):
        return refused()
    # Idempotency lock, then the queue: two round trips, as the seed design has them.
    if not await pool.set(f"idem:{source}:{msg_id}", "1", nx=True, ex=86400):
        return Response(status_code=202, content=json.dumps({"id": msg_id, "duplicate": True}), media_type="application/json")
    await pool.lpush(f"queue:{source}", body)
    return Response(status_code=202, content=json.dumps({"id": msg_id, "duplicate": False}), media_type="application/json")
