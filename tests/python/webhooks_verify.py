"""hookd's signatures verified by the Standard Webhooks reference library.

Starts an HTTP receiver on 127.0.0.1 that checks every request with
`standardwebhooks.Webhook(secret).verify(body, headers)` (the spec's own Python
implementation, including its timestamp tolerance), registers it as a hookd endpoint with
two secrets (as during a rotation) over gRPC, enqueues events, and waits until each has
arrived and verified with either secret alone.

Usage: webhooks_verify.py HOST:PORT PROTO_ROOT
"""

import importlib.resources
import base64
import http.server
import json
import sys
import tempfile
import threading
import time

import grpc
from grpc_tools import protoc

# The well-known types (google/protobuf/struct.proto) grpcio-tools ships; protoc adds its own.
WKT = f"-I{importlib.resources.files('grpc_tools') / '_proto'}"
from standardwebhooks.webhooks import Webhook

OLD = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
NEW = "whsec_" + base64.b64encode(bytes(range(32))).decode()
EVENTS = 20


class Receiver(http.server.BaseHTTPRequestHandler):
    verified = {}  # webhook-id -> payload
    failures = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["content-length"]))
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            for secret in (OLD, NEW):  # each secret alone verifies: rotation works
                Webhook(secret).verify(body, headers)
            Receiver.verified[headers["webhook-id"]] = json.loads(body)
        except Exception as e:  # noqa: BLE001 - record any refusal, answer 400
            Receiver.failures.append(f"{headers.get('webhook-id')}: {e!r}")
            self.send_response(400)
            self.end_headers()
            return
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


def main(addr: str, proto_root: str) -> None:
    out = tempfile.mkdtemp(prefix="hookd-py-")
    rc = protoc.main(
        ["protoc", f"-I{proto_root}", WKT, f"--python_out={out}", f"--grpc_python_out={out}", "hookd/v1/hookd.proto"]
    )
    assert rc == 0, f"protoc failed with {rc}"
    sys.path.insert(0, out)
    from hookd.v1 import hookd_pb2, hookd_pb2_grpc  # noqa: E402

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/hooks"

    with grpc.insecure_channel(addr) as channel:
        stub = hookd_pb2_grpc.HookdStub(channel)
        stub.PutEndpoint(
            hookd_pb2.PutEndpointRequest(endpoint=hookd_pb2.Endpoint(name="py-verify", url=url, secrets=[OLD, NEW]))
        )
        ids = {}
        for n in range(EVENTS):
            payload = json.dumps({"n": n, "text": "héllo ✓"}).encode()
            r = stub.Enqueue(hookd_pb2.EnqueueRequest(endpoint="py-verify", payload=payload))
            ids[r.id] = n
        deadline = time.monotonic() + 20
        while len(Receiver.verified) < EVENTS and not Receiver.failures and time.monotonic() < deadline:
            time.sleep(0.01)
    server.shutdown()
    assert not Receiver.failures, Receiver.failures
    assert set(Receiver.verified) == set(ids), (len(Receiver.verified), EVENTS)
    assert all(Receiver.verified[i]["n"] == n for i, n in ids.items())
    print(f"{EVENTS} deliveries verified by standardwebhooks with each of two secrets")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
