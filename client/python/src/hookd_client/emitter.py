"""The Emitter: fire-and-forget events with a bounded buffer (see the package's docstring)."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import random
import threading
import time
import uuid
from typing import Callable, Deque, List, Optional

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from ._proto import hookd_pb2 as pb
from ._proto import hookd_pb2_grpc as pb_grpc

RETRYABLE = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.ABORTED,
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.CANCELLED,
}
RETRYABLE_CODES = {c.value[0] for c in RETRYABLE}


def queue(name: str, payload: bytes, **fields) -> pb.EnqueueRequest:
    """An event for a pull queue (fields: event_type, idempotency_key, headers, delay_ms, ordering_key...)."""
    return pb.EnqueueRequest(queue=name, payload=payload, **fields)


def endpoint(name: str, payload: bytes, **fields) -> pb.EnqueueRequest:
    """An event for a registered endpoint."""
    return pb.EnqueueRequest(endpoint=name, payload=payload, **fields)


def url(address: str, payload: bytes, **fields) -> pb.EnqueueRequest:
    """An event for an ad-hoc URL."""
    return pb.EnqueueRequest(url=address, payload=payload, **fields)


def topic(name: str, payload: bytes, **fields) -> pb.EnqueueRequest:
    """An event published to a topic (its event type): one delivery per subscription that takes it."""
    return pb.EnqueueRequest(topic=name, payload=payload, **fields)


class EmitError(Exception):
    """emit() did not take the event."""


class BufferFull(EmitError):
    def __init__(self, capacity: int):
        super().__init__(f"the emitter's buffer is full ({capacity} events); the event was not taken")
        self.capacity = capacity


class Closed(EmitError):
    def __init__(self):
        super().__init__("the emitter is closed")


class Unflushed(Exception):
    """flush() or close() ran out of time with events still unacknowledged."""

    def __init__(self, left: int):
        super().__init__(f"{left} events were not yet acknowledged by hookd when the deadline passed")
        self.left = left


@dataclasses.dataclass
class EmitterConfig:
    capacity: int = 10_000
    throttle_at: int = 8_000
    throttle_pause_s: float = 0.1
    max_batch: int = 500
    retry_base_s: float = 0.05
    retry_cap_s: float = 5.0
    call_timeout_s: float = 10.0


@dataclasses.dataclass
class Counters:
    buffered: int = 0
    sent: int = 0
    duplicates: int = 0
    throttled: int = 0
    refused: int = 0
    retries: int = 0
    failed: int = 0


def retry_info(error: grpc.RpcError) -> Optional[float]:
    """The server's RetryInfo delay in seconds, if the status carries one."""
    try:
        status = rpc_status.from_call(error)
    except Exception:  # noqa: BLE001 - a malformed trailer is treated as absent
        return None
    if status is None:
        return None
    for detail in status.details:
        if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            info = error_details_pb2.RetryInfo()
            detail.Unpack(info)
            return info.retry_delay.seconds + info.retry_delay.nanos / 1e9
    return None


