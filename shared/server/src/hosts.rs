//! DNS rebinding: a web page the developer visits names a host of its own that resolves to
//! 127.0.0.1, and its scripts then talk to the open suite on loopback as if same-origin. The
//! browser still sends the page's host name in `Host`, so a server running open (no
//! authentication) answers only requests naming a loopback host or one it was configured for
//! (`*` turns the check off). With authentication on, a rebound page has no credential to send, so no check runs.

use std::net::IpAddr;

use axum::extract::Request;
use axum::http::{StatusCode, header};

use crate::error::ErrorResponse;
use crate::middleware::{Middleware, Refusal, refuse_now};

/// Refuses requests whose host (`Host`, or an HTTP/2 request's `:authority`) is not allowed,
/// with `421 Misdirected Request`.
#[derive(Debug, Clone)]
pub(crate) struct CheckHost {
    /// Lowercase names without port, besides the loopback ones.
    allowed: std::sync::Arc<[String]>,
}

impl CheckHost {
    pub(crate) fn new(allowed: &[String]) -> Self {
        Self { allowed: allowed.iter().map(|name| name.trim().to_ascii_lowercase()).collect() }
    }

    fn allows(&self, host: &str) -> bool {
        let name = host_name(host).to_ascii_lowercase();
        is_loopback_name(&name) || self.allowed.iter().any(|allowed| *allowed == name || allowed == "*")
    }
}

/// The name of `host` without its port (and without the brackets of an IPv6 literal).
fn host_name(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or_default();
    }
    host.rsplit_once(':').map_or(host, |(name, _port)| name)
}

/// `localhost`, a name under `.localhost` (RFC 6761 keeps both on loopback), or a loopback address.
fn is_loopback_name(name: &str) -> bool {
    name == "localhost" || name.ends_with(".localhost") || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

impl Middleware for CheckHost {
    type Pass = ();

    fn before(&self, request: &mut Request) -> Result<(), Refusal> {
        let host = request
            .uri()
            .authority()
            .map(|authority| authority.as_str().to_owned())
            .or_else(|| request.headers().get(header::HOST).and_then(|v| v.to_str().ok()).map(str::to_owned));
        match host {
            // No host at all is an HTTP/1.0 client, not a browser: browsers always send one.
            None => Ok(()),
            Some(host) if self.allows(&host) => Ok(()),
            Some(host) => Err(refuse_now(ErrorResponse::new(
                StatusCode::MISDIRECTED_REQUEST,
                "REQUEST_HOST_NOT_ALLOWED",
                format!(
                    "this server runs without authentication and answers only requests to its configured hosts, \
                     not {host:?}; add the name to serve.allowed_hosts, or turn authentication on"
                ),
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names_pass_by_default_and_others_do_not() {
        let check = CheckHost::new(&[]);
        for host in ["127.0.0.1:8001", "localhost", "LOCALHOST:80", "[::1]:8001", "127.1.2.3", "app.localhost:3000"] {
            assert!(check.allows(host), "{host}");
        }
        for host in ["evil.example", "evil.example:8001", "10.0.0.1:80", "localhost.evil.example", "[2001:db8::1]:80"] {
            assert!(!check.allows(host), "{host}");
        }
    }

    #[test]
    fn configured_names_pass_besides_loopback_and_a_star_lets_every_name_pass() {
        let check = CheckHost::new(&["Search.Mesh.Internal".to_owned()]);
        assert!(check.allows("search.mesh.internal:8003") && check.allows("127.0.0.1:8003"));
        assert!(!check.allows("evil.example"));
        assert!(CheckHost::new(&["*".to_owned()]).allows("evil.example"));
    }
}
