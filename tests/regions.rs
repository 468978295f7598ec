//! Several regions as real processes on 127.0.0.1: each region one gateway
//! with its own embedded store and its own counting upstream. Every key has
//! a home region, runs there once, and is never run anywhere else.

mod common;
mod pg_support;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use common::config::{Config, Peer, Route, Store, Tls, Upstream};
use common::gateway::free_port;
use common::{Client, GatewayProcess, MockUpstream, Reply, TestDir};
use pg_support::TestSchema;

const TOKEN: &str = "region-token-5f0c1d2e3a4b69788796a5b4";
const TOKEN_ENV: &str = "IDEMGATE_REGION_TOKEN";
const AUTH: &str = "Bearer tenant-1";

/// Region `name` on `store`, before its `[regions.*]`.
fn region_config(name: &str, store: Store) -> Config {
    Config::new()
        .server("shutdown_grace", "5s")
        .store(store)
        .upstream(Upstream::api().timeout("5s"))
        .defaults("lock_timeout", "20s")
        .route(Route::api("charges", "/v1/charges"))
        .route(Route::api("rest", "/").plain())
        .region(name, TOKEN_ENV)
}

struct Region {
    name: &'static str,
    ports: (SocketAddr, SocketAddr),
    dir: TestDir,
    upstream: MockUpstream,
    gateway: Option<GatewayProcess>,
}

impl Region {
    fn gateway(&self) -> &GatewayProcess {
        self.gateway.as_ref().expect("region started")
    }

    fn client(&self) -> Client {
        self.gateway().client()
    }
}

/// Regions planned with their addresses; `start` runs the first `running`
/// of them, each configured with those first `running` as the regions.
struct World {
    regions: Vec<Region>,
    /// Each region's `timeout` for reaching another's gateway.
    forward_timeout: &'static str,
    /// Each region's store; the embedded store when absent.
    stores: Vec<Store>,
}

