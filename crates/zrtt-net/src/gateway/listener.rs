//! The accept loop and the dispatch on a connection's first byte.

use std::future::Future;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use zrtt_proto::admission::Admission;
use zrtt_proto::handshake::FRAME_FIRST_FLIGHT;

use super::{first_flight, lock, tls, Backend, GatewayConfig, Metrics, Shared};
use crate::error::{Error, Result};
use crate::tfo;

/// A bound gateway; [`Gateway::run`] serves it.
pub struct Gateway {
    /// One or more sockets on the same address (`SO_REUSEPORT`), each with
    /// its own accept loop.
    listeners: Vec<TcpListener>,
    shared: Arc<Shared>,
    fast_open: bool,
    /// The SDNS's sockets (`ShortcutConfig::sdns`), served by `run`.
    sdns: Vec<super::sdns::SdnsSocket>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("local_addr", &self.local_addr().ok())
            .field("listeners", &self.listeners.len())
            .field("fast_open", &self.fast_open)
            .finish_non_exhaustive()
    }
}

impl Gateway {
    /// Bind `addr` (port 0 for any) with a Fast Open listener.
    pub fn bind(addr: SocketAddr, cfg: GatewayConfig) -> Result<Self> {
        cfg.admission.check().map_err(Error::Config)?;
        let (listeners, fast_open) = tfo::bind_listeners(addr, cfg.listen)?;
        Self::serve_on(listeners, fast_open, cfg)
    }

    /// Serve on listening sockets another process handed over (docs/GATEWAY.md,
    /// Restart without a blackout): the same kernel sockets, so their
    /// queues, Fast Open settings and address carry over and no SYN meets a
    /// closed port. Each must be a listening TCP socket on one address.
    pub fn from_listeners(
        listeners: Vec<std::net::TcpListener>,
        cfg: GatewayConfig,
    ) -> Result<Self> {
        cfg.admission.check().map_err(Error::Config)?;
        if listeners.is_empty() {
            return Err(Error::Config("no listening socket handed over".into()));
        }
        let mut fast_open = true;
        let mut out = Vec::with_capacity(listeners.len());
        let mut at = None;
        for l in listeners {
            let addr = l.local_addr().map_err(Error::io("local address"))?;
            if at.is_some_and(|a| a != addr) {
                return Err(Error::Config(format!(
                    "handed-over sockets listen on {} and {addr}",
                    at.unwrap_or(addr)
                )));
            }
            at = Some(addr);
            fast_open &=
                crate::sys::get_tcp_int(l.as_fd(), crate::sys::TCP_FASTOPEN).is_ok_and(|q| q > 0);
            l.set_nonblocking(true).map_err(Error::io("O_NONBLOCK"))?;
            out.push(TcpListener::from_std(l).map_err(Error::io("registering listener"))?);
        }
        Self::serve_on(out, fast_open, cfg)
    }

