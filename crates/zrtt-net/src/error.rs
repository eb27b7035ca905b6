//! The crate's error type.

use std::io;

/// Errors of the zrtt transport.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A socket operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The zrtt core refused something (a record, a frame, a handshake).
    #[error("zrtt: {0}")]
    Proto(#[from] zrtt_proto::Error),
    /// TLS failed (configuration or handshake).
    #[error("tls: {0}")]
    Tls(#[from] rustls::Error),
    /// A peer sent bytes that are not what the protocol allows.
    #[error("protocol violation: {0}")]
    Protocol(&'static str),
    /// A bounded wait ran out.
    #[error("timed out: {0}")]
    Timeout(&'static str),
    /// The TCP handshake did not complete in time (gating).
    #[error("TCP handshake did not complete within {0:?}")]
    HandshakeIncomplete(std::time::Duration),
    /// The peer closed or reset the connection without an answer.
    #[error("connection closed by peer without an answer")]
    NoAnswer,
    /// Invalid configuration or arguments.
    #[error("configuration: {0}")]
    Config(String),
}

impl Error {
    pub(crate) fn io(context: &'static str) -> impl FnOnce(io::Error) -> Error {
        move |source| Error::Io { context, source }
    }
}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        match e {
            Error::Io { source, .. } => source,
            Error::Timeout(_) | Error::HandshakeIncomplete(_) => {
                io::Error::new(io::ErrorKind::TimedOut, e)
            }
            Error::NoAnswer => io::Error::new(io::ErrorKind::ConnectionAborted, e),
            other => io::Error::other(other),
        }
    }
}

/// Result with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
