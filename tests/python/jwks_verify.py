"""A receiver that trusts only hookd's JWKS: PyJWT (a JWK parser no one here wrote) reads the
set from its URL, and each `v1a` entry of the delivery's signature verifies with the key its
`hookd-key-id` names; a changed body does not.

Usage: jwks_verify.py JWKS_URL WEBHOOK_ID WEBHOOK_TIMESTAMP WEBHOOK_SIGNATURE HOOKD_KEY_ID BODY_FILE
"""

import base64
import sys

import jwt
from cryptography.exceptions import InvalidSignature

url, webhook_id, timestamp, signature, key_ids, body_file = sys.argv[1:7]
with open(body_file, "rb") as f:
    body = f.read()

keys = jwt.PyJWKClient(url).get_jwk_set()
by_kid = {k.key_id: k for k in keys.keys}
v1a = [e[len("v1a,"):] for e in signature.split(" ") if e.startswith("v1a,")]
kids = key_ids.split(" ")
assert len(v1a) == len(kids) == 2, (signature, key_ids)
signed = f"{webhook_id}.{timestamp}.".encode() + body
for kid, sig in zip(kids, v1a):
    key = by_kid[kid]
    assert key.algorithm_name == "EdDSA", key.algorithm_name
    key.key.verify(base64.b64decode(sig), signed)  # raises InvalidSignature if wrong
    try:
        key.key.verify(base64.b64decode(sig), signed + b" ")
        raise AssertionError("a changed body verified")
    except InvalidSignature:
        pass
print(f"jwks_verify.py: {len(kids)} v1a signatures verified with PyJWT's JWK set from {url}")
