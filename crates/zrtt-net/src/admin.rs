//! The admin endpoint every long-running role serves with `--admin ADDR`:
//! `GET /metrics` (OpenMetrics text from a prometheus-client registry),
//! `GET /healthz` (200 while the process serves HTTP at all) and
//! `GET /readyz` (200 when ready, else 503). One server for the gateway,
//! `zrtt dns`, `zrtt verifier serve` and `zrtt proxy`; each role defines
//! its own metrics and says when it is ready (docs/GATEWAY.md "Metrics,
//! health and readiness").

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

/// Whether the role takes work: `/readyz` answers 200 while it is `true`,
/// 503 before the role is ready and while it drains.
pub type Readiness = tokio::sync::watch::Receiver<bool>;

/// What `/metrics` serves: a function rendering the exposition text (each
/// role's registry, encoded by prometheus-client).
pub type Exposition = Arc<dyn Fn() -> String + Send + Sync>;

/// The OpenMetrics text of `registry`: `# HELP` and `# TYPE` lines per
/// metric, `_total` counters, histogram buckets, ending in `# EOF`.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, registry);
    out
}

/// Serve the admin endpoint on `listener` until `shutdown`: `GET /metrics`
/// (`metrics()`), `GET /healthz`, `GET /readyz` (200 when `ready`, else
/// 503). HTTP/1.1 through hyper; each connection has 10 s.
pub async fn serve_admin(
    listener: TcpListener,
    metrics: Exposition,
    ready: Readiness,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let mut conns = tokio::task::JoinSet::new();
    loop {
        let tcp = tokio::select! {
            () = &mut shutdown => break,
            r = listener.accept() => match r {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    tracing::warn!("admin accept: {e}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
        };
        let (metrics, ready) = (metrics.clone(), ready.clone());
        conns.spawn(async move {
            let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let r = admin_response(&req, &*metrics, *ready.borrow());
                async move { Ok::<_, std::convert::Infallible>(r) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .keep_alive(false)
                .serve_connection(TokioIo::new(tcp), svc);
            let _ = tokio::time::timeout(Duration::from_secs(10), conn).await;
        });
    }
    conns.shutdown().await;
}

fn admin_response<B>(
    req: &Request<B>,
    metrics: &(dyn Fn() -> String + Send + Sync),
    ready: bool,
) -> Response<Full<Bytes>> {
    let text = |status: StatusCode, ctype: &'static str, body: String| {
        let mut r = Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = status;
        r.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static(ctype),
        );
        r
    };
    const PLAIN: &str = "text/plain; charset=utf-8";
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, PLAIN, "GET only\n".into());
    }
    match req.uri().path() {
        "/metrics" => text(
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            metrics(),
        ),
        "/healthz" => text(StatusCode::OK, PLAIN, "ok\n".into()),
        "/readyz" if ready => text(StatusCode::OK, PLAIN, "ready\n".into()),
        "/readyz" => text(StatusCode::SERVICE_UNAVAILABLE, PLAIN, "not ready\n".into()),
        _ => text(
            StatusCode::NOT_FOUND,
            PLAIN,
            "/metrics, /healthz or /readyz\n".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(path: &str) -> Request<()> {
        Request::get(path).body(()).unwrap_or_default()
    }

    #[test]
    fn admin_routes() {
        let m = || "# EOF\n".to_owned();
        assert_eq!(admin_response(&get("/metrics"), &m, false).status(), 200);
        assert_eq!(admin_response(&get("/healthz"), &m, false).status(), 200);
        assert_eq!(admin_response(&get("/readyz"), &m, true).status(), 200);
        assert_eq!(admin_response(&get("/readyz"), &m, false).status(), 503);
        assert_eq!(admin_response(&get("/"), &m, true).status(), 404);
        let post = Request::post("/metrics").body(()).unwrap_or_default();
        assert_eq!(admin_response(&post, &m, true).status(), 405);
    }
}
