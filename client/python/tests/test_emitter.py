"""The Python Emitter: its buffer rules on a fake hookd with an injected sleep, then against a
real hookd at HOOKD_ADDR (required) configured as client/test-hookd.toml says (small marks:
the hard-mark test needs them). The cargo test python_client_package starts that hookd;
by hand: `hookd serve --config client/test-hookd.toml`."""

import asyncio
import os
import threading

import grpc
import pytest

from hookd_client import (
    AsyncEmitter,
    BufferFull,
    Closed,
    Emitter,
    Unflushed,
    EmitterConfig,
    pb,
    pb_grpc,
    queue,
    topic,
)
from hookd_client import metadata
from hookd_client.emitter import retry_info


class FakeHookd:
    """Answers EnqueueBatch calls: stores keys (duplicates answered as such), can hold calls
    until released, refuse items with a retry delay, or suggest a throttle pause."""

    def __init__(self, script=()):
        self.script = list(script)
        self.stored = set()
        self.calls = []
        self.gate = threading.Event()
        self.gate.set()

    def send(self, batch, timeout):
        self.gate.wait()
        keys = [e.idempotency_key for e in batch.events]
        self.calls.append(keys)
        step = self.script.pop(0) if self.script else "accept"
        results = []
        for k in keys:
            if step == "busy":
                results.append(pb.EnqueueResult(error=pb.Error(code=8, message="over the hard mark", retry_after_ms=1500)))
            else:
                dup = k in self.stored
                self.stored.add(k)
                results.append(pb.EnqueueResult(ok=pb.EnqueueResponse(id=k, duplicate=dup)))
        return pb.EnqueueBatchResponse(results=results, throttle_ms=400 if step == "throttle" else 0)


def test_a_full_buffer_refuses_at_once_and_slow_down_says_so_first():
    fake = FakeHookd()
    fake.gate.clear()  # hookd does not answer: the buffer only fills
    pauses = []
    e = Emitter(config=EmitterConfig(capacity=10, slow_down_at=8), send=fake.send, sleep=pauses.append)
    taken = 0
    refused = 0
    slow = []
    for i in range(12):
        slow.append(e.slow_down())
        try:
            e.emit(queue("q", str(i).encode()))
            taken += 1
        except BufferFull:
            refused += 1
    assert (taken, refused) == (10, 2)
    assert pauses == []  # emit never waits
    assert slow.count(True) == 4 and not slow[7] and slow[8]
    c = e.counters()
    assert (c.emitted, c.buffered, c.pressured, c.refused) == (10, 10, 2, 2)
    fake.gate.set()
    assert e.close(timeout=5) == []
    c = e.counters()
    assert (c.sent, c.emitted) == (10, 10)
    with pytest.raises(Closed):
        e.emit(queue("q", b"late"))


def test_close_at_its_deadline_returns_the_unacknowledged_events_and_stops():
    fake = FakeHookd()
    fake.gate.clear()  # the call hangs
    e = Emitter(send=fake.send)
    for i in range(3):
        e.emit(queue("q", str(i).encode(), idempotency_key=f"k{i}"))
    left = e.close(timeout=0.2)
    assert [ev.idempotency_key for ev in left] == ["k0", "k1", "k2"]
    fake.gate.set()  # the answer comes late: given back means not acknowledged
    e._thread.join(5)
    assert not e._thread.is_alive()
    c = e.counters()
    assert (c.emitted, c.sent, c.abandoned, c.buffered) == (3, 0, 3, 0), c


def test_strict_flush_raises_with_the_events():
    fake = FakeHookd()
    fake.gate.clear()
    e = Emitter(send=fake.send)
    e.emit(queue("q", b"x", idempotency_key="only"))
    with pytest.raises(Unflushed) as err:
        e.flush(timeout=0.1, strict=True)
    assert [ev.idempotency_key for ev in err.value.events] == ["only"]
    fake.gate.set()
    assert e.flush(timeout=5) == []


def test_async_emit_is_a_plain_call_and_close_returns_what_is_left():
    async def main():
        never = asyncio.Event()

        async def send(batch, timeout):
            await never.wait()

        e = AsyncEmitter(send=send, config=EmitterConfig(capacity=2))
        e.emit(queue("q", b"a"))
        e.emit(queue("q", b"b"))
        with pytest.raises(BufferFull):
            e.emit(queue("q", b"c"))
        left = await e.close(timeout=0.1)
        return len(left), e.counters()

    n, c = asyncio.run(main())
    assert n == 2
    assert (c.emitted, c.refused, c.abandoned, c.sent) == (2, 1, 2, 0), c


def test_a_refused_item_waits_the_servers_retry_delay_and_keeps_its_key():
    fake = FakeHookd(script=["busy", "accept"])
    sleeps = []
    e = Emitter(send=fake.send, sleep=sleeps.append)
    for i in range(3):
        e.emit(queue("q", str(i).encode()))
    e.flush(timeout=5)
    assert sleeps == [1.5]
    assert fake.calls[0] == fake.calls[1]
    assert len({k for call in fake.calls for k in call}) == 3
    c = e.counters()
    assert (c.sent, c.retries, c.failed) == (3, 1, 0)
    e.close(timeout=1)


