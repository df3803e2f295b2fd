//! Which network addresses a process may send requests to, for the requests whose target a third
//! party chose (the registry fetching a registrant's card and health endpoint; agents posting
//! push notifications to their clients' webhooks). Without it, anyone able to register, or to
//! set a webhook, could make the mesh probe internal hosts or read a cloud metadata service
//! (SSRF).
//!
//! The check is made on the addresses a name resolves to, inside the HTTP client's own resolver
//! ([`PolicyResolver`]): the address checked is the address connected to, so a name that
//! resolves to an allowed address when vetted and to a refused one when fetched (DNS rebinding)
//! gains nothing. Literal IP hosts never reach a resolver, so [`AddressPolicy::check_url`]
//! checks those before sending.
//!
//! Some networks are refused whatever the configuration says: link-local addresses
//! (169.254.0.0/16, fe80::/10), where cloud metadata services answer, the unspecified addresses
//! (which connect to the local host), and cloud metadata addresses, also written as IPv4-mapped,
//! IPv4-compatible or NAT64 IPv6. Odd spellings of an IPv4 address (`2852039166`, `0xa9fea9fe`,
//! `169.254.43518`) are normalised by the URL parser before any check, so they are caught too.
//!
//! Two shapes of policy: [`AddressPolicy::from_networks`] allows only the networks it lists, or
//! everything not always refused when the list is empty (the registry's `allowed_networks`: a
//! mesh on one machine registers loopback agents); [`AddressPolicy::public_only`] allows the
//! public internet and refuses every private, loopback, shared (CGNAT) or otherwise non-public
//! network unless the list opts it in (webhooks, which A2A 1.0 §13.2 says SHOULD not reach
//! private networks).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use ipnet::IpNet;

use crate::transport::BoxFuture;

/// Networks refused whatever `allowed_networks` says.
const ALWAYS_REFUSED_NETWORKS: &[&str] = &[
    // Link-local: where cloud metadata services (169.254.169.254) and link-local peers answer.
    "169.254.0.0/16",
    "fe80::/10",
    // "This host": connecting to 0.0.0.0 or :: reaches the local host on Linux.
    "0.0.0.0/8",
    "::/128",
    // AWS's IPv6 metadata endpoint.
    "fd00:ec2::254/128",
    // Alibaba Cloud's metadata service, inside the shared address space (CGNAT) an operator may
    // opt in for other reasons (Tailscale addresses live there).
    "100.100.100.200/32",
];

/// Networks that are not the public internet, refused by [`AddressPolicy::public_only`] unless
/// opted in: what a third party must not make the process reach inside its own network. The
/// IPv4 address an IPv6 one carries (mapped, compatible, NAT64) is checked as well.
const NON_PUBLIC_NETWORKS: &[&str] = &[
    "10.0.0.0/8",      // private (RFC 1918)
    "172.16.0.0/12",   // private (RFC 1918)
    "192.168.0.0/16",  // private (RFC 1918)
    "127.0.0.0/8",     // loopback
    "100.64.0.0/10",   // shared address space, carrier-grade NAT (RFC 6598)
    "192.0.0.0/24",    // IETF protocol assignments (RFC 6890)
    "192.0.2.0/24",    // documentation (RFC 5737)
    "198.51.100.0/24", // documentation
    "203.0.113.0/24",  // documentation
    "198.18.0.0/15",   // benchmarking (RFC 2544)
    "192.88.99.0/24",  // 6to4 relay anycast (deprecated, RFC 7526)
    "224.0.0.0/4",     // multicast
    "240.0.0.0/4",     // reserved, and the broadcast address
    "::1/128",         // loopback
    "fc00::/7",        // unique local (RFC 4193), IPv6's private networks
    "fec0::/10",       // site-local (deprecated)
    "ff00::/8",        // multicast
    "100::/64",        // discard-only (RFC 6666)
    "2001:db8::/32",   // documentation (RFC 3849)
    "64:ff9b:1::/48",  // local-use NAT64 (RFC 8215)
    "2001::/32",       // Teredo, whose addresses embed an obfuscated IPv4 address
    "2002::/16",       // 6to4, whose addresses embed any IPv4 address (deprecated)
];

