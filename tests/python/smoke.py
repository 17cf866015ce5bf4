"""hookd from Python: the .proto files are the contract for clients in any language.

Generates the stubs from proto/hookd/v1/hookd.proto with grpcio-tools, then enqueues,
deduplicates, receives, acks, checks a bad request's status, and lists services through
server reflection v1alpha (the version Python's grpcio-reflection speaks).

Usage: smoke.py HOST:PORT PROTO_ROOT
"""

import importlib.resources
import sys
import tempfile

import grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from grpc_tools import protoc

# The well-known types (google/protobuf/struct.proto) grpcio-tools ships; protoc adds its own.
WKT = f"-I{importlib.resources.files('grpc_tools') / '_proto'}"


def main(addr: str, proto_root: str) -> None:
    out = tempfile.mkdtemp(prefix="hookd-py-")
    rc = protoc.main(
        [
            "protoc",
            f"-I{proto_root}", WKT,
            f"--python_out={out}",
            f"--grpc_python_out={out}",
            "hookd/v1/hookd.proto",
        ]
    )
    assert rc == 0, f"protoc failed with {rc}"
    # The generated modules import each other by package path.
    sys.path.insert(0, out)
    from hookd.v1 import hookd_pb2, hookd_pb2_grpc  # noqa: E402

    with grpc.insecure_channel(addr) as channel:
        stub = hookd_pb2_grpc.HookdStub(channel)

        first = stub.Enqueue(
            hookd_pb2.EnqueueRequest(queue="py", payload=b"hello from python", idempotency_key="py-1")
        )
        assert first.id and not first.duplicate, first
        again = stub.Enqueue(
            hookd_pb2.EnqueueRequest(queue="py", payload=b"hello from python", idempotency_key="py-1")
        )
        assert again.duplicate and again.id == first.id, again

        got = stub.Receive(hookd_pb2.ReceiveRequest(queue="py", max_messages=10, visibility_timeout_ms=30_000))
        assert len(got.messages) == 1, got
        message = got.messages[0]
        assert message.id == first.id and message.payload == b"hello from python", message
        acked = stub.Ack(hookd_pb2.AckRequest(lease_ids=[message.lease_id]))
        assert acked.acked == 1, acked

        # A publish: two queues subscribe, one with a filter written as Outpost takes it.
        from google.protobuf import struct_pb2  # noqa: E402

        urgent = struct_pb2.Struct()
        urgent.update({"data": {"priority": {"$in": ["high", "urgent"]}}})
        for name, wanted in (("py-all", None), ("py-urgent", urgent)):
            stub.PutSubscription(
                hookd_pb2.PutSubscriptionRequest(
                    subscription=hookd_pb2.Subscription(name=name, queue=name, event_types=["py.*"], filter=wanted)
                )
            )
        low = stub.Enqueue(hookd_pb2.EnqueueRequest(topic="py.ticket", payload=b'{"priority": "low"}'))
        assert low.subscribers == 1, low
        high = stub.Enqueue(hookd_pb2.EnqueueRequest(topic="py.ticket", payload=b'{"priority": "high"}'))
        assert high.subscribers == 2 and len(high.delivery_ids) == 2, high
        got = stub.Receive(hookd_pb2.ReceiveRequest(queue="py-urgent", max_messages=10, visibility_timeout_ms=30_000))
        assert [m.event_id for m in got.messages] == [high.id], got
        shown = stub.GetSubscription(hookd_pb2.GetSubscriptionRequest(name="py-urgent")).subscription
        assert dict(shown.filter)["data"]["priority"]["$in"] == ["high", "urgent"], shown

        try:
            stub.Enqueue(hookd_pb2.EnqueueRequest(payload=b"no destination"))
            raise AssertionError("an event without a destination was accepted")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e
            assert e.details().startswith("destination:"), e.details()

        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        responses = reflection.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
        names = {s.name for r in responses for s in r.list_services_response.service}
        assert "hookd.v1.Hookd" in names and "grpc.health.v1.Health" in names, names

    print("python client: enqueue, duplicate, receive, ack, publish with a filter, INVALID_ARGUMENT, reflection v1alpha: ok")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
