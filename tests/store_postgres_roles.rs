//! PostgreSQL with least-privilege roles, as platforms run it: an owner
//! role migrates, the serving role has only the grants that
//! docs/postgres.md ("Roles and privileges") lists, and an operator's role
//! only reads. The statements run here are the ones the docs show, read from
//! the file, with this test's names in place of the docs' own.
//!
//! Every test makes its own roles and schema (unique per process and test)
//! and drops them at the end, so tests run in parallel with the others.

mod common;
mod pg_support;

use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use common::config::{Config, Route, Store, Upstream};
use common::{GatewayProcess, MockUpstream, TestDir};
use idemgate::store::{PostgresStore, RecordId, Reservation};

const TOKEN: &str = "roles-test-admin-token-0123456789";

/// Taken first in each batch of statements that grants on, or revokes from,
/// the database (held to the batch's end): PostgreSQL fails a `GRANT` that
/// changes a database's privileges while another does ("tuple concurrently
/// updated"), and the tests run in parallel.
const SERIALIZED: &str = "SELECT pg_advisory_xact_lock(7265636)";

/// The `sql` code blocks of docs/postgres.md's "Roles and privileges":
/// the one-time setup, the serving role's grants, the operator's role.
fn documented_sql() -> Vec<String> {
    let docs = include_str!("../docs/postgres.md");
    let start = docs
        .find("\n## Roles and privileges\n")
        .expect("docs/postgres.md has a section Roles and privileges");
    let section = &docs[start + 1..];
    let section = &section[..section[3..]
        .find("\n## ")
        .map_or(section.len(), |end| end + 3)];
    let blocks: Vec<String> = section
        .split("```sql\n")
        .skip(1)
        .map(|block| block.split("```").next().unwrap().to_owned())
        .collect();
    assert_eq!(blocks.len(), 3, "{section}");
    blocks
}

/// One deployment's roles and schema, named for this test; dropped (with
/// everything they own and were granted) on drop.
struct Deployment {
    schema: String,
    owner: String,
    app: String,
    operator: String,
    database: String,
}

impl Deployment {
    async fn create() -> Deployment {
        let tag = pg_support::unique("roles");
        let base: tokio_postgres::Config = pg_support::base_url().parse().unwrap();
        let deployment = Deployment {
            schema: format!("{tag}_schema"),
            owner: format!("{tag}_owner"),
            app: format!("{tag}_app"),
            operator: format!("{tag}_operator"),
            database: base.get_dbname().unwrap_or("test").to_owned(),
        };
        deployment.as_superuser(&documented_sql()[0]).await;
        deployment
    }

    /// The docs' statement with this deployment's names: whole identifiers
    /// only, so `idemgate` the schema is replaced and `idemgate_records`
    /// is not.
    fn ours(&self, sql: &str) -> String {
        let mut out = String::with_capacity(sql.len());
        let mut word = String::new();
        let flush = |word: &mut String, out: &mut String| {
            out.push_str(match word.as_str() {
                "idemgate" => &self.schema,
                "idemgate_owner" => &self.owner,
                "idemgate_app" => &self.app,
                "idemgate_operator" => &self.operator,
                "payments" => &self.database,
                other => other,
            });
            word.clear();
        };
        for c in sql.chars() {
            if c.is_ascii_alphanumeric() || c == '_' {
                word.push(c);
            } else {
                flush(&mut word, &mut out);
                out.push(c);
            }
        }
        flush(&mut word, &mut out);
        out
    }

    async fn as_superuser(&self, sql: &str) {
        pg_support::admin_sql(&format!("{SERIALIZED}; {}", self.ours(sql))).await;
    }

    async fn as_role(&self, role: &str, sql: &str) {
        let (client, conn) = tokio_postgres::connect(&self.url(role), tokio_postgres::NoTls)
            .await
            .unwrap();
        let task = tokio::spawn(conn);
        client.batch_execute(&self.ours(sql)).await.unwrap();
        drop(client);
        let _ = task.await;
    }

    /// The base URL as `role`, in this deployment's schema, its sessions
    /// named after the schema.
    fn url(&self, role: &str) -> String {
        let url = pg_support::url_in_schema(&self.schema);
        let (scheme, rest) = url.split_once("://").unwrap();
        let host = rest.split_once('@').map_or(rest, |(_, host)| host);
        format!("{scheme}://{role}@{host}")
    }

