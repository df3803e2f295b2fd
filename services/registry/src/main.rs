use clap::Parser;
use mesh_server::http::shutdown_signal;
use registry::{Application, RegistryCli};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    mesh_telemetry::init(mesh_telemetry::LogFormat::from_env());
    let cli = RegistryCli::parse();
    let config = cli.load()?;
    let app = Application::build(&config).await?;
    tracing::info!(port = app.port(), database = %redact(&config.database_url), "registry listening");
    // Listening before serving: SIGHUP's default action would end the process.
    let hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup());
    let reloader = tokio::spawn(reload_on_hangup(hangups, cli, app.service()));
    let stopped = app.run_until_stopped(shutdown_signal()).await;
    reloader.abort();
    // The spans of the last moments, still in the exporters' queues.
    mesh_telemetry::flush();
    stopped?;
    Ok(())
}

/// SIGHUP re-reads the configuration (file, environment, flags) and applies its graph: the
/// mode and the `[[links]]`. A configuration that no longer loads is logged and ignored.
async fn reload_on_hangup(
    hangups: std::io::Result<tokio::signal::unix::Signal>,
    cli: RegistryCli,
    service: registry::RegistryService,
) {
    let mut hangups = match hangups {
        Ok(signal) => signal,
        Err(error) => {
            tracing::error!(%error, "cannot listen for SIGHUP; the graph configuration will not reload");
            return;
        }
    };
    while hangups.recv().await.is_some() {
        match cli.load() {
            Ok(config) => {
                if let Err(error) = service.reload_graph(&config).await {
                    tracing::error!(%error, "cannot apply the reloaded graph configuration");
                }
            }
            Err(error) => tracing::error!(%error, "cannot reload the configuration; keeping the current graph"),
        }
    }
}

/// Hides a password in a database URL before it reaches the log.
fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.into()
        }
        _ => url.to_owned(),
    }
}
