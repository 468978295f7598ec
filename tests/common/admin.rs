//! A gateway whose `/admin/*` is guarded by a bearer token from the
//! environment, as most admin-plane tests start one.

use super::config::Config;
use super::{GatewayProcess, MockUpstream, TestDir};

/// The variable the token is read from.
pub const TOKEN_ENV: &str = "IDEMGATE_TEST_ADMIN_TOKEN";

/// A fresh directory, a mock upstream, and a gateway on `config` (which
/// names `TOKEN_ENV` in `[admin] token_env`, so that a config the test
/// writes for a reload keeps it) with `token` in that variable.
pub async fn start_with_token(
    name: &str,
    config: &Config,
    token: &str,
) -> (TestDir, MockUpstream, GatewayProcess) {
    assert!(
        config
            .toml()
            .contains(&format!("token_env = \"{TOKEN_ENV}\"")),
        "the config does not read the token from {TOKEN_ENV}"
    );
    let dir = TestDir::new(name);
    let upstream = MockUpstream::start().await;
    let gateway =
        GatewayProcess::start_with_env(&dir, &upstream.url(), config, &[(TOKEN_ENV, token)]);
    (dir, upstream, gateway)
}

/// The `Authorization` header's value for `token`.
pub fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}
