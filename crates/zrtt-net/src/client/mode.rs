//! [`Mode`]: how a connection (or a request answered without one) ended up.

/// How a connection ended up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mode {
    /// zrtt, answered before the TCP handshake completed (about 1 RTT).
    ZrttEarly,
    /// zrtt, answered after the TCP handshake completed (about 2 RTT).
    ZrttGated,
    /// TLS 1.3 on the same port.
    TlsFallback,
    /// The DNS shortcut: the response came inside the DNS answer
    /// (docs/DNS.md §8); no connection to the site was made.
    DnsShortcut,
    /// The DNS shortcut's answer was too large for DNS: the same flight
    /// went to the site over TCP (Fast Open) and the prepared answer came
    /// back on that connection.
    ShortcutFetch,
}

impl Mode {
    /// Short name as `zrtt get -w %{zrtt_mode}` prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::ZrttEarly => "0rtt-early",
            Mode::ZrttGated => "0rtt-gated",
            Mode::TlsFallback => "tls-fallback",
            Mode::DnsShortcut => "dns-shortcut",
            Mode::ShortcutFetch => "shortcut-fetch",
        }
    }
}
