"""Signs a webhook delivery with the sender's own library, for
tests/webhooks.rs: the gateway must accept what the real senders send.

Reads one JSON object on stdin:
  {"scheme": "standard" | "stripe", "secret": "...", "id": "...",
   "timestamp": <unix seconds>, "body": "..."}
and prints a JSON object of the headers to send, e.g.
  {"webhook-id": "...", "webhook-timestamp": "...", "webhook-signature": "v1,..."}

Run with the python of scripts/webhook-interop-env.
"""
import json
import sys
from datetime import datetime, timezone

import standardwebhooks
import stripe


def standard(request):
    when = datetime.fromtimestamp(request["timestamp"], tz=timezone.utc)
    signature = standardwebhooks.Webhook(request["secret"]).sign(
        msg_id=request["id"], timestamp=when, data=request["body"]
    )
    return {
        "webhook-id": request["id"],
        "webhook-timestamp": str(request["timestamp"]),
        "webhook-signature": signature,
    }


def stripe_signature(request):
    header = stripe.WebhookSignature.generate_signature_header(
        request["body"], request["secret"], timestamp=request["timestamp"]
    )
    # The library's own check, so a header it would refuse never reaches the test.
    stripe.WebhookSignature.verify_header(
        request["body"], header, request["secret"], tolerance=None
    )
    return {"stripe-signature": header}


SCHEMES = {"standard": standard, "stripe": stripe_signature}


def main():
    request = json.load(sys.stdin)
    sign = SCHEMES.get(request.get("scheme"))
    if sign is None:
        sys.exit(f"sign.py: unknown scheme {request.get('scheme')!r} (known: {sorted(SCHEMES)})")
    json.dump(sign(request), sys.stdout)


if __name__ == "__main__":
    main()
