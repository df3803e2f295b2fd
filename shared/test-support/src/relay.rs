//! A TCP relay a test can cut, to see what the code under test does when a real part it talks to
//! (a database, a broker) stops answering: once cut, the connections through it end and new ones
//! are refused, as when the server or the network goes away.

use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// Relays connections on a port of 127.0.0.1 to one target, until cut or dropped.
#[derive(Debug)]
pub struct Relay {
    addr: SocketAddr,
    accept: JoinHandle<()>,
}

impl Relay {
    /// A relay in front of the server `url` names (its port, or `default_port`), and `url` with
    /// its host and port turned to the relay's.
    pub async fn in_front_of(url: &str, default_port: u16) -> (Self, String) {
        let mut url = url::Url::parse(url).unwrap_or_else(|error| panic!("{url}: {error}"));
        let host = url.host_str().expect("a URL with a host").to_owned();
        let port = url.port().unwrap_or(default_port);
        let target = tokio::net::lookup_host((host.as_str(), port)).await.unwrap().next().expect("an address");
        let relay = Self::start(target).await;
        url.set_host(Some(&relay.addr.ip().to_string())).unwrap();
        url.set_port(Some(relay.addr.port())).unwrap();
        (relay, url.to_string())
    }

    /// A relay to `target` on a free port of 127.0.0.1.
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accept = tokio::spawn(async move {
            // Owned by this task: when it is aborted, dropping the set aborts every connection,
            // and dropping the listener closes the port.
            let mut connections = JoinSet::new();
            while let Ok((mut inbound, _)) = listener.accept().await {
                connections.spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(target).await {
                        // Either side closing or failing ends the relayed connection; how is no
                        // matter to a test.
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                // Keep only the live connections.
                while connections.try_join_next().is_some() {}
            }
        });
        Self { addr, accept }
    }

    /// Where the relay listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Ends every relayed connection and stops listening; returns once they are gone.
    pub async fn cut(&mut self) {
        self.accept.abort();
        // Aborted, the task ends with an error saying so: only its end is awaited.
        let _ = (&mut self.accept).await;
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test]
    async fn relays_both_ways_until_cut_then_refuses() {
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = echo.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let (mut read, mut write) = socket.split();
                    let _ = tokio::io::copy(&mut read, &mut write).await;
                });
            }
        });
        let (mut relay, url) = Relay::in_front_of(&format!("postgres://user@{target}/db"), 1).await;
        assert_eq!(url, format!("postgres://user@{}/db", relay.addr()));
        let mut client = TcpStream::connect(relay.addr()).await.unwrap();
        client.write_all(b"ping").await.unwrap();
        let mut answer = [0; 4];
        client.read_exact(&mut answer).await.unwrap();
        assert_eq!(&answer, b"ping");
        relay.cut().await;
        // The relayed connection ends (end of stream or a reset), and the port is closed.
        let mut rest = Vec::new();
        let ended = client.read_to_end(&mut rest).await;
        assert!(ended.is_err() || rest.is_empty(), "{ended:?} {rest:?}");
        assert!(TcpStream::connect(relay.addr()).await.is_err());
    }
}
