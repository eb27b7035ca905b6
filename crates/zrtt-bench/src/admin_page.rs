//! Reading an admin endpoint's `/metrics` page (a gateway's or a proxy's,
//! OpenMetrics text) from inside a lab host: one HTTP/1.0 GET with a
//! bounded connect and read, the page returned whole (head included; the
//! parsers skip what is not a sample).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{Context, Result};
use zrtt_lab::Lab;

/// Longest wait for the connection, and for the page once connected.
const CONNECT: Duration = Duration::from_secs(2);
const READ: Duration = Duration::from_secs(5);

/// The `/metrics` page at `addr`, fetched inside `host`'s namespace.
pub(crate) fn fetch(lab: &Lab, host: &str, addr: SocketAddr) -> Result<String> {
    lab.in_host(host, || -> std::io::Result<String> {
        let mut c = TcpStream::connect_timeout(&addr, CONNECT)?;
        c.set_read_timeout(Some(READ))?;
        c.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
        let mut s = String::new();
        c.read_to_string(&mut s)?;
        Ok(s)
    })?
    .with_context(|| format!("reading {addr}/metrics in {host}"))
}
