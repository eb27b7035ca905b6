//! `--admin ADDR` of every long-running role: binds the address, prints
//! `admin ADDR` on stdout, serves `zrtt_net::admin` until stopped, and
//! holds the role's readiness.

use std::net::SocketAddr;

use anyhow::{Context, Result};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use zrtt_net::admin::Exposition;

/// A running admin endpoint (or none, without `--admin`).
pub struct Admin {
    ready: watch::Sender<bool>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
    /// A duplicate of the listening socket (a hand-over offers it).
    fd: Option<std::os::fd::OwnedFd>,
}

impl Admin {
    /// Bind `addr` and serve `metrics` there, not ready yet; `None` serves
    /// nothing. Must be called inside a tokio runtime.
    pub async fn start(addr: Option<SocketAddr>, metrics: Exposition) -> Result<Self> {
        Self::start_handed(addr, None, metrics).await
    }

    /// As [`Admin::start`], on `handed` (the listening socket a predecessor
    /// handed over) when it is bound to `addr` (any address for port 0).
    pub async fn start_handed(
        addr: Option<SocketAddr>,
        handed: Option<std::net::TcpListener>,
        metrics: Exposition,
    ) -> Result<Self> {
        let (ready, ready_rx) = watch::channel(false);
        let Some(addr) = addr else {
            return Ok(Self {
                ready,
                stop: None,
                task: None,
                fd: None,
            });
        };
        let handed = handed.filter(|l| {
            l.local_addr()
                .is_ok_and(|at| at == addr || addr.port() == 0)
        });
        let l = match handed {
            Some(l) => {
                l.set_nonblocking(true)?;
                tokio::net::TcpListener::from_std(l)?
            }
            None => tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding admin address {addr}"))?,
        };
        let fd = Some(std::os::fd::AsFd::as_fd(&l).try_clone_to_owned()?);
        println!("admin {}", l.local_addr()?);
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(zrtt_net::admin::serve_admin(
            l,
            metrics,
            ready_rx,
            async move {
                let _ = stopped.await;
            },
        ));
        Ok(Self {
            ready,
            stop: Some(stop),
            task: Some(task),
            fd,
        })
    }

    /// A duplicate of the listening socket, for a successor to take over
    /// (`zrtt gateway --handover`); `None` without `--admin`.
    pub fn take_fd(&mut self) -> Option<std::os::fd::OwnedFd> {
        self.fd.take()
    }

    /// `/readyz` answers 200 while `ready`, else 503.
    pub fn set_ready(&self, ready: bool) {
        self.ready.send_replace(ready);
    }

    /// The sender behind `/readyz`, for a role that says itself when it is
    /// ready.
    pub fn readiness(&self) -> watch::Sender<bool> {
        self.ready.clone()
    }

    /// Stop accepting on the admin socket (a successor serves it after a
    /// hand-over); [`Admin::stop`] then waits for the open connections.
    pub fn stop_accepting(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }

    /// Stop serving and wait for the endpoint's connections to end.
    pub async fn stop(mut self) {
        self.ready.send_replace(false);
        self.stop_accepting();
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }
}
