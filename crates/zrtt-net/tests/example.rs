//! The `fetch` example (examples/fetch.rs) and the public connector against
//! a gateway on loopback: the body arrives over zrtt (not the TLS
//! fallback), hosts without a key get TLS, connections are pooled.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;
#[allow(dead_code)]
#[path = "../examples/fetch.rs"]
mod example;

use std::sync::Arc;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use zrtt_net::client::{conn_info, Mode, SystemResolver, ZrttConnector};

/// `HOST` on the gateway's port goes to the gateway.
fn to_gateway(env: &Env) -> Arc<SystemResolver> {
    let mut resolver = SystemResolver::new();
    resolver.add_override(HOST, env.addr.port(), env.addr.ip());
    Arc::new(resolver)
}

fn url(env: &Env, path: &str) -> String {
    format!("https://{HOST}:{}{path}", env.addr.port())
}

#[tokio::test]
async fn example_fetches_over_zrtt() {
    let env = start_gateway(GatewayOpts::default()).await;
    let config = client_config(env.records.clone());
    let (status, body, mode) = example::fetch(config, to_gateway(&env), &url(&env, "/hello"))
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert_eq!(body, "GET /hello early=1 body=0");
    assert!(
        matches!(mode, Some(Mode::ZrttEarly | Mode::ZrttGated)),
        "{mode:?}"
    );
    assert_eq!(env.metric("zrtt_accepted"), 1);
    assert_eq!(env.metric("early_requests"), 1);
    assert_eq!(env.metric("tls_connections"), 0);
    env.stop().await;
}

#[tokio::test]
async fn example_falls_back_to_tls_without_a_key() {
    let env = start_gateway(GatewayOpts::default()).await;
    let config = client_config(Vec::new());
    let (status, body, mode) = example::fetch(config, to_gateway(&env), &url(&env, "/tls"))
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert_eq!(body, "GET /tls early=- body=0");
    assert_eq!(mode, Some(Mode::TlsFallback));
    assert_eq!(env.metric("tls_connections"), 1);
    assert_eq!(env.metric("zrtt_flights"), 0);
    env.stop().await;
}

#[tokio::test]
async fn connector_pools_connections_and_refuses_plain_http() {
    let env = start_gateway(GatewayOpts::default()).await;
    let connector = ZrttConnector::builder(Arc::new(client_config(env.records.clone())))
        .resolver(to_gateway(&env))
        .build();
    let client = Client::builder(TokioExecutor::new()).build::<_, Empty<Bytes>>(connector);
    for (path, early) in [("/one", "1"), ("/two", "-")] {
        let resp = client.get(url(&env, path).parse().unwrap()).await.unwrap();
        assert_ne!(conn_info(&resp).unwrap().mode, Mode::TlsFallback);
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, format!("GET {path} early={early} body=0"));
    }
    assert_eq!(env.metric("connections"), 1);
    assert_eq!(env.metric("requests"), 2);
    let plain = format!("http://{HOST}:{}/", env.addr.port());
    assert!(client.get(plain.parse().unwrap()).await.is_err());
    assert_eq!(env.metric("connections"), 1);
    drop(client);
    env.stop().await;
}
