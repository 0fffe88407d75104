//! Where a pull may go, decided by the operator and never by the request: which registries may
//! be spoken to over plain http ([`InsecureRegistries`], from `insecure_registries`,
//! `-insecure-registry` or `LLAMAY_INSECURE_REGISTRIES`; `llamay pull -insecure` with no daemon
//! is the operator too), and which redirects a pull follows ([`judge_redirect`]): only to https
//! or to an allowed plain-http registry, and never from a public address to a loopback,
//! private or link-local one. A pull from a public registry resolves every host through
//! [`PublicOnlyResolver`], so a name that resolves to a private address (a redirect's, or the
//! registry's own after a DNS change) is not connected to either.
//!
//! Key types: [`InsecureRegistries`], [`PublicOnlyResolver`]; [`is_public`], [`origin_is_public`].
//! Cost: one DNS lookup of the registry's host per pull, string checks per redirect.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::Url;

/// Most redirects one request follows (reqwest's own default).
pub const MAX_REDIRECTS: usize = 10;

/// The registries the operator lets pulls reach over plain http.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InsecureRegistries {
    /// Every registry (`llamay pull -insecure` without a daemon).
    any: bool,
    /// `host` (any port) or `host:port`, lower case.
    hosts: Vec<String>,
}

impl InsecureRegistries {
    /// Plain http nowhere.
    pub fn none() -> Self {
        InsecureRegistries::default()
    }

    /// Plain http anywhere: only for the operator's own command line.
    pub fn any() -> Self {
        InsecureRegistries {
            any: true,
            hosts: Vec::new(),
        }
    }

    /// Plain http to these registries, each `host` (any port) or `host:port`.
    pub fn listed<S: AsRef<str>>(hosts: impl IntoIterator<Item = S>) -> Self {
        InsecureRegistries {
            any: false,
            hosts: hosts
                .into_iter()
                .map(|host| host.as_ref().trim().to_ascii_lowercase())
                .filter(|host| !host.is_empty())
                .collect(),
        }
    }

    /// This list and `authority` (`host` or `host:port`).
    pub fn with(mut self, authority: String) -> Self {
        self.hosts.push(authority.to_ascii_lowercase());
        self
    }

    /// Whether `authority` (`host` or `host:port`, as in a model name) may be reached over http.
    pub fn allows(&self, authority: &str) -> bool {
        if self.any {
            return true;
        }
        let authority = authority.to_ascii_lowercase();
        let host = split_port(&authority);
        self.hosts
            .iter()
            .any(|allowed| *allowed == authority || *allowed == host)
    }

    /// Whether `url`'s host and port may be reached over http.
    pub fn allows_url(&self, url: &Url) -> bool {
        match (url.host_str(), url.port_or_known_default()) {
            (Some(host), Some(port)) => self.allows(&format!("{host}:{port}")),
            _ => false,
        }
    }
}

/// `host` of `host:port` (`[v6]` of `[v6]:port`).
fn split_port(authority: &str) -> &str {
    match authority.rsplit_once(':') {
        Some((host, port))
            if port.bytes().all(|b| b.is_ascii_digit())
                && (!host.contains(':') || host.ends_with(']')) =>
        {
            host
        }
        _ => authority,
    }
}

/// Whether `ip` is reachable on the public internet: not loopback, private, link-local,
/// shared (CGNAT), unspecified, broadcast or multicast, in either family (an IPv4 address
/// mapped into IPv6 counts as itself).
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_public_v4(v4),
            None => is_public_v6(v6),
        },
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [first, second, ..] = ip.octets();
    let shared = first == 100 && (64..128).contains(&second);
    let this_network = first == 0;
    !(ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || shared
        || this_network)
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    let unique_local = first & 0xfe00 == 0xfc00;
    let link_local = first & 0xffc0 == 0xfe80;
    !(ip.is_loopback() || ip.is_unspecified() || ip.is_multicast() || unique_local || link_local)
}

/// Whether a host names the machine itself without DNS (`localhost`, `*.localhost`).
fn is_localhost(host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    host == "localhost" || host.ends_with(".localhost")
}

/// The address a URL's host is, when it is an address rather than a name.
fn literal_ip(url: &Url) -> Option<IpAddr> {
    let host = url.host_str()?;
    let host = host
        .strip_prefix('[')
        .and_then(|inner| inner.strip_suffix(']'))
        .unwrap_or(host);
    host.parse().ok()
}

/// Whether the registry or file a pull starts from is on the public internet. A name is
/// resolved once (blocking): public when every address is; a name that does not resolve is
/// treated as public, the strictest choice (its pull fails anyway).
pub fn origin_is_public(url: &Url) -> bool {
    if let Some(ip) = literal_ip(url) {
        return is_public(ip);
    }
    let Some(host) = url.host_str() else {
        return true;
    };
    if is_localhost(host) {
        return false;
    }
    let port = url.port_or_known_default().unwrap_or(443);
    match (host, port).to_socket_addrs() {
        Ok(addresses) => addresses.into_iter().all(|address| is_public(address.ip())),
        Err(_) => true,
    }
}

/// Whether a pull that started at a public (`origin_public`) or local origin may follow a
/// redirect to `target`; `Err` says why not. Names are checked when they are resolved
/// ([`PublicOnlyResolver`]), addresses here.
pub fn judge_redirect(
    target: &Url,
    origin_public: bool,
    insecure: &InsecureRegistries,
) -> Result<(), &'static str> {
    match target.scheme() {
        "https" => {}
        "http" if insecure.allows_url(target) => {}
        "http" => return Err("a redirect to plain http, to a registry the operator does not allow"),
        _ => return Err("a redirect to a scheme other than https"),
    }
    if origin_public {
        let local_name = target.host_str().is_some_and(is_localhost);
        let local_address = literal_ip(target).is_some_and(|ip| !is_public(ip));
        if local_name || local_address {
            return Err("a redirect from a public address to a loopback, private or link-local one");
        }
    }
    Ok(())
}

