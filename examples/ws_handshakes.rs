//! WebSocket handshakes with distinct `instance` values against a UI agent on loopback, as an
//! attacker growing its topics would send them (issue #34's measure, run by
//! `scripts/ws-handshakes.sh`), or with `--own-instance` all naming the agent where it runs, as
//! one filling the socket places would. Every accepted socket stays open until every handshake
//! was tried, then all close together. Prints the outcomes by HTTP status.
//!
//! ```sh
//! cargo run --example ws_handshakes -- --url http://127.0.0.1:8020 --agent orchestrator --count 2000
//! ```

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use clap::Parser;
use futures::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{Error, Message};

/// Hosts the example agrees to load: it is a measure of this machine's suite, never of another.
const LOOPBACK_HOSTS: [&str; 3] = ["127.0.0.1", "localhost", "[::1]"];

#[derive(Debug, Parser)]
struct Args {
    /// The UI agent's URL (loopback only).
    #[arg(long, default_value = "http://127.0.0.1:8020")]
    url: String,
    /// The agent every socket names.
    #[arg(long, default_value = "orchestrator")]
    agent: String,
    /// Handshakes in all, each with its own `instance`.
    #[arg(long, default_value_t = 2_000)]
    count: usize,
    /// Name no instance (the UI agent's own, where the agent runs) instead of a new one each.
    #[arg(long)]
    own_instance: bool,
    /// Handshakes in flight at once.
    #[arg(long, default_value_t = 50)]
    concurrency: usize,
    /// Time allowed for each handshake, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    timeout_ms: u64,
    /// Bearer credential, when the UI agent checks callers.
    #[arg(long, env = "MESH_CREDENTIAL", hide_env_values = true)]
    credential: Option<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let base = args.url.trim_end_matches('/');
    let rest = base.strip_prefix("http://").ok_or_else(|| anyhow::anyhow!("--url must be http://LOOPBACK:PORT"))?;
    let host = rest.rsplit_once(':').map_or(rest, |(host, _)| host);
    anyhow::ensure!(LOOPBACK_HOSTS.contains(&host), "--url must be a loopback address, not {host}");
    let socket_base = format!("ws://{rest}/ws?agent={}", args.agent);
    let timeout = Duration::from_millis(args.timeout_ms);

    let started = Instant::now();
    let attempts = futures::stream::iter(0..args.count).map(|i| {
        let url = if args.own_instance { socket_base.clone() } else { format!("{socket_base}&instance=m{i}") };
        let credential = args.credential.clone();
        async move {
            let mut request = url.into_client_request()?;
            if let Some(credential) = credential {
                request.headers_mut().insert("authorization", format!("Bearer {credential}").parse()?);
            }
            Ok::<_, anyhow::Error>(
                match tokio::time::timeout(timeout, tokio_tungstenite::connect_async(request)).await {
                    Ok(Ok((socket, _))) => (Some(socket), "101".to_owned()),
                    Ok(Err(Error::Http(response))) => (None, response.status().as_u16().to_string()),
                    Ok(Err(error)) => (None, format!("error: {error}")),
                    Err(_) => (None, "timed out".to_owned()),
                },
            )
        }
    });
    let results: Vec<_> = attempts.buffer_unordered(args.concurrency.max(1)).collect().await;
    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    let mut sockets = Vec::new();
    for result in results {
        let (socket, outcome) = result?;
        *outcomes.entry(outcome).or_default() += 1;
        sockets.extend(socket);
    }
    println!("{} handshakes in {:.1} s", args.count, started.elapsed().as_secs_f64());
    for (outcome, count) in &outcomes {
        println!("  {outcome}: {count}");
    }

    let open = sockets.len();
    let closing =
        futures::stream::iter(sockets).for_each_concurrent(args.concurrency.max(1), |mut socket| async move {
            let _ = tokio::time::timeout(timeout, socket.send(Message::Close(None))).await;
            // Read until the server's own close, so the socket is gone on both sides.
            let _ = tokio::time::timeout(timeout, async { while socket.next().await.is_some() {} }).await;
        });
    closing.await;
    println!("{open} open sockets closed");
    Ok(())
}