    fn serve_on(listeners: Vec<TcpListener>, fast_open: bool, cfg: GatewayConfig) -> Result<Self> {
        if fast_open && tfo::fast_open_sysctl().is_some_and(|v| v & 2 == 0) {
            tracing::warn!(
                "net.ipv4.tcp_fastopen lacks bit 0x2: SYN data will be ignored \
                 (set it to 3 in this network namespace)"
            );
        }
        let sites = super::sites::Sites::new(
            super::Site {
                names: cfg.server_names.clone(),
                backends: cfg.backends.clone(),
                health: None,
            },
            &cfg.sites,
        );
        if let Some(s) = sites.all().iter().find(|s| s.backends.is_empty()) {
            return Err(Error::Config(format!("site {} has no backend", s.label())));
        }
        let mut files = Vec::new();
        for s in sites.all() {
            let roots: Vec<_> = s.backends.iter().filter_map(Backend::files).collect();
            files.push(match roots[..] {
                [] => None,
                [root] if s.backends.len() == 1 => {
                    Some(super::static_files::StaticFiles::new(root).map_err(|e| {
                        Error::Config(format!("site {}: {}: {e}", s.label(), root.dir.display()))
                    })?)
                }
                _ => {
                    return Err(Error::Config(format!(
                        "site {}: a directory is its only backend",
                        s.label()
                    )))
                }
            });
        }
        cfg.tls_sessions.attach(
            cfg.admission.tokens.clone(),
            cfg.replay_store.clone(),
            cfg.clock,
            cfg.rng.clone(),
        );
        let sdns = cfg
            .shortcut
            .sdns
            .iter()
            .map(|a| super::sdns::bind(*a))
            .collect::<Result<Vec<_>>>()?;
        let glue = sdns
            .iter()
            .filter_map(|s| s.udp.local_addr().ok())
            .map(|a| a.ip())
            .collect();
        let metrics = Arc::new(Metrics::default());
        let timeouts = super::pool::PoolTimeouts {
            connect: cfg.timeouts.backend_connect,
            response: cfg.timeouts.backend_response,
        };
        let pools = sites
            .all()
            .iter()
            .enumerate()
            .map(|(i, s)| {
                Arc::new(super::pool::Pool::new(
                    i,
                    s.label(),
                    &s.backends,
                    s.health.as_ref().unwrap_or(&cfg.backend_health),
                    timeouts,
                    &metrics.backends,
                ))
            })
            .collect();
        // Resumption tickets are sealed with keys derived from the token
        // keys (docs/PROTOCOL.md §12.2); a key refresh keeps this setting.
        cfg.keys
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .resumption = cfg.admission.tokens.clone().filter(|_| cfg.resumption);
        let window = lock(&cfg.replay).window();
        let shared = Arc::new(Shared {
            shortcuts: super::shortcut::Shortcuts::new(&cfg.shortcut, glue, window),
            admission: Arc::new(Admission::new(cfg.admission.clone(), Instant::now())),
            sites,
            cfg,
            metrics,
            pools,
            files,
            active: AtomicUsize::new(0),
            peak_active: AtomicUsize::new(0),
            shutdown: tokio::sync::watch::Sender::new(false),
            paused: tokio::sync::watch::Sender::new(false),
        });
        Ok(Self {
            listeners,
            shared,
            fast_open,
            sdns,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.listeners[0]
            .local_addr()
            .map_err(Error::io("local address"))
    }

    /// The SDNS's bound addresses (UDP and TCP share each port).
    pub fn sdns_addrs(&self) -> Vec<SocketAddr> {
        self.sdns
            .iter()
            .filter_map(|s| s.udp.local_addr().ok())
            .collect()
    }

    /// Whether the listener accepted the Fast Open options.
    pub fn fast_open(&self) -> bool {
        self.fast_open
    }

    /// The gateway's counters.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.shared.metrics.clone()
    }

    /// The listening sockets, to hand over to a successor process (which
    /// gets its own descriptors of the same sockets).
    pub fn listening_fds(&self) -> Vec<std::os::fd::BorrowedFd<'_>> {
        self.listeners.iter().map(AsFd::as_fd).collect()
    }

    /// Duplicates of the listening sockets' descriptors (for a hand-over
    /// served while the gateway runs).
    pub fn dup_listening_fds(&self) -> Result<Vec<std::os::fd::OwnedFd>> {
        self.listeners
            .iter()
            .map(|l| l.as_fd().try_clone_to_owned().map_err(Error::io("dup")))
            .collect()
    }

    /// Stops and restarts accepting without closing the listening sockets.
    pub fn accept_control(&self) -> AcceptControl {
        AcceptControl(self.shared.clone())
    }

    /// Serve until `shutdown` resolves, then give open connections
    /// `timeouts.shutdown_grace` to finish and abort the rest. Each
    /// listening socket has its own accept loop (a task the runtime can
    /// run on any worker thread).
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<()> {
        if let Some(store) = &self.shared.cfg.replay_store {
            store.connect();
        }
        let mut checks = JoinSet::new();
        for pool in &self.shared.pools {
            if let Some(check) = pool.active_check() {
                checks.spawn(pool.clone().run_checks(check));
            }
        }
        let mut loops = JoinSet::new();
        for listener in self.listeners {
            loops.spawn(accept_loop(listener, self.shared.clone()));
        }
        for sock in self.sdns {
            loops.spawn(super::sdns::serve(self.shared.clone(), sock));
        }
        checks.spawn(super::trim::run(self.shared.clone()));
        shutdown.await;
        self.shared.shutdown.send_replace(true);
        while loops.join_next().await.is_some() {}
        checks.shutdown().await;
        Ok(())
    }
}

/// Pauses a running gateway's accept loops: while paused, new connections
/// wait in the kernel's queues of the listening sockets (which stay open),
/// and connections already accepted are served as before.
#[derive(Clone)]
pub struct AcceptControl(Arc<Shared>);

impl std::fmt::Debug for AcceptControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AcceptControl")
            .field("paused", &*self.0.paused.borrow())
            .finish()
    }
}

impl AcceptControl {
    /// Stop calling `accept` (at once for loops waiting in it).
    pub fn pause(&self) {
        self.0.paused.send_replace(true);
    }