/// reqwest's redirect policy for a pull: [`judge_redirect`] on every hop, at most
/// [`MAX_REDIRECTS`] of them.
pub fn redirect_policy(
    origin_public: bool,
    insecure: InsecureRegistries,
) -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(move |attempt| {
        if attempt.previous().len() > MAX_REDIRECTS {
            return attempt.error("too many redirects");
        }
        match judge_redirect(attempt.url(), origin_public, &insecure) {
            Ok(()) => attempt.follow(),
            Err(reason) => attempt.error(reason),
        }
    })
}

/// Resolves names to their public addresses only, so a pull from a public registry never
/// connects to a loopback, private or link-local address, whatever a name resolves to.
pub struct PublicOnlyResolver;

impl Resolve for PublicOnlyResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_string();
        Box::pin(async move {
            if is_localhost(&host) {
                return Err("the name is the local machine's".into());
            }
            let lookup = tokio::task::spawn_blocking(move || {
                (host.as_str(), 0)
                    .to_socket_addrs()
                    .map(|addresses| addresses.collect::<Vec<SocketAddr>>())
            });
            let addresses = lookup.await??;
            let public: Vec<SocketAddr> = addresses
                .into_iter()
                .filter(|address| is_public(address.ip()))
                .collect();
            if public.is_empty() {
                return Err("the name resolves to no public address".into());
            }
            let addresses: Addrs = Box::new(public.into_iter());
            Ok(addresses)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(text: &str) -> Url {
        Url::parse(text).expect("url")
    }

    #[test]
    fn public_and_local_addresses() {
        for public in ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "100.128.0.1"] {
            assert!(is_public(public.parse().unwrap()), "{public}");
        }
        for local in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "0.1.2.3",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "fc00::1",
            "fd12::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
        ] {
            assert!(!is_public(local.parse().unwrap()), "{local}");
        }
    }

    #[test]
    fn the_operator_list_allows_hosts_or_host_ports() {
        let list = InsecureRegistries::listed(["127.0.0.1", "Registry.Local:5000", " "]);
        assert!(list.allows("127.0.0.1:5000") && list.allows("127.0.0.1:9"));
        assert!(list.allows("registry.local:5000") && list.allows("REGISTRY.LOCAL:5000"));
        assert!(!list.allows("registry.local:5001") && !list.allows("registry.local"));
        assert!(!list.allows("localhost:5000"), "a name is not its address");
        assert!(list.allows_url(&url("http://127.0.0.1:8080/x")));
        assert!(!list.allows_url(&url("http://10.0.0.1:5000/x")));
        let v6 = InsecureRegistries::listed(["[::1]"]);
        assert!(v6.allows_url(&url("http://[::1]:5000/x")));
        assert!(!InsecureRegistries::none().allows("127.0.0.1"));
        assert!(InsecureRegistries::any().allows("anything:1"));
    }

    #[test]
    fn redirects_go_to_https_or_allowed_http_and_never_inward_from_outside() {
        let list = InsecureRegistries::listed(["127.0.0.1:5000", "mirror.example"]);
        let judge = |target: &str, public| judge_redirect(&url(target), public, &list);
        assert!(judge("https://cdn.example/blob", true).is_ok());
        assert!(judge("http://mirror.example/blob", true).is_ok());
        assert!(judge("http://cdn.example/blob", true).is_err());
        assert!(judge("ftp://cdn.example/blob", false).is_err());
        for inward in [
            "https://127.0.0.1/x",
            "https://10.0.0.1/x",
            "https://[::1]/x",
            "https://169.254.169.254/latest/meta-data",
            "https://localhost/x",
            "https://api.localhost/x",
            "http://127.0.0.1:5000/x",
        ] {
            let refused = judge(inward, true).expect_err(inward);
            assert!(refused.contains("public"), "{inward}: {refused}");
        }
        // A registry on this machine or network may send its clients to its neighbours.
        assert!(judge("https://10.0.0.1/x", false).is_ok());
        assert!(judge("http://127.0.0.1:5000/x", false).is_ok());
        assert!(judge("http://127.0.0.1:5001/x", false).is_err());
    }

    #[test]
    fn local_origins_are_not_public() {
        assert!(!origin_is_public(&url("http://127.0.0.1:5000/v2/")));
        assert!(!origin_is_public(&url("http://localhost:5000/v2/")));
        assert!(!origin_is_public(&url("https://[::1]/v2/")));
        assert!(!origin_is_public(&url("https://192.168.0.10/v2/")));
        assert!(origin_is_public(&url("https://8.8.8.8/v2/")));
    }

    #[tokio::test]
    async fn the_public_only_resolver_refuses_local_names_and_addresses() {
        let refused = |host: &'static str| async move {
            let name: Name = host.parse().expect("a name");
            PublicOnlyResolver.resolve(name).await.err().map(|e| e.to_string())
        };
        assert!(refused("localhost").await.is_some_and(|e| e.contains("local machine")));
        assert!(refused("127.0.0.1").await.is_some_and(|e| e.contains("no public address")));
        assert!(refused("10.9.8.7").await.is_some_and(|e| e.contains("no public address")));
    }
}
