"""Prints the webhook test vectors of tests/webhook_vectors/mod.rs as the
senders' own Python libraries make them, and checks each composed header
(several signatures, a rolled secret) with the library's own verifier.

Not run by the tests (they hold the vectors as fixed text). To regenerate:
  pip install --target /tmp/whpy standardwebhooks==1.3.0 svix==2.9.1 stripe==16.1.0
  PYTHONPATH=/tmp/whpy python3 scripts/webhook-vectors/generate.py
and compare with scripts/webhook-vectors/generate.mjs (the Node libraries).
"""
import base64
import hashlib
import hmac
import json
import time
from datetime import datetime, timezone
from importlib.metadata import version

import standardwebhooks
import stripe
import svix

# The secrets of tests/webhooks.rs.
STANDARD_SECRET = "whsec_c3RhbmRhcmQtbmV3LWtleS0wMTIzNDU2Nzg5"
STANDARD_SECRET_OLD = "whsec_c3RhbmRhcmQtb2xkLWtleQ=="
STRIPE_WHSEC = "whsec_stripe_new_0123456789abcdef"
STRIPE_WHSEC_OLD = "whsec_stripe_old_fedcba9876543210"
GITHUB_SECRET = "It's a Secret to Everybody"
SHOPIFY_SECRET = "shpss_shopify_client_secret"

T = 1767225600  # 2026-01-01T00:00:00Z
RETRY = T + 3600  # the sender's redelivery, an hour later
# An asymmetric (ed25519) entry as a Standard Webhooks sender may add: 64 bytes.
V1A = "v1a," + base64.b64encode(bytes(range(64))).decode()


def body(event_id):
    return json.dumps({"id": event_id, "type": "order.created", "data": {"amount": 1200}},
                      separators=(",", ":"))


def when(ts):
    return datetime.fromtimestamp(ts, tz=timezone.utc)


def standard(lib, secret, msg_id, ts, data):
    return lib.Webhook(secret).sign(msg_id=msg_id, timestamp=when(ts), data=data)


def check_standard(header_value):
    # The libraries bound the timestamp to now with no option: check the
    # composed form at now.
    now = int(time.time())
    data = body("evt_check")
    value = header_value(now, data)
    for lib in (standardwebhooks, svix):
        headers = {"webhook-id": "msg_check", "webhook-timestamp": str(now), "webhook-signature": value}
        lib.Webhook(STANDARD_SECRET).verify(data, headers)


out = {"versions": {p: version(p) for p in ("standardwebhooks", "svix", "stripe")}}

b = body("msg_vec_1")
out["standard"] = {
    "body": b,
    "first": standard(standardwebhooks, STANDARD_SECRET, "msg_vec_1", T, b),
    "retry": standard(standardwebhooks, STANDARD_SECRET, "msg_vec_1", RETRY, b),
    "old_secret": standard(standardwebhooks, STANDARD_SECRET_OLD, "msg_vec_1", T, b),
    "svix": svix.Webhook(STANDARD_SECRET).sign("msg_vec_1", when(T), b),
    # Signed with the secret as given without its prefix and padding.
    "bare_secret": standard(standardwebhooks, "c3RhbmRhcmQtbmV3LWtleS0wMTIzNDU2Nzg5", "msg_vec_1", T, b),
}
assert out["standard"]["first"] == out["standard"]["svix"] == out["standard"]["bare_secret"]
several = lambda ts, data: " ".join([
    V1A,
    standard(standardwebhooks, STANDARD_SECRET_OLD, "msg_check", ts, data),
    standard(standardwebhooks, STANDARD_SECRET, "msg_check", ts, data),
])
check_standard(several)
out["standard"]["several"] = " ".join([V1A, out["standard"]["old_secret"], out["standard"]["first"]])

b = body("evt_vec_1")
sig = stripe.WebhookSignature.generate_signature_header
first = sig(b, STRIPE_WHSEC, timestamp=T)
old = sig(b, STRIPE_WHSEC_OLD, timestamp=T)
# A rolled secret: Stripe signs with both, one v1 each; test mode adds v0.
v0 = "v0=" + hmac.new(b"whsec_test_v0", f"{T}.{b}".encode(), hashlib.sha256).hexdigest()
rolled = f"{old},{first.split(',')[1]},{v0}"
for secret in (STRIPE_WHSEC, STRIPE_WHSEC_OLD):
    stripe.WebhookSignature.verify_header(b, rolled, secret, tolerance=None)
out["stripe"] = {
    "body": b,
    "first": first,
    "retry": sig(b, STRIPE_WHSEC, timestamp=RETRY),
    "old_secret": old,
    "rolled": rolled,
}

b = body("evt_vec_gh")
out["github_sha1"] = "sha1=" + hmac.new(GITHUB_SECRET.encode(), b.encode(), hashlib.sha1).hexdigest()
# Shopify's documented check: base64 of the body's HMAC-SHA256 under the client secret.
b = body("evt_vec_shop")
out["shopify"] = {
    "body": b,
    "hmac": base64.b64encode(hmac.new(SHOPIFY_SECRET.encode(), b.encode(), hashlib.sha256).digest()).decode(),
}
print(json.dumps(out, indent=2))
