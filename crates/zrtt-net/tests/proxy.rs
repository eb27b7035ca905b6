//! Loopback tests of the forward proxy: a zrtt host goes over zrtt through a
//! gateway, other hosts pass through as plain HTTP, CONNECT is tunnelled,
//! unreachable origins get a 502.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use zrtt_net::proxy::{Proxy, ProxyConfig, ProxyMetrics, SystemResolver, ZrttPorts};

struct ProxyEnv {
    addr: SocketAddr,
    metrics: Arc<ProxyMetrics>,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl ProxyEnv {
    async fn stop(self) {
        let _ = self.stop.send(());
        let _ = tokio::time::timeout(Duration::from_secs(10), self.task).await;
    }

    fn metric(&self, name: &str) -> u64 {
        self.metrics
            .snapshot()
            .into_iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v)
            .unwrap()
    }
}

/// A proxy whose key source holds `records` for [`HOST`], whose resolver
/// maps the given `host:port` pairs to loopback, and whose zrtt port for
/// [`HOST`] is `zrtt_port`.
async fn start_proxy(
    records: Vec<zrtt_proto::record::KeyRecord>,
    zrtt_port: u16,
    resolve: &[(&str, u16)],
) -> ProxyEnv {
    start_proxy_with(records, zrtt_port, resolve, |_| {}).await
}

/// [`start_proxy`], with `tweak` applied to the configuration.
async fn start_proxy_with(
    records: Vec<zrtt_proto::record::KeyRecord>,
    zrtt_port: u16,
    resolve: &[(&str, u16)],
    tweak: impl FnOnce(&mut ProxyConfig),
) -> ProxyEnv {
    let mut client = client_config(records);
    client.fast_open = false;
    client.connect_timeout = Duration::from_secs(2);
    let mut resolver = SystemResolver::new();
    for (h, p) in resolve {
        resolver.add_override(h, *p, "127.0.0.1".parse().unwrap());
    }
    let mut ports = ZrttPorts::default();
    ports.add_spec(&format!("{HOST}={zrtt_port}")).unwrap();
    let mut cfg = ProxyConfig::new(Arc::new(client));
    cfg.resolver = Arc::new(resolver);
    cfg.zrtt_ports = ports;
    cfg.timeouts.connect = Duration::from_secs(2);
    cfg.timeouts.response = Duration::from_secs(5);
    tweak(&mut cfg);
    let proxy = Proxy::bind("127.0.0.1:0".parse().unwrap(), cfg)
        .await
        .unwrap();
    let addr = proxy.local_addr().unwrap();
    let metrics = proxy.metrics();
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        proxy
            .run(async {
                let _ = rx.await;
            })
            .await
            .unwrap();
    });
    ProxyEnv {
        addr,
        metrics,
        stop,
        task,
    }
}

fn absolute(method: &str, url: &str, body: &'static [u8]) -> Request<Full<Bytes>> {
    let uri: hyper::Uri = url.parse().unwrap();
    Request::builder()
        .method(method)
        .uri(url)
        .header("host", uri.authority().unwrap().as_str())
        .header("proxy-connection", "keep-alive")
        .body(Full::new(Bytes::from_static(body)))
        .unwrap()
}

/// Send absolute-form requests over one connection to the proxy.
async fn via_proxy(proxy: SocketAddr, reqs: Vec<Request<Full<Bytes>>>) -> Vec<(u16, String)> {
    let tcp = TcpStream::connect(proxy).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    let conn = tokio::spawn(conn);
    let mut out = Vec::new();
    for req in reqs {
        let resp = tokio::time::timeout(Duration::from_secs(15), sender.send_request(req))
            .await
            .expect("proxy answered in time")
            .unwrap();
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        out.push((status, String::from_utf8_lossy(&body).into_owned()));
    }
    drop(sender);
    let _ = tokio::time::timeout(Duration::from_secs(2), conn).await;
    out
}

