//! A site's backends: one is chosen per request, round robin over those
//! that take requests (health.rs), and a request whose connection failed
//! before any of it was sent goes to the next one.
//!
//! **Which retries are safe.** A request is sent again, to another backend,
//! only when its backend could not be reached: the connection failed (or
//! its PROXY header could not be written) and the body was never asked
//! for ([`RequestBody::started`]), so no byte of the request left the
//! gateway. A request that may have reached a backend (a reset after
//! sending, no response head in time) is never sent again: 502 or 504.
//! A request from early data keeps its `Early-Data: 1` on the next
//! backend: it reached none before, so this is its first delivery, and the
//! backend it reaches judges it as RFC 8470 asks (425 is handled in
//! relay.rs).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::body::Incoming;
use hyper::{Request, Response};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::time::Instant;

use super::backend::{self, Backend, BackendClient};
use super::body::RequestBody;
use super::health::{BackendHealth, HealthCheck, HealthState};
use super::metrics::{BackendLabels, BackendMetrics};
use super::{lock, proxy_header};

/// Why a request got no response from the site's backends.
#[derive(Debug)]
pub(super) enum Failure {
    /// Every backend is marked down (or failed to connect): 502.
    NoneHealthy,
    /// No response head within the backend timeout: 504.
    TimedOut,
    /// The backend failed after the request may have reached it: 502.
    Backend(String),
}

struct Member {
    backend: Backend,
    /// Pooled connections (not used for `proxy-v2+` backends).
    client: BackendClient,
    health: Mutex<HealthState>,
    up: Gauge,
    requests: Counter,
    connect_failures: Counter,
    check_failures: Counter,
}

/// A client connection's own connection to a `proxy-v2+` backend (its
/// PROXY header names that client), kept for its next requests: the site's
/// index, the backend's, and the connection.
pub(super) type ProxyConns = Mutex<Option<(usize, usize, backend::Sender)>>;

/// Time bounds of a pool.
#[derive(Clone, Copy, Debug)]
pub(super) struct PoolTimeouts {
    pub(super) connect: Duration,
    pub(super) response: Duration,
}

/// The backends of one site.
pub(super) struct Pool {
    /// The site's index among the gateway's sites.
    id: usize,
    /// The site's first name (`*` for a default site without names).
    site: String,
    members: Vec<Member>,
    next: AtomicUsize,
    health: BackendHealth,
    timeouts: PoolTimeouts,
}

impl Pool {
    pub(super) fn new(
        id: usize,
        site: &str,
        backends: &[Backend],
        health: &BackendHealth,
        timeouts: PoolTimeouts,
        metrics: &BackendMetrics,
    ) -> Self {
        let members = backends
            .iter()
            .map(|b| {
                let labels = BackendLabels {
                    site: site.to_owned(),
                    backend: b.to_string(),
                };
                let up = metrics.up.get_or_create(&labels).clone();
                up.set(1);
                Member {
                    backend: b.clone(),
                    client: backend::client(b, timeouts.connect),
                    health: Mutex::new(HealthState::new()),
                    up,
                    requests: metrics.requests.get_or_create(&labels).clone(),
                    connect_failures: metrics.connect_failures.get_or_create(&labels).clone(),
                    check_failures: metrics.check_failures.get_or_create(&labels).clone(),
                }
            })
            .collect();
        Self {
            id,
            site: site.to_owned(),
            members,
            next: AtomicUsize::new(0),
            health: health.clone(),
            timeouts,
        }
    }

    /// Whether any backend speaks h2c (an `Upgrade` needs HTTP/1.1).
    pub(super) fn any_h2c(&self) -> bool {
        self.members.iter().any(|m| m.backend.h2c)
    }

