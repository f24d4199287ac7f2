//! The address policy against server-side request forgery, shared by everything that connects to
//! a URL a request (or a model) chose: Remote MCP servers and pages `web_search` opens.
//!
//! [`non_public_reason`] says why an address is off limits (loopback, private, link-local,
//! unspecified, multicast, CGNAT, reserved, documentation, and those hidden in IPv4-mapped,
//! IPv4-compatible, NAT64 and 6to4 IPv6 forms). [`GuardedResolver`] is an HTTP client's DNS
//! resolver that keeps only allowed addresses, so the check applies to every connection the client
//! makes — redirects included — and to the address actually used (no window for DNS rebinding).
//! URLs whose host is an IP literal never reach a resolver: callers check them with
//! [`ip_literal`] + [`non_public_reason`] themselves, on every URL they follow.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use futures::future::BoxFuture;

/// reqwest is built without a TLS provider of its own (and panics without one); the `respgw` binary
/// installs ring, but Remote MCP and page fetches must also work in a process that did not (tests, embedding).
pub fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// The address a URL host (as `Url::host_str` gives it: IPv6 in brackets) names, if it is one.
pub fn ip_literal(host: &str) -> Option<IpAddr> {
    host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host).parse().ok()
}

/// Why `ip` is not a public unicast address the gateway may connect to on a request's behalf;
/// `None` when it is one.
/// IPv6 forms that carry an IPv4 address (mapped, compatible, NAT64, 6to4) are judged by that
/// address.
pub fn non_public_reason(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => v4_reason(v4),
        IpAddr::V6(v6) => v6_reason(v6),
    }
}

fn v4_reason(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        (0, _, _) => "unspecified (0.0.0.0/8)",
        (127, _, _) => "loopback (127.0.0.0/8)",
        (10, _, _) => "private (10.0.0.0/8)",
        (172, 16..=31, _) => "private (172.16.0.0/12)",
        (192, 168, _) => "private (192.168.0.0/16)",
        (100, 64..=127, _) => "shared address space (CGNAT, 100.64.0.0/10)",
        (169, 254, _) => "link-local (169.254.0.0/16)",
        (192, 0, 0) => "IETF protocol assignments (192.0.0.0/24)",
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => "documentation",
        (198, 18..=19, _) => "benchmarking (198.18.0.0/15)",
        (224..=239, _, _) => "multicast (224.0.0.0/4)",
        (240..=255, _, _) => "reserved or broadcast (240.0.0.0/4)",
        _ => return None,
    })
}

fn v6_reason(ip: Ipv6Addr) -> Option<&'static str> {
    let s = ip.segments();
    if ip.is_unspecified() {
        return Some("unspecified (::)");
    }
    if ip.is_loopback() {
        return Some("loopback (::1)");
    }
    let embedded = |hi: u16, lo: u16| Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
    // ::ffff:a.b.c.d (mapped) and ::a.b.c.d (compatible, deprecated).
    if s[..5] == [0; 5] && (s[5] == 0xffff || s[5] == 0) {
        return v4_reason(embedded(s[6], s[7]))
            .map(|_| "an IPv4-mapped or IPv4-compatible form of a non-public IPv4 address");
    }
    // 64:ff9b::/96, the well-known NAT64 prefix.
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return v4_reason(embedded(s[6], s[7])).map(|_| "a NAT64 form of a non-public IPv4 address");
    }
    // 2002::/16, 6to4: the IPv4 address is in bits 16..48.
    if s[0] == 0x2002 {
        return v4_reason(embedded(s[1], s[2])).map(|_| "a 6to4 form of a non-public IPv4 address");
    }
    Some(match s[0] {
        0x0064 if s[1] == 0xff9b && s[2] == 1 => "local-use NAT64 (64:ff9b:1::/48)",
        0x0100 if s[1..4] == [0, 0, 0] => "discard-only (100::/64)",
        0x2001 if s[1] == 0 => "Teredo tunnelling (2001::/32)",
        0x2001 if s[1] == 0x0db8 => "documentation (2001:db8::/32)",
        x if x & 0xfe00 == 0xfc00 => "unique local (fc00::/7)",
        x if x & 0xffc0 == 0xfe80 => "link-local (fe80::/10)",
        x if x & 0xffc0 == 0xfec0 => "site-local (fec0::/10)",
        x if x & 0xff00 == 0xff00 => "multicast (ff00::/8)",
        x if x & 0xe000 != 0x2000 => "not global unicast (outside 2000::/3)",
        _ => return None,
    })
}