impl World {
    async fn new(names: &[&'static str]) -> World {
        let mut regions = Vec::new();
        for name in names {
            regions.push(Region {
                name,
                ports: (free_port(), free_port()),
                dir: TestDir::new(&format!("region-{name}")),
                upstream: MockUpstream::start().await,
                gateway: None,
            });
        }
        World {
            regions,
            forward_timeout: "10s",
            stores: Vec::new(),
        }
    }

    async fn started(names: &[&'static str]) -> World {
        let mut world = World::new(names).await;
        for i in 0..names.len() {
            world.start(i, names.len());
        }
        world
    }

    /// The config of region `i` with the first `count` regions.
    fn template(&self, i: usize, count: usize) -> Config {
        let store = self.stores.get(i).cloned().unwrap_or_else(Store::embedded);
        let mut config = region_config(self.regions[i].name, store);
        for region in &self.regions[..count] {
            let gateway = format!("http://{}", region.ports.0);
            config = config.peer(
                Peer::new(region.name, &gateway)
                    .set("connect_timeout", "1s")
                    .set("timeout", self.forward_timeout),
            );
        }
        config
    }

    fn start(&mut self, i: usize, count: usize) {
        let template = self.template(i, count);
        self.start_as(i, &template, TOKEN);
    }

    /// Region `i` with a config and a region token of the test's own.
    fn start_as(&mut self, i: usize, template: &Config, token: &str) {
        let region = &mut self.regions[i];
        let gateway = GatewayProcess::start_at(
            &region.dir,
            &region.upstream.url(),
            template,
            region.ports,
            &[(TOKEN_ENV, token)],
        )
        .unwrap_or_else(|log| panic!("region {} did not start: {log}", region.name));
        region.gateway = Some(gateway);
    }

    fn names(&self, count: usize) -> Vec<&'static str> {
        self.regions[..count].iter().map(|r| r.name).collect()
    }

    fn index(&self, name: &str) -> usize {
        self.regions.iter().position(|r| r.name == name).unwrap()
    }

    fn executions(&self, key: &str) -> Vec<(&'static str, u64)> {
        self.regions
            .iter()
            .map(|r| (r.name, r.upstream.executions(key)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    fn logs(&self) -> String {
        self.regions
            .iter()
            .filter_map(|r| r.gateway.as_ref().map(|g| (r.name, g.log_text())))
            .map(|(name, log)| format!("--- {name}\n{log}"))
            .collect()
    }
}

/// The home the gateways compute: the scope is the hash of the route's
/// default scope (`header:Authorization`).
fn home(names: &[&'static str], key: &str) -> &'static str {
    let scope = idemgate::key::scope_hash(&[("header:authorization", Some(AUTH.as_bytes()))]);
    names[idemgate::region::home(names, "charges", &scope, key).unwrap()]
}

async fn charge(client: &Client, key: &str, extra: &[(&str, &str)]) -> Reply {
    let mut headers = vec![
        ("idempotency-key", key),
        ("authorization", AUTH),
        ("content-type", "application/json"),
    ];
    headers.extend_from_slice(extra);
    client
        .send(
            "POST",
            "/v1/charges",
            &headers,
            format!("{{\"key\":\"{key}\"}}"),
        )
        .await
}

fn marker(reply: &Reply) -> Option<&str> {
    reply.header("idempotent-replayed")
}

/// A small deterministic generator: the same choices every run.
struct Choices(u64);

impl Choices {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

async fn metric(gateway: &GatewayProcess, line_start: &str) -> Option<f64> {
    let text = gateway.admin_client().get("/metrics").await.text();
    text.lines()
        .find(|line| line.starts_with(line_start))
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_key_runs_once_at_its_home_and_replays_everywhere() {
    let world = World::started(&["eu", "us", "ap"]).await;
    once_at_home_replayed_everywhere(&world).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_postgres_every_key_runs_once_at_its_home_and_replays_everywhere() {
    // Three regions, three stores: a schema each in the test database.
    let schemas = [
        TestSchema::create().await,
        TestSchema::create().await,
        TestSchema::create().await,
    ];
    let mut world = World::new(&["eu", "us", "ap"]).await;
    world.stores = schemas
        .iter()
        .map(|schema| {
            Store::postgres(&schema.url())
                .set("pool_size", 4)
                .set("migrate", true)
        })
        .collect();
    for i in 0..3 {
        world.start(i, 3);
    }
    once_at_home_replayed_everywhere(&world).await;
}

/// 300 keys, each sent to a region chosen at random, then retried at the
/// two others.
async fn once_at_home_replayed_everywhere(world: &World) {
    let names = world.names(3);
    let keys: Vec<String> = (0..300).map(|i| format!("order-{i}")).collect();
    let mut choices = Choices(0x9e37_79b9_7f4a_7c15);
    let plan: Vec<(String, usize)> = keys.iter().map(|k| (k.clone(), choices.below(3))).collect();

    let clients: Vec<Client> = world.regions.iter().map(Region::client).collect();
    let mut tasks = Vec::new();
    for batch in plan.chunks(30) {
        let batch = batch.to_vec();
        let clients = clients.clone();
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for (key, first) in batch {
                let mut replies = vec![(first, charge(&clients[first], &key, &[]).await)];
                for other in (0..3).filter(|r| *r != first) {
                    replies.push((other, charge(&clients[other], &key, &[]).await));
                }
                out.push((key, replies));
            }
            out
        }));
    }
    let mut sent = 0;
    for task in tasks {
        for (key, replies) in task.await.unwrap() {
            sent += 1;
            let (_, first) = &replies[0];
            assert_eq!(
                first.status,
                201,
                "{key}: {}\n{}",
                first.text(),
                world.logs()
            );
            assert_eq!(marker(first), Some("false"), "{key}");
            for (at, retry) in &replies[1..] {
                assert_eq!(
                    retry.status,
                    201,
                    "{key} at {}: {}",
                    names[*at],
                    retry.text()
                );
                assert_eq!(marker(retry), Some("true"), "{key} at {}", names[*at]);
                assert_eq!(
                    retry.body, first.body,
                    "{key}: the first answer, byte for byte"
                );
                assert_eq!(retry.header("location"), first.header("location"));
            }
            assert_eq!(
                world.executions(&key),
                vec![(home(&names, &key), 1)],
                "{key} runs once, at its home"
            );
        }
    }
    assert_eq!(sent, 300);
    let total: u64 = world.regions.iter().map(|r| r.upstream.total()).sum();
    assert_eq!(total, 300, "one execution per key, nothing else");
    for region in &world.regions {
        // Every region is some keys' home, and forwards the others.
        assert!(
            region.upstream.total() > 50,
            "{}: {}",
            region.name,
            region.upstream.total()
        );
        let others: Vec<_> = names.iter().filter(|n| **n != region.name).collect();
        let mut forwarded = 0.0;
        for other in others {
            let line =
                format!("idemgate_region_forwards_total{{region=\"{other}\",result=\"ok\"}}");
            forwarded += metric(region.gateway(), &line).await.unwrap_or(0.0);
        }
        assert!(forwarded > 100.0, "{}: {forwarded} forwards", region.name);
        let log = region.gateway().log_text();
        for name in &names {
            assert!(
                log.contains(&format!("home_region=\"{name}\""))
                    || log.contains(&format!("\"home_region\":\"{name}\"")),
                "{}'s log names home {name}:\n{log}",
                region.name
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stopped_region_s_keys_get_503_elsewhere_and_run_nowhere() {
    let mut world = World::started(&["eu", "us", "ap"]).await;
    let names = world.names(3);
    let us = world.index("us");
    world.regions[us].gateway.as_mut().unwrap().kill();

    let mut choices = Choices(0x2545_f491_4f6c_dd1d);
    let mut stranded = Vec::new();
    for i in 0..90 {
        let key = format!("stop-{i}");
        let at = [0, 2][choices.below(2)];
        let reply = charge(&world.regions[at].client(), &key, &[]).await;
        if home(&names, &key) == "us" {
            assert_eq!(reply.status, 503, "{key}: {}", reply.text());
            assert_eq!(reply.json()["code"], "home-region-unavailable");
            assert!(
                reply
                    .header("retry-after")
                    .is_some_and(|v| v.parse::<u64>().unwrap() >= 1)
            );
            assert_eq!(
                marker(&reply),
                None,
                "the gateway's own rejection has no marker"
            );
            stranded.push(key);
        } else {
            assert_eq!(reply.status, 201, "{key}: {}", reply.text());
            assert_eq!(marker(&reply), Some("false"));
            assert_eq!(world.executions(&key), vec![(home(&names, &key), 1)]);
        }
    }
    assert!(stranded.len() > 10, "{} keys homed at us", stranded.len());
    for key in &stranded {
        assert_eq!(world.executions(key), vec![], "{key} ran nowhere");
    }
    let unavailable = metric(
        world.regions[0].gateway(),
        "idemgate_region_forwards_total{region=\"us\",result=\"unavailable\"}",
    )
    .await
    .unwrap_or(0.0)
        + metric(
            world.regions[2].gateway(),
            "idemgate_region_forwards_total{region=\"us\",result=\"unavailable\"}",
        )
        .await
        .unwrap_or(0.0);
    assert_eq!(unavailable as usize, stranded.len());

    // Back: the stranded keys run, once, at home.
    world.regions[us].gateway.as_mut().unwrap().restart();
    let key = &stranded[0];
    let reply = charge(&world.regions[0].client(), key, &[]).await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert_eq!(marker(&reply), Some("false"));
    let again = charge(&world.regions[2].client(), key, &[]).await;
    assert_eq!(marker(&again), Some("true"));
    assert_eq!(world.executions(key), vec![("us", 1)]);
}

/// A client's head at `max_headers` fields (100) where it lands is served at
/// its home region, though the forward added fields of its own; one field
/// more is refused where it lands, and so is a head that reaches the limit
/// only with a forged region token.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_head_at_the_limit_is_not_refused_at_its_home() {
    let world = World::started(&["eu", "us"]).await;
    let names = world.names(2);
    let key_at_us = |tag: &str| {
        (0..)
            .map(|i| format!("{tag}-{i}"))
            .find(|key| home(&names, key) == "us")
            .unwrap()
    };
    // `charge` sends three fields, the client adds `host` and
    // `content-length`: 95 more make the 100 that `max_headers` admits.
    let fields: Vec<(String, String)> = (0..97)
        .map(|i| (format!("x-field-{i}"), "v".to_owned()))
        .collect();
    let extra = |n: usize| -> Vec<(&str, &str)> {
        fields[..n]
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
            .collect()
    };
    let eu = world.regions[0].client();

    let key = key_at_us("full");
    let reply = charge(&eu, &key, &extra(95)).await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert_eq!(world.executions(&key), vec![("us", 1)]);

    let key = key_at_us("over");
    let reply = charge(&eu, &key, &extra(96)).await;
    assert_eq!(reply.status, 431, "{}", reply.text());
    assert_eq!(reply.json()["code"], "header-too-large");
    assert!(world.executions(&key).is_empty());

    // Over HTTP/2 the forward also makes a `Host` field of `:authority`:
    // the most fields a hop adds. At the limit where it landed (one more
    // field is refused there), it still runs at its home.
    let h2 = Client::h2c(world.regions[0].ports.0);
    let key = key_at_us("h2-full");
    let reply = charge(&h2, &key, &extra(96)).await;
    assert_eq!(reply.status, 201, "{}\n{}", reply.text(), world.logs());
    assert_eq!(world.executions(&key), vec![("us", 1)]);
    let key = key_at_us("h2-over");
    let reply = charge(&h2, &key, &extra(97)).await;
    assert_eq!(reply.status, 431, "{}", reply.text());
    assert!(world.executions(&key).is_empty());

    let key = key_at_us("forged");
    let mut forged = extra(95);
    forged.push(("idempotency-region-token", "a-guess"));
    let reply = charge(&eu, &key, &forged).await;
    assert_eq!(reply.status, 431, "{}", reply.text());
    assert!(world.executions(&key).is_empty());
}

/// A gateway that became a region by a reload (started with one region, no
/// `[region]`) admits a forward's own fields as one started with it does:
/// a client's head at `max_headers` where it landed is served at home.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gateway_made_a_region_by_reload_admits_the_hop_s_fields() {
    let mut world = World::new(&["eu", "us"]).await;
    world.start(0, 2);
    let single = Config::new()
        .server("shutdown_grace", "5s")
        .store(Store::embedded())
        .upstream(Upstream::api().timeout("5s"))
        .defaults("lock_timeout", "20s")
        .route(Route::api("charges", "/v1/charges"))
        .route(Route::api("rest", "/").plain());
    let us = &mut world.regions[1];
    let gateway = GatewayProcess::start_at(
        &us.dir,
        &us.upstream.url(),
        &single,
        us.ports,
        &[(TOKEN_ENV, TOKEN)],
    )
    .unwrap_or_else(|log| panic!("us did not start: {log}"));
    us.gateway = Some(gateway);
    let us = world.regions[1].gateway();
    us.write_config(&world.template(1, 2));
    us.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(20);
    while metric(us, "idemgate_config_reloads_total{result=\"ok\"}").await != Some(1.0) {
        assert!(Instant::now() < deadline, "no reload:\n{}", us.log_text());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let names = world.names(2);
    let key = (0..)
        .map(|i| format!("grown-{i}"))
        .find(|key| home(&names, key) == "us")
        .unwrap();
    // As in the test above: 95 fields and the client's five make 100.
    let fields: Vec<(String, String)> = (0..95)
        .map(|i| (format!("x-field-{i}"), "v".to_owned()))
        .collect();
    let extra: Vec<(&str, &str)> = fields
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .collect();
    let reply = charge(&world.regions[0].client(), &key, &extra).await;
    assert_eq!(reply.status, 201, "{}\n{}", reply.text(), world.logs());
    assert_eq!(world.executions(&key), vec![("us", 1)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forged_region_headers_from_a_client_do_nothing() {
    let world = World::started(&["eu", "us", "ap"]).await;
    let names = world.names(3);
    let key_at = |region: &str, tag: &str| {
        (0..)
            .map(|i| format!("{tag}-{i}"))
            .find(|key| home(&names, key) == region)
            .unwrap()
    };
    let forged = [
        ("idempotency-region-token", "a-guess"),
        ("idempotency-forwarded-from", "us"),
    ];

    // Homed at us, sent to eu claiming to come from us: still forwarded.
    let key = key_at("us", "forged");
    let reply = charge(&world.regions[0].client(), &key, &forged).await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert_eq!(world.executions(&key), vec![("us", 1)], "not run at eu");
    let us = &world.regions[1].upstream;
    assert_eq!(
        us.last_header("idempotency-forwarded-from").as_deref(),
        Some("eu")
    );
    assert_eq!(
        us.last_header("idempotency-region-token"),
        None,
        "the token stays between gateways"
    );
    assert_eq!(us.last_header("authorization").as_deref(), Some(AUTH));
    assert_eq!(
        us.last_header("idempotency-key").as_deref(),
        Some(key.as_str())
    );
    // A refused token naming a region as its sender is what another token
    // in that region looks like: warned of, naming the region.
    const REFUSED: &str = "a request forwarded from region us carried a region token";
    let warned = world.regions[0].gateway().log_text();
    assert_eq!(warned.matches(REFUSED).count(), 1, "{warned}");

    // A token that is almost right does not make ap handle a key homed at us.
    let key = key_at("us", "almost");
    let almost = &TOKEN[..TOKEN.len() - 1];
    let reply = charge(
        &world.regions[2].client(),
        &key,
        &[("idempotency-region-token", almost)],
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert_eq!(world.executions(&key), vec![("us", 1)]);
    // Naming no region, it is a client's: nothing to warn of.
    let quiet = world.regions[2].gateway().log_text();
    assert!(!quiet.contains("carried a region token"), "{quiet}");

    // Homed where it lands: handled there, the forged headers removed.
    let key = key_at("eu", "home");
    let reply = charge(&world.regions[0].client(), &key, &forged).await;
    assert_eq!(reply.status, 201);
    assert_eq!(world.executions(&key), vec![("eu", 1)]);
    let eu = &world.regions[0].upstream;
    assert_eq!(eu.last_header("idempotency-forwarded-from"), None);
    assert_eq!(eu.last_header("idempotency-region-token"), None);

    // Pass-through traffic: local, and the forged headers removed too.
    let reply = world.regions[2]
        .client()
        .send("GET", "/echo", &forged, "")
        .await;
    assert_eq!(reply.status, 200);
    let headers = &reply.json()["headers"];
    assert!(
        headers.get("idempotency-region-token").is_none(),
        "{headers}"
    );
    assert!(
        headers.get("idempotency-forwarded-from").is_none(),
        "{headers}"
    );

    // With the valid token, a request is handled where it lands: no second hop.
    let key = key_at("us", "landed");
    let reply = charge(
        &world.regions[0].client(),
        &key,
        &[
            ("idempotency-region-token", TOKEN),
            ("idempotency-forwarded-from", "ap"),
        ],
    )
    .await;
    assert_eq!(reply.status, 201);
    assert_eq!(world.executions(&key), vec![("eu", 1)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fourth_region_takes_only_the_keys_it_now_outweighs() {
    let mut world = World::new(&["eu", "us", "ap", "sa"]).await;
    for i in 0..3 {
        world.start(i, 3);
    }
    let three = world.names(3);
    let four = world.names(4);
    let mut choices = Choices(0x1234_5678_9abc_def1);
    let keys: Vec<String> = (0..120).map(|i| format!("grow-{i}")).collect();
    for key in &keys {
        let reply = charge(&world.regions[choices.below(3)].client(), key, &[]).await;
        assert_eq!(reply.status, 201, "{key}: {}", reply.text());
        assert_eq!(world.executions(key), vec![(home(&three, key), 1)]);
    }

    // sa starts knowing all four; the three others learn of it by a reload.
    world.start(3, 4);
    for i in 0..3 {
        let gateway = world.regions[i].gateway();
        let text = common::gateway::render(
            &world.template(i, 4),
            &world.regions[i].dir,
            &world.regions[i].upstream.url(),
            world.regions[i].ports.0,
            world.regions[i].ports.1,
        );
        std::fs::write(gateway.config_path(), text).unwrap();
        gateway.signal("HUP");
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    for i in 0..3 {
        let gateway = world.regions[i].gateway();
        while metric(gateway, "idemgate_config_reloads_total{result=\"ok\"}").await != Some(1.0) {
            assert!(
                Instant::now() < deadline,
                "{} did not reload:\n{}",
                world.regions[i].name,
                gateway.log_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    let mut moved = 0;
    for key in &keys {
        let (before, after) = (home(&three, key), home(&four, key));
        let reply = charge(&world.regions[choices.below(4)].client(), key, &[]).await;
        assert_eq!(reply.status, 201, "{key}: {}", reply.text());
        if before == after {
            assert_eq!(marker(&reply), Some("true"), "{key} stayed at {before}");
            assert_eq!(world.executions(key), vec![(before, 1)]);
        } else {
            // Only to the new region; its store has no record of the key.
            assert_eq!(after, "sa", "{key} moved from {before} to {after}");
            moved += 1;
            assert_eq!(marker(&reply), Some("false"), "{key}");
            assert_eq!(world.executions(key), vec![(before, 1), ("sa", 1)]);
            let again = charge(&world.regions[choices.below(4)].client(), key, &[]).await;
            assert_eq!(marker(&again), Some("true"), "{key} now replays at sa");
        }
    }
    assert!((10..60).contains(&moved), "{moved} of 120 keys moved to sa");
}

/// What a failed forward answers, whether or not the request was sent: 503
/// `home-region-unavailable` with `Retry-After`, no replay marker, counted
/// `unavailable`; no third result exists.
async fn assert_home_unavailable(reply: &Reply, forwarder: &GatewayProcess, failed: f64) {
    assert_eq!(reply.status, 503, "{}", reply.text());
    assert_eq!(reply.json()["code"], "home-region-unavailable");
    let retry_after = reply.header("retry-after").expect("Retry-After");
    assert!(
        retry_after.parse::<u64>().is_ok_and(|s| s >= 1),
        "{retry_after}"
    );
    assert_eq!(
        marker(reply),
        None,
        "the gateway's own answer has no marker"
    );
    assert_eq!(
        metric(
            forwarder,
            "idemgate_region_forwards_total{region=\"us\",result=\"unavailable\"}"
        )
        .await,
        Some(failed)
    );
    let metrics = forwarder.admin_client().get("/metrics").await.text();
    let results: Vec<&str> = metrics
        .lines()
        .filter(|line| line.starts_with("idemgate_region_forwards_total{"))
        .collect();
    assert!(
        !results.iter().any(|line| line.contains("outcome_unknown")),
        "{results:?}"
    );
    assert_eq!(results.len(), 2, "ok and unavailable only: {results:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_home_that_answers_too_late_is_503_and_the_retry_replays_its_answer() {
    let mut world = World::new(&["eu", "us"]).await;
    // The forward gives up after 1 s; the home's upstream takes 3 s and the
    // home's own upstream timeout (5 s) lets it finish and record.
    world.forward_timeout = "1s";
    world.start(0, 2);
    world.start(1, 2);
    let names = world.names(2);
    let key = (0..)
        .map(|i| format!("late-{i}"))
        .find(|key| home(&names, key) == "us")
        .unwrap();
    let eu = world.regions[0].client();
    let late = |client: Client, key: String| async move {
        let headers = [
            ("idempotency-key", key.as_str()),
            ("authorization", AUTH),
            ("content-type", "application/json"),
        ];
        client
            .send("POST", "/v1/charges?delay_ms=3000", &headers, "{}")
            .await
    };
    let reply = late(eu.clone(), key.clone()).await;
    assert_home_unavailable(&reply, world.regions[0].gateway(), 1.0).await;
    // The home ran it and recorded its answer; eu recorded nothing, so once
    // the home has finished a retry through eu gets the home's answer.
    let deadline = Instant::now() + Duration::from_secs(20);
    while world.executions(&key).is_empty()
        || late(world.regions[1].client(), key.clone()).await.status == 409
    {
        assert!(Instant::now() < deadline, "{}", world.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let retry = late(eu, key.clone()).await;
    assert_eq!(retry.status, 201, "{}", retry.text());
    assert_eq!(marker(&retry), Some("true"));
    assert_eq!(world.executions(&key), vec![("us", 1)], "never run at eu");
}

/// What a stand-in for the home region's gateway does with each request it
/// reads whole.
#[derive(Clone, Copy)]
enum Silent {
    /// Keeps the connection open and never answers.
    Hangs,
    /// Closes the connection without a byte of answer.
    Closes,
    /// Sends a head announcing 64 body bytes, 3 of them, then closes.
    CutsTheBody,
}

/// A raw listener in place of us's gateway: it reads each request whole,
/// keeps it, and answers as `silent` says.
async fn silent_home(silent: Silent) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = common::gateway::free_listener();
    listener.set_nonblocking(true).unwrap();
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    let addr = listener.local_addr().unwrap();
    let requests = Arc::new(Mutex::new(Vec::new()));
    let seen = requests.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((mut stream, _)) = listener.accept().await {
            let request = read_request(&mut stream).await;
            seen.lock().unwrap().push(request);
            match silent {
                Silent::Hangs => held.push(stream),
                Silent::Closes => drop(stream),
                Silent::CutsTheBody => {
                    let head = "HTTP/1.1 201 Created\r\ncontent-type: application/json\r\n\
                                content-length: 64\r\n\r\n{\"i";
                    let _ = stream.write_all(head.as_bytes()).await;
                    drop(stream);
                }
            }
        }
    });
    (addr, requests)
}

/// A request's head and its `Content-Length` body, lossily decoded.
async fn read_request(stream: &mut tokio::net::TcpStream) -> String {
    let mut read = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = read.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&read[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if read.len() >= end + 4 + length {
                break;
            }
        }
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => read.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&read).into_owned()
}

/// eu forwards a key homed at us to a stand-in that reads the request and
/// does not answer it: a failed hop, the same 503 as an unreachable home,
/// and nothing run at eu.
async fn a_silent_home_is_unavailable(silent: Silent) {
    let mut world = World::new(&["eu", "us"]).await;
    world.forward_timeout = "1s";
    let (addr, requests) = silent_home(silent).await;
    world.regions[1].ports.0 = addr;
    world.start(0, 2);
    let names = world.names(2);
    let key = (0..)
        .map(|i| format!("silent-{i}"))
        .find(|key| home(&names, key) == "us")
        .unwrap();
    let started = Instant::now();
    let reply = charge(&world.regions[0].client(), &key, &[]).await;
    let eu = world.regions[0].gateway();
    assert_home_unavailable(&reply, eu, 1.0).await;
    if matches!(silent, Silent::Hangs) {
        assert!(
            started.elapsed() >= Duration::from_millis(900),
            "the forward's timeout ran out"
        );
    }
    // The request was sent whole: the failure came after it.
    let requests = requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert!(
        requests[0].starts_with("POST /v1/charges "),
        "{}",
        requests[0]
    );
    assert!(requests[0].contains(&key), "{}", requests[0]);
    assert!(
        requests[0]
            .to_ascii_lowercase()
            .contains(&format!("\r\nidempotency-region-token: {TOKEN}\r\n")),
        "{}",
        requests[0]
    );
    assert!(
        requests[0].ends_with(&format!("{{\"key\":\"{key}\"}}")),
        "{}",
        requests[0]
    );
    assert_eq!(world.regions[0].upstream.total(), 0, "nothing ran at eu");
    assert_eq!(world.executions(&key), vec![]);
    assert_eq!(
        metric(
            eu,
            "idemgate_requests_total{outcome=\"region_unavailable\",route=\"charges\"}"
        )
        .await,
        Some(1.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_home_gateway_that_never_answers_is_503_home_region_unavailable() {
    a_silent_home_is_unavailable(Silent::Hangs).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_home_gateway_that_closes_without_answering_is_503_home_region_unavailable() {
    a_silent_home_is_unavailable(Silent::Closes).await;
}

/// A small answer is read whole before the client gets anything: cut short,
/// it is a failed hop like a missing head.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_home_answer_cut_before_its_small_body_is_whole_is_503_home_region_unavailable() {
    a_silent_home_is_unavailable(Silent::CutsTheBody).await;
}

/// A forward appends its gateway's entry to the client's `Via` (kept, in
/// order): the home's upstream sees both, and a pseudonym, not the region's
/// name.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_forward_appends_its_via_entry_to_the_client_s() {
    let world = World::started(&["eu", "us"]).await;
    let names = world.names(2);
    let key = (0..)
        .map(|i| format!("via-{i}"))
        .find(|key| home(&names, key) == "us")
        .unwrap();
    let reply = charge(
        &world.regions[0].client(),
        &key,
        &[("via", "1.0 corp-proxy (Squid)")],
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert_eq!(world.executions(&key), vec![("us", 1)]);
    let via = world.regions[1].upstream.last_header("via");
    let via = via.as_deref().unwrap_or_default();
    let ours = via
        .strip_prefix("1.0 corp-proxy (Squid), 1.1 idemgate-")
        .unwrap_or_else(|| panic!("the client's Via, then eu's entry: {via:?}"));
    assert!(
        ours.len() == 16 && ours.bytes().all(|b| b.is_ascii_hexdigit()),
        "{via:?}"
    );
    assert!(!via.contains("eu"), "no region name: {via:?}");

    // Homed where it lands: no hop, no entry of the gateway's.
    let key = (0..)
        .map(|i| format!("via-here-{i}"))
        .find(|key| home(&names, key) == "eu")
        .unwrap();
    let reply = charge(&world.regions[0].client(), &key, &[("via", "1.1 cdn")]).await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert_eq!(
        world.regions[0].upstream.last_header("via").as_deref(),
        Some("1.1 cdn")
    );
}

/// Gateways that neither share the region token nor compute the same homes
/// (here us knows eu's gateway as "ap", a rename pushed to one region) would
/// pass a request back and forth until a timeout. The gateway it comes back
/// to refuses it at once: 503 `home-region-unavailable`, nothing run
/// anywhere, one forward each way, and an error line naming both regions.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_forward_that_comes_back_is_refused_at_once() {
    let mut world = World::new(&["eu", "us"]).await;
    world.forward_timeout = "3s";
    let eu_config = world.template(0, 2);
    let peer = |name: &str, region: &Region| {
        Peer::new(name, &format!("http://{}", region.ports.0))
            .set("connect_timeout", "1s")
            .set("timeout", "3s")
    };
    let us_config = region_config("us", Store::embedded())
        .peer(peer("us", &world.regions[1]))
        .peer(peer("ap", &world.regions[0]));
    world.start_as(0, &eu_config, TOKEN);
    world.start_as(1, &us_config, "another-region-token-0a1b2c3d4e5f");
    let key = (0..)
        .map(|i| format!("loop-{i}"))
        .find(|key| home(&["eu", "us"], key) == "us" && home(&["ap", "us"], key) == "ap")
        .unwrap();

    let started = Instant::now();
    let reply = charge(&world.regions[0].client(), &key, &[]).await;
    let took = started.elapsed();
    let eu = world.regions[0].gateway();
    assert!(
        world.executions(&key).is_empty(),
        "{:?}",
        world.executions(&key)
    );
    let forwards = |gateway, line: &'static str| metric(gateway, line);
    assert_eq!(
        forwards(
            eu,
            "idemgate_region_forwards_total{region=\"us\",result=\"ok\"}"
        )
        .await,
        Some(1.0),
        "eu forwarded once, and relayed the refusal"
    );
    let us = world.regions[1].gateway();
    assert_eq!(
        forwards(
            us,
            "idemgate_region_forwards_total{region=\"ap\",result=\"ok\"}"
        )
        .await,
        Some(1.0),
        "us forwarded once\n{}",
        world.logs()
    );
    assert_home_unavailable(&reply, eu, 1.0).await;
    assert!(took < Duration::from_secs(2), "answered in {took:?}");
    assert!(
        reply.text().contains("came back"),
        "the detail says why: {}",
        reply.text()
    );
    let log = eu.log_text();
    let line = log
        .lines()
        .find(|line| line.contains("forwarding loop"))
        .unwrap_or_else(|| panic!("no loop logged:\n{}", world.logs()));
    assert!(line.contains("ERROR"), "{line}");
    assert!(
        line.contains("Region eu and region us") && line.contains("region token"),
        "{line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_region_the_region_headers_are_a_client_s_like_any_other() {
    let (_dir, upstream, gateway) =
        GatewayProcess::start_fresh("no-region", &common::config::Config::charges_and_rest()).await;
    let headers = [
        ("idempotency-region-token", "anything"),
        ("idempotency-forwarded-from", "us"),
    ];
    let reply = gateway.client().send("GET", "/echo", &headers, "").await;
    assert_eq!(reply.status, 200);
    let echoed = &reply.json()["headers"];
    assert_eq!(echoed["idempotency-region-token"], "anything", "{echoed}");
    assert_eq!(echoed["idempotency-forwarded-from"], "us", "{echoed}");
    let reply = charge(&gateway.client(), "k-1", &headers).await;
    assert_eq!(reply.status, 201);
    assert_eq!(upstream.executions("k-1"), 1);
    let metrics = gateway.admin_client().get("/metrics").await.text();
    assert!(
        !metrics.contains("idemgate_region_forwards_total{"),
        "{metrics}"
    );
    assert!(!gateway.log_text().contains("home_region"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forwards_go_over_https_with_a_private_ca_and_http2() {
    let pki = common::certs::Pki::new("regions test CA");
    let mut world = World::new(&["eu", "us"]).await;
    let names = world.names(2);
    let us_dir = &world.regions[1].dir;
    let identity = pki.server(us_dir, "us");
    let ca = pki.write_ca(&world.regions[0].dir, "regions-ca.pem");
    let us_port = world.regions[1].ports.0.port();
    // us serves TLS only (h2 by ALPN); eu reaches it by name, trusting the CA.
    let eu_gateway = format!("http://{}", world.regions[0].ports.0);
    let with_peers = |name: &str, ca: Option<&std::path::Path>| {
        let mut us = Peer::new("us", &format!("https://localhost:{us_port}")).set("http2", true);
        if let Some(ca) = ca {
            us = us.set("ca", ca);
        }
        region_config(name, Store::embedded())
            .peer(Peer::new("eu", &eu_gateway))
            .peer(us)
    };
    let eu_template = with_peers("eu", Some(&ca));
    let us_template = with_peers("us", None).server_tls(Tls::of(&identity));
    for (i, template) in [(0, eu_template.clone()), (1, us_template)] {
        let region = &mut world.regions[i];
        region.gateway = Some(
            GatewayProcess::start_at(
                &region.dir,
                &region.upstream.url(),
                &template,
                region.ports,
                &[(TOKEN_ENV, TOKEN)],
            )
            .unwrap_or_else(|log| panic!("{log}")),
        );
    }
    let key = (0..)
        .map(|i| format!("tls-{i}"))
        .find(|k| home(&names, k) == "us")
        .unwrap();
    let eu = world.regions[0].client();
    let first = charge(&eu, &key, &[]).await;
    assert_eq!(first.status, 201, "{}\n{}", first.text(), world.logs());
    assert_eq!(marker(&first), Some("false"));
    // `http2 = true` over https refuses a gateway whose handshake does not
    // choose h2: this answer came over HTTP/2.
    let again = charge(&eu, &key, &[]).await;
    assert_eq!(marker(&again), Some("true"));
    assert_eq!(again.body, first.body);
    assert_eq!(world.executions(&key), vec![("us", 1)]);

    // Without the CA the handshake fails: nothing was sent, nothing ran.
    let eu = &mut world.regions[0];
    let no_ca = with_peers("eu", None);
    assert_ne!(no_ca.toml(), eu_template.toml());
    eu.gateway.take().unwrap().kill();
    eu.gateway = Some(
        GatewayProcess::start_at(
            &eu.dir,
            &eu.upstream.url(),
            &no_ca,
            eu.ports,
            &[(TOKEN_ENV, TOKEN)],
        )
        .unwrap_or_else(|log| panic!("{log}")),
    );
    let other = (0..)
        .map(|i| format!("untrusted-{i}"))
        .find(|k| home(&names, k) == "us")
        .unwrap();
    let reply = charge(&world.regions[0].client(), &other, &[]).await;
    assert_eq!(reply.status, 503, "{}", reply.text());
    assert_eq!(reply.json()["code"], "home-region-unavailable");
    assert_eq!(world.executions(&other), vec![]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn key_less_pass_through_and_uncovered_methods_stay_local() {
    let world = World::started(&["eu", "us", "ap"]).await;
    let names = world.names(3);
    for (i, region) in world.regions.iter().enumerate() {
        let client = region.client();
        let headers = [
            ("authorization", AUTH),
            ("content-type", "application/json"),
        ];
        let key_less = client.send("POST", "/v1/charges", &headers, "{}").await;
        assert_eq!(key_less.status, 201, "{}", key_less.text());
        assert_eq!(marker(&key_less), None);
        // GET is not among the route's methods: passed through, key and all.
        let key = (0..)
            .map(|n| format!("get-{i}-{n}"))
            .find(|k| home(&names, k) != region.name)
            .unwrap();
        let get = client
            .send(
                "GET",
                "/v1/charges",
                &[("idempotency-key", key.as_str())],
                "",
            )
            .await;
        assert_eq!(get.status, 201, "{}", get.text());
        let other = client
            .send(
                "PUT",
                "/elsewhere",
                &[("idempotency-key", key.as_str())],
                "x",
            )
            .await;
        assert_eq!(other.status, 201);
        assert_eq!(
            region.upstream.executions(""),
            1,
            "{}: the key-less request",
            region.name
        );
        assert_eq!(world.executions(&key), vec![(region.name, 2)], "{key}");
    }
    // Counted as forwarded where they were, as what they were at home.
    let key = (0..)
        .map(|n| format!("count-{n}"))
        .find(|k| home(&names, k) == "us")
        .unwrap();
    assert_eq!(
        charge(&world.regions[0].client(), &key, &[]).await.status,
        201
    );
    let eu = world.regions[0].gateway();
    let us = world.regions[1].gateway();
    let line = |outcome: &str| {
        format!("idemgate_requests_total{{outcome=\"{outcome}\",route=\"charges\"}}")
    };
    assert_eq!(metric(eu, &line("forwarded")).await, Some(1.0));
    assert_eq!(metric(eu, &line("new")).await, Some(0.0));
    assert_eq!(metric(us, &line("new")).await, Some(1.0));
}

/// A route keyed by the client's header, else by a key derived from the
/// body: every answer under a derived key tells it, at its home and where
/// the request landed, the 503 of a home that cannot be reached included.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_derived_key_is_told_through_a_forward_and_on_its_failure() {
    const NAMESPACE: &str = "9f1c3e0a-5b7d-4c2e-8a61-3d4f5e6a7b8c";
    let mut world = World::new(&["eu", "us"]).await;
    for i in 0..2 {
        let template = world.template(i, 2).with_route("charges", |route| {
            route.set(
                "key",
                common::config::raw(&format!(
                    r#"[{{ header = "Idempotency-Key" }}, {{ derive = ["/order_id"], namespace = "{NAMESPACE}" }}]"#
                )),
            )
        });
        world.start_as(i, &template, TOKEN);
    }
    let names = world.names(2);
    // RFC 9562 UUIDv5 of the part written as "<byte length>:<bytes>".
    let derived = |order: &str| {
        let namespace = uuid::Uuid::parse_str(NAMESPACE).unwrap();
        let name = format!("{}:{order}", order.len());
        uuid::Uuid::new_v5(&namespace, name.as_bytes()).to_string()
    };
    let homed_at_us = |prefix: &str| {
        (0..)
            .map(|n| format!("{prefix}-{n}"))
            .find(|order| home(&names, &derived(order)) == "us")
            .unwrap()
    };
    let order = async |region: &Region, order: &str| {
        let headers = [
            ("authorization", AUTH),
            ("content-type", "application/json"),
        ];
        let body = format!(r#"{{"order_id":"{order}","amount":5}}"#);
        region
            .client()
            .send("POST", "/v1/charges", &headers, body)
            .await
    };

    let first = homed_at_us("ord");
    let key = derived(&first);
    let fresh = order(&world.regions[0], &first).await;
    assert_eq!(fresh.status, 201, "{}", fresh.text());
    assert_eq!(marker(&fresh), Some("false"));
    assert_eq!(fresh.header("idempotency-key"), Some(key.as_str()));
    assert_eq!(world.executions(&key), vec![("us", 1)]);
    for region in &world.regions {
        let again = order(region, &first).await;
        assert_eq!(marker(&again), Some("true"), "at {}", region.name);
        assert_eq!(again.header("idempotency-key"), Some(key.as_str()));
    }

    world.regions[1].gateway.as_mut().unwrap().kill();
    let stranded = homed_at_us("stranded");
    let refused = order(&world.regions[0], &stranded).await;
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert_eq!(refused.json()["code"], "home-region-unavailable");
    assert_eq!(
        refused.header("idempotency-key"),
        Some(derived(&stranded).as_str()),
        "the client and the operator can find the key it will run under"
    );
    assert_eq!(marker(&refused), None);
    assert_eq!(world.executions(&derived(&stranded)), vec![]);
}

/// The admin API and `idemgate keys` act on their own region's store. Asked
/// outside a key's home they answer 404 as ever, but the 404 now names the
/// home when the route's scope is empty (the home then follows from route
/// and key alone), and says that it depends on the scope otherwise: an
/// operator reconciling a key got a bare 404 and no hint where to look.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_key_asked_for_outside_its_home_names_its_home() {
    use common::admin::{TOKEN_ENV as ADMIN_ENV, bearer};
    use common::config::raw;
    const ADMIN_TOKEN: &str = "admin-token-for-regions";

    let mut world = World::new(&["eu", "us"]).await;
    for i in 0..2 {
        let mut template = Config::new()
            .server("shutdown_grace", "5s")
            .admin_token_env(ADMIN_ENV)
            .upstream(Upstream::api().timeout("5s"))
            .route(Route::api("charges", "/v1/charges").set("scope", raw("[]")))
            .route(Route::api("tenant_charges", "/v1/tenant/charges"))
            .route(Route::api("rest", "/").plain())
            .region(world.regions[i].name, TOKEN_ENV);
        for region in &world.regions {
            let gateway = format!("http://{}", region.ports.0);
            template = template.peer(Peer::new(region.name, &gateway));
        }
        let region = &mut world.regions[i];
        let gateway = GatewayProcess::start_at(
            &region.dir,
            &region.upstream.url(),
            &template,
            region.ports,
            &[(TOKEN_ENV, TOKEN), (ADMIN_ENV, ADMIN_TOKEN)],
        )
        .unwrap_or_else(|log| panic!("region {} did not start: {log}", region.name));
        region.gateway = Some(gateway);
    }
    let names = world.names(2);
    let unscoped = idemgate::key::scope_hash::<&[u8]>(&[]);
    let key = (0..)
        .map(|i| format!("order-{i}"))
        .find(|key| {
            names[idemgate::region::home(&names, "charges", &unscoped, key).unwrap()] == "us"
        })
        .unwrap();
    let (eu, us) = (&world.regions[0], &world.regions[1]);
    // Sent to eu, it runs in us and is recorded there.
    let reply = charge(&eu.client(), &key, &[]).await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert_eq!(world.executions(&key), vec![("us", 1)]);

    let admin = |gateway: &GatewayProcess, method: &'static str, path: String| {
        let client = gateway.admin_client();
        async move {
            let auth = bearer(ADMIN_TOKEN);
            client
                .send(method, &path, &[("authorization", auth.as_str())], "")
                .await
        }
    };
    let path = format!("/admin/keys/charges/{key}");
    let at_home = admin(us.gateway(), "GET", path.clone()).await;
    assert_eq!(at_home.status, 200, "{}", at_home.text());

    for method in ["GET", "DELETE"] {
        let elsewhere = admin(eu.gateway(), method, path.clone()).await;
        assert_eq!(elsewhere.status, 404, "{method}: {}", elsewhere.text());
        let problem = elsewhere.json();
        assert_eq!(problem["code"], "not-found", "{problem}");
        assert_eq!(problem["home_region"], "us", "{method}: {problem}");
        let detail = problem["detail"].as_str().unwrap();
        assert!(detail.contains("region us"), "{detail}");
        assert!(detail.contains("region eu"), "{detail}");
    }
    // Purged at home, a 404 there names that region, itself.
    let purged = admin(us.gateway(), "DELETE", path.clone()).await;
    assert_eq!(purged.status, 204, "{}", purged.text());
    let gone = admin(us.gateway(), "GET", path.clone()).await;
    assert_eq!(gone.status, 404);
    assert_eq!(gone.json()["home_region"], "us", "{}", gone.text());

    // A scoped route: the home depends on each request's scope.
    let scoped = admin(
        eu.gateway(),
        "GET",
        format!("/admin/keys/tenant_charges/{key}"),
    )
    .await;
    assert_eq!(scoped.status, 404);
    let problem = scoped.json();
    assert!(problem.get("home_region").is_none(), "{problem}");
    assert!(
        problem["detail"].as_str().unwrap().contains("scope"),
        "{problem}"
    );

    // `idemgate keys show|purge` against eu's file say the same.
    let config = eu.gateway().config_path().to_owned();
    for action in ["show", "purge"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"))
            .args(["keys", action, "-c"])
            .arg(&config)
            .args(["charges", &key])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{action}: {stderr}");
        assert!(stderr.contains("no records"), "{action}: {stderr}");
        assert!(stderr.contains("home region is us"), "{action}: {stderr}");
    }
}

/// A forward rewrites some of the client's fields on its way to the home
/// region (`X-Forwarded-For` gets the client's address appended,
/// `X-Forwarded-Proto` and `-Host` are set, `Via` gets the gateway's entry,
/// hop-by-hop and `Proxy-*` fields are dropped). A route whose scope,
/// fingerprint or key read one of them was homed by the value the client
/// sent and filed, at its home, under the rewritten one: with
/// `scope = ["header:X-Forwarded-For"]` a key sent to eu ran in us, and its
/// retry sent to us directly ran there a second time. Such a route cannot
/// cross regions, as one scoped by `client_cert` cannot: `check` and `serve`
/// refuse it with `[region]`, and accept it without.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_route_reading_a_field_a_forward_rewrites_cannot_cross_regions() {
    use common::config::raw;
    const NAMESPACE: &str = "9f1c3e0a-5b7d-4c2e-8a61-3d4f5e6a7b8c";
    let derive = format!(r#"{{ derive = ["/id", "header:Via"], namespace = "{NAMESPACE}" }}"#);
    let cases: [(&str, &str, String); 5] = [
        (
            "scope",
            "header:x-forwarded-for",
            r#"["header:X-Forwarded-For"]"#.into(),
        ),
        (
            "scope",
            "header:proxy-authorization",
            r#"["header:Proxy-Authorization"]"#.into(),
        ),
        (
            "fingerprint",
            "header:x-forwarded-proto",
            r#"["method", "path", "body", "header:X-Forwarded-Proto"]"#.into(),
        ),
        ("key", "header:via", derive),
        (
            "key",
            "x-forwarded-host",
            r#"{ header = "X-Forwarded-Host" }"#.into(),
        ),
    ];
    let mut world = World::new(&["eu", "us"]).await;
    let dir = TestDir::new("hop-fields");
    let check = |template: &Config| {
        let path = dir.path("idemgate.toml");
        let text = common::gateway::render(
            template,
            &dir,
            "http://127.0.0.1:9",
            free_port(),
            free_port(),
        );
        std::fs::write(&path, text).unwrap();
        std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"))
            .args(["check", "-c"])
            .arg(&path)
            .env(TOKEN_ENV, TOKEN)
            .output()
            .unwrap()
    };
    for (field, part, value) in &cases {
        let charges = Route::api("charges", "/v1/charges").set(field, raw(value));
        // One region: the gateway reads what the client sent; nothing to refuse.
        let alone = Config::new()
            .store(Store::embedded())
            .upstream(Upstream::api().timeout("5s"))
            .route(charges.clone());
        let out = check(&alone);
        assert!(
            out.status.success(),
            "{field} {part} without regions: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let regions = world
            .template(0, 2)
            .with_route("charges", |_| charges.clone());
        let out = check(&regions);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{field} {part} accepted");
        assert!(stderr.contains("route \"charges\""), "{stderr}");
        assert!(stderr.contains(part), "{part}: {stderr}");
        assert!(stderr.contains(field), "{field}: {stderr}");
        assert!(stderr.contains("cannot cross regions"), "{stderr}");
    }
    // `serve` refuses it as `check` does, before it opens anything.
    let (field, _, value) = &cases[0];
    let template = world
        .template(0, 2)
        .with_route("charges", |route| route.set(field, raw(value)));
    let region = &mut world.regions[0];
    let refused = GatewayProcess::start_at(
        &region.dir,
        &region.upstream.url(),
        &template,
        region.ports,
        &[(TOKEN_ENV, TOKEN)],
    )
    .err()
    .expect("serve refuses the route");
    assert!(refused.contains("cannot cross regions"), "{refused}");
}

/// A reload that leaves a region's `gateway`, timeouts and `http2` as they
/// were leaves the connections to it too: a forward after the reload goes
/// on the connection one still running across it used, rather than each
/// reload opening connections of its own beside those still in use.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reload_keeps_the_connections_to_a_region_it_leaves_alone() {
    for http2 in [false, true] {
        let mut world = World::new(&["eu", "us"]).await;
        // A stand-in for us's gateway that counts the connections it accepts.
        let us = MockUpstream::start().await;
        world.regions[1].ports.0 = us.addr;
        let eu_gateway = format!("http://{}", world.regions[0].ports.0);
        let template = region_config("eu", Store::embedded())
            .peer(Peer::new("eu", &eu_gateway))
            .peer(
                Peer::new("us", &us.url())
                    .set("connect_timeout", "1s")
                    .set("http2", http2),
            );
        world.start_as(0, &template, TOKEN);
        let names = world.names(2);
        let keys = (0..).map(|i| format!("kept-{http2}-{i}"));
        let keys: Vec<String> = keys.filter(|k| home(&names, k) == "us").take(4).collect();
        let eu = world.regions[0].client();
        for (n, key) in (1..).zip(&keys) {
            let body = format!("{{\"key\":\"{key}\"}}");
            let eu = eu.clone();
            let key = key.clone();
            // Still at us while eu reloads.
            let forward = tokio::spawn(async move {
                let headers = [
                    ("idempotency-key", key.as_str()),
                    ("authorization", AUTH),
                    ("content-type", "application/json"),
                ];
                eu.send("POST", "/v1/charges?delay_ms=300", &headers, body)
                    .await
            });
            tokio::time::sleep(Duration::from_millis(100)).await;
            world.regions[0].gateway().reload_by_signal(n).await;
            let reply = forward.await.unwrap();
            assert_eq!(reply.status, 201, "{}\n{}", reply.text(), world.logs());
        }
        assert_eq!(us.total(), 4, "every forward reached us");
        let (opened, _) = us.connections();
        assert_eq!(opened, 1, "http2 = {http2}: {opened} connections opened");
    }
}
