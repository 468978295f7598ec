//! Tenant isolation: with `scope = ["header:Authorization"]` (the default),
//! three tenants reuse overlapping keys and bodies through the real gateway,
//! in a seeded random order with concurrent batches. No tenant ever receives
//! an answer produced for another (the upstream numbers its executions, and
//! each execution is attributed to the tenant whose fresh request caused it),
//! and 422 answers carry nothing of any tenant's stored answers.

mod common;

use std::collections::HashMap;

use common::config::{Config, Route, Upstream};
use common::{GatewayProcess, MockUpstream, Reply, TestDir};

fn config() -> Config {
    Config::new()
        .upstream(Upstream::api().timeout("5s"))
        .defaults("lock_timeout", "10s")
        .route(Route::api("charges", "/v1/charges").set("required", true))
}

const TENANTS: [&str; 3] = ["Bearer tenant-a", "Bearer tenant-b", "Bearer tenant-c"];
const KEYS: [&str; 4] = ["k0", "k1", "k2", "shared-key"];
const BODIES: [&str; 3] = [
    r#"{"amount":1}"#,
    r#"{"amount":2}"#,
    r#"{"amount":1,"x":"y"}"#,
];

struct Rng(u64);

impl Rng {
    fn pick(&mut self, n: usize) -> usize {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        (x % n as u64) as usize
    }
}

/// What the first request of a (tenant, key) produced.
struct First {
    body: usize,
    execution: u64,
    answer: bytes::Bytes,
}

async fn send(gateway: &GatewayProcess, tenant: usize, key: usize, body: usize) -> Reply {
    gateway
        .client()
        .send(
            "POST",
            "/v1/charges",
            &[
                ("authorization", TENANTS[tenant]),
                ("idempotency-key", KEYS[key]),
                ("content-type", "application/json"),
            ],
            BODIES[body].to_string(),
        )
        .await
}

fn execution_of(reply: &Reply) -> u64 {
    reply.json()["execution"]
        .as_u64()
        .unwrap_or_else(|| panic!("no execution number in {}", reply.text()))
}

#[tokio::test(flavor = "multi_thread")]
async fn tenants_never_see_each_others_answers() {
    let upstream = MockUpstream::start().await;
    let dir = TestDir::new("tenants");
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &config());

    let seed = std::env::var("TENANTS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5EED_1D3A_u64);
    let mut rng = Rng(seed | 1);
    let mut owner: HashMap<u64, usize> = HashMap::new();
    let mut first: HashMap<(usize, usize), First> = HashMap::new();

    for batch in 0..80 {
        // One request per tenant, sent together, often on the same key.
        let shared_key = rng.pick(KEYS.len());
        let requests: Vec<(usize, usize, usize)> = (0..TENANTS.len())
            .map(|tenant| {
                let key = if rng.pick(3) == 0 {
                    rng.pick(KEYS.len())
                } else {
                    shared_key
                };
                (tenant, key, rng.pick(BODIES.len()))
            })
            .collect();
        let replies = futures_util::future::join_all(
            requests
                .iter()
                .map(|&(tenant, key, body)| send(&gateway, tenant, key, body)),
        )
        .await;

        for (&(tenant, key, body), reply) in requests.iter().zip(&replies) {
            let case = format!(
                "batch {batch}: {} key {} body {}",
                TENANTS[tenant], KEYS[key], BODIES[body]
            );
            match first.get(&(tenant, key)) {
                None => {
                    assert_eq!(reply.status, 201, "{case}: {}", reply.text());
                    assert_eq!(reply.header("idempotent-replayed"), Some("false"), "{case}");
                    let execution = execution_of(reply);
                    let previous = owner.insert(execution, tenant);
                    assert!(
                        previous.is_none(),
                        "{case}: execution {execution} answered twice as fresh"
                    );
                    first.insert(
                        (tenant, key),
                        First {
                            body,
                            execution,
                            answer: reply.body.clone(),
                        },
                    );
                }
                Some(done) if done.body == body => {
                    assert_eq!(reply.status, 201, "{case}: {}", reply.text());
                    assert_eq!(reply.header("idempotent-replayed"), Some("true"), "{case}");
                    let execution = execution_of(reply);
                    assert_eq!(
                        owner.get(&execution),
                        Some(&tenant),
                        "{case}: replayed execution {execution}, which belongs to another tenant"
                    );
                    assert_eq!(execution, done.execution, "{case}");
                    assert_eq!(reply.body, done.answer, "{case}: replay differs");
                }
                Some(_) => {
                    assert_eq!(reply.status, 422, "{case}: {}", reply.text());
                    let problem = reply.json();
                    assert_eq!(problem["code"], "fingerprint-mismatch", "{case}");
                    assert!(reply.header("idempotent-replayed").is_none(), "{case}");
                    assert!(reply.header("x-execution").is_none(), "{case}");
                    assert!(reply.header("location").is_none(), "{case}");
                    let text = reply.text();
                    assert!(
                        !text.contains("execution") && !text.contains("ch_"),
                        "{case}: a 422 carries an upstream answer: {text}"
                    );
                    for stored in first.values() {
                        assert!(
                            !text.contains(&*String::from_utf8_lossy(&stored.answer)),
                            "{case}: a 422 echoes a stored answer"
                        );
                    }
                }
            }
        }
    }

    // Every execution was caused by exactly one fresh request.
    assert_eq!(upstream.total(), owner.len() as u64);
    assert_eq!(owner.len(), first.len());
    // Each tenant ran each key it used once, so shared keys ran once per tenant.
    for (key, name) in KEYS.iter().enumerate() {
        let tenants = (0..TENANTS.len())
            .filter(|t| first.contains_key(&(*t, key)))
            .count() as u64;
        assert_eq!(upstream.executions(name), tenants, "key {name}");
    }
    assert!(
        (0..TENANTS.len()).all(|t| first.keys().filter(|(tt, _)| *tt == t).count() >= 2),
        "the sequence should exercise every tenant on several keys"
    );
    let log = gateway.log_text();
    assert!(!log.contains("panicked"), "{log}");
}
