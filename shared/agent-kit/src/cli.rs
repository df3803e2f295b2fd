use mesh_config::{ConfigError, ConfigLoader, ServerArgs};

use serde::de::DeserializeOwned;

#[cfg(doc)]
use crate::app::AgentConfig;

/// Flags every agent binary takes; flatten it into the binary's `clap` parser. Each also comes
/// from the `--config` TOML file (keys `host`, `port`, `registry_url`, `name`, `public_url`,
/// `request_timeout_ms`, `body_limit_bytes`) or from `<PREFIX>_<KEY>` environment variables.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct AgentArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    /// Registry to register with at start (and deregister from on shutdown).
    #[arg(long, value_name = "URL")]
    pub registry_url: Option<String>,
    /// Name to serve and register under, for running several replicas of one agent.
    #[arg(long)]
    pub name: Option<String>,
    /// URL other agents reach this one at, when it differs from the listening address.
    #[arg(long, value_name = "URL")]
    pub public_url: Option<String>,
}

impl AgentArgs {
    /// Loads the agent's configuration `T` (which flattens an [`AgentConfig`]); `env_prefix`
    /// like `MESH_SEARCH`; `default_port` applies when neither file, environment nor flag sets one.
    pub fn load<T: DeserializeOwned>(&self, env_prefix: &str, default_port: u16) -> Result<T, ConfigError> {
        ConfigLoader::new(env_prefix, self.server.config.as_deref())
            .default_value("port", i64::from(default_port))
            .server_args(&self.server)
            .set("registry_url", self.registry_url.clone())
            .set("name", self.name.clone())
            .set("public_url", self.public_url.clone())
            .load()
    }
}
