//! Finding 6: a server must not let a client hold a connection without sending a request
//! (slowloris), nor keep more connections than it can serve. Each test runs one agent on port 0
//! with short timers and talks raw TCP to it.

use std::time::{Duration, Instant};

use mesh_agent_kit::AgentConfig;
use mesh_server::http::ServeConfig;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The timers the tests give the agent: short, so a test waits little for them.
const HEADER_READ_TIMEOUT_MS: u64 = 300;
const IDLE_TIMEOUT_MS: u64 = 600;
/// How long a test waits for the server to close a connection before it fails: far longer than
/// any timer above, so a slow machine does not fail it, yet bounded.
const CLOSE_DEADLINE: Duration = Duration::from_secs(10);

async fn agent(serve: ServeConfig) -> (String, tokio::sync::oneshot::Sender<()>) {
    let (url, stop) = crate::lone_agent::serve(AgentConfig { serve, ..AgentConfig::default() }).await;
    (url.trim_start_matches("http://").to_owned(), stop)
}

fn short_timers() -> ServeConfig {
    ServeConfig {
        header_read_timeout_ms: HEADER_READ_TIMEOUT_MS,
        idle_timeout_ms: IDLE_TIMEOUT_MS,
        ..ServeConfig::default()
    }
}

/// Reads until the server closes the connection, returning what it sent; fails the test when it
/// stays open past [`CLOSE_DEADLINE`].
async fn read_until_closed(stream: &mut (impl AsyncRead + Unpin)) -> String {
    let mut received = Vec::new();
    let mut buffer = [0_u8; 4096];
    loop {
        match tokio::time::timeout(CLOSE_DEADLINE, stream.read(&mut buffer)).await {
            Ok(Ok(0) | Err(_)) => return String::from_utf8_lossy(&received).into_owned(),
            Ok(Ok(read)) => received.extend_from_slice(&buffer[..read]),
            Err(_) => panic!(
                "the server kept the connection open for {CLOSE_DEADLINE:?}; it sent {:?}",
                String::from_utf8_lossy(&received)
            ),
        }
    }
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed_after_the_header_timeout() {
    let (address, _stop) = agent(short_timers()).await;
    let mut silent = TcpStream::connect(&address).await.unwrap();
    let sent = read_until_closed(&mut silent).await;
    assert!(sent.is_empty(), "nothing was asked, nothing is answered: {sent}");
}

#[tokio::test]
async fn a_half_sent_request_head_is_cut_off_after_the_header_timeout() {
    let (address, _stop) = agent(short_timers()).await;
    let (mut reader, mut writer) = TcpStream::connect(&address).await.unwrap().into_split();
    writer.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ").await.unwrap();
    // One more header byte now and then, as slowloris does, never the blank line.
    let dripping = async {
        loop {
            tokio::time::sleep(Duration::from_millis(HEADER_READ_TIMEOUT_MS / 4)).await;
            if writer.write_all(b"a").await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        sent = read_until_closed(&mut reader) => assert!(sent.is_empty(), "{sent}"),
        () = dripping => {}
    }
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_its_request() {
    let (address, _stop) = agent(short_timers()).await;
    let mut client = TcpStream::connect(&address).await.unwrap();
    client.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").await.unwrap();
    let sent = read_until_closed(&mut client).await;
    assert!(sent.starts_with("HTTP/1.1 200"), "the request is answered before the connection closes: {sent}");
}

#[tokio::test]
async fn a_connection_past_the_cap_is_refused_with_a_json_503() {
    let (address, _stop) =
        agent(ServeConfig { connections_max: 2, header_read_timeout_ms: 60_000, ..ServeConfig::default() }).await;
    // Two connections that each finished a request hold the two places.
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut stream = TcpStream::connect(&address).await.unwrap();
        stream.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").await.unwrap();
        let mut buffer = [0_u8; 1024];
        let read = stream.read(&mut buffer).await.unwrap();
        assert!(buffer[..read].starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&buffer[..read]));
        held.push(stream);
    }
    let mut third = TcpStream::connect(&address).await.unwrap();
    third.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").await.unwrap();
    let sent = read_until_closed(&mut third).await;
    assert!(sent.starts_with("HTTP/1.1 503"), "{sent}");
    let body: serde_json::Value = serde_json::from_str(sent.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(body["error_code"], "SERVER_CONNECTIONS_FULL", "{body}");
    // A place freed is a place taken again.
    drop(held.pop());
    let deadline = Instant::now() + CLOSE_DEADLINE;
    loop {
        let mut again = TcpStream::connect(&address).await.unwrap();
        again.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").await.unwrap();
        let sent = read_until_closed(&mut again).await;
        if sent.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(Instant::now() < deadline, "the freed place was never given again: {sent}");
        tokio::task::yield_now().await;
    }
}
