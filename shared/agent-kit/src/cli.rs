use mesh_config::{ConfigError, ConfigLoader, ServerArgs};

use std::future::Future;

use mesh_client::HttpClient;
use serde::de::DeserializeOwned;

use crate::app::AgentApp;

#[cfg(doc)]
use crate::app::AgentConfig;

/// Flags every agent binary takes; flatten it into the binary's `clap` parser. Each also comes
/// from the `--config` TOML file (keys `host`, `port`, `registry_url`, `name`, `public_url`,
/// `request_timeout_ms`, `body_limit_bytes`) or from `<PREFIX>_<KEY>` environment variables.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct AgentArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    /// Registry to register with at start (and deregister from on shutdown); several replicas
    /// of it as a comma-separated list, tried in turn when one cannot answer.
    #[arg(long, value_name = "URL[,URL...]")]
    pub registry_url: Option<String>,
    /// Name to serve and register under, for running several replicas of one agent.
    #[arg(long)]
    pub name: Option<String>,
    /// URL other agents reach this one at, when it differs from the listening address.
    #[arg(long, value_name = "URL")]
    pub public_url: Option<String>,
}

/// What an agent binary's `main` can fail with.
pub type MainError = Box<dyn std::error::Error + Send + Sync>;

impl AgentArgs {
    /// The whole of an agent binary after parsing its flags: logging, configuration `C` (from
    /// `env_prefix` and `default_port`), the process's HTTP client, `build`, then serving until
    /// Ctrl-C or SIGTERM.
    pub async fn run<C, F, Fut, E>(&self, env_prefix: &str, default_port: u16, build: F) -> Result<(), MainError>
    where
        C: DeserializeOwned,
        F: FnOnce(C, HttpClient) -> Fut,
        Fut: Future<Output = Result<AgentApp, E>>,
        E: std::error::Error + Send + Sync + 'static,
    {
        mesh_telemetry::init(mesh_telemetry::LogFormat::from_env());
        let config: C = self.load(env_prefix, default_port)?;
        let app = build(config, HttpClient::with_reqwest()?).await?;
        let stopped = app.run_until_signalled().await;
        // The spans of the last moments, still in the exporters' queues.
        mesh_telemetry::flush();
        Ok(stopped?)
    }

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
