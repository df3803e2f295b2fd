//! Configuration for every mesh binary, in layers: the service's defaults (serde defaults of its
//! config struct), then an optional TOML file, then environment variables, then command-line flags.
//!
//! Environment variables are `<PREFIX>_<KEY>` with `__` for nesting, e.g. `MESH_REGISTRY_PORT=8000`
//! or `MESH_REGISTRY_HEALTH_CHECK_INTERVAL_MS=1000`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use config::{Config, Environment, File, FileFormat};
use serde::de::DeserializeOwned;

/// Flags every service binary takes; flatten it into the binary's `clap` parser.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ServerArgs {
    /// Address to listen on (overrides the config file and environment).
    #[arg(long)]
    pub host: Option<String>,
    /// Port to listen on; 0 picks a free one (overrides the config file and environment).
    #[arg(long)]
    pub port: Option<u16>,
    /// TOML configuration file; its keys are the service's configuration fields.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Serve with no authentication even on an address other than loopback (protected mode
    /// refuses that otherwise).
    #[arg(long)]
    pub insecure: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("configuration file {path}: {source}")]
    File { path: PathBuf, source: Box<config::ConfigError> },
    #[error("invalid configuration: {0}")]
    Invalid(Box<config::ConfigError>),
}

impl From<config::ConfigError> for ConfigError {
    fn from(error: config::ConfigError) -> Self {
        Self::Invalid(Box::new(error))
    }
}

/// Builds one service's configuration from its layers.
#[derive(Debug)]
pub struct ConfigLoader {
    env_prefix: String,
    file: Option<PathBuf>,
    /// `None` reads the process environment; tests inject a map instead.
    env: Option<HashMap<String, String>>,
    defaults: Vec<(String, config::Value)>,
    overrides: Vec<(String, config::Value)>,
}

impl ConfigLoader {
    /// `env_prefix` without trailing underscore, e.g. `MESH_REGISTRY`.
    pub fn new(env_prefix: &str, file: Option<&Path>) -> Self {
        Self {
            env_prefix: env_prefix.to_owned(),
            file: file.map(Path::to_path_buf),
            env: None,
            defaults: Vec::new(),
            overrides: Vec::new(),
        }
    }

    /// Reads environment variables from `vars` instead of the process environment.
    pub fn with_env(mut self, vars: HashMap<String, String>) -> Self {
        self.env = Some(vars);
        self
    }

    /// Sets `key` when `value` is given; flags use this so that an absent flag changes nothing.
    pub fn set(mut self, key: &str, value: Option<impl Into<config::Value>>) -> Self {
        if let Some(value) = value {
            self.overrides.push((key.to_owned(), value.into()));
        }
        self
    }

    /// A default for `key` that the struct's own defaults cannot express (e.g. a per-service port
    /// of a shared, flattened section); the file, the environment and flags all override it.
    pub fn default_value(mut self, key: &str, value: impl Into<config::Value>) -> Self {
        self.defaults.push((key.to_owned(), value.into()));
        self
    }

    /// Applies `--host`, `--port` (the keys `host` and `port`).
    pub fn server_args(self, args: &ServerArgs) -> Self {
        self.set("host", args.host.clone())
            .set("port", args.port.map(i64::from))
            .set("auth.insecure", args.insecure.then_some(true))
    }

    pub fn load<T: DeserializeOwned>(self) -> Result<T, ConfigError> {
        let mut builder = Config::builder();
        for (key, value) in self.defaults {
            builder = builder.set_default(key, value)?;
        }
        if let Some(path) = &self.file {
            // Read the file ourselves so a missing or unreadable file names its path in the error.
            let text = std::fs::read_to_string(path).map_err(|e| ConfigError::File {
                path: path.clone(),
                source: Box::new(config::ConfigError::Foreign(Box::new(e))),
            })?;
            builder = builder.add_source(File::from_str(&text, FileFormat::Toml));
            // Parse eagerly to attribute TOML syntax errors to the file.
            Config::builder()
                .add_source(File::from_str(&text, FileFormat::Toml))
                .build()
                .map_err(|source| ConfigError::File { path: path.clone(), source: Box::new(source) })?;
        }
        let env = Environment::with_prefix(&self.env_prefix)
            .prefix_separator("_")
            .separator("__")
            .try_parsing(true)
            .source(self.env);
        builder = builder.add_source(env);
        for (key, value) in self.overrides {
            builder = builder.set_override(key, value)?;
        }
        Ok(builder.build()?.try_deserialize()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(default)]
    struct Sample {
        host: String,
        port: u16,
        health_check_interval_ms: u64,
        verify: bool,
    }

    impl Default for Sample {
        fn default() -> Self {
            Self { host: "127.0.0.1".into(), port: 8000, health_check_interval_ms: 60_000, verify: true }
        }
    }

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn defaults_apply_when_nothing_is_set() {
        let loaded: Sample = ConfigLoader::new("MESH_TEST", None).with_env(HashMap::new()).load().unwrap();
        assert_eq!(loaded, Sample::default());
    }

    #[test]
    fn file_then_env_then_flags_each_override_the_previous() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("svc.toml");
        std::fs::write(&path, "port = 9000\nhealth_check_interval_ms = 1000\nhost = \"0.0.0.0\"\n").unwrap();
        let loaded: Sample = ConfigLoader::new("MESH_TEST", Some(&path))
            .with_env(env(&[("MESH_TEST_PORT", "9100"), ("MESH_TEST_VERIFY", "false")]))
            .server_args(&ServerArgs { host: None, port: Some(9200), config: None, insecure: false })
            .load()
            .unwrap();
        assert_eq!(
            loaded,
            Sample { host: "0.0.0.0".into(), port: 9200, health_check_interval_ms: 1000, verify: false }
        );
    }

    #[test]
    fn explicit_defaults_yield_to_every_layer() {
        let loaded: Sample =
            ConfigLoader::new("MESH_TEST", None).with_env(HashMap::new()).default_value("port", 8002).load().unwrap();
        assert_eq!(loaded.port, 8002);
        let loaded: Sample = ConfigLoader::new("MESH_TEST", None)
            .with_env(env(&[("MESH_TEST_PORT", "9")]))
            .default_value("port", 8002)
            .load()
            .unwrap();
        assert_eq!(loaded.port, 9);
    }

    #[test]
    fn errors_name_the_missing_file_and_the_bad_value() {
        let missing = ConfigLoader::new("MESH_TEST", Some(Path::new("/nonexistent/svc.toml")))
            .with_env(HashMap::new())
            .load::<Sample>()
            .unwrap_err();
        assert!(missing.to_string().contains("/nonexistent/svc.toml"), "{missing}");

        let bad = ConfigLoader::new("MESH_TEST", None)
            .with_env(env(&[("MESH_TEST_PORT", "not-a-port")]))
            .load::<Sample>()
            .unwrap_err();
        assert!(bad.to_string().contains("port"), "{bad}");
    }

    #[test]
    fn toml_syntax_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("broken.toml");
        std::fs::write(&path, "port = = 1").unwrap();
        let err = ConfigLoader::new("MESH_TEST", Some(&path)).with_env(HashMap::new()).load::<Sample>().unwrap_err();
        assert!(matches!(err, ConfigError::File { .. }), "{err}");
    }
}