/// Why an address or a URL is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressRefused {
    #[error("{0} is in a network that is always refused (link-local, metadata or unspecified)")]
    AlwaysRefused(IpAddr),
    #[error("{0} is not in the allowed networks")]
    NotAllowed(IpAddr),
    #[error("{0} is not a public address (private, loopback, shared or reserved) and no allowed network opts it in")]
    NotPublic(IpAddr),
    /// Every address the name resolved to was refused; `why` is the first one's refusal.
    #[error("{host} resolves to no allowed address: {why}")]
    NoAllowedAddress { host: String, why: String },
    #[error("cannot resolve {host}: {reason}")]
    Unresolved { host: String, reason: String },
    #[error("{0:?} is not an http(s) URL with a host")]
    InvalidUrl(String),
}

/// A CIDR in `allowed_networks` that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("allowed_networks entry {entry:?} is not a CIDR network such as 10.0.0.0/8 or fd00::/8: {reason}")]
pub struct InvalidNetwork {
    pub entry: String,
    pub reason: String,
}

/// The outbound address policy: the always-refused networks, and the allowed ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressPolicy {
    /// `None`: every address not always refused is allowed.
    allowed: Option<Vec<IpNet>>,
    /// Refused unless in `opted_in` ([`NON_PUBLIC_NETWORKS`] for a public-only policy).
    non_public: Vec<IpNet>,
    opted_in: Vec<IpNet>,
    refused: Vec<IpNet>,
}

impl Default for AddressPolicy {
    fn default() -> Self {
        Self::allow_all()
    }
}

impl AddressPolicy {
    /// Allows every address except the always-refused ones (loopback included, so a mesh on one
    /// machine works as before).
    pub fn allow_all() -> Self {
        Self { allowed: None, non_public: Vec::new(), opted_in: Vec::new(), refused: parsed(ALWAYS_REFUSED_NETWORKS) }
    }

    /// Allows only addresses in `networks` (CIDR, e.g. `10.0.0.0/8`, `127.0.0.1/32`; a bare
    /// address means that address alone); an empty list allows everything not always refused.
    pub fn from_networks<S: AsRef<str>>(networks: &[S]) -> Result<Self, InvalidNetwork> {
        if networks.is_empty() {
            return Ok(Self::allow_all());
        }
        Ok(Self { allowed: Some(parse_networks(networks)?), ..Self::allow_all() })
    }

    /// Allows public addresses, and the non-public ones (private, loopback, shared, reserved:
    /// [`NON_PUBLIC_NETWORKS`]) only inside `opted_in` (CIDR, as [`Self::from_networks`] reads
    /// them; `127.0.0.0/8` lets a test's webhook on loopback through). The always-refused
    /// networks stay refused even inside an opted-in one.
    pub fn public_only<S: AsRef<str>>(opted_in: &[S]) -> Result<Self, InvalidNetwork> {
        Ok(Self { non_public: parsed(NON_PUBLIC_NETWORKS), opted_in: parse_networks(opted_in)?, ..Self::allow_all() })
    }

    /// Whether a request may be sent to `ip`.
    pub fn check(&self, ip: IpAddr) -> Result<(), AddressRefused> {
        // The IPv4 address an IPv6 one stands for is what the network stack ends up reaching.
        let effective = embedded_ipv4(ip).map_or(ip, IpAddr::V4);
        let within = |networks: &[IpNet]| networks.iter().any(|net| net.contains(&ip) || net.contains(&effective));
        if within(&self.refused) {
            return Err(AddressRefused::AlwaysRefused(ip));
        }
        if within(&self.non_public) && !within(&self.opted_in) {
            return Err(AddressRefused::NotPublic(ip));
        }
        match &self.allowed {
            Some(allowed) if !within(allowed) => Err(AddressRefused::NotAllowed(ip)),
            _ => Ok(()),
        }
    }

    /// Checks the host of `url` when it is a literal IP (names are checked once resolved, by
    /// [`PolicyResolver`]).
    pub fn check_url(&self, url: &str) -> Result<(), AddressRefused> {
        let parsed = url::Url::parse(url).map_err(|_| AddressRefused::InvalidUrl(url.to_owned()))?;
        self.check_parsed_url(&parsed)
    }

