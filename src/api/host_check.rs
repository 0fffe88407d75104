//! DNS-rebinding protection: a daemon listening on a loopback address answers only requests
//! whose `Host` names this machine's loopback. A web page on `attacker.example` whose DNS name
//! is re-pointed to 127.0.0.1 makes the browser send `Host: attacker.example` to the daemon,
//! and, being same-origin for the browser, could read the answers; refusing that `Host` closes
//! the hole (Ollama does the same on loopback binds).
//!
//! Allowed on a loopback listener: no `Host` or an empty one (HTTP/1.0; browsers always send a
//! name), `localhost` and any name under `.localhost` (RFC 6761: always loopback), loopback IP
//! literals (`127.0.0.0/8`, `[::1]`), the host part of the configured `addr`, and the names the
//! operator adds (`allowed_hosts`; `*` turns the check off). A listener on any other address is reachable
//! from other machines on purpose and relies on the API key and allowed origins instead.
//! Refused: 403 in the route's API shape, naming the `Host`.
//!
//! Key items: [`HostCheck`], [`check_host`] (actix middleware, mounted by `build_app`).
//! Cost: one header parse and a set lookup per request on a loopback listener.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header;
use actix_web::middleware::Next;
use actix_web::web;

use super::auth::Shape;
use super::AppState;
use crate::error::{CoreError, ErrorCode};

/// The address of the listener a connection came in on, kept in the connection's data.
#[derive(Debug, Clone, Copy)]
pub struct Listener(pub SocketAddr);

/// The `Host` names a loopback listener answers besides the built-in loopback ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostCheck {
    /// Lower-case names without port or trailing dot.
    names: HashSet<String>,
    /// `allowed_hosts` holds `*`: every `Host` is answered.
    any: bool,
}

impl HostCheck {
    /// The check for a daemon configured with `addr` (`host:port`) and `allowed` extra names.
    pub fn new(addr: &str, allowed: &[String]) -> Self {
        let mut names = HashSet::new();
        let (bind_host, _) = split_host_port(addr);
        if !bind_host.is_empty() {
            names.insert(normalize(bind_host));
        }
        let mut any = false;
        for name in allowed {
            if name.trim() == "*" {
                any = true;
            } else {
                names.insert(normalize(split_host_port(name.trim()).0));
            }
        }
        HostCheck { names, any }
    }

    /// Whether a request with this `Host` header value (or none) is answered.
    pub fn allows(&self, host: Option<&str>) -> bool {
        let Some(host) = host else {
            return true;
        };
        if self.any {
            return true;
        }
        let (name, _) = split_host_port(host.trim());
        let name = normalize(name);
        // An empty Host (a request target without authority) is no browser's.
        if name.is_empty() || name == "localhost" || name.ends_with(".localhost") {
            return true;
        }
        if name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback()) {
            return true;
        }
        self.names.contains(&name)
    }
}

/// `host:port`, `[v6]:port`, `host` or `[v6]` split into the host (brackets removed) and port.
fn split_host_port(text: &str) -> (&str, Option<&str>) {
    if let Some(rest) = text.strip_prefix('[') {
        return match rest.split_once(']') {
            Some((host, tail)) => (host, tail.strip_prefix(':')),
            None => (rest, None),
        };
    }
    // A bare IPv6 address has several colons and no port.
    if text.matches(':').count() > 1 {
        return (text, None);
    }
    match text.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (text, None),
    }
}

fn normalize(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// Middleware: on a loopback listener, answers 403 to a request whose `Host` the daemon's
/// [`HostCheck`] does not allow; everything else passes.
pub async fn check_host(
    request: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, actix_web::Error> {
    // Without a connection (the app mounted in a test) the check applies, as on loopback.
    let loopback = request
        .request()
        .conn_data::<Listener>()
        .is_none_or(|listener| listener.0.ip().is_loopback());
    let refused = match request.app_data::<web::Data<AppState>>() {
        Some(state) if loopback => {
            let host = request.headers().get(header::HOST).map(|value| value.to_str());
            match host {
                None => None,
                Some(Ok(host)) if state.host_check.allows(Some(host)) => None,
                Some(Ok(host)) => Some(host.to_string()),
                Some(Err(_)) => Some("(not text)".to_string()),
            }
        }
        _ => None,
    };
    let Some(host) = refused else {
        return Ok(next.call(request).await?.map_into_left_body());
    };
    let error = CoreError::new(
        ErrorCode::HostNotAllowed,
        format!(
            "Host {host:?} is not answered: this llamay listens on loopback and answers only \
             localhost, 127.0.0.1, [::1] and its own address (protection against DNS rebinding); \
             add the name to allowed_hosts (-allowed-hosts, LLAMAY_ALLOWED_HOSTS) to serve it"
        ),
    );
    let response = Shape::of_path(request.path()).render(&error);
    Ok(request.into_response(response).map_into_right_body())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names_the_bind_host_and_added_names_are_allowed() {
        let check = HostCheck::new("localhost:11435", &["box.lan".into(), "Proxy.Example:8080".into()]);
        for host in [
            "localhost",
            "localhost:11435",
            "LOCALHOST.",
            "app.localhost:3000",
            "127.0.0.1:11435",
            "127.1.2.3",
            "[::1]:11435",
            "[::1]",
            "box.lan:11435",
            "proxy.example",
        ] {
            assert!(check.allows(Some(host)), "{host}");
        }
        assert!(check.allows(None) && check.allows(Some("")));
        for host in [
            "attacker.example",
            "attacker.example:11435",
            "localhost.attacker.example",
            "10.0.0.1",
            "[::2]:11435",
        ] {
            assert!(!check.allows(Some(host)), "{host}");
        }
    }

    #[test]
    fn the_bind_address_and_a_star_count() {
        let check = HostCheck::new("devbox.internal:11435", &[]);
        assert!(check.allows(Some("devbox.internal:11435")));
        assert!(!check.allows(Some("other.internal")));
        assert!(HostCheck::new("127.0.0.1:1", &["*".into()]).allows(Some("anything.example")));
    }
}
