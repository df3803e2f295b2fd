//! Logging and tracing setup shared by every mesh binary.
//!
//! `RUST_LOG` picks what is logged (default `info`); `MESH_LOG_FORMAT=json` switches to one JSON
//! object per line for log collectors.

use tracing_subscriber::EnvFilter;

/// Log level used when `RUST_LOG` is unset.
const DEFAULT_LOG_FILTER: &str = "info";

/// Output shape of the log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

impl LogFormat {
    /// Reads `MESH_LOG_FORMAT` (`json` or anything else for text).
    pub fn from_env() -> Self {
        match std::env::var("MESH_LOG_FORMAT") {
            Ok(value) if value.eq_ignore_ascii_case("json") => Self::Json,
            _ => Self::Text,
        }
    }
}

/// Installs the global subscriber once; later calls (several services in one process, tests)
/// keep the first one, which is why the result is not an error.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_LOG_FILTER));
    // Logs on stderr: stdout is for what a command prints (`up`'s URLs, `ask`'s answer).
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_target(true).with_writer(std::io::stderr);
    let _already_installed = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}