    /// [`Self::check_url`] for a URL already parsed: a caller that sends the request with the
    /// parsed URL (the gateway, on every call) parses it once.
    pub fn check_parsed_url(&self, url: &url::Url) -> Result<(), AddressRefused> {
        match url.host() {
            Some(url::Host::Ipv4(ip)) => self.check(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => self.check(IpAddr::V6(ip)),
            Some(url::Host::Domain(_)) => Ok(()),
            None => Err(AddressRefused::InvalidUrl(url.to_string())),
        }
    }

    /// The addresses of `addresses` this policy allows; refused ones are logged.
    fn filter(&self, host: &str, addresses: Vec<IpAddr>) -> Result<Vec<IpAddr>, AddressRefused> {
        let mut first_refusal = None;
        let allowed: Vec<IpAddr> = addresses
            .into_iter()
            .filter(|ip| match self.check(*ip) {
                Ok(()) => true,
                Err(refusal) => {
                    tracing::warn!(host, %refusal, "outbound address refused");
                    first_refusal.get_or_insert(refusal);
                    false
                }
            })
            .collect();
        if allowed.is_empty() {
            let why = first_refusal.map_or_else(|| "it has no address".to_owned(), |refusal| refusal.to_string());
            return Err(AddressRefused::NoAllowedAddress { host: host.to_owned(), why });
        }
        Ok(allowed)
    }
}

/// The constant networks above (every entry parses: the tests check it).
fn parsed(networks: &[&str]) -> Vec<IpNet> {
    networks.iter().filter_map(|net| net.parse().ok()).collect()
}

/// Networks from configuration: CIDR, or a bare address for that address alone.
fn parse_networks<S: AsRef<str>>(networks: &[S]) -> Result<Vec<IpNet>, InvalidNetwork> {
    networks
        .iter()
        .map(|entry| {
            let entry = entry.as_ref().trim();
            entry
                .parse::<IpNet>()
                .or_else(|_| entry.parse::<IpAddr>().map(IpNet::from))
                .map_err(|e| InvalidNetwork { entry: entry.to_owned(), reason: e.to_string() })
        })
        .collect()
}

/// The IPv4 address an IPv6 address carries: IPv4-mapped (`::ffff:a.b.c.d`), IPv4-compatible
/// (`::a.b.c.d`, deprecated but still routed by some stacks) or NAT64 (`64:ff9b::a.b.c.d`).
fn embedded_ipv4(ip: IpAddr) -> Option<Ipv4Addr> {
    let IpAddr::V6(v6) = ip else { return None };
    if let Some(v4) = v6.to_ipv4_mapped() {
        return Some(v4);
    }
    let segments = v6.segments();
    let tail = Ipv4Addr::from((u32::from(segments[6]) << 16) | u32::from(segments[7]));
    let nat64 = segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0];
    // `::` and `::1` are the unspecified and loopback addresses, not IPv4-compatible ones.
    let compatible = segments[..6] == [0; 6] && v6 != Ipv6Addr::UNSPECIFIED && v6 != Ipv6Addr::LOCALHOST;
    (nat64 || compatible).then_some(tail)
}

/// Turns a host name into addresses: the system resolver in production, a fixed table in tests.
pub trait HostLookup: Send + Sync + std::fmt::Debug + 'static {
    fn lookup(&self, host: &str) -> BoxFuture<'static, std::io::Result<Vec<IpAddr>>>;
}

/// The operating system's resolver (`getaddrinfo`, through tokio).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemLookup;

impl HostLookup for SystemLookup {
    fn lookup(&self, host: &str) -> BoxFuture<'static, std::io::Result<Vec<IpAddr>>> {
        let host = host.to_owned();
        Box::pin(async move { Ok(tokio::net::lookup_host((host, 0)).await?.map(|a| a.ip()).collect()) })
    }
}

/// A fixed table of names, like `/etc/hosts`; names it lacks do not resolve. Tests use it to
/// point a name at any address (169.254.169.254 included) without a DNS server.
#[derive(Debug, Clone, Default)]
pub struct StaticLookup {
    hosts: HashMap<String, Vec<IpAddr>>,
}

impl StaticLookup {
    pub fn new(hosts: impl IntoIterator<Item = (String, Vec<IpAddr>)>) -> Self {
        Self { hosts: hosts.into_iter().map(|(name, ips)| (name.to_ascii_lowercase(), ips)).collect() }
    }
}

impl HostLookup for StaticLookup {
    fn lookup(&self, host: &str) -> BoxFuture<'static, std::io::Result<Vec<IpAddr>>> {
        let found = self.hosts.get(&host.to_ascii_lowercase()).cloned();
        let host = host.to_owned();
        Box::pin(async move {
            found
                .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, format!("{host} is not in the table")))
        })
    }
}

/// An address policy with the resolver it checks names through.
#[derive(Debug, Clone)]
pub struct OutboundGuard {
    policy: Arc<AddressPolicy>,
    lookup: Arc<dyn HostLookup>,
}