class _Core:
    """State shared by both emitters: the buffer, the counters, and what an answer means."""

    def __init__(self, config: EmitterConfig, now: Callable[[], float]):
        self.config = config
        self.now = now
        self.queue: Deque[pb.EnqueueRequest] = collections.deque()
        self.sending = 0
        self.closed = False
        # close() ran out of time: the sender stops at its next step, leaving the rest unsent.
        self.abandoned = False
        self.hinted_until = 0.0
        self.counters = Counters()
        self.last_error: Optional[str] = None
        self.failures = 0

    def held(self) -> int:
        return len(self.queue) + self.sending

    def must_pause(self) -> bool:
        return self.held() >= self.config.throttle_at or self.hinted_until > self.now()

    def admit(self, event: pb.EnqueueRequest) -> None:
        """Buffers `event` (with a key kept across retries) or raises."""
        if self.held() >= self.config.capacity:
            self.counters.refused += 1
            raise BufferFull(self.config.capacity)
        if not event.idempotency_key:
            event.idempotency_key = str(uuid.uuid4())
        self.queue.append(event)

    def take(self) -> List[pb.EnqueueRequest]:
        n = min(len(self.queue), max(1, self.config.max_batch))
        batch = [self.queue.popleft() for _ in range(n)]
        self.sending = n
        return batch

    def backoff(self) -> float:
        ceiling = min(self.config.retry_cap_s, self.config.retry_base_s * (2 ** min(self.failures, 20)))
        self.failures += 1
        return random.uniform(0, ceiling)

    def answered(self, pending: List[pb.EnqueueRequest], take: int, response) -> tuple:
        """Applies an EnqueueBatch answer for pending[:take]; returns (left, delay, pause)."""
        again: List[pb.EnqueueRequest] = []
        delay: Optional[float] = None
        ok = 0
        results = list(response.results)
        for i, event in enumerate(pending[:take]):
            result = results[i] if i < len(results) else None
            kind = result.WhichOneof("result") if result is not None else None
            if kind == "ok":
                ok += 1
                self.counters.sent += 1
                self.counters.duplicates += int(result.ok.duplicate)
            elif kind == "error" and result.error.code in RETRYABLE_CODES:
                if result.error.retry_after_ms:
                    d = result.error.retry_after_ms / 1000
                    delay = d if delay is None else max(delay, d)
                self.last_error = result.error.message
                again.append(event)
            elif kind == "error":
                self.counters.failed += 1
                self.last_error = result.error.message
            else:
                again.append(event)  # no answer for it: its key makes a resend safe
        left = again + pending[take:]
        self.sending = len(left)
        pause = response.throttle_ms / 1000 if response.throttle_ms else 0.0
        if pause:
            self.hinted_until = max(self.hinted_until, self.now() + pause)
        if not left or (delay is None and ok > 0):
            self.failures = 0
            delay = None
        elif delay is None:
            delay = self.backoff()
        return left, delay, pause

    def call_failed(self, pending: List[pb.EnqueueRequest], take: int, error: grpc.RpcError) -> tuple:
        """Applies a failed call for pending[:take]; returns (left, delay, alone): retry all
        after `delay`, or (a final refusal) resend one per call, or drop a lone event."""
        self.last_error = f"{error.code().name}: {error.details()}"
        if error.code() in RETRYABLE:
            delay = retry_info(error)
            return pending, (self.backoff() if delay is None else delay), False
        if take > 1:
            return pending, None, True
        self.counters.failed += 1
        self.sending = len(pending) - 1
        return pending[1:], None, True

    def snapshot(self) -> Counters:
        c = dataclasses.replace(self.counters)
        c.buffered = self.held()
        return c


