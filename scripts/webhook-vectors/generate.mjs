// Prints the webhook test vectors of tests/webhook_vectors/mod.rs as the
// senders' own Node libraries make them, and checks the composed headers
// with the libraries' own verifiers. The Standard Webhooks and Stripe ones
// must equal scripts/webhook-vectors/generate.py's byte for byte.
//
// Not run by the tests (they hold the vectors as fixed text). To regenerate:
//   mkdir -p /tmp/whjs && cd /tmp/whjs && npm install standardwebhooks@1.3.0 \
//     svix@1.99.1 stripe@23.2.0 @octokit/webhooks-methods@6.0.0
//   cp scripts/webhook-vectors/generate.mjs /tmp/whjs/ && node /tmp/whjs/generate.mjs
// (a module resolves its imports beside itself, hence the copy).
import { readFileSync } from "node:fs";
import { Webhook as Standard } from "standardwebhooks";
import { Webhook as Svix } from "svix";
import Stripe from "stripe";
import { sign as octokitSign, verify as octokitVerify } from "@octokit/webhooks-methods";

const version = (name) =>
  JSON.parse(readFileSync(new URL(`node_modules/${name}/package.json`, import.meta.url))).version;

const STANDARD_SECRET = "whsec_c3RhbmRhcmQtbmV3LWtleS0wMTIzNDU2Nzg5";
const STANDARD_SECRET_OLD = "whsec_c3RhbmRhcmQtb2xkLWtleQ==";
const STRIPE_WHSEC = "whsec_stripe_new_0123456789abcdef";
const STRIPE_WHSEC_OLD = "whsec_stripe_old_fedcba9876543210";
const GITHUB_SECRET = "It's a Secret to Everybody";

const T = 1767225600;
const RETRY = T + 3600;
const body = (id) =>
  JSON.stringify({ id, type: "order.created", data: { amount: 1200 } });
const at = (ts) => new Date(ts * 1000);

const out = {
  versions: Object.fromEntries(
    ["standardwebhooks", "svix", "stripe", "@octokit/webhooks-methods"].map(
      (n) => [n, version(n)],
    ),
  ),
};

let b = body("msg_vec_1");
out.standard = {
  body: b,
  first: new Standard(STANDARD_SECRET).sign("msg_vec_1", at(T), b),
  retry: new Standard(STANDARD_SECRET).sign("msg_vec_1", at(RETRY), b),
  old_secret: new Standard(STANDARD_SECRET_OLD).sign("msg_vec_1", at(T), b),
  svix: new Svix(STANDARD_SECRET).sign("msg_vec_1", at(T), b),
  bare_secret: new Standard("c3RhbmRhcmQtbmV3LWtleS0wMTIzNDU2Nzg5").sign(
    "msg_vec_1", at(T), b,
  ),
};
// The composed header the libraries accept (they bound the time to now).
const now = Math.floor(Date.now() / 1000);
const v1a = "v1a," + Buffer.from([...Array(64).keys()]).toString("base64");
const several = [
  v1a,
  new Standard(STANDARD_SECRET_OLD).sign("msg_check", at(now), b),
  new Standard(STANDARD_SECRET).sign("msg_check", at(now), b),
].join(" ");
new Standard(STANDARD_SECRET).verify(b, {
  "webhook-id": "msg_check", "webhook-timestamp": String(now), "webhook-signature": several,
});
new Svix(STANDARD_SECRET).verify(b, {
  "svix-id": "msg_check", "svix-timestamp": String(now), "svix-signature": several,
});

out.standard.several = [v1a, out.standard.old_secret, out.standard.first].join(" ");

b = body("evt_vec_1");
const stripe = new Stripe("sk_test_unused");
const header = (secret, timestamp, scheme) =>
  stripe.webhooks.generateTestHeaderString({ payload: b, secret, timestamp, scheme });
const first = header(STRIPE_WHSEC, T);
const old = header(STRIPE_WHSEC_OLD, T);
const v0 = header("whsec_test_v0", T, "v0").split(",")[1];
const rolled = `${old},${first.split(",")[1]},${v0}`;
for (const secret of [STRIPE_WHSEC, STRIPE_WHSEC_OLD]) {
  stripe.webhooks.signature.verifyHeader(b, rolled, secret, 0);
}
out.stripe = { body: b, first, retry: header(STRIPE_WHSEC, RETRY), old_secret: old, rolled };

b = body("evt_vec_gh");
const github = await octokitSign(GITHUB_SECRET, b);
if (!(await octokitVerify(GITHUB_SECRET, b, github))) throw new Error("octokit");
out.github = { body: b, sha256: github };
console.log(JSON.stringify(out, null, 2));