#[tokio::test]
async fn zrtt_host_goes_over_zrtt_and_connection_is_reused() {
    let env = start_gateway(GatewayOpts::default()).await;
    let gw_port = env.addr.port();
    let proxy = start_proxy(env.records.clone(), gw_port, &[(HOST, gw_port)]).await;
    let resp = via_proxy(
        proxy.addr,
        vec![
            absolute("GET", "http://www.example.com/hello", b""),
            absolute("GET", "http://www.example.com/two?x=1", b""),
            absolute("POST", "http://www.example.com/form", b"a=1&b=2"),
        ],
    )
    .await;
    assert_eq!(
        resp,
        vec![
            (200, "GET /hello early=1 body=0".to_owned()),
            (200, "GET /two early=- body=0".to_owned()),
            (200, "POST /form early=- body=7".to_owned()),
        ]
    );
    assert_eq!(env.metric("zrtt_flights"), 1);
    assert_eq!(env.metric("zrtt_accepted"), 1);
    assert_eq!(env.metric("early_requests"), 1);
    assert_eq!(env.metric("tls_connections"), 0);
    // One zrtt connection carried all three requests.
    assert_eq!(env.metric("connections"), 1);
    assert_eq!(env.metric("requests"), 3);
    assert_eq!(proxy.metric("zrtt_requests"), 3);
    assert_eq!(proxy.metric("passthrough_requests"), 0);

    // A second client connection to the proxy reuses the pooled zrtt channel.
    let resp = via_proxy(
        proxy.addr,
        vec![absolute("GET", "http://www.example.com/again", b"")],
    )
    .await;
    assert_eq!(resp, vec![(200, "GET /again early=- body=0".to_owned())]);
    assert_eq!(env.metric("connections"), 1);
    proxy.stop().await;
    env.stop().await;
}

#[tokio::test]
async fn other_hosts_pass_through_as_plain_http() {
    let env = start_gateway(GatewayOpts::default()).await;
    let (plain, seen) = start_backend().await;
    let gw_port = env.addr.port();
    let proxy = start_proxy(
        env.records.clone(),
        gw_port,
        &[(HOST, gw_port), ("plain.test", plain.port())],
    )
    .await;
    let base = format!("http://plain.test:{}", plain.port());
    let resp = via_proxy(
        proxy.addr,
        vec![
            absolute("GET", &format!("{base}/p?q=1"), b""),
            absolute("PUT", &format!("{base}/up"), b"12345"),
        ],
    )
    .await;
    assert_eq!(
        resp,
        vec![
            (200, "GET /p early=- body=0".to_owned()),
            (200, "PUT /up early=- body=5".to_owned()),
        ]
    );
    assert_eq!(seen.lock().unwrap().len(), 2);
    assert_eq!(env.metric("zrtt_flights"), 0);
    assert_eq!(env.metric("connections"), 0);
    assert_eq!(proxy.metric("passthrough_requests"), 2);
    assert_eq!(proxy.metric("zrtt_requests"), 0);
    proxy.stop().await;
    env.stop().await;
}

#[tokio::test]
async fn connect_is_tunnelled_unchanged() {
    let (plain, _) = start_backend().await;
    let proxy = start_proxy(Vec::new(), 1, &[]).await;
    let mut tcp = TcpStream::connect(proxy.addr).await.unwrap();
    let connect = format!(
        "CONNECT 127.0.0.1:{p} HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\n\r\n",
        p = plain.port()
    );
    tcp.write_all(connect.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut byte))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(n, 1, "proxy closed during CONNECT");
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // Inside the tunnel: plain HTTP straight to the backend.
    tcp.write_all(b"GET /tunnel HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut rest))
        .await
        .unwrap()
        .unwrap();
    let rest = String::from_utf8_lossy(&rest);
    assert!(rest.starts_with("HTTP/1.1 200"), "{rest}");
    assert!(rest.ends_with("GET /tunnel early=- body=0"), "{rest}");
    assert_eq!(proxy.metric("tunnels"), 1);
    proxy.stop().await;
}

/// A loopback port with nothing listening.
async fn dead_port() -> u16 {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    port
}

