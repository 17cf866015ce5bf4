"""Providers' own libraries against hookd's ingest listener (issue #13).

- Standard Webhooks: `standardwebhooks` (PyPI, the reference library) signs; hookd accepts,
  deduplicates a resend, refuses a tampered body and a stale timestamp; the consumer pulls
  the event over gRPC and re-verifies the stored signature with the same library.
- Stripe: a `Stripe-Signature` header built here is first accepted by the `stripe`
  package's own verification (proving the format), then by hookd.

Usage: ingest_providers.py INGEST_ADDR GRPC_ADDR PROTO_DIR
(hookd configured by tests/it/python.rs with the sources and secrets below).
"""

import importlib.resources
import datetime
import hashlib
import hmac
import json
import os
import sys
import tempfile
import time
import urllib.error
import urllib.request

import stripe
import standardwebhooks

SW_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
STRIPE_SECRET = "whsec_stripe_python_test"

ingest, grpc_addr, proto_dir = sys.argv[1], sys.argv[2], sys.argv[3]


def post(source, headers, body):
    req = urllib.request.Request(
        f"http://{ingest}/in/{source}", data=body, headers=headers, method="POST"
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def check(cond, what):
    if not cond:
        raise SystemExit(f"FAILED: {what}")
    print(f"ok: {what}")


# --- Standard Webhooks, signed by the reference library.
wh = standardwebhooks.Webhook(SW_SECRET)
payload = json.dumps({"type": "agent.step.finished", "data": {"step": 3}})
now = datetime.datetime.now(tz=datetime.timezone.utc)
signature = wh.sign("msg_py_1", now, payload)
headers = {
    "content-type": "application/json",
    "webhook-id": "msg_py_1",
    "webhook-timestamp": str(int(now.timestamp())),
    "webhook-signature": signature,
}
status, answer = post("sw", headers, payload.encode())
check(status == 202 and answer["duplicate"] is False, f"standardwebhooks-signed event: 202 {answer}")
first_id = answer["id"]
status, answer = post("sw", headers, payload.encode())
check(status == 202 and answer == {"id": first_id, "duplicate": True}, "resend: 202, duplicate, same id")
status, _ = post("sw", headers, payload.replace("3", "4").encode())
check(status == 401, "tampered body: 401")
old = now - datetime.timedelta(minutes=10)
stale = dict(headers, **{
    "webhook-id": "msg_py_old",
    "webhook-timestamp": str(int(old.timestamp())),
    "webhook-signature": wh.sign("msg_py_old", old, payload),
})
status, _ = post("sw", stale, payload.encode())
check(status == 401, "replayed outside the 5 min tolerance: 401")

# The consumer pulls it and re-verifies the provider's signature with the library.
from grpc_tools import protoc  # noqa: E402

# The well-known types (google/protobuf/struct.proto) grpcio-tools ships; protoc adds its own.
WKT = f"-I{importlib.resources.files('grpc_tools') / '_proto'}"

out = tempfile.mkdtemp()
protoc.main([
    "protoc", f"-I{proto_dir}", WKT, f"--python_out={out}", f"--grpc_python_out={out}",
    os.path.join(proto_dir, "hookd/v1/hookd.proto"),
])
sys.path.insert(0, out)
import grpc  # noqa: E402
from hookd.v1 import hookd_pb2, hookd_pb2_grpc  # noqa: E402

stub = hookd_pb2_grpc.HookdStub(grpc.insecure_channel(grpc_addr))
got = stub.Receive(hookd_pb2.ReceiveRequest(queue="py-inbox", max_messages=10, visibility_timeout_ms=30000))
check(len(got.messages) == 1, "one message pulled")
m = got.messages[0]
check(m.id == first_id and m.event_type == "agent.step.finished", "id and event type")
verified = wh.verify(m.payload, dict(m.headers))
check(verified == json.loads(payload), "stored headers and body re-verify with standardwebhooks")
stub.Ack(hookd_pb2.AckRequest(lease_ids=[m.lease_id]))

# --- Stripe: a header built here, proven by the stripe package, accepted by hookd.
event = {"id": "evt_py_1", "object": "event", "type": "payment_intent.succeeded", "data": {"object": {}}}
body = json.dumps(event).encode()
t = int(time.time())
v1 = hmac.new(STRIPE_SECRET.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
stripe_header = f"t={t},v1={v1}"
check(stripe.WebhookSignature.verify_header(body.decode(), stripe_header, STRIPE_SECRET, 300), "stripe package verifies the header")
constructed = stripe.Webhook.construct_event(body.decode(), stripe_header, STRIPE_SECRET)
check(constructed["id"] == "evt_py_1", "stripe.Webhook.construct_event accepts it")
status, answer = post("stripe", {"content-type": "application/json", "stripe-signature": stripe_header}, body)
check(status == 202 and answer["duplicate"] is False, f"hookd accepts the Stripe event: {answer}")
status, answer = post("stripe", {"content-type": "application/json", "stripe-signature": stripe_header}, body)
check(status == 202 and answer["duplicate"] is True, "Stripe resend: duplicate by event id")
bad = f"t={t},v1={'0' * 64}"
try:
    stripe.WebhookSignature.verify_header(body.decode(), bad, STRIPE_SECRET, 300)
    raise SystemExit("FAILED: stripe accepted a bad signature")
except stripe.SignatureVerificationError:
    pass
status, _ = post("stripe", {"content-type": "application/json", "stripe-signature": bad}, body)
check(status == 401, "a signature stripe refuses, hookd refuses (401)")
print("all ok")
