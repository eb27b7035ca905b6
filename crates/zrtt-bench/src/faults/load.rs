//! The request stream: idempotent GETs, each on a new connection through
//! the zrtt client library ([`ZrttStream`]: zrtt with Fast Open, its own
//! retries, TLS 1.3 fallback), from a few concurrent workers in one
//! current-thread runtime inside the client's namespace.
//!
//! A request that got no HTTP answer at all (refused, reset, timed out)
//! is sent again, up to `retries` times with a doubling pause, as an
//! application does with an idempotent GET; any HTTP answer (502 and 504
//! included) is final.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use zrtt_net::client::{ClientConfig, ConnInfo, Mode, Target, ZrttStream};

/// How each request is sent and retried (shared with `zrtt lab soak`).
#[derive(Clone, Debug)]
pub(crate) struct Attempts {
    pub(crate) host: String,
    pub(crate) addr: SocketAddr,
    /// Retries of a request that got no HTTP answer.
    pub(crate) retries: u32,
    /// Pause before the first retry (doubled for each next one).
    pub(crate) backoff: Duration,
    /// Bound on one attempt.
    pub(crate) attempt_timeout: Duration,
    /// The `User-Agent` of the requests.
    pub(crate) agent: &'static str,
    /// Retry an answer other than 200 too (a fleet's killed gateway), not
    /// only a request without any HTTP answer.
    pub(crate) retry_status: bool,
}

/// What the workers share.
pub(crate) struct Load {
    pub(crate) attempts: Attempts,
    pub(crate) requests: usize,
    pub(crate) concurrency: usize,
    /// Makes the client configuration of each request: a fresh one each
    /// time (a new client) or the same one (a client that keeps its state).
    pub(crate) client: Box<dyn Fn() -> Arc<ClientConfig> + Send + Sync>,
    /// Requests finished so far (the caller watches it).
    pub(crate) done: Arc<AtomicUsize>,
}

/// One request's fate.
#[derive(Clone, Debug, Default)]
pub(crate) struct Sample {
    /// From the first attempt's start to the whole answer.
    pub(crate) ms: f64,
    /// The final HTTP status, if any answer came.
    pub(crate) status: Option<u16>,
    /// Attempts made (1 + retries).
    pub(crate) attempts: u32,
    /// How the answering connection was made (`Mode::as_str`).
    pub(crate) mode: Option<&'static str>,
    /// Retries inside the client library on the answering connection:
    /// again without Fast Open, again with a refusal's fresh keys.
    pub(crate) inner_retries: u32,
    /// The answering connection was retried with the fresh keys a refusal
    /// carried (the client held a key the gateway no longer serves).
    pub(crate) fresh_keys: bool,
    /// Why the attempts without an answer failed.
    pub(crate) errors: Vec<String>,
}

impl Sample {
    pub(crate) fn tls_fallback(&self) -> bool {
        self.mode == Some(Mode::TlsFallback.as_str())
    }
    pub(crate) fn early(&self) -> bool {
        self.mode == Some(Mode::ZrttEarly.as_str())
    }
}