    /// Accept again.
    pub fn resume(&self) {
        self.0.paused.send_replace(false);
    }
}

/// Accepts on one socket until shutdown, then closes it and gives its
/// connections the grace period. While paused, does not accept.
async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut tasks = JoinSet::new();
    let mut stop = shared.shutdown.subscribe();
    let mut paused = shared.paused.subscribe();
    loop {
        let pause = *paused.borrow_and_update();
        tokio::select! {
            () = async { let _ = stop.wait_for(|s| *s).await; } => break,
            _ = paused.changed() => {}
            r = listener.accept(), if !pause => match r {
                Ok((tcp, peer)) => {
                    let shared = shared.clone();
                    // No total cut: each phase has its bound, and a
                    // served connection ends when nothing moves (idle.rs).
                    tasks.spawn(handle(shared, tcp, peer));
                }
                Err(e) => {
                    tracing::warn!("accept: {e}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            },
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
    drop(listener);
    let grace = shared.cfg.timeouts.shutdown_grace;
    let _ = tokio::time::timeout(grace, async { while tasks.join_next().await.is_some() {} }).await;
    tasks.shutdown().await;
}

/// A connection's place in its source's count (docs/GATEWAY.md): taken
/// only once the source is real, that is once the TCP handshake completed
/// or the address is proven, so spoofed SYNs cannot use up an address's
/// places; until then connections are bounded by the Fast Open queue and
/// the first-flight and gate timeouts. Given back when dropped.
pub(super) struct SourceSlot {
    admission: Arc<Admission>,
    peer: std::net::IpAddr,
    claimed: std::sync::atomic::AtomicBool,
}

impl SourceSlot {
    fn new(admission: Arc<Admission>, peer: std::net::IpAddr) -> Self {
        Self {
            admission,
            peer,
            claimed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Take the place (once); false if the source is at its cap.
    pub(super) fn claim(&self) -> bool {
        if self.claimed.load(Ordering::Acquire) {
            return true;
        }
        let ok = self.admission.open_connection(self.peer);
        if ok {
            self.claimed.store(true, Ordering::Release);
        }
        ok
    }
}

impl Drop for SourceSlot {
    fn drop(&mut self) {
        if self.claimed.load(Ordering::Acquire) {
            self.admission.close_connection(self.peer);
        }
    }
}

struct ActiveGuard<'a>(&'a AtomicUsize);

impl Drop for ActiveGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn handle(shared: Arc<Shared>, tcp: TcpStream, peer: SocketAddr) {
    let active = shared.active.fetch_add(1, Ordering::Relaxed) + 1;
    shared.peak_active.fetch_max(active, Ordering::Relaxed);
    let _guard = ActiveGuard(&shared.active);
    Metrics::inc(&shared.metrics.connections);
    let _ = tcp.set_nodelay(true);
    let slot = Arc::new(SourceSlot::new(shared.admission.clone(), peer.ip()));
    // A connection accepted after its handshake (no data in the SYN) is real now.
    let established =
        crate::sys::tcp_info(tcp.as_fd()).is_ok_and(|i| i.state == crate::sys::state::ESTABLISHED);
    if established && !slot.claim() {
        Metrics::inc(&shared.metrics.source_limited);
        return;
    }
    let mut first = [0u8; 1];
    match tokio::time::timeout(shared.cfg.timeouts.first_flight, tcp.peek(&mut first)).await {
        Ok(Ok(1)) => {}
        _ => return,
    }
    // One duplicate of the socket for the gate and the reset guard (the
    // fewer descriptors a pending connection holds, the larger a flood of
    // spoofed SYNs the process's descriptor limit absorbs).
    let gate_fd = match tcp.as_fd().try_clone_to_owned() {
        Ok(fd) => Arc::new(fd),
        Err(e) => {
            tracing::warn!("dup: {e}");
            return;
        }
    };
    let _reset = super::close::ResetIfUnanswered(gate_fd.clone());
    match first[0] {
        FRAME_FIRST_FLIGHT => {
            if let Err(e) = first_flight::serve(&shared, tcp, peer, gate_fd, active, slot).await {
                tracing::debug!("zrtt {peer}: {e}");
            }
        }
        0x14..=0x18 => {
            if active > shared.cfg.admission.limits.hard_max_connections {
                return;
            }
            tls::serve(&shared, tcp, peer, gate_fd, active, slot).await;
        }
        _ => Metrics::inc(&shared.metrics.other_refused),
    }
}