impl OutboundGuard {
    pub fn new(policy: AddressPolicy, lookup: Arc<dyn HostLookup>) -> Self {
        Self { policy: Arc::new(policy), lookup }
    }

    pub fn policy(&self) -> &AddressPolicy {
        &self.policy
    }

    /// Whether `url`'s host (a literal IP, or every allowed address its name resolves to now)
    /// may be reached: a registration is refused at once rather than failing later.
    pub async fn vet(&self, url: &str) -> Result<(), AddressRefused> {
        let parsed = url::Url::parse(url).map_err(|_| AddressRefused::InvalidUrl(url.to_owned()))?;
        match parsed.host() {
            Some(url::Host::Domain(name)) => self.resolve(name).await.map(drop),
            Some(_) => self.policy.check_url(url),
            None => Err(AddressRefused::InvalidUrl(url.to_owned())),
        }
    }

    async fn resolve(&self, host: &str) -> Result<Vec<IpAddr>, AddressRefused> {
        let addresses = self
            .lookup
            .lookup(host)
            .await
            .map_err(|e| AddressRefused::Unresolved { host: host.to_owned(), reason: e.to_string() })?;
        self.policy.filter(host, addresses)
    }

    /// The resolver to give `reqwest`: it only ever yields allowed addresses.
    pub fn resolver(&self) -> PolicyResolver {
        PolicyResolver { guard: self.clone() }
    }
}

/// A `reqwest` resolver that drops every address the policy refuses, and fails when none is
/// left: the connection can only go to an address that was checked.
#[derive(Debug, Clone)]
pub struct PolicyResolver {
    guard: OutboundGuard,
}