class Emitter:
    """Buffers events and sends them to hookd from a background thread."""

    def __init__(
        self,
        target: str = "127.0.0.1:7700",
        config: Optional[EmitterConfig] = None,
        *,
        channel: Optional[grpc.Channel] = None,
        send: Optional[Callable[[pb.EnqueueBatchRequest, float], pb.EnqueueBatchResponse]] = None,
        sleep: Callable[[float], None] = time.sleep,
        now: Callable[[], float] = time.monotonic,
    ):
        self._core = _Core(config or EmitterConfig(), now)
        self._sleep = sleep
        self._lock = threading.Condition()
        if send is None:
            self._channel = channel or grpc.insecure_channel(target)
            stub = pb_grpc.HookdStub(self._channel)
            send = lambda batch, timeout: stub.EnqueueBatch(batch, timeout=timeout)  # noqa: E731
        self._send = send
        self._thread = threading.Thread(target=self._run, name="hookd-emitter", daemon=True)
        self._thread.start()

    def emit(self, event: pb.EnqueueRequest) -> None:
        """Takes an event. Returns at once, or after one throttle pause; raises BufferFull
        when the buffer is full and Closed after close()."""
        with self._lock:
            if self._core.closed:
                raise Closed()
            pause = self._core.must_pause()
            if pause:
                self._core.counters.throttled += 1
        if pause:
            self._sleep(self._core.config.throttle_pause_s)
        with self._lock:
            self._core.admit(event)
            self._lock.notify_all()

    def counters(self) -> Counters:
        with self._lock:
            return self._core.snapshot()

    @property
    def last_error(self) -> Optional[str]:
        return self._core.last_error

    def flush(self, timeout: float) -> None:
        """Waits until every event taken so far is acknowledged; raises Unflushed at the deadline."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._core.held():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Unflushed(self._core.held())
                self._lock.wait(left)

    def close(self, timeout: float) -> None:
        """Refuses new events, sends what is buffered (until the deadline), stops the thread."""
        with self._lock:
            self._core.closed = True
            self._lock.notify_all()
        try:
            self.flush(timeout)
        except Unflushed:
            self._core.abandoned = True
            raise
        finally:
            with self._lock:
                self._lock.notify_all()

    def _run(self) -> None:
        core = self._core
        while True:
            with self._lock:
                while not core.queue:
                    self._lock.notify_all()
                    if core.closed:
                        return
                    self._lock.wait()
                pending = core.take()
            alone = False
            while pending:
                if core.abandoned:
                    return
                take = 1 if alone else len(pending)
                request = pb.EnqueueBatchRequest(events=pending[:take])
                delay: Optional[float] = None
                pause = 0.0
                try:
                    response = self._send(request, core.config.call_timeout_s)
                except grpc.RpcError as e:
                    with self._lock:
                        pending, delay, alone = core.call_failed(pending, take, e)
                        self._lock.notify_all()
                else:
                    with self._lock:
                        pending, delay, pause = core.answered(pending, take, response)
                        self._lock.notify_all()
                if pause:
                    self._sleep(pause)
                if delay is not None and pending:
                    with self._lock:
                        core.counters.retries += 1
                    self._sleep(delay)


class AsyncEmitter:
    """The asyncio Emitter: `await emit(...)`, a background task sends. Create it inside a
    running event loop."""

    def __init__(
        self,
        target: str = "127.0.0.1:7700",
        config: Optional[EmitterConfig] = None,
        *,
        channel: Optional[grpc.aio.Channel] = None,
        send=None,
        sleep=asyncio.sleep,
        now: Callable[[], float] = time.monotonic,
    ):
        self._core = _Core(config or EmitterConfig(), now)
        self._sleep = sleep
        self._changed = asyncio.Condition()
        if send is None:
            self._channel = channel or grpc.aio.insecure_channel(target)
            stub = pb_grpc.HookdStub(self._channel)

            async def send(batch, timeout):
                return await stub.EnqueueBatch(batch, timeout=timeout)

        self._send = send
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def emit(self, event: pb.EnqueueRequest) -> None:
        if self._core.closed:
            raise Closed()
        if self._core.must_pause():
            self._core.counters.throttled += 1
            await self._sleep(self._core.config.throttle_pause_s)
        self._core.admit(event)
        async with self._changed:
            self._changed.notify_all()

    def counters(self) -> Counters:
        return self._core.snapshot()

    @property
    def last_error(self) -> Optional[str]:
        return self._core.last_error

    async def flush(self, timeout: float) -> None:
        async def drained():
            async with self._changed:
                await self._changed.wait_for(lambda: self._core.held() == 0)

        try:
            await asyncio.wait_for(drained(), timeout)
        except asyncio.TimeoutError:
            raise Unflushed(self._core.held()) from None

    async def close(self, timeout: float) -> None:
        self._core.closed = True
        async with self._changed:
            self._changed.notify_all()
        try:
            await self.flush(timeout)
        except Unflushed:
            self._core.abandoned = True
            raise
        finally:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def _run(self) -> None:
        core = self._core
        while True:
            async with self._changed:
                await self._changed.wait_for(lambda: core.queue or core.closed)
                if not core.queue:
                    return
                pending = core.take()
            alone = False
            while pending:
                take = 1 if alone else len(pending)
                request = pb.EnqueueBatchRequest(events=pending[:take])
                delay: Optional[float] = None
                pause = 0.0
                try:
                    response = await self._send(request, core.config.call_timeout_s)
                except grpc.RpcError as e:
                    pending, delay, alone = core.call_failed(pending, take, e)
                    await self._notify()
                else:
                    pending, delay, pause = core.answered(pending, take, response)
                    await self._notify()
                if pause:
                    await self._sleep(pause)
                if delay is not None and pending:
                    core.counters.retries += 1
                    await self._sleep(delay)
