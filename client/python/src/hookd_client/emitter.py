"""The Emitter: fire-and-forget events with a bounded buffer (see the package's docstring)."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import random
import threading
import time
import uuid
from typing import Callable, Deque, List, Optional, Tuple, Union

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


Payload = Union[bytes, str, dict, list, int, float, bool, None]


def _bytes(payload: Payload) -> bytes:
    """The payload as stored: bytes as they are, text as UTF-8, anything else (a dict, a
    list, a number...) as its compact JSON, which push delivery sends as application/json."""
    if isinstance(payload, (bytes, bytearray, memoryview)):
        return bytes(payload)
    if isinstance(payload, str):
        return payload.encode()
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


def queue(name: str, payload: Payload, **fields) -> pb.EnqueueRequest:
    """An event for a pull queue (fields: event_type, idempotency_key, headers, delay_ms,
    ordering_key...). The payload: bytes, text, or a JSON value (a dict, a list...)."""
    return pb.EnqueueRequest(queue=name, payload=_bytes(payload), **fields)


def endpoint(name: str, payload: Payload, **fields) -> pb.EnqueueRequest:
    """An event for a registered endpoint."""
    return pb.EnqueueRequest(endpoint=name, payload=_bytes(payload), **fields)


def url(address: str, payload: Payload, **fields) -> pb.EnqueueRequest:
    """An event for an ad-hoc URL."""
    return pb.EnqueueRequest(url=address, payload=_bytes(payload), **fields)


def topic(name: str, payload: Payload, **fields) -> pb.EnqueueRequest:
    """An event published to a topic (its event type): one delivery per subscription that takes it."""
    return pb.EnqueueRequest(topic=name, payload=_bytes(payload), **fields)


class EmitError(Exception):
    """emit() did not take the event (it was not buffered and will not be sent)."""


class BufferFull(EmitError):
    def __init__(self, capacity: int):
        super().__init__(f"the emitter's buffer is full ({capacity} events); the event was not taken")
        self.capacity = capacity


class Closed(EmitError):
    def __init__(self):
        super().__init__("the emitter is closed")


class Unflushed(Exception):
    """flush(strict=True) or close(strict=True) ran out of time: `events` were still
    unacknowledged (without strict, they are returned instead)."""

    def __init__(self, events: List[pb.EnqueueRequest]):
        super().__init__(f"{len(events)} events were not yet acknowledged by hookd when the deadline passed")
        self.events = events
        self.left = len(events)


@dataclasses.dataclass
class EmitterConfig:
    capacity: int = 10_000
    # From this many held, slow_down() is true (emit never waits).
    slow_down_at: int = 8_000
    max_batch: int = 500
    retry_base_s: float = 0.05
    retry_cap_s: float = 5.0
    call_timeout_s: float = 10.0


@dataclasses.dataclass
class Counters:
    """A consistent snapshot. emitted = sent + failed + abandoned + buffered."""

    emitted: int = 0
    buffered: int = 0
    sent: int = 0
    duplicates: int = 0
    pressured: int = 0
    refused: int = 0
    retries: int = 0
    failed: int = 0
    abandoned: int = 0


TENANT_HEADER = "x-hookd-tenant"


def metadata(token: Optional[str] = None, tenant: Optional[str] = None) -> List[Tuple[str, str]]:
    """The gRPC metadata of a call: `authorization: Bearer TOKEN` when a token is given,
    and `x-hookd-tenant: NAME` when a tenant is (an operator's token acting on that
    tenant; a tenant's own token needs none). Pass it as `metadata=` to any stub call."""
    out: List[Tuple[str, str]] = []
    if token:
        out.append(("authorization", f"Bearer {token}"))
    if tenant:
        out.append((TENANT_HEADER, tenant))
    return out


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


def _copy(event: pb.EnqueueRequest) -> pb.EnqueueRequest:
    c = pb.EnqueueRequest()
    c.CopyFrom(event)
    return c


class _Core:
    """State shared by both emitters: the buffer, the counters, and what an answer means.
    The callers hold their lock around every method that changes it; the sender works out
    what an answer means (`outcome`) outside the lock, so emit never waits on that."""

    def __init__(self, config: EmitterConfig, now: Callable[[], float]):
        self.config = config
        self.now = now
        self.queue: Deque[pb.EnqueueRequest] = collections.deque()
        # Taken by the sender, not yet acknowledged, in order (the front is sent first).
        self.inflight: List[pb.EnqueueRequest] = []
        self.closed = False
        # close() gave the held events back: the sender stops and ignores a late answer.
        self.abandoned = False
        self.alone = False
        self.hinted_until = 0.0
        self.counters = Counters()
        self.last_error: Optional[str] = None
        self.failures = 0

    def held(self) -> int:
        return len(self.queue) + len(self.inflight)

    def slow_down(self) -> bool:
        return self.held() >= self.config.slow_down_at or self.hinted_until > self.now()

    def admit(self, event: pb.EnqueueRequest) -> None:
        """Buffers `event` (with a key kept across retries) or raises, at once."""
        if self.closed:
            raise Closed()
        if self.held() >= self.config.capacity:
            self.counters.refused += 1
            raise BufferFull(self.config.capacity)
        if self.slow_down():
            self.counters.pressured += 1
        if not event.idempotency_key:
            event.idempotency_key = str(uuid.uuid4())
        self.counters.emitted += 1
        self.queue.append(event)

    def next_batch(self) -> Optional[pb.EnqueueBatchRequest]:
        """The front of what is in flight (refilled from the queue when empty), or None."""
        if self.abandoned:
            return None
        if not self.inflight:
            self.alone = False
            n = min(len(self.queue), max(1, self.config.max_batch))
            self.inflight = [self.queue.popleft() for _ in range(n)]
        if not self.inflight:
            return None
        take = 1 if self.alone else len(self.inflight)
        return pb.EnqueueBatchRequest(events=self.inflight[:take])

    def backoff(self) -> float:
        ceiling = min(self.config.retry_cap_s, self.config.retry_base_s * (2 ** min(self.failures, 20)))
        self.failures += 1
        return random.uniform(0, ceiling)

    @staticmethod
    def outcome(take: int, response) -> tuple:
        """What an EnqueueBatch answer means for the first `take` events, worked out without
        the lock: (kinds, counts, delay, last_error), kind per event: ok, dup, again, failed."""
        kinds = []
        delay: Optional[float] = None
        last_error = None
        results = list(response.results)
        for i in range(take):
            result = results[i] if i < len(results) else None
            kind = result.WhichOneof("result") if result is not None else None
            if kind == "ok":
                kinds.append("dup" if result.ok.duplicate else "ok")
            elif kind == "error" and result.error.code in RETRYABLE_CODES:
                if result.error.retry_after_ms:
                    d = result.error.retry_after_ms / 1000
                    delay = d if delay is None else max(delay, d)
                last_error = result.error.message
                kinds.append("again")
            elif kind == "error":
                last_error = result.error.message
                kinds.append("failed")
            else:
                kinds.append("again")  # no answer for it: its key makes a resend safe
        return kinds, delay, last_error

    def answered(self, take: int, response, worked) -> tuple:
        """Applies an answer (its `outcome`); returns (pause, delay or None: no retry)."""
        kinds, delay, last_error = worked
        sent = self.inflight[:take]
        again = [e for e, k in zip(sent, kinds) if k == "again"]
        ok = sum(1 for k in kinds if k in ("ok", "dup"))
        self.counters.sent += ok
        self.counters.duplicates += kinds.count("dup")
        self.counters.failed += kinds.count("failed")
        if last_error is not None:
            self.last_error = last_error
        self.inflight = again + self.inflight[take:]
        pause = response.throttle_ms / 1000 if response.throttle_ms else 0.0
        if pause:
            self.hinted_until = max(self.hinted_until, self.now() + pause)
        if not self.inflight or (delay is None and ok > 0):
            self.failures = 0
            return pause, None
        return pause, (self.backoff() if delay is None else delay)

    def call_failed(self, take: int, code, details: str, delay: Optional[float]) -> Optional[float]:
        """Applies a failed call; returns the delay before a retry, or None (go on at once:
        a final refusal makes events go one per call, and drops a lone one)."""
        self.last_error = f"{code.name}: {details}"
        if code in RETRYABLE:
            return self.backoff() if delay is None else delay
        if take > 1:
            self.alone = True
        else:
            self.counters.failed += 1
            self.inflight = self.inflight[1:]
        return None

    def held_events(self) -> List[pb.EnqueueRequest]:
        return [_copy(e) for e in self.inflight] + [_copy(e) for e in self.queue]

    def give_back(self) -> List[pb.EnqueueRequest]:
        """close() at its deadline: everything held leaves the emitter."""
        left = list(self.inflight) + list(self.queue)
        self.inflight = []
        self.queue.clear()
        self.abandoned = True
        self.counters.abandoned += len(left)
        return left

    def snapshot(self) -> Counters:
        c = dataclasses.replace(self.counters)
        c.buffered = self.held()
        return c


class Emitter:
    """Buffers events and sends them to hookd from a background thread. emit() never waits."""

    def __init__(
        self,
        target: str = "127.0.0.1:7700",
        config: Optional[EmitterConfig] = None,
        *,
        channel: Optional[grpc.Channel] = None,
        token: Optional[str] = None,
        tenant: Optional[str] = None,
        send: Optional[Callable[[pb.EnqueueBatchRequest, float], pb.EnqueueBatchResponse]] = None,
        sleep: Optional[Callable[[float], None]] = None,
        now: Callable[[], float] = time.monotonic,
    ):
        self._core = _Core(config or EmitterConfig(), now)
        self._lock = threading.Condition()
        # Wakes the sender out of a pause when close() gives the events back.
        self._stop = threading.Event()
        self._sleep = sleep or self._stop.wait
        self._call = None
        if send is None:
            self._channel = channel or grpc.insecure_channel(target)
            stub = pb_grpc.HookdStub(self._channel)

            headers = metadata(token=token, tenant=tenant)

            def send(batch, timeout):
                call = stub.EnqueueBatch.future(batch, timeout=timeout, metadata=headers)
                self._call = call
                try:
                    return call.result()
                finally:
                    self._call = None

        self._send = send
        self._thread = threading.Thread(target=self._run, name="hookd-emitter", daemon=True)
        self._thread.start()

    def emit(self, event: pb.EnqueueRequest) -> None:
        """Takes an event, or raises BufferFull (buffer full) or Closed (after close()) at
        once. Never waits for hookd."""
        with self._lock:
            self._core.admit(event)
            self._lock.notify_all()

    def slow_down(self) -> bool:
        """True while the buffer is at or above slow_down_at or hookd asked producers to
        slow down: an agent that can produce less should. emit() takes events regardless."""
        with self._lock:
            return self._core.slow_down()

    def counters(self) -> Counters:
        with self._lock:
            return self._core.snapshot()

    @property
    def last_error(self) -> Optional[str]:
        return self._core.last_error

    def flush(self, timeout: float, *, strict: bool = False) -> List[pb.EnqueueRequest]:
        """Waits until every event taken so far is acknowledged (or refused for good), or
        the deadline; returns copies of the events still unacknowledged (empty when none),
        which stay buffered. With strict=True, raises Unflushed instead of returning them."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._core.held() and not self._core.abandoned:
                left = deadline - time.monotonic()
                if left <= 0:
                    events = self._core.held_events()
                    if strict:
                        raise Unflushed(events)
                    return events
                self._lock.wait(left)
        return []

    def close(self, timeout: float, *, strict: bool = False) -> List[pb.EnqueueRequest]:
        """Refuses new events, sends what is held until the deadline, and stops the thread.
        Returns the events still unacknowledged then (empty when none): they leave the
        emitter (counted in `abandoned`); their idempotency keys make sending them again
        later safe. With strict=True, raises Unflushed instead of returning them."""
        with self._lock:
            self._core.closed = True
            self._lock.notify_all()
        if not self.flush(timeout):
            return []
        with self._lock:
            left = self._core.give_back()
            self._lock.notify_all()
        self._stop.set()
        call = self._call
        if call is not None:
            call.cancel()
        if strict and left:
            raise Unflushed(left)
        return left

    def _run(self) -> None:
        core = self._core
        while True:
            with self._lock:
                while True:
                    if core.abandoned:
                        return
                    request = core.next_batch()
                    if request is not None:
                        break
                    self._lock.notify_all()
                    if core.closed:
                        return
                    self._lock.wait()
            take = len(request.events)
            pause = 0.0
            delay: Optional[float] = None
            try:
                response = self._send(request, core.config.call_timeout_s)
            except grpc.RpcError as e:
                code, details = e.code(), e.details()
                hint = retry_info(e) if code in RETRYABLE else None
                with self._lock:
                    if core.abandoned:
                        return
                    delay = core.call_failed(take, code, details, hint)
                    self._lock.notify_all()
            except grpc.FutureCancelledError:
                return
            else:
                worked = core.outcome(take, response)
                with self._lock:
                    if core.abandoned:
                        return
                    pause, delay = core.answered(take, response, worked)
                    self._lock.notify_all()
            if delay is not None:
                with self._lock:
                    core.counters.retries += 1
            wait = pause + (delay or 0.0)
            if wait:
                self._sleep(wait)


class AsyncEmitter:
    """The asyncio Emitter: `emit(...)` takes an event at once (it is a plain method: no
    await needed); a background task sends. Create it inside a running event loop."""

    def __init__(
        self,
        target: str = "127.0.0.1:7700",
        config: Optional[EmitterConfig] = None,
        *,
        channel: Optional[grpc.aio.Channel] = None,
        token: Optional[str] = None,
        tenant: Optional[str] = None,
        send=None,
        sleep=asyncio.sleep,
        now: Callable[[], float] = time.monotonic,
    ):
        self._core = _Core(config or EmitterConfig(), now)
        self._sleep = sleep
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()
        if send is None:
            self._channel = channel or grpc.aio.insecure_channel(target)
            stub = pb_grpc.HookdStub(self._channel)

            headers = metadata(token=token, tenant=tenant)

            async def send(batch, timeout):
                return await stub.EnqueueBatch(batch, timeout=timeout, metadata=headers)

        self._send = send
        self._task = asyncio.get_running_loop().create_task(self._run())

    def emit(self, event: pb.EnqueueRequest) -> None:
        """Takes an event, or raises BufferFull or Closed at once."""
        self._core.admit(event)
        self._wake.set()

    def slow_down(self) -> bool:
        return self._core.slow_down()

    def counters(self) -> Counters:
        return self._core.snapshot()

    @property
    def last_error(self) -> Optional[str]:
        return self._core.last_error

    async def flush(self, timeout: float, *, strict: bool = False) -> List[pb.EnqueueRequest]:
        """As Emitter.flush."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._core.held() and not self._core.abandoned:
            left = deadline - loop.time()
            if left <= 0:
                events = self._core.held_events()
                if strict:
                    raise Unflushed(events)
                return events
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except asyncio.TimeoutError:
                pass
        return []

    async def close(self, timeout: float, *, strict: bool = False) -> List[pb.EnqueueRequest]:
        """As Emitter.close."""
        self._core.closed = True
        self._wake.set()
        left = await self.flush(timeout)
        if left:
            left = self._core.give_back()
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        if strict and left:
            raise Unflushed(left)
        return left

    async def _run(self) -> None:
        core = self._core
        while True:
            request = core.next_batch()
            if request is None:
                self._changed.set()
                if core.closed or core.abandoned:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            take = len(request.events)
            pause = 0.0
            try:
                response = await self._send(request, core.config.call_timeout_s)
            except grpc.RpcError as e:
                code = e.code()
                delay = core.call_failed(take, code, e.details(), retry_info(e) if code in RETRYABLE else None)
            else:
                pause, delay = core.answered(take, response, core.outcome(take, response))
            self._changed.set()
            if delay is not None:
                core.counters.retries += 1
            wait = pause + (delay or 0.0)
            if wait:
                await self._sleep(wait)
