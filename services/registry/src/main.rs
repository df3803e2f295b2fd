use clap::Parser;
use mesh_agent_kit::http::shutdown_signal;
use registry::{Application, RegistryCli};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    mesh_telemetry::init(mesh_telemetry::LogFormat::from_env());
    let config = RegistryCli::parse().load()?;
    let app = Application::build(&config).await?;
    tracing::info!(port = app.port(), database = %redact(&config.database_url), "registry listening");
    app.run_until_stopped(shutdown_signal()).await?;
    Ok(())
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