/// A name lookup: host name to addresses.
type Lookup = Arc<dyn Fn(String) -> BoxFuture<'static, std::io::Result<Vec<IpAddr>>> + Send + Sync>;

/// The DNS resolver of every HTTP client that dials request-chosen URLs (Remote MCP with URL checks
/// on, web_search page opening): resolves with the system resolver, keeps
/// only public unicast addresses, and fails when none is left — so a connection can only ever go
/// to an address that passed the policy, whatever the name resolved to a moment before.
#[derive(Clone)]
pub struct GuardedResolver {
    lookup: Lookup,
}

/// A host name that resolved to no address the policy allows. Its text names the host only: what
/// the host resolved to (an internal address plan) is logged at debug level, never shown to a
/// client or a model.
#[derive(Debug, thiserror::Error)]
#[error("host '{host}' is not an allowed destination; refusing to connect")]
pub struct RefusedHost {
    host: String,
}

impl GuardedResolver {
    /// Resolution with the system's resolver (`getaddrinfo`, on tokio's blocking pool).
    pub fn system() -> Self {
        Self::with_lookup(|host| {
            Box::pin(async move { Ok(tokio::net::lookup_host((host.as_str(), 0)).await?.map(|a| a.ip()).collect()) })
        })
    }

    /// Resolution with `lookup` (tests: a fake DNS).
    pub fn with_lookup(
        lookup: impl Fn(String) -> BoxFuture<'static, std::io::Result<Vec<IpAddr>>> + Send + Sync + 'static,
    ) -> Self {
        GuardedResolver { lookup: Arc::new(lookup) }
    }

    /// The allowed addresses of `host`, or why there are none.
    pub async fn resolve_host(&self, host: &str) -> Result<Vec<IpAddr>, Box<dyn std::error::Error + Send + Sync>> {
        let addresses = (self.lookup)(host.to_owned()).await?;
        let (allowed, refused): (Vec<IpAddr>, Vec<IpAddr>) =
            addresses.into_iter().partition(|ip| non_public_reason(*ip).is_none());
        if allowed.is_empty() {
            let refused: BTreeMap<String, &str> =
                refused.iter().map(|ip| (ip.to_string(), non_public_reason(*ip).unwrap_or_default())).collect();
            tracing::debug!(host, ?refused, "refused a host with no public address");
            return Err(Box::new(RefusedHost { host: host.to_owned() }));
        }
        if !refused.is_empty() {
            tracing::debug!(host, ?refused, "dropped non-public addresses of a host");
        }
        Ok(allowed)
    }
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let resolver = self.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let allowed = resolver.resolve_host(&host).await?;
            Ok(Box::new(allowed.into_iter().map(|ip| SocketAddr::new(ip, 0))) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::time::Duration;

    use super::*;
    use respgw_mcp::redact::error_chain;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("address")
    }

    #[test]
    fn every_non_public_ipv4_range_is_refused() {
        for (addr, why) in [
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "unspecified"),
            ("127.0.0.1", "loopback"),
            ("127.255.255.254", "loopback"),
            ("10.0.0.1", "private"),
            ("10.255.255.255", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("100.64.0.1", "CGNAT"),
            ("100.127.255.255", "CGNAT"),
            ("169.254.169.254", "link-local"),
            ("192.0.0.8", "IETF"),
            ("192.0.2.1", "documentation"),
            ("198.51.100.7", "documentation"),
            ("203.0.113.9", "documentation"),
            ("198.18.0.1", "benchmarking"),
            ("224.0.0.1", "multicast"),
            ("239.255.255.250", "multicast"),
            ("240.0.0.1", "reserved"),
            ("255.255.255.255", "broadcast"),
        ] {
            let reason = non_public_reason(ip(addr)).unwrap_or_else(|| panic!("{addr} must be refused"));
            assert!(reason.contains(why), "{addr}: {reason}");
        }
    }

