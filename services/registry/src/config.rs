//! The registry's configuration: defaults, then `--config FILE` (TOML), then `MESH_REGISTRY_*`
//! environment variables, then flags.

use mesh_config::{ConfigError, ConfigLoader, ServerArgs};
use mesh_protocol::graph::GraphMode;
use serde::Deserialize;

use crate::events::{EVENT_SUBSCRIBERS_MAX_DEFAULT, EVENT_SUBSCRIBERS_PER_TENANT_MAX_DEFAULT, EVENTS_BUFFERED_DEFAULT};
pub use crate::links::LinkDef;

pub const REGISTRY_PORT_DEFAULT: u16 = 8000;
pub const DATABASE_URL_DEFAULT: &str = "sqlite://data/registry.db";
pub const HEALTH_CHECK_INTERVAL_MS_DEFAULT: u64 = 60_000;
pub const HEALTH_CHECK_TIMEOUT_MS_DEFAULT: u64 = 5_000;
/// Health checks in flight at once; bounds the poller's sockets however many agents register.
pub const HEALTH_CHECK_CONCURRENCY_MAX_DEFAULT: usize = 32;
/// How often a replica reads whether the registrations changed (through another replica sharing
/// its database), by default: the bound on how late it sees such a change.
pub const SYNC_INTERVAL_MS_DEFAULT: u64 = 1_000;
pub const CARD_FETCH_TIMEOUT_MS_DEFAULT: u64 = 5_000;
/// Agents registered at once, at most, whoever registers them.
pub const REGISTRATIONS_MAX_DEFAULT: usize = 10_000;
/// Agents one identity (an admin: an agent holds only its own name) may hold at once.
pub const REGISTRATIONS_PER_IDENTITY_MAX_DEFAULT: usize = 1_000;
/// Prefix of the environment variables the registry reads.
pub const ENV_PREFIX: &str = "MESH_REGISTRY";

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RegistryConfig {
    /// Address to listen on.
    pub host: String,
    /// Port to listen on; 0 picks a free one.
    pub port: u16,
    /// `sqlite://PATH` (created when missing) or `postgres://...`.
    pub database_url: String,
    /// Milliseconds between two health checks of each agent, however many replicas share the database.
    pub health_check_interval_ms: u64,
    /// Milliseconds one health check may take; an agent that does not answer within it is `unreachable`.
    pub health_check_timeout_ms: u64,
    /// Health checks this replica runs at once; due checks beyond its free permits are left to the other
    /// replicas.
    pub health_check_concurrency_max: usize,
    /// Milliseconds between two reads of whether registrations or healths changed in the
    /// database (through another replica); a change is seen here within this plus a reload.
    pub sync_interval_ms: u64,
    /// Fetch each registering agent's card and refuse a registration it does not confirm.
    pub verify_registrations: bool,
    /// Milliseconds fetching a registering agent's card may take.
    pub card_fetch_timeout_ms: u64,
    /// Milliseconds a request may take before the registry answers 504 itself.
    pub request_timeout_ms: u64,
    /// Largest request body accepted; a larger one is answered 413.
    pub body_limit_bytes: usize,
    /// `open` (every call allowed) or `enforced` (agents allow only calls over enabled links).
    pub graph_mode: GraphMode,
    /// Links of the communication graph, synced into the database at start and on SIGHUP.
    pub links: Vec<LinkDef>,
    /// Events kept for resuming `GET /api/events` streams.
    pub events_buffered: usize,
    /// Event streams open at once, at most.
    pub event_subscribers_max: usize,
    /// Event streams one tenant (the credential's, or the one an admin names) holds at once, at most.
    pub event_subscribers_per_tenant_max: usize,
    /// Networks (CIDR) the registry may fetch agent cards and health endpoints from, checked
    /// on the resolved addresses. Empty: every address except link-local, metadata and
    /// unspecified ones, which are refused whatever this says.
    pub allowed_networks: Vec<String>,
    /// Agents registered at once, at most; a new name beyond it is refused.
    pub registrations_max: usize,
    /// Agents registered by one identity at once, at most (with authentication on).
    pub registrations_per_identity_max: usize,
    /// Public keys (each with its `kid`) whose signatures on agent cards are trusted. A card
    /// whose signatures all fail against them is refused.
    pub trusted_card_keys: Vec<mesh_auth::JwtPublicKey>,
    /// Refuse agents whose card is not signed by a trusted key (needs `trusted_card_keys` and
    /// `verify_registrations`).
    pub require_signed_cards: bool,
    /// Requests handled at once, at most; more are answered 503 at once.
    pub concurrency_max: usize,
    /// Requests per second each tenant may make (sustained), and the burst above it.
    pub rate_limit_per_s: u32,
    /// Requests a tenant may make at once above `rate_limit_per_s`.
    pub rate_limit_burst: u32,
    /// Milliseconds shutdown waits for open requests and streams before closing them.
    pub shutdown_drain_ms: u64,
    /// Milliseconds a stopping registry keeps accepting requests while it answers not ready,
    /// before the drain begins (the time its load balancer takes to notice).
    pub shutdown_unready_ms: u64,
    /// How callers authenticate (see docs/guides/secure.md); open when empty.
    pub auth: mesh_auth::AuthConfig,
    /// How connections are timed and capped, and the hosts an open registry answers to.
    pub serve: mesh_server::http::ServeConfig,
    /// The embedding model that ranks agents by meaning in `GET /agents?q=` and `POST /route`
    /// (the `[dense]` table, as the search agent's). Off by default: a registry alone ranks by
    /// words (BM25); `a2a-mesh up` turns it on with the search agent's model.
    pub dense: mesh_embedding::DenseConfig,
    /// Other registries whose agents this one lists too, read-only (`[[mirrors]]` tables with
    /// `url`, `interval_ms` and `credential_file`; docs/concepts/registry.md, "Mirror other registries").
    pub mirrors: Vec<crate::mirror::MirrorConfig>,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        Self {
            host: "127.0.0.1".into(),
            port: REGISTRY_PORT_DEFAULT,
            database_url: DATABASE_URL_DEFAULT.into(),
            health_check_interval_ms: HEALTH_CHECK_INTERVAL_MS_DEFAULT,
            health_check_timeout_ms: HEALTH_CHECK_TIMEOUT_MS_DEFAULT,
            health_check_concurrency_max: HEALTH_CHECK_CONCURRENCY_MAX_DEFAULT,
            sync_interval_ms: SYNC_INTERVAL_MS_DEFAULT,
            verify_registrations: true,
            card_fetch_timeout_ms: CARD_FETCH_TIMEOUT_MS_DEFAULT,
            request_timeout_ms: mesh_server::http::REQUEST_TIMEOUT_MS_DEFAULT,
            body_limit_bytes: mesh_server::http::BODY_LIMIT_BYTES_DEFAULT,
            graph_mode: GraphMode::Open,
            links: Vec::new(),
            events_buffered: EVENTS_BUFFERED_DEFAULT,
            event_subscribers_max: EVENT_SUBSCRIBERS_MAX_DEFAULT,
            event_subscribers_per_tenant_max: EVENT_SUBSCRIBERS_PER_TENANT_MAX_DEFAULT,
            allowed_networks: Vec::new(),
            registrations_max: REGISTRATIONS_MAX_DEFAULT,
            registrations_per_identity_max: REGISTRATIONS_PER_IDENTITY_MAX_DEFAULT,
            trusted_card_keys: Vec::new(),
            require_signed_cards: false,
            concurrency_max: mesh_server::http::CONCURRENCY_MAX_DEFAULT,
            rate_limit_per_s: mesh_server::http::RATE_LIMIT_PER_S_DEFAULT,
            rate_limit_burst: mesh_server::http::RATE_LIMIT_BURST_DEFAULT,
            shutdown_drain_ms: mesh_server::http::SHUTDOWN_DRAIN_MS_DEFAULT,
            shutdown_unready_ms: mesh_server::http::SHUTDOWN_UNREADY_MS_DEFAULT,
            auth: mesh_auth::AuthConfig::default(),
            serve: mesh_server::http::ServeConfig::default(),
            dense: mesh_embedding::DenseConfig { enabled: false, ..mesh_embedding::DenseConfig::default() },
            mirrors: Vec::new(),
        }
    }
}