impl reqwest::dns::Resolve for PolicyResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let guard = self.guard.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addresses = guard.resolve(&host).await?;
            let addrs: reqwest::dns::Addrs = Box::new(addresses.into_iter().map(|ip| SocketAddr::new(ip, 0)));
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn link_local_metadata_and_unspecified_addresses_are_always_refused() {
        let open = AddressPolicy::allow_all();
        let everything = AddressPolicy::from_networks(&["0.0.0.0/0", "::/0"]).unwrap();
        for refused in [
            "169.254.169.254",
            "169.254.0.1",
            "fe80::1",
            "::ffff:169.254.169.254",
            "::a9fe:a9fe",
            "64:ff9b::a9fe:a9fe",
            "0.0.0.0",
            "::",
            "fd00:ec2::254",
            "100.100.100.200",
            "::ffff:100.100.100.200",
        ] {
            for policy in [&open, &everything] {
                assert!(
                    matches!(policy.check(ip(refused)), Err(AddressRefused::AlwaysRefused(_))),
                    "{refused} must be refused"
                );
            }
        }
        for allowed in ["127.0.0.1", "::1", "10.1.2.3", "::ffff:127.0.0.1", "93.184.216.34"] {
            assert_eq!(open.check(ip(allowed)), Ok(()), "{allowed}");
        }
    }

    #[test]
    fn allowed_networks_restrict_and_see_through_mapped_addresses() {
        let policy = AddressPolicy::from_networks(&["10.0.0.0/8", "192.168.1.7"]).unwrap();
        assert_eq!(policy.check(ip("10.9.8.7")), Ok(()));
        assert_eq!(policy.check(ip("::ffff:10.9.8.7")), Ok(()));
        assert_eq!(policy.check(ip("192.168.1.7")), Ok(()));
        assert_eq!(policy.check(ip("127.0.0.1")), Err(AddressRefused::NotAllowed(ip("127.0.0.1"))));
        assert_eq!(policy.check(ip("::ffff:127.0.0.1")), Err(AddressRefused::NotAllowed(ip("::ffff:127.0.0.1"))));
        let bad = AddressPolicy::from_networks(&["10.0.0.0/33"]).unwrap_err();
        assert!(bad.to_string().contains("10.0.0.0/33"), "{bad}");
    }

    #[test]
    fn every_constant_network_parses() {
        assert_eq!(parsed(ALWAYS_REFUSED_NETWORKS).len(), ALWAYS_REFUSED_NETWORKS.len());
        assert_eq!(parsed(NON_PUBLIC_NETWORKS).len(), NON_PUBLIC_NETWORKS.len());
    }

    #[test]
    fn a_public_only_policy_refuses_non_public_addresses_in_every_spelling_unless_opted_in() {
        let public = AddressPolicy::public_only::<&str>(&[]).unwrap();
        for refused in [
            "10.1.2.3",
            "172.31.255.255",
            "192.168.0.1",
            "127.0.0.1",
            "127.255.0.9",
            "100.64.0.1",
            "100.127.255.254",
            "192.0.0.192",
            "198.18.0.1",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "fc00::1",
            "fd12:3456::1",
            "ff02::1",
            "::ffff:10.0.0.1",
            "::ffff:127.0.0.1",
            "::7f00:1",
            "64:ff9b::a00:1",
            "2002:7f00:1::1",
        ] {
            assert_eq!(public.check(ip(refused)), Err(AddressRefused::NotPublic(ip(refused))), "{refused}");
        }
        for metadata in ["169.254.169.254", "100.100.100.200", "fd00:ec2::254", "::"] {
            assert!(matches!(public.check(ip(metadata)), Err(AddressRefused::AlwaysRefused(_))), "{metadata}");
        }
        for allowed in ["93.184.216.34", "8.8.8.8", "2606:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"] {
            assert_eq!(public.check(ip(allowed)), Ok(()), "{allowed}");
        }

        let opted = AddressPolicy::public_only(&["127.0.0.0/8", "100.64.0.0/10", "fd00::/8"]).unwrap();
        for allowed in ["127.0.0.1", "::ffff:127.0.0.1", "100.64.0.1", "fd12::1", "8.8.8.8"] {
            assert_eq!(opted.check(ip(allowed)), Ok(()), "{allowed}");
        }
        for refused in ["10.0.0.1", "::1", "192.168.1.1"] {
            assert_eq!(opted.check(ip(refused)), Err(AddressRefused::NotPublic(ip(refused))), "{refused}");
        }
        // Opting a network in never opens the metadata addresses inside it.
        assert!(matches!(opted.check(ip("100.100.100.200")), Err(AddressRefused::AlwaysRefused(_))));
        assert!(AddressPolicy::public_only(&["not-a-network"]).is_err());
    }

    #[test]
    fn odd_spellings_of_a_metadata_address_are_normalised_then_refused() {
        let policy = AddressPolicy::allow_all();
        for url in [
            "http://2852039166/latest/meta-data/",
            "http://0xa9fea9fe/",
            "http://0251.0376.0251.0376/",
            "http://169.254.43518/",
            "http://[::ffff:a9fe:a9fe]/",
            "http://[fe80::1]:8080/",
        ] {
            assert!(policy.check_url(url).is_err(), "{url} must be refused");
        }
        assert_eq!(policy.check_url("http://127.0.0.1:8000/health"), Ok(()));
        assert_eq!(policy.check_url("http://agent.example/health"), Ok(()));
    }

    #[tokio::test]
    async fn names_are_vetted_on_what_they_resolve_to() {
        let lookup = StaticLookup::new([
            ("metadata.test".to_owned(), vec![ip("169.254.169.254")]),
            ("mixed.test".to_owned(), vec![ip("169.254.169.254"), ip("127.0.0.1")]),
            ("agent.test".to_owned(), vec![ip("127.0.0.1")]),
            ("public.test".to_owned(), vec![ip("::1"), ip("93.184.216.34")]),
        ]);
        let lookup = Arc::new(lookup);
        let guard = OutboundGuard::new(AddressPolicy::allow_all(), lookup.clone());
        assert!(matches!(guard.vet("http://metadata.test:80/").await, Err(AddressRefused::NoAllowedAddress { .. })));
        assert_eq!(guard.resolve("mixed.test").await, Ok(vec![ip("127.0.0.1")]));
        assert_eq!(guard.vet("http://agent.test:9/").await, Ok(()));
        assert!(matches!(guard.vet("http://unknown.test/").await, Err(AddressRefused::Unresolved { .. })));

        // A name is judged by its addresses: one resolving to loopback is refused as loopback is.
        let public = OutboundGuard::new(AddressPolicy::public_only::<&str>(&[]).unwrap(), lookup);
        let refused = public.vet("http://agent.test:9/").await.unwrap_err();
        assert_eq!(
            refused.to_string(),
            "agent.test resolves to no allowed address: 127.0.0.1 is not a public address (private, loopback, \
             shared or reserved) and no allowed network opts it in"
        );
        assert_eq!(public.resolve("public.test").await, Ok(vec![ip("93.184.216.34")]));
    }
}
