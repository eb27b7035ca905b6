//! The Reply timer (docs/PROTOCOL.md §4.3): a zrtt connection serving an
//! early request sends its Reply with the first response bytes, but no
//! later than [`REPLY_BOUND`] after it may speak (the client's ACK for an
//! unproven address, at once for a proven one), with whatever it has then,
//! possibly nothing; the response follows in transport records.
//!
//! Why: a client whose raced TLS handshake completed while the server holds
//! its flight cannot tell a slow backend from a path that drops zrtt's
//! bytes after the SYN (a TLS-only middlebox). With the bound, a Reply that
//! has not come a few round trips after it was due means the path, and the
//! client uses its TLS connection at once (`client/reply_wait.rs`); a slow
//! backend behind a healthy path still answers over zrtt, once.
//!
//! Nothing else changes: the Reply to an unproven address still waits for
//! the handshake ([`Gate::wait_to_send`]), one to a proven address still
//! has to fit its budget (`early_answer.rs`), and early data is forwarded
//! exactly as before.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::early_answer::EarlyCtl;
use super::gate::Gate;
use crate::reply_bound::REPLY_BOUND;

/// Wait until the server may speak, then `bound`, then have the Reply sent
/// (a no-op if it left already). `false` if the handshake never completed
/// (nothing may be sent; the relay gives up on its own).
pub(super) async fn release_within(gate: &Gate, ctl: &EarlyCtl, bound: Duration) -> bool {
    if gate.wait_to_send().await.is_err() {
        return false;
    }
    tokio::time::sleep(bound).await;
    ctl.release_reply();
    true
}

/// Run `serve` (the relay of one zrtt connection) with the Reply timer when
/// an early request is being answered (`timer`). The timer runs inside the
/// connection's own task and ends with it.
pub(super) async fn serve_bounded(
    timer: Option<(Arc<Gate>, Arc<EarlyCtl>)>,
    serve: impl Future<Output = ()>,
) {
    let Some((gate, ctl)) = timer else {
        return serve.await;
    };
    tokio::pin!(serve);
    tokio::select! {
        biased;
        () = &mut serve => return,
        _ = release_within(&gate, &ctl, REPLY_BOUND) => {}
    }
    drop((gate, ctl));
    serve.await;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use std::os::fd::AsFd;

    use tokio::io::AsyncReadExt;
    use tokio::net::{TcpListener, TcpStream};
    use zrtt_proto::handshake::{read_frame, Expect, Frame};

    use super::super::early_answer::{tests::accepted, EarlyAnswer, EarlyUse};
    use super::super::Metrics;
    use super::*;

    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        (client, listener.accept().await.unwrap().0)
    }

    #[tokio::test(start_paused = true)]
    async fn the_timer_releases_the_reply_the_bound_after_the_handshake() {
        // Loopback: the handshake is complete, so the server may speak now
        // and the Reply is released exactly REPLY_BOUND later (paused clock).
        let (_client, server) = pair().await;
        let fd = Arc::new(server.as_fd().try_clone_to_owned().unwrap());
        let gate = Gate::new(fd, false, Duration::from_secs(3)).unwrap();
        let ctl = EarlyCtl::default();
        let t = tokio::time::Instant::now();
        assert!(release_within(&gate, &ctl, REPLY_BOUND).await);
        assert_eq!(t.elapsed(), REPLY_BOUND);
    }

    #[tokio::test]
    async fn an_early_request_without_response_gets_an_empty_reply_at_the_bound() {
        let (mut client, server) = pair().await;
        let fd = Arc::new(server.as_fd().try_clone_to_owned().unwrap());
        let gate = Arc::new(Gate::new(fd, false, Duration::from_secs(3)).unwrap());
        let ctl = Arc::new(EarlyCtl::default());
        let mut answer = EarlyAnswer::new(
            server,
            accepted(),
            Vec::new(),
            gate.clone(),
            Arc::new(Metrics::default()),
            (None, zrtt_proto::handshake::Extensions::new()),
            None,
            EarlyUse::Serve,
            ctl.clone(),
            Duration::from_secs(5),
            None,
        );
        // hyper's part: the early request, then reading on while the
        // backend works (it never answers here).
        let mut req = [0u8; 256];
        let n = answer.read(&mut req).await.unwrap();
        assert!(req[..n].starts_with(b"GET / "));
        let reader = tokio::spawn(async move {
            let mut b = [0u8; 64];
            let r = answer.read(&mut b).await;
            (r.map(|_| ()), answer)
        });
        tokio::task::yield_now().await;
        let mut probe = [0u8; 1];
        assert_eq!(
            client.try_read(&mut probe).unwrap_err().kind(),
            std::io::ErrorKind::WouldBlock,
            "nothing before the timer"
        );
        assert!(release_within(&gate, &ctl, REPLY_BOUND).await);
        let mut got = Vec::new();
        let used = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                if let Some((_, used)) = read_frame(&got, Expect::ReplyOrReject).unwrap() {
                    return used;
                }
                let mut chunk = [0u8; 512];
                let n = client.read(&mut chunk).await.unwrap();
                assert!(n > 0, "closed before the Reply");
                got.extend_from_slice(&chunk[..n]);
            }
        })
        .await
        .expect("no Reply after the bound");
        let (frame, _) = read_frame(&got, Expect::ReplyOrReject).unwrap().unwrap();
        assert!(matches!(frame, Frame::Reply { .. }), "{frame:?}");
        // 0xD8, u16 length, e (32), AEAD(u16 extensions length = 0) (2 + 16):
        // no response bytes.
        assert_eq!(used, 3 + 32 + 2 + 16);
        reader.abort();
    }
}
