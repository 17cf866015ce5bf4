"""hookd from Python over TLS and mTLS, with grpcio's own TLS stack.

Checks: TLS with a bearer token enqueues; a client certificate alone (mTLS) stands in for
a token with the scopes configured for its name; a call with no credential is
UNAUTHENTICATED; a client that does not trust hookd's CA, and a plaintext client, are
refused.

Usage: tls_smoke.py HOST:PORT PROTO_ROOT CA_PEM CLIENT_CERT_PEM CLIENT_KEY_PEM TOKEN OTHER_CA_PEM
"""

import importlib.resources
import sys
import tempfile

import grpc
from grpc_tools import protoc

# The well-known types (google/protobuf/struct.proto) grpcio-tools ships; protoc adds its own.
WKT = f"-I{importlib.resources.files('grpc_tools') / '_proto'}"


def stubs(proto_root: str):
    out = tempfile.mkdtemp(prefix="hookd-py-tls-")
    rc = protoc.main(
        ["protoc", f"-I{proto_root}", WKT, f"--python_out={out}", f"--grpc_python_out={out}", "hookd/v1/hookd.proto"]
    )
    assert rc == 0, f"protoc failed with {rc}"
    sys.path.insert(0, out)
    from hookd.v1 import hookd_pb2, hookd_pb2_grpc  # noqa: E402

    return hookd_pb2, hookd_pb2_grpc


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def main(addr, proto_root, ca, cert, key, token, other_ca) -> None:
    pb, rpc = stubs(proto_root)
    # hookd's certificate is for localhost and 127.0.0.1.
    options = [("grpc.ssl_target_name_override", "localhost")]
    bearer = [("authorization", f"Bearer {token}")]

    tls = grpc.ssl_channel_credentials(root_certificates=read(ca))
    with grpc.secure_channel(addr, tls, options=options) as channel:
        stub = rpc.HookdStub(channel)
        sent = stub.Enqueue(pb.EnqueueRequest(queue="py-tls", payload=b"over tls"), metadata=bearer, timeout=10)
        assert sent.id, sent
        try:
            stub.Enqueue(pb.EnqueueRequest(queue="py-tls", payload=b"no token"), timeout=10)
            raise AssertionError("a call without a credential was accepted")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.UNAUTHENTICATED, e

    mtls = grpc.ssl_channel_credentials(root_certificates=read(ca), private_key=read(key), certificate_chain=read(cert))
    with grpc.secure_channel(addr, mtls, options=options) as channel:
        stub = rpc.HookdStub(channel)
        got = stub.Receive(pb.ReceiveRequest(queue="py-tls", max_messages=10, visibility_timeout_ms=30_000), timeout=10)
        assert len(got.messages) == 1 and got.messages[0].payload == b"over tls", got
        try:
            stub.Enqueue(pb.EnqueueRequest(queue="py-tls", payload=b"cert lacks enqueue"), timeout=10)
            raise AssertionError("a certificate without the enqueue scope enqueued")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.PERMISSION_DENIED, e

    untrusting = grpc.ssl_channel_credentials(root_certificates=read(other_ca))
    with grpc.secure_channel(addr, untrusting, options=options) as channel:
        try:
            rpc.HookdStub(channel).Stats(pb.StatsRequest(), metadata=bearer, timeout=5)
            raise AssertionError("a client that does not trust hookd's CA got an answer")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.UNAVAILABLE, e

    with grpc.insecure_channel(addr) as channel:
        try:
            rpc.HookdStub(channel).Stats(pb.StatsRequest(), metadata=bearer, timeout=5)
            raise AssertionError("a plaintext client got an answer from a TLS listener")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.UNAVAILABLE, e
    print("python TLS and mTLS: ok")


if __name__ == "__main__":
    main(*sys.argv[1:8])
