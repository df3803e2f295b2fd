//! `a2a-mesh chat AGENT`: a terminal conversation with an agent through the UI agent's
//! WebSocket. Each line typed is one message; each answer is printed as it arrives. At the end
//! of input the command waits for the answers still owed, then exits.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

/// Time to wait, after the input ends, for the answers still owed.
pub const CHAT_ANSWER_WAIT_MS: u64 = 120_000;
pub const UI_AGENT_URL_DEFAULT: &str = "http://127.0.0.1:8020";

/// The WebSocket address of a conversation with `agent` (its type, e.g. `orchestrator`).
pub fn socket_url(ui_url: &str, agent: &str, conversation: Option<&str>) -> String {
    let base = ui_url.trim_end_matches('/');
    let base = base.strip_prefix("http://").map(|rest| format!("ws://{rest}")).unwrap_or_else(|| {
        base.strip_prefix("https://").map(|rest| format!("wss://{rest}")).unwrap_or_else(|| base.to_owned())
    });
    let resume = conversation.map(|id| format!("&conversation={id}")).unwrap_or_default();
    format!("{base}/ws?agent={agent}{resume}")
}

/// Reads lines from stdin, sends each, prints each answer, until the input ends and every
/// message has had its answer (or [`CHAT_ANSWER_WAIT_MS`] passed).
pub async fn run(
    ui_url: &str,
    agent: &str,
    conversation: Option<&str>,
    credential: Option<&str>,
) -> anyhow::Result<()> {
    let url = socket_url(ui_url, agent, conversation);
    let mut request = url.as_str().into_client_request()?;
    if let Some(credential) = credential {
        request.headers_mut().insert(http::header::AUTHORIZATION, format!("Bearer {credential}").parse()?);
    }
    let (socket, response) = tokio_tungstenite::connect_async(request)
        .await
        .map_err(|error| anyhow::anyhow!("cannot open {url} ({error}); is `a2a-mesh up` running?"))?;
    if let Some(id) = response.headers().get(ui_agent::WS_CONVERSATION_HEADER).and_then(|v| v.to_str().ok()) {
        eprintln!("conversation {id} with {agent} (resume it with --conversation {id}); end with Ctrl-D");
    }
    let (mut outgoing, mut incoming) = socket.split();
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let (mut sent, mut answered, mut input_open) = (0usize, 0usize, true);
    let wait = tokio::time::sleep(Duration::from_millis(CHAT_ANSWER_WAIT_MS));
    tokio::pin!(wait);
    while input_open || answered < sent {
        tokio::select! {
            line = lines.next_line(), if input_open => match line? {
                Some(line) if line.trim().is_empty() => {}
                Some(line) => {
                    outgoing.send(Message::Text(line.into())).await?;
                    sent += 1;
                }
                None => {
                    input_open = false;
                    wait.as_mut().reset(tokio::time::Instant::now() + Duration::from_millis(CHAT_ANSWER_WAIT_MS));
                }
            },
            frame = incoming.next() => match frame {
                Some(Ok(Message::Text(text))) => {
                    answered += 1;
                    println!("{agent}> {text}");
                }
                Some(Ok(Message::Close(_))) | None => break,
                Some(Ok(_)) => {}
                Some(Err(error)) => return Err(error.into()),
            },
            () = &mut wait, if !input_open => {
                anyhow::bail!("{} of {sent} answers arrived within {CHAT_ANSWER_WAIT_MS} ms", answered);
            }
        }
    }
    let _ = outgoing.send(Message::Close(None)).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_urls_follow_the_ui_agent_url() {
        assert_eq!(
            socket_url("http://127.0.0.1:8020/", "orchestrator", None),
            "ws://127.0.0.1:8020/ws?agent=orchestrator"
        );
        assert_eq!(
            socket_url("https://ui.example", "search", Some("c1")),
            "wss://ui.example/ws?agent=search&conversation=c1"
        );
    }
}