    /// The next backend taking requests after the last one chosen, not in
    /// `tried`.
    fn pick(&self, tried: &[usize], now: Instant) -> Option<usize> {
        let n = self.members.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..n).map(|k| (start + k) % n).find(|&i| {
            let m = &self.members[i];
            let available = lock(&m.health).available(now);
            m.up.set(i64::from(available));
            available && !tried.contains(&i)
        })
    }

    /// Send the request `build` makes (with the body handle it is given) to
    /// one of the backends, to the next one when a connection fails before
    /// anything was sent; `peer` and `local` are the client connection's
    /// addresses (for PROXY headers), `own` its connection to a `proxy-v2+`
    /// backend.
    pub(super) async fn send(
        &self,
        build: &(dyn Fn(RequestBody) -> Request<RequestBody> + Sync),
        body: &RequestBody,
        (peer, local): (SocketAddr, SocketAddr),
        own: &ProxyConns,
    ) -> Result<Response<Incoming>, Failure> {
        let mut tried = Vec::new();
        loop {
            let Some(i) = self.pick(&tried, Instant::now()) else {
                return Err(Failure::NoneHealthy);
            };
            tried.push(i);
            let m = &self.members[i];
            m.requests.inc();
            let mut req = build(body.clone());
            if m.backend.h2c {
                // To an h2c backend the host travels as :authority (the
                // URI's), and a Host field beside it is a duplicate some
                // servers refuse (nginx: 400).
                req.headers_mut().remove(hyper::header::HOST);
            }
            let attempt = async {
                if m.backend.proxy_v2 {
                    self.send_own(i, req, (peer, local), own, body).await
                } else {
                    m.client
                        .request(req)
                        .await
                        .map_err(|e| (e.is_connect(), e.to_string()))
                }
            };
            match tokio::time::timeout(self.timeouts.response, attempt).await {
                Err(_) => return Err(Failure::TimedOut),
                Ok(Ok(resp)) => {
                    lock(&m.health).handle_response();
                    return Ok(resp);
                }
                Ok(Err((connect, e))) => {
                    if !connect {
                        return Err(Failure::Backend(e));
                    }
                    m.connect_failures.inc();
                    // A lone backend is never marked down by failures (as
                    // in nginx): there is nothing else to send to, and the
                    // next request should find it back at once.
                    let lone = self.members.len() == 1;
                    if !lone && lock(&m.health).handle_connect_failure(Instant::now(), &self.health)
                    {
                        m.up.set(0);
                        tracing::warn!(
                            "backend {} of {} marked down for {:?}: {e}",
                            m.backend,
                            self.site,
                            self.health.fail_timeout
                        );
                    }
                    if body.started() {
                        return Err(Failure::Backend(e));
                    }
                    tracing::debug!("backend {}: {e}; trying another", m.backend);
                }
            }
        }
    }

    /// Send `req` to `proxy-v2+` backend `i` on the client connection's own
    /// connection to it: the one kept from its last request if it is ready,
    /// else a new one (and again on a new one if the kept one turns out
    /// closed before the request was written). Errors: (connect failure,
    /// why).
    async fn send_own(
        &self,
        i: usize,
        mut req: Request<RequestBody>,
        (peer, local): (SocketAddr, SocketAddr),
        own: &ProxyConns,
        body: &RequestBody,
    ) -> Result<Response<Incoming>, (bool, String)> {
        let m = &self.members[i];
        let mut kept = lock(own)
            .take()
            .filter(|(site, member, s)| *site == self.id && *member == i && s.is_ready())
            .map(|(_, _, s)| s);
        loop {
            let reused = kept.is_some();
            let mut sender = match kept.take() {
                Some(s) => s,
                None => {
                    let header = proxy_header::proxy(peer, local);
                    backend::open(&m.backend, self.timeouts.connect, Some(&header))
                        .await
                        .map_err(|e| (true, e.to_string()))?
                }
            };
            let (parts, b) = req.into_parts();
            let mut attempt = Request::from_parts(parts.clone(), b);
            if !sender.absolute_uri() {
                let path = attempt.uri().path_and_query().map_or("/", |p| p.as_str());
                if let Ok(u) = path.parse() {
                    *attempt.uri_mut() = u;
                }
            }
            match sender.send(attempt).await {
                Ok(resp) => {
                    *lock(own) = Some((self.id, i, sender));
                    return Ok(resp);
                }
                // The kept connection closed before the request was
                // written: nothing was sent, a new one may carry it.
                Err(e) if reused && e.is_canceled() && !body.started() => {
                    tracing::debug!("kept backend connection closed: {e}");
                    req = Request::from_parts(parts, body.clone());
                }
                Err(e) => return Err((false, e.to_string())),
            }
        }
    }

    /// The pool's active check, if its site has one.
    pub(super) fn active_check(&self) -> Option<HealthCheck> {
        self.health.check.clone()
    }

    /// Run `check` on every backend of the pool, each every `interval`,
    /// until dropped (the gateway's shutdown aborts it).
    pub(super) async fn run_checks(self: Arc<Self>, check: HealthCheck) {
        let mut tasks = tokio::task::JoinSet::new();
        // A directory (static_files.rs) is not checked.
        for i in (0..self.members.len()).filter(|&i| self.members[i].backend.files().is_none()) {
            let (pool, check) = (self.clone(), check.clone());
            tasks.spawn(async move {
                let mut tick = tokio::time::interval(check.interval);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    pool.check(i, &check).await;
                }
            });
        }
        while tasks.join_next().await.is_some() {}
    }

    async fn check(&self, i: usize, check: &HealthCheck) {
        let m = &self.members[i];
        let probe = async {
            let header = m.backend.proxy_v2.then(proxy_header::local);
            let mut sender = backend::open(&m.backend, check.timeout, header.as_deref())
                .await
                .map_err(|e| e.to_string())?;
            let host = if self.site == "*" {
                "localhost"
            } else {
                &self.site
            };
            let uri = if sender.absolute_uri() {
                format!("http://{host}{}", check.path)
            } else {
                check.path.clone()
            };
            let mut req = Request::get(uri)
                .header(hyper::header::USER_AGENT, "zrtt-gateway-check")
                .body(RequestBody::empty())
                .map_err(|e| e.to_string())?;
            if !sender.absolute_uri() {
                if let Ok(v) = hyper::header::HeaderValue::from_str(host) {
                    req.headers_mut().insert(hyper::header::HOST, v);
                }
            }
            let resp = sender.send(req).await.map_err(|e| e.to_string())?;
            let status = resp.status();
            if status.is_success() || status.is_redirection() {
                Ok(())
            } else {
                Err(format!("status {status}"))
            }
        };
        let result = match tokio::time::timeout(check.timeout, probe).await {
            Ok(r) => r,
            Err(_) => Err(format!("no answer within {:?}", check.timeout)),
        };
        if result.is_err() {
            m.check_failures.inc();
        }
        let changed = lock(&m.health).handle_check(result.is_ok(), check);
        let available = lock(&m.health).available(Instant::now());
        m.up.set(i64::from(available));
        match (changed, result) {
            (Some(true), _) => tracing::info!("backend {} of {} is up", m.backend, self.site),
            (Some(false), Err(e)) => {
                tracing::warn!("backend {} of {} is down: {e}", m.backend, self.site);
            }
            _ => {}
        }
    }
}