#[tokio::test]
async fn unreachable_targets_get_502() {
    let dead = dead_port().await;
    let (rec, _) = record("zrtt test key 1", 16384);
    // The zrtt host's gateway is down too (zrtt and the TLS fallback both fail).
    let proxy = start_proxy(vec![rec], dead, &[(HOST, dead)]).await;
    let resp = via_proxy(
        proxy.addr,
        vec![
            absolute("GET", &format!("http://127.0.0.1:{dead}/x"), b""),
            absolute("GET", "http://www.example.com/x", b""),
        ],
    )
    .await;
    assert_eq!(resp[0].0, 502, "{resp:?}");
    assert!(
        resp[0]
            .1
            .starts_with("zrtt proxy: 127.0.0.1 via plain HTTP"),
        "{resp:?}"
    );
    assert_eq!(resp[1].0, 502, "{resp:?}");
    assert!(resp[1].1.contains("www.example.com via zrtt"), "{resp:?}");

    let mut tcp = TcpStream::connect(proxy.addr).await.unwrap();
    tcp.write_all(format!("CONNECT 127.0.0.1:{dead} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut buf = [0u8; 12];
    tokio::time::timeout(Duration::from_secs(5), tcp.read_exact(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&buf, b"HTTP/1.1 502");
    drop(tcp);
    assert_eq!(proxy.metric("bad_gateway"), 3);

    // A request to the proxy itself is refused, not looped.
    let own = format!("http://{}/", proxy.addr);
    let resp = via_proxy(proxy.addr, vec![absolute("GET", &own, b"")]).await;
    assert_eq!(resp[0].0, 502, "{resp:?}");
    assert!(resp[0].1.contains("loops back to the proxy"), "{resp:?}");
    proxy.stop().await;
}

#[tokio::test]
async fn origin_form_is_refused() {
    let proxy = start_proxy(Vec::new(), 1, &[]).await;
    let req = Request::builder()
        .uri("/not-absolute")
        .header("host", "x")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = via_proxy(proxy.addr, vec![req]).await;
    assert_eq!(resp[0].0, 400);
    assert!(resp[0].1.contains("not a proxy request"), "{resp:?}");
    proxy.stop().await;
}

/// A plain HTTP origin whose answers wait for a permit of `release`;
/// counts requests in flight, their maximum, and all requests.
struct HeldOrigin {
    port: u16,
    release: Arc<tokio::sync::Semaphore>,
    in_flight: Arc<std::sync::atomic::AtomicUsize>,
    max: Arc<std::sync::atomic::AtomicUsize>,
    seen: Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

async fn held_origin() -> HeldOrigin {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    let (in_flight, max, seen) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    let (r, f, m, n) = (
        release.clone(),
        in_flight.clone(),
        max.clone(),
        seen.clone(),
    );
    let task = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = l.accept().await else {
                return;
            };
            let (r, f, m, n) = (r.clone(), f.clone(), m.clone(), n.clone());
            tokio::spawn(async move {
                let svc =
                    hyper::service::service_fn(move |_req: Request<hyper::body::Incoming>| {
                        let (r, f, m, n) = (r.clone(), f.clone(), m.clone(), n.clone());
                        async move {
                            n.fetch_add(1, SeqCst);
                            let now = f.fetch_add(1, SeqCst) + 1;
                            m.fetch_max(now, SeqCst);
                            r.acquire().await.unwrap().forget();
                            f.fetch_sub(1, SeqCst);
                            Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                                Bytes::from_static(b"held"),
                            )))
                        }
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    HeldOrigin {
        port,
        release,
        in_flight,
        max,
        seen,
        task,
    }
}

#[tokio::test]
async fn requests_in_flight_per_origin_are_bounded_and_the_rest_wait() {
    use std::sync::atomic::Ordering::SeqCst;
    let origin = held_origin().await;
    let proxy = start_proxy_with(Vec::new(), 1, &[("held.test", origin.port)], |cfg| {
        cfg.max_conns_per_origin = 2
    })
    .await;
    let url = format!("http://held.test:{}/x", origin.port);
    // Five clients, each on its own connection to the proxy.
    let clients: Vec<_> = (0..5)
        .map(|_| {
            let url = url.clone();
            let addr = proxy.addr;
            tokio::spawn(async move { via_proxy(addr, vec![absolute("GET", &url, b"")]).await })
        })
        .collect();
    // Two reach the origin ...
    for _ in 0..500 {
        if origin.seen.load(SeqCst) >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(origin.seen.load(SeqCst), 2);
    // ... and the other three wait in the proxy (counted as they start
    // waiting; none reaches the origin while the first two are held).
    for _ in 0..500 {
        if proxy.metric("origin_waits") >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(proxy.metric("origin_waits"), 3);
    assert_eq!(origin.seen.load(SeqCst), 2);
    assert_eq!(origin.in_flight.load(SeqCst), 2);
    // Each answer lets one waiting request through.
    origin.release.add_permits(5);
    for c in clients {
        assert_eq!(c.await.unwrap(), vec![(200, "held".to_owned())]);
    }
    assert_eq!(origin.seen.load(SeqCst), 5);
    assert_eq!(origin.max.load(SeqCst), 2);
    assert_eq!(proxy.metric("passthrough_requests"), 5);
    assert_eq!(proxy.metric("origin_waits"), 3);
    assert_eq!(proxy.metric("origin_wait_timeouts"), 0);
    assert_eq!(proxy.metric("origin_long_holds"), 0);
    proxy.stop().await;
    origin.task.abort();
}