/// Runs the stream in the calling thread (which must be in the client's
/// namespace); samples in request order.
pub(crate) fn run(load: Load) -> Result<Vec<Sample>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    let load = Arc::new(load);
    local.block_on(&rt, async move {
        let next = Arc::new(AtomicUsize::new(0));
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..load.concurrency.clamp(1, load.requests.max(1)) {
            let (load, next) = (load.clone(), next.clone());
            tasks.spawn_local(async move {
                let mut out = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= load.requests {
                        return out;
                    }
                    let path = format!("/r/{i}");
                    out.push((i, request(&load.attempts, &*load.client, &path).await));
                    load.done.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
        let mut all = Vec::new();
        while let Some(r) = tasks.join_next().await {
            all.extend(r.map_err(|e| anyhow!("worker: {e}"))?);
        }
        all.sort_by_key(|(i, _)| *i);
        Ok(all.into_iter().map(|(_, s)| s).collect())
    })
}

/// One GET of `path` with its retries; `client` makes the client
/// configuration of each attempt.
pub(crate) async fn request<F>(load: &Attempts, client: &F, path: &str) -> Sample
where
    F: Fn() -> Arc<ClientConfig> + ?Sized,
{
    let t0 = Instant::now();
    let mut s = Sample::default();
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {}\r\nUser-Agent: {}\r\nAccept: */*\r\nConnection: close\r\n\r\n",
        load.host, load.agent
    );
    let mut pause = load.backoff;
    loop {
        s.attempts += 1;
        let target = Target {
            host: load.host.clone(),
            addr: load.addr,
        };
        let cfg = client();
        match tokio::time::timeout(load.attempt_timeout, attempt(cfg, target, req.as_bytes())).await
        {
            Ok(Ok((status, info))) => {
                s.status = Some(status);
                if let Some(info) = info {
                    s.mode = Some(info.mode.as_str());
                    s.inner_retries = inner_retries(&info);
                    s.fresh_keys = info.retried_with_fresh_keys;
                }
                if status == 200 || !load.retry_status {
                    break;
                }
                s.errors.push(format!("status {status}"));
            }
            Ok(Err(e)) => s.errors.push(format!("{e:#}")),
            Err(_) => s.errors.push(format!(
                "no answer within {} s",
                load.attempt_timeout.as_secs()
            )),
        }
        if s.attempts > load.retries {
            break;
        }
        tokio::time::sleep(pause).await;
        pause *= 2;
    }
    s.ms = t0.elapsed().as_secs_f64() * 1000.0;
    s
}

/// The client library's own retries on a connection: without Fast Open
/// after a SYN with data went unanswered, and with fresh keys after a
/// refusal carrying them.
pub(crate) fn inner_retries(info: &ConnInfo) -> u32 {
    let no_fo = info
        .notes
        .iter()
        .filter(|n| n.contains("retrying without Fast Open"))
        .count() as u32;
    no_fo + u32::from(info.retried_with_fresh_keys)
}

/// One connection: the request, then the whole answer. The status, and
/// how the connection was made.
pub(crate) async fn attempt(
    cfg: Arc<ClientConfig>,
    target: Target,
    req: &[u8],
) -> Result<(u16, Option<ConnInfo>)> {
    let mut s = ZrttStream::new(cfg, target);
    s.write_all(req).await?;
    s.flush().await?;
    let info = s.info().lock().ok().and_then(|i| (*i).clone());
    let status = read_answer(&mut s).await?;
    Ok((status, info))
}

/// Reads one HTTP/1.1 answer: its head, then its `Content-Length` body (to
/// the end of the stream without one). Returns the status.
async fn read_answer(c: &mut (impl AsyncRead + Unpin)) -> Result<u16> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut resp = httparse::Response::new(&mut headers);
        if let httparse::Status::Complete(head) = resp.parse(&buf)? {
            let status = resp.code.ok_or_else(|| anyhow!("no status"))?;
            let len: Option<usize> = resp
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse().ok());
            loop {
                if len.is_some_and(|l| buf.len() >= head + l) {
                    return Ok(status);
                }
                let n = c.read(&mut chunk).await?;
                if n == 0 {
                    if len.is_none() {
                        return Ok(status);
                    }
                    bail!("connection closed mid-body");
                }
                buf.extend_from_slice(&chunk[..n]);
            }
        }
        let n = c.read(&mut chunk).await?;
        if n == 0 {
            bail!("connection closed before the answer");
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reads_answers_with_and_without_length() {
        let mut a: &[u8] = b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 3\r\n\r\nbad";
        assert_eq!(read_answer(&mut a).await.unwrap(), 502);
        let mut b: &[u8] = b"HTTP/1.1 200 OK\r\n\r\nto the end";
        assert_eq!(read_answer(&mut b).await.unwrap(), 200);
        let mut c: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nshort";
        assert!(read_answer(&mut c)
            .await
            .unwrap_err()
            .to_string()
            .contains("mid-body"));
        let mut d: &[u8] = b"HTTP/1.1 20";
        assert!(read_answer(&mut d).await.is_err());
    }
}
