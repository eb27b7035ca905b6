//! [`establish_when_keys`]: the address is known, the key records are still
//! on their way. TLS starts at once; whichever is ready first carries the
//! request: the keys (→ zrtt, the TLS handshake is dropped before any
//! request was written on it) or the TLS handshake (→ TLS, and the key
//! lookup goes on in the background so the next connection has them).
//!
//! Why: a QNAME-minimising resolver (unbound's default) answers the HTTPS
//! and TLSA records of a name it has not seen one resolver-to-authoritative
//! round trip after the A record (docs/DNS.md §6a). Waiting for them made a
//! cold first contact to a nearby server slower than TLS 1.3 (ztls lab,
//! Seoul cold, +32 ms). Racing bounds that cost by the TLS handshake: a
//! zrtt client is never slower than a TLS client because of the key lookup.
//!
//! The request is written on exactly one connection: the TLS connection is
//! only handshaken (no application data) when the keys win, so nothing the
//! server executes is sent twice. The cost is a TLS handshake the server
//! does for nothing, once per cold key lookup.

use std::time::{Duration, Instant};

use super::config::ClientConfig;
use super::connect::{establish_as, tls_handshake, tls_send, AppProtocol, Conn, ConnInfo, Target};
use super::keys::PrefetchFuture;
use crate::error::Result;

/// How long after the address the TLS handshake raced beside key records
/// still coming holds its ClientHello (RFC 8305's "Resolution Delay" idea,
/// far shorter than its 50 ms). The TLS connection's TCP handshake starts
/// at once, so on any path whose RTT is at least this the race loses no
/// time to it (a client is never slower than a TLS client because of the
/// key lookup); keys that come before the TCP handshake completed (one
/// server answering four parallel queries: microseconds behind) drop that
/// connection in SYN-SENT, which costs the server one SYN-ACK answered by
/// a reset and no TLS work; keys that come after the TCP handshake but
/// within this close a connection that carried nothing. Keys a minimising
/// resolver fetches a round trip later meet a TLS handshake under way.
pub const KEY_RACE_GRACE: Duration = Duration::from_millis(2);

/// Connect to `target` (its address already resolved) and send `request`,
/// while `keys` (typically [`KeySource::prefetch`](super::KeySource::prefetch)
/// or the rest of a DNS resolution) is still fetching the host's key
/// records. See the module docs. Without TLS fallback this waits for
/// `keys` and then runs [`establish`](super::establish).
pub async fn establish_when_keys(
    cfg: &ClientConfig,
    target: &Target,
    request: &[u8],
    keys: PrefetchFuture,
) -> Result<(Conn, ConnInfo)> {
    establish_when_keys_as(cfg, target, AppProtocol::Http1, request, keys).await
}

/// [`establish_when_keys`] for `protocol` (`request`: its bytes, for
/// HTTP/2 the connection preface and the requests' frames written so far).
pub async fn establish_when_keys_as(
    cfg: &ClientConfig,
    target: &Target,
    protocol: AppProtocol,
    request: &[u8],
    keys: PrefetchFuture,
) -> Result<(Conn, ConnInfo)> {
    let establish = |cfg, target, request| establish_as(cfg, target, protocol, request);
    if !cfg.tls_fallback {
        keys.await;
        return establish(cfg, target, request).await;
    }
    let t0 = Instant::now();
    let mut keys = keys;
    let tls = tls_handshake(cfg, target, protocol, t0, Some(t0 + KEY_RACE_GRACE));
    tokio::pin!(tls);
    tokio::select! {
        biased;
        () = &mut keys => {
            let waited = t0.elapsed();
            if cfg.keys.lookup(&target.host, (cfg.clock)()).is_some() {
                // Dropping `tls` closes a connection that carried no request.
                let (conn, mut info) = establish(cfg, target, request).await?;
                info.notes.insert(0, format!(
                    "key records came {} ms after the address, before the TLS \
                     handshake started beside them finished: zrtt (that TLS \
                     connection closed unused)",
                    waited.as_millis()
                ));
                Ok((conn, info))
            } else {
                let (conn, mut info) = tls_send(tls.await?, protocol, request).await?;
                info.notes.insert(0, format!(
                    "no usable key record after {} ms: TLS",
                    waited.as_millis()
                ));
                Ok((conn, info))
            }
        }
        t = &mut tls => match t {
            Ok(ready) => {
                let waited = t0.elapsed();
                // The lookup goes on, so the next connection finds the keys.
                tokio::spawn(keys);
                let (conn, mut info) = tls_send(ready, protocol, request).await?;
                info.notes.insert(0, format!(
                    "TLS handshake done {} ms after the address, before the key \
                     records came: TLS (the lookup goes on for later connections)",
                    waited.as_millis()
                ));
                Ok((conn, info))
            }
            Err(e) => {
                tracing::debug!("TLS beside the key lookup failed: {e}");
                keys.await;
                establish(cfg, target, request).await
            }
        },
    }
}
