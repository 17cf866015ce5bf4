"""hookd's Python client: a thin gRPC client and an Emitter for agents that must never block.

    from hookd_client import Emitter, queue

    emitter = Emitter("127.0.0.1:7700")
    emitter.emit(queue("jobs", b'{"step": 1}', event_type="agent.step_finished"))
    left = emitter.close(timeout=10)  # the events hookd had not acknowledged by then

`Emitter` (threads) and `AsyncEmitter` (asyncio) share the semantics of the Rust client's
Emitter: `emit` never waits (a bounded buffer of 10,000 events; full, it raises `BufferFull`
at once; from 8,000, or on hookd's throttle hint, `slow_down()` is true), background
batching into EnqueueBatch, an idempotency key per event kept across retries, retries of
UNAVAILABLE / RESOURCE_EXHAUSTED / DEADLINE_EXCEEDED that honour the server's
`google.rpc.RetryInfo`, counters that add up (emitted = sent + failed + abandoned +
buffered), and `flush` / `close` with a deadline that return the events still
unacknowledged (`strict=True` raises `Unflushed` with them instead).
"""

from ._proto import hookd_pb2 as pb
from ._proto import hookd_pb2_grpc as pb_grpc
from . import route
from .emitter import (
    AsyncEmitter,
    BufferFull,
    Closed,
    Counters,
    EmitError,
    Emitter,
    EmitterConfig,
    Unflushed,
    endpoint,
    metadata,
    queue,
    topic,
    url,
)

__all__ = [
    "route",
    "AsyncEmitter",
    "BufferFull",
    "Closed",
    "Counters",
    "EmitError",
    "Emitter",
    "EmitterConfig",
    "Unflushed",
    "endpoint",
    "metadata",
    "pb",
    "pb_grpc",
    "queue",
    "topic",
    "url",
]
