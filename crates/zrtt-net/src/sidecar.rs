//! Sidecar mode of `zrtt proxy` (the DZone pair of proxies, with zrtt in
//! place of TLS + Fast Open): a local port mapped to one HTTPS origin. An
//! unmodified application calls `http://127.0.0.1:PORT/...` as if the
//! service were local; every request on that port goes to the origin over
//! zrtt (the client of [`crate::client`]: key from the key source, TLS
//! fallback), keep-alive connections pooled. `Upgrade` requests
//! (WebSocket) switch both sides and are relayed byte for byte.

use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::Arc;

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode, Uri};
use hyper_util::rt::TokioIo;

use crate::error::{Error, Result};
use crate::http::{restore_upgrade, strip_hop_by_hop, text_response as text, upgrade_requested};
use crate::proxy::{ProxyBody, ProxyShared};

/// `LOCAL=https://host[:port]`: requests to the local address go to the
/// origin. `LOCAL` is a port (on 127.0.0.1) or an address and port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SidecarMap {
    /// Where the application connects.
    pub local: SocketAddr,
    /// The origin's host name (its key record's and certificate's name).
    pub host: String,
    /// The origin's port (its gateway's).
    pub port: u16,
}

impl FromStr for SidecarMap {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let bad =
            |why: &str| Error::Config(format!("--map {s:?}: {why} (LOCAL=https://host[:port])"));
        let (local, origin) = s.split_once('=').ok_or_else(|| bad("no '='"))?;
        let local: SocketAddr = match local.parse::<u16>() {
            Ok(port) => SocketAddr::from(([127, 0, 0, 1], port)),
            Err(_) => local
                .parse()
                .map_err(|_| bad("LOCAL is neither a port nor an address:port"))?,
        };
        let uri: Uri = origin.parse().map_err(|_| bad("not a URL"))?;
        if uri.scheme_str() != Some("https") {
            return Err(bad("the origin must be https://"));
        }
        if uri.path_and_query().is_some_and(|p| p.as_str() != "/") {
            return Err(bad("the origin takes no path"));
        }
        let host = uri
            .host()
            .ok_or_else(|| bad("no host"))?
            .trim_matches(['[', ']'])
            .to_owned();
        Ok(Self {
            local,
            host,
            port: uri.port_u16().unwrap_or(443),
        })
    }
}

/// One request that arrived on `map`'s local port.
pub(crate) async fn handle(
    shared: Arc<ProxyShared>,
    map: &SidecarMap,
    mut req: Request<Incoming>,
) -> Response<ProxyBody> {
    let m = &shared.metrics;
    let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let authority = if map.port == 443 {
        map.host.clone()
    } else {
        format!("{}:{}", map.host, map.port)
    };
    let Ok(target) = format!("https://{authority}{path}").parse::<Uri>() else {
        crate::proxy::inc(&m.bad_requests);
        return text(
            StatusCode::BAD_REQUEST,
            "zrtt sidecar: malformed request target",
        );
    };
    let upgrade = upgrade_requested(req.headers())
        .filter(|_| req.version() == hyper::Version::HTTP_11)
        .map(|proto| (proto, hyper::upgrade::on(&mut req)));
    let (mut parts, body) = req.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    if let Some((proto, _)) = &upgrade {
        restore_upgrade(&mut parts.headers, proto.clone());
    }
    // The origin sees its own name, whatever the application wrote.
    if let Ok(h) = HeaderValue::from_str(&authority) {
        parts.headers.insert(header::HOST, h);
    }
    parts.uri = target.clone();
    crate::proxy::inc(&m.zrtt_requests);
    let response = shared.cfg.timeouts.response;
    let started = std::time::Instant::now();
    // An upgrade needs HTTP/1.1 to the origin (HTTP/2 has no `Upgrade`).
    let client = match (&upgrade, &shared.zrtt_h1) {
        (Some(_), Some(h1)) => h1,
        _ => &shared.zrtt,
    };
    let mut resp = match tokio::time::timeout(
        response,
        client.request(Request::from_parts(parts, body)),
    )
    .await
    {
        Ok(Ok(r)) => {
            m.first_byte(
                r.extensions().get::<crate::client::ConnInfoHandle>(),
                started.elapsed(),
            );
            r
        }
        Ok(Err(e)) => {
            crate::proxy::inc(&m.bad_gateway);
            let msg = format!("zrtt sidecar: {target}: {}", crate::proxy::error_chain(&e));
            tracing::debug!("{msg}");
            return text(StatusCode::BAD_GATEWAY, msg);
        }
        Err(_) => {
            crate::proxy::inc(&m.gateway_timeout);
            return text(
                StatusCode::GATEWAY_TIMEOUT,
                format!("zrtt sidecar: {target}: no response within {response:?}"),
            );
        }
    };
    let origin =
        (resp.status() == StatusCode::SWITCHING_PROTOCOLS).then(|| hyper::upgrade::on(&mut resp));
    let (mut rparts, rbody) = resp.into_parts();
    let proto = rparts.headers.get(header::UPGRADE).cloned();
    strip_hop_by_hop(&mut rparts.headers);
    if let Some(origin) = origin {
        let (Some((_, client)), Some(proto)) = (upgrade, proto) else {
            crate::proxy::inc(&m.bad_gateway);
            return text(
                StatusCode::BAD_GATEWAY,
                "zrtt sidecar: origin switched protocols unasked",
            );
        };
        restore_upgrade(&mut rparts.headers, proto);
        let tunnel = shared.cfg.timeouts.tunnel;
        tokio::spawn(async move {
            match (client.await, origin.await) {
                (Ok(c), Ok(o)) => {
                    let (mut c, mut o) = (TokioIo::new(c), TokioIo::new(o));
                    let _ =
                        tokio::time::timeout(tunnel, tokio::io::copy_bidirectional(&mut c, &mut o))
                            .await;
                }
                (c, o) => tracing::debug!("sidecar upgrade: {:?} {:?}", c.err(), o.err()),
            }
        });
        return Response::from_parts(rparts, rbody.boxed());
    }
    Response::from_parts(rparts, rbody.boxed())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn maps_parse_and_bad_ones_say_why() {
        let m: SidecarMap = "8081=https://www.example.com".parse().unwrap();
        assert_eq!(m.local, "127.0.0.1:8081".parse().unwrap());
        assert_eq!((m.host.as_str(), m.port), ("www.example.com", 443));
        let m: SidecarMap = "0.0.0.0:9000=https://api.example.com:8443/"
            .parse()
            .unwrap();
        assert_eq!(m.local, "0.0.0.0:9000".parse().unwrap());
        assert_eq!((m.host.as_str(), m.port), ("api.example.com", 8443));
        for bad in [
            "8081",
            "x=https://a.example",
            "8081=http://a.example",
            "8081=https://a.example/path",
            "8081=not a url",
        ] {
            let e = bad.parse::<SidecarMap>().unwrap_err().to_string();
            assert!(e.contains("LOCAL=https://host[:port]"), "{bad}: {e}");
        }
    }
}
