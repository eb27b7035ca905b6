//! Plain TCP to origins: the `http://` pool's connector (hosts without a
//! zrtt key) and the connections of `CONNECT` tunnels.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::Uri;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::Resolve;
use crate::client::host_port;
use crate::error::{Error, Result};

/// Opens plain TCP connections to origins (`http://` pool).
#[derive(Clone)]
pub(super) struct PlainConnector {
    pub(super) resolver: Arc<dyn Resolve>,
    pub(super) timeout: Duration,
    /// The proxy's own address: requests to it would loop.
    pub(super) own: SocketAddr,
}

type ConnectFuture<T> = Pin<Box<dyn Future<Output = Result<T>> + Send>>;

/// Resolve `host` and connect to it within `timeout`, with `TCP_NODELAY`.
pub(super) async fn connect_tcp(
    resolver: &dyn Resolve,
    host: &str,
    port: u16,
    timeout: Duration,
) -> Result<TcpStream> {
    let fut = resolver.resolve(host, port);
    let tcp = tokio::time::timeout(timeout, async move {
        let addr = fut.await.map_err(Error::io("resolving the origin"))?;
        TcpStream::connect(addr)
            .await
            .map_err(Error::io("connecting to the origin"))
    })
    .await
    .map_err(|_| Error::Timeout("connecting to the origin"))??;
    tcp.set_nodelay(true).map_err(Error::io("TCP_NODELAY"))?;
    Ok(tcp)
}

impl tower_service::Service<Uri> for PlainConnector {
    type Response = TokioIo<TcpStream>;
    type Error = Error;
    type Future = ConnectFuture<Self::Response>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let (host, port) = host_port(&uri, 80)?;
            let tcp = connect_tcp(this.resolver.as_ref(), &host, port, this.timeout).await?;
            if tcp.peer_addr().ok() == Some(this.own) {
                return Err(Error::Config("the request loops back to the proxy".into()));
            }
            Ok(TokioIo::new(tcp))
        })
    }
}