/// The agent registry of the A2A mesh: registration, discovery by capability, round-robin
/// picks among healthy agents, health polling.
#[derive(Debug, Clone, Default, clap::Parser)]
#[command(
    name = "registry",
    version,
    after_help = "Every setting can also come from the TOML file given by --config (keys as below, in \
snake_case: host, port, database_url, health_check_interval_ms, health_check_timeout_ms, \
health_check_concurrency_max, sync_interval_ms, verify_registrations, card_fetch_timeout_ms, request_timeout_ms, \
body_limit_bytes, graph_mode, events_buffered, event_subscribers_max, event_subscribers_per_tenant_max, allowed_networks, \
registrations_max, registrations_per_identity_max, require_signed_cards, concurrency_max, rate_limit_per_s, \
rate_limit_burst, shutdown_drain_ms, shutdown_unready_ms, [[trusted_card_keys]] tables with kid, algorithm (EdDSA or ES256) and pem_file, \
an [auth] table, a [serve] table (header_read_timeout_ms, idle_timeout_ms, connections_max, allowed_hosts), [[links]] tables with from, \
to, direction, relationship, enabled, and [[mirrors]] tables with url, interval_ms, credential_file: other registries listed read-only) or from environment variables MESH_REGISTRY_<KEY> (e.g. \
MESH_REGISTRY_PORT=8000, MESH_REGISTRY_GRAPH_MODE=enforced). Flags win over the environment, which \
wins over the file. SIGHUP reloads the file's links and graph mode."
)]
pub struct RegistryCli {
    #[command(flatten)]
    pub server: ServerArgs,
    /// Database URL: sqlite://PATH (default sqlite://data/registry.db) or postgres://USER@HOST/DB.
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,
    /// Milliseconds between two health polls of every agent (default 60000).
    #[arg(long, value_name = "MS")]
    pub health_check_interval_ms: Option<u64>,
    /// Milliseconds an agent's /health may take before it counts as unreachable (default 5000).
    #[arg(long, value_name = "MS")]
    pub health_check_timeout_ms: Option<u64>,
    /// Accept registrations without fetching the agent's card.
    #[arg(long)]
    pub no_verify: bool,
    /// Graph mode: open (default) or enforced.
    #[arg(long, value_name = "MODE")]
    pub graph_mode: Option<String>,
}