    #[test]
    fn public_addresses_are_allowed() {
        for addr in [
            "8.8.8.8",
            "1.1.1.1",
            "93.184.216.34",
            "172.15.255.255",
            "172.32.0.1",
            "100.63.255.255",
            "100.128.0.1",
            "169.253.1.1",
            "192.167.1.1",
            "198.17.1.1",
            "198.20.0.1",
            "223.255.255.254",
            "2606:4700:4700::1111",
            "2001:4860:4860::8888",
            "2a00:1450:4001:82b::200e",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
        ] {
            assert_eq!(non_public_reason(ip(addr)), None, "{addr} is public");
        }
    }

    #[test]
    fn every_non_public_ipv6_range_is_refused_including_embedded_ipv4() {
        for (addr, why) in [
            ("::", "unspecified"),
            ("::1", "loopback"),
            ("fc00::1", "unique local"),
            ("fd12:3456:789a::1", "unique local"),
            ("fe80::1", "link-local"),
            ("febf::1", "link-local"),
            ("fec0::1", "site-local"),
            ("ff02::1", "multicast"),
            ("2001:db8::1", "documentation"),
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"),
            ("100::1", "discard"),
            ("64:ff9b:1::1", "NAT64"),
            ("4000::1", "not global unicast"),
            ("::ffff:127.0.0.1", "IPv4-mapped"),
            ("::ffff:10.1.2.3", "IPv4-mapped"),
            ("::ffff:169.254.169.254", "IPv4-mapped"),
            ("::ffff:100.64.0.1", "IPv4-mapped"),
            ("::ffff:0.0.0.0", "IPv4-mapped"),
            ("::ffff:192.168.0.1", "IPv4-mapped"),
            ("::127.0.0.1", "IPv4-compatible"),
            ("::10.0.0.1", "IPv4-compatible"),
            ("64:ff9b::7f00:1", "NAT64"),
            ("64:ff9b::a9fe:a9fe", "NAT64"),
            ("2002:7f00:1::1", "6to4"),
            ("2002:c0a8:101::1", "6to4"),
        ] {
            let reason = non_public_reason(ip(addr)).unwrap_or_else(|| panic!("{addr} must be refused"));
            assert!(reason.contains(why), "{addr}: {reason}");
        }
    }

    fn fake_dns(answers: &[(&str, &[&str])]) -> GuardedResolver {
        let table: Arc<HashMap<String, Vec<IpAddr>>> = Arc::new(
            answers.iter().map(|(name, ips)| (name.to_string(), ips.iter().map(|s| ip(s)).collect())).collect(),
        );
        GuardedResolver::with_lookup(move |host| {
            let answer = table.get(&host).cloned();
            Box::pin(
                async move { answer.ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no such host")) },
            )
        })
    }

    #[tokio::test]
    async fn the_resolver_keeps_only_public_addresses_and_fails_without_any() {
        let dns = fake_dns(&[
            ("public.test", &["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"]),
            ("mixed.test", &["10.0.0.5", "93.184.216.34", "::ffff:127.0.0.1"]),
            ("internal.test", &["127.0.0.1", "::1", "169.254.169.254"]),
            ("empty.test", &[]),
        ]);
        assert_eq!(dns.resolve_host("public.test").await.expect("public").len(), 2);
        assert_eq!(dns.resolve_host("mixed.test").await.expect("mixed"), vec![ip("93.184.216.34")]);
        let refused = dns.resolve_host("internal.test").await.expect_err("internal").to_string();
        assert_eq!(refused, "host 'internal.test' is not an allowed destination; refusing to connect");
        assert!(dns.resolve_host("empty.test").await.is_err());
        assert!(dns.resolve_host("nxdomain.test").await.is_err());
    }

    #[tokio::test]
    async fn an_http_client_with_the_resolver_never_connects_to_a_refused_address() {
        // A server on loopback that a name points at: the request must fail before connecting.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let accepted = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = accepted.clone();
        let server = tokio::spawn(async move {
            if listener.accept().await.is_ok() {
                flag.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        });
        ensure_crypto_provider();
        let client = reqwest::Client::builder()
            .no_proxy()
            .dns_resolver(fake_dns(&[("rebind.test", &["127.0.0.1"])]))
            .build()
            .expect("client");
        let error = client.get(format!("http://rebind.test:{port}/mcp")).send().await.expect_err("refused");
        let text = error_chain(&error);
        assert!(text.contains("is not an allowed destination"), "{text}");
        assert!(!text.contains("127.0.0.1"), "what the host resolved to is not told: {text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!accepted.load(std::sync::atomic::Ordering::SeqCst), "no connection was made");
        server.abort();
    }
}