    fn store_config(&self, role: &str, migrate: bool) -> idemgate::config::PostgresStoreConfig {
        idemgate::config::PostgresStoreConfig {
            url: self.url(role),
            pool_size: 4,
            connect_timeout: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(5),
            migrate,
            sweep_interval: Duration::from_secs(60),
            sweep_batch: 1000,
            redis: None,
            encryption: Vec::new(),
        }
    }

    /// `idemgate migrate` as the owner.
    async fn migrate(&self) {
        let store = PostgresStore::lazy(&self.store_config(&self.owner, true)).unwrap();
        store.migrate().await.unwrap();
    }

    /// The serving role's documented grants, made by the owner.
    async fn grant(&self) {
        self.as_role(&self.owner, &documented_sql()[1]).await;
    }
}

impl Drop for Deployment {
    fn drop(&mut self) {
        let mut sql = vec![format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema)];
        for role in [&self.app, &self.operator, &self.owner] {
            sql.push(format!("{SERIALIZED}; DROP OWNED BY {role}"));
            sql.push(format!("DROP ROLE IF EXISTS {role}"));
        }
        let _ = std::thread::spawn(move || {
            // A role never made (the operator's, in most tests) fails its
            // DROP OWNED: one statement at a time, each on its own.
            if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                rt.block_on(async {
                    let Ok((client, conn)) =
                        tokio_postgres::connect(&pg_support::base_url(), tokio_postgres::NoTls)
                            .await
                    else {
                        return;
                    };
                    let task = tokio::spawn(conn);
                    for statement in &sql {
                        let _ = client.batch_execute(statement).await;
                    }
                    drop(client);
                    let _ = task.await;
                });
            }
        })
        .join();
    }
}

fn config(pg_url: &str, migrate: bool) -> Config {
    Config::new()
        .admin("token", TOKEN)
        .store(
            Store::postgres(pg_url)
                .set("pool_size", 4)
                .set("migrate", migrate)
                .set("sweep_interval", "1s"),
        )
        .upstream(Upstream::api().timeout("5s"))
        .defaults("lock_timeout", "10s")
        .route(Route::api("charges", "/v1/charges").set("required", true))
}

/// The binary's `args` on a config file for `role`.
fn command(dir: &TestDir, deployment: &Deployment, role: &str, args: &[&str]) -> Output {
    let path = dir.path(&format!("{role}.toml"));
    // Nothing listens: commands bind no listener.
    let text = common::gateway::render(
        &config(&deployment.url(role), false),
        dir,
        "http://127.0.0.1:9",
        "127.0.0.1:9".parse().unwrap(),
        "127.0.0.1:10".parse().unwrap(),
    );
    std::fs::write(&path, text).unwrap();
    Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(args)
        .arg("-c")
        .arg(&path)
        .output()
        .unwrap()
}