impl RegistryCli {
    pub fn load(&self) -> Result<RegistryConfig, ConfigError> {
        ConfigLoader::new(ENV_PREFIX, self.server.config.as_deref())
            .server_args(&self.server)
            .set("database_url", self.database_url.clone())
            .set("health_check_interval_ms", self.health_check_interval_ms)
            .set("health_check_timeout_ms", self.health_check_timeout_ms)
            .set("verify_registrations", self.no_verify.then_some(false))
            .set("graph_mode", self.graph_mode.clone())
            .load()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn the_deploy_example_file_loads_and_flags_override_it() {
        let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/registry.toml");
        let cli = RegistryCli::parse_from(["registry", "--config", file, "--port", "9100", "--no-verify"]);
        let config = cli.load().unwrap();
        assert_eq!(config.host, "0.0.0.0");
        assert!(config.database_url.starts_with("postgres://"));
        assert_eq!((config.port, config.verify_registrations), (9100, false));
    }

    #[test]
    fn links_and_the_graph_mode_come_from_the_file_and_the_environment_overrides_the_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.toml");
        std::fs::write(
            &path,
            "graph_mode = \"open\"\n[[links]]\nfrom = \"a\"\nto = \"b\"\ndirection = \"one_way\"\nrelationship = \"superior\"\n\n[[links]]\nfrom = \"b\"\nto = \"c\"\n",
        )
        .unwrap();
        let cli = RegistryCli::parse_from(["registry", "--config", path.to_str().unwrap(), "--graph-mode", "enforced"]);
        let config = cli.load().unwrap();
        assert_eq!(config.graph_mode, GraphMode::Enforced);
        assert_eq!(config.links.len(), 2);
        assert_eq!(config.links[0].direction, mesh_protocol::graph::LinkDirection::OneWay);
        assert_eq!(config.links[1].relationship, mesh_protocol::graph::LinkRelationship::Peer);
        assert!(config.links[1].enabled);
        let bad = RegistryCli::parse_from(["registry", "--graph-mode", "sometimes"]).load().unwrap_err();
        assert!(bad.to_string().contains("sometimes"), "{bad}");
    }

    #[test]
    fn an_unknown_key_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.toml");
        std::fs::write(&path, "prot = 1\n").unwrap();
        let cli = RegistryCli::parse_from(["registry", "--config", path.to_str().unwrap()]);
        assert!(cli.load().unwrap_err().to_string().contains("prot"));
    }
}