def test_a_throttle_hint_asks_for_slow_down_and_pauses_the_sender():
    fake = FakeHookd(script=["throttle"])
    sleeps = []
    e = Emitter(send=fake.send, sleep=sleeps.append)
    e.emit(queue("q", b"a"))
    e.flush(timeout=5)
    assert e.slow_down()  # hookd asked for 400 ms
    e.emit(queue("q", b"b"))  # taken at once all the same
    e.close(timeout=5)
    assert sleeps == [0.4]
    assert e.counters().pressured == 1


def addr():
    a = os.environ.get("HOOKD_ADDR")
    assert a, "HOOKD_ADDR must name a running hookd configured as client/test-hookd.toml (the cargo test python_client_package starts one)"
    return a


def drain(stub, name):
    got = []
    while True:
        r = stub.Receive(pb.ReceiveRequest(queue=name, max_messages=1000, visibility_timeout_ms=600000))
        if not r.messages:
            return got
        got.extend(r.messages)


def test_sync_emitter_against_hookd():
    e = Emitter(addr())
    for i in range(500):
        e.emit(queue("py-sync", f"ev-{i}".encode(), event_type="agent.step"))
    e.close(timeout=30)
    c = e.counters()
    assert (c.sent, c.failed, c.buffered) == (500, 0, 0), c
    stub = pb_grpc.HookdStub(grpc.insecure_channel(addr()))
    got = drain(stub, "py-sync")
    assert sorted(m.payload for m in got) == sorted(f"ev-{i}".encode() for i in range(500))
    assert {m.event_type for m in got} == {"agent.step"}


def test_async_emitter_against_hookd():
    async def main():
        e = AsyncEmitter(addr())
        for i in range(300):
            e.emit(queue("py-async", f"ev-{i}".encode()))
        await e.close(timeout=30)
        return e.counters()

    c = asyncio.run(main())
    assert (c.sent, c.failed, c.buffered) == (300, 0, 0), c
    stub = pb_grpc.HookdStub(grpc.insecure_channel(addr()))
    assert len(drain(stub, "py-async")) == 300


def test_an_emitter_for_a_tenant_stores_its_events_in_that_tenant():
    stub = pb_grpc.HookdStub(grpc.insecure_channel(addr()))
    stub.CreateTenant(pb.CreateTenantRequest(tenant=pb.Tenant(name="py-tenant")))
    e = Emitter(addr(), tenant="py-tenant")
    for i in range(50):
        e.emit(queue("py-tenanted", f"t-{i}".encode()))
    e.close(timeout=30)
    assert e.counters().sent == 50, e.counters()
    # The tenant's queue holds them; tenant default's queue of that name does not.
    r = stub.Receive(
        pb.ReceiveRequest(queue="py-tenanted", max_messages=1000, visibility_timeout_ms=600000),
        metadata=metadata(tenant="py-tenant"),
    )
    assert len(r.messages) == 50
    assert drain(stub, "py-tenanted") == []
    with pytest.raises(grpc.RpcError) as e:
        stub.ListEndpoints(pb.ListEndpointsRequest(), metadata=metadata(tenant="py-nobody"))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    assert metadata(token="t", tenant="x") == [("authorization", "Bearer t"), ("x-hookd-tenant", "x")]


def test_hookd_at_its_hard_mark_sends_retry_info_and_the_emitter_waits_for_room():
    # The hookd under test holds at most 64 KiB of live messages per destination.
    stub = pb_grpc.HookdStub(grpc.insecure_channel(addr()))
    big = b"x" * 2048
    err = None
    for _ in range(100):
        try:
            stub.Enqueue(queue("py-full", big))
        except grpc.RpcError as e:
            err = e
            break
    assert err is not None, "hookd never refused"
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err
    assert "backpressure.destination_max_bytes" in err.details()
    assert retry_info(err) == pytest.approx(1.0)

    async def refused_async():
        async with grpc.aio.insecure_channel(addr()) as channel:
            try:
                await pb_grpc.HookdStub(channel).Enqueue(queue("py-full", big))
            except grpc.RpcError as e:  # grpc.aio.AioRpcError
                return e
        return None

    aio_err = asyncio.run(refused_async())
    assert aio_err is not None and aio_err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert retry_info(aio_err) == pytest.approx(1.0)
    slept = []
    sleep_event = threading.Event()

    def sleep(s):
        slept.append(s)
        sleep_event.set()
        import time

        time.sleep(min(s, 0.05))

    e = Emitter(addr(), sleep=sleep)
    for i in range(10):
        e.emit(queue("py-full", big, idempotency_key=f"late-{i}"))
    assert sleep_event.wait(10), "the emitter never backed off"
    assert 1.0 in slept  # RetryInfo's delay
    assert e.counters().sent == 0
    # Make room: consume what is held; the emitter's retries then get through.
    got = drain(stub, "py-full")
    stub.Ack(pb.AckRequest(lease_ids=[m.lease_id for m in got]))
    e.close(timeout=30)
    assert e.counters().sent == 10


def test_topic_builds_a_publish():
    r = topic("ticket.classified", b"{}", idempotency_key="k")
    assert (r.WhichOneof("destination"), r.topic, r.idempotency_key) == ("topic", "ticket.classified", "k")


def test_a_json_value_is_sent_as_its_compact_json():
    r = queue("q", {"step": 1, "note": "café"}, event_type="agent.step")
    assert r.payload == '{"step":1,"note":"café"}'.encode()
    assert topic("t", [1, 2]).payload == b"[1,2]"
    assert queue("q", "text").payload == b"text"
    assert queue("q", b"\x00raw").payload == b"\x00raw"