fn says(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn bearer() -> (&'static str, String) {
    ("authorization", format!("Bearer {TOKEN}"))
}

/// The documented grants are enough for everything a user relies on,
/// through two replicas serving as the role that owns nothing (one with
/// `store.migrate = false`, one with the default), the commands as that
/// role, and `keys show` / `keys list` as the operator's read-only role.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_grants_are_enough_for_every_path() {
    let deployment = Deployment::create().await;
    deployment.migrate().await;
    deployment.grant().await;
    deployment.as_superuser(&documented_sql()[2]).await;

    let upstream = MockUpstream::start().await;
    let dirs = [TestDir::new("roles-a"), TestDir::new("roles-b")];
    let app_url = deployment.url(&deployment.app);
    let one = GatewayProcess::start(&dirs[0], &upstream.url(), &config(&app_url, false));
    let two = GatewayProcess::start(&dirs[1], &upstream.url(), &config(&app_url, true));
    for gateway in [&one, &two] {
        let ready = gateway.admin_client().get("/readyz").await;
        assert_eq!(ready.status, 200, "{}", ready.text());
    }

    // A new key, its replays on both replicas, another request under it.
    let first = one.client().post("/v1/charges", Some("k1"), "{}").await;
    assert_eq!(first.status, 201, "{}", first.text());
    for gateway in [&one, &two, &two] {
        let replay = gateway.client().post("/v1/charges", Some("k1"), "{}").await;
        assert_eq!(replay.status, 201, "{}", replay.text());
        assert_eq!(replay.body, first.body);
    }
    assert_eq!(upstream.executions("k1"), 1);
    let other = two
        .client()
        .post("/v1/charges", Some("k1"), "{\"a\":1}")
        .await;
    assert_eq!(other.status, 422, "{}", other.text());

    // Listing by state and the record of one key.
    let (name, value) = bearer();
    let admin = one.admin_client();
    let listed = admin
        .send(
            "GET",
            "/admin/keys/charges?state=completed",
            &[(name, &value)],
            "",
        )
        .await;
    assert_eq!(listed.status, 200, "{}", listed.text());
    assert!(listed.text().contains("\"k1\""), "{}", listed.text());

    // A purge through one replica reaches the other's copy in memory: the
    // next request there runs again.
    let purged = admin
        .send("DELETE", "/admin/keys/charges/k1", &[(name, &value)], "")
        .await;
    assert_eq!(purged.status, 204, "{}", purged.text());
    let again = two.client().post("/v1/charges", Some("k1"), "{}").await;
    assert_eq!(again.status, 201, "{}", again.text());
    assert_eq!(upstream.executions("k1"), 2);

    // The records count.
    let metrics = one.admin_client().get("/metrics").await.text();
    assert!(
        metrics.contains("idemgate_records{route=\"charges\",state=\"completed\"}"),
        "{metrics}"
    );

    // The commands: as the serving role, and the operator's reads.
    let dir = TestDir::new("roles-commands");
    let app = deployment.app.clone();
    let operator = deployment.operator.clone();
    for (role, args) in [
        (&app, &["migrate"][..]),
        (&app, &["sweep"][..]),
        (&operator, &["keys", "show", "charges", "k1"][..]),
        (&operator, &["keys", "list", "charges"][..]),
        (&app, &["keys", "purge", "charges", "k1"][..]),
    ] {
        let output = command(&dir, &deployment, role, args);
        assert!(output.status.success(), "{args:?}: {}", says(&output));
    }
    let refused = command(
        &dir,
        &deployment,
        &operator,
        &["keys", "purge", "charges", "k1"],
    );
    assert!(!refused.status.success());
    let text = says(&refused);
    assert!(
        text.contains("refuses this role a privilege") && text.contains("permission denied"),
        "{text}"
    );

    // Nothing the gateways did in the background (the sweep every second,
    // the count, the purge listener) was refused.
    for gateway in [&one, &two] {
        let log = gateway.log_text();
        assert!(!log.contains("permission denied"), "{log}");
        assert!(!log.contains("counting records failed"), "{log}");
    }
}

/// A serving role that lacks a grant is refused at start, naming the
/// `GRANT` it lacks: it would otherwise start, say ready, and fail every
/// new key (here, the token sequence's `USAGE`).
#[tokio::test]
async fn a_role_without_a_grant_is_refused_at_start_naming_it() {
    let deployment = Deployment::create().await;
    deployment.migrate().await;
    deployment.grant().await;
    deployment
        .as_superuser(&format!(
            "REVOKE USAGE ON SEQUENCE {0}.idemgate_tokens FROM {1};
             REVOKE DELETE ON {0}.idemgate_records FROM {1}",
            deployment.schema, deployment.app
        ))
        .await;
    let dir = TestDir::new("roles-refused");
    let upstream = MockUpstream::start().await;
    let url = deployment.url(&deployment.app);
    let ports = (common::gateway::free_port(), common::gateway::free_port());
    let started = GatewayProcess::start_at(&dir, &upstream.url(), &config(&url, false), ports, &[]);
    let log = match started {
        Ok(gateway) => panic!("started without the grants:\n{}", gateway.log_text()),
        Err(log) => log,
    };
    let (schema, app) = (&deployment.schema, &deployment.app);
    for grant in [
        format!("GRANT DELETE ON TABLE {schema}.idemgate_records TO {app}"),
        format!("GRANT USAGE ON SEQUENCE {schema}.idemgate_tokens TO {app}"),
    ] {
        assert!(log.contains(&grant), "{grant} not in {log}");
    }
    assert!(!log.contains("cannot be reached"), "{log}");
}

/// A grant revoked while serving: each keyed request it fails is told as
/// a privilege refused, not as a store that cannot be reached, nothing is
/// forwarded, `/readyz` says which grant is missing, and the gateway serves
/// again once it is granted, without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_revoked_while_serving_is_told_and_granted_again_without_a_restart() {
    let deployment = Deployment::create().await;
    deployment.migrate().await;
    deployment.grant().await;
    let dir = TestDir::new("roles-revoked");
    let upstream = MockUpstream::start().await;
    let url = deployment.url(&deployment.app);
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &config(&url, false));
    let client = gateway.client();
    assert_eq!(
        client.post("/v1/charges", Some("r1"), "{}").await.status,
        201
    );

    let (schema, app) = (&deployment.schema, &deployment.app);
    deployment
        .as_superuser(&format!(
            "REVOKE INSERT ON {schema}.idemgate_records FROM {app}"
        ))
        .await;
    let refused = client.post("/v1/charges", Some("r2"), "{}").await;
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert_eq!(upstream.executions("r2"), 0);
    let detail = refused.json()["detail"].as_str().unwrap().to_owned();
    assert!(
        detail.contains("refuses the gateway's database role a privilege"),
        "{detail}"
    );
    let ready = gateway.admin_client().get("/readyz").await;
    assert_eq!(ready.status, 503, "{}", ready.text());
    assert!(
        ready.text().contains(&format!(
            "GRANT INSERT ON TABLE {schema}.idemgate_records TO {app}"
        )),
        "{}",
        ready.text()
    );

    deployment
        .as_superuser(&format!(
            "GRANT INSERT ON {schema}.idemgate_records TO {app}"
        ))
        .await;
    let ran = client.post("/v1/charges", Some("r2"), "{}").await;
    assert_eq!(ran.status, 201, "{}", ran.text());
    assert_eq!(upstream.executions("r2"), 1);
    assert_eq!(gateway.admin_client().get("/readyz").await.status, 200);
}

/// `migrate` by a role that may create in the schema but does not own the
/// tables (only an owner may alter a table) is told which role owns them,
/// not to grant the `CREATE` it has; nothing is changed.
#[tokio::test]
async fn a_migration_by_a_role_that_does_not_own_the_tables_names_their_owner() {
    let deployment = Deployment::create().await;
    deployment.migrate().await;
    deployment.grant().await;
    let (schema, app, owner) = (&deployment.schema, &deployment.app, &deployment.owner);
    // The schema as version 1 left it, and a serving role that may create.
    deployment
        .as_role(
            owner,
            &format!(
                "DROP INDEX {schema}.idemgate_records_listing;
                 ALTER TABLE {schema}.idemgate_records DROP COLUMN outcome_unknown;
                 DELETE FROM {schema}.idemgate_schema_migrations WHERE version = 2;
                 GRANT CREATE ON SCHEMA {schema} TO {app}"
            ),
        )
        .await;
    let store = PostgresStore::lazy(&deployment.store_config(app, true)).unwrap();
    let refused = store
        .migrate()
        .await
        .expect_err("migrated as a role that owns nothing");
    let msg = refused.to_string();
    assert!(
        msg.contains(&format!("belong to role {owner}"))
            && msg.contains(&format!("run `idemgate migrate` as {owner}")),
        "{msg}"
    );
    assert!(!msg.contains("GRANT CREATE"), "{msg}");
    // As the owner, it applies.
    deployment.migrate().await;
}

/// The documented default privileges alternative: the owner grants ahead
/// of time what it creates, and the serving role needs nothing more.
#[tokio::test]
async fn default_privileges_grant_what_the_owner_creates() {
    let deployment = Deployment::create().await;
    let docs = include_str!("../docs/postgres.md");
    let start = docs.find("`ALTER DEFAULT PRIVILEGES").unwrap() + 1;
    let statement = &docs[start..start + docs[start..].find('`').unwrap()];
    let statement = statement.split_whitespace().collect::<Vec<_>>().join(" ");
    deployment.as_role(&deployment.owner, &statement).await;
    deployment
        .as_role(
            &deployment.owner,
            &statement.replace(
                "GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES",
                "GRANT USAGE ON SEQUENCES",
            ),
        )
        .await;
    deployment.migrate().await;
    let store = PostgresStore::connect(&deployment.store_config(&deployment.app, false))
        .await
        .unwrap();
    let store: Arc<dyn idemgate::store::Store> = Arc::new(store);
    let id = RecordId::new("charges", "", "d1");
    let reserved = store
        .reserve(&id, "fp", Duration::from_secs(10))
        .await
        .unwrap();
    assert!(matches!(reserved, Reservation::Reserved(_)), "{reserved:?}");
}
