//! The proxy's errors.

use std::fmt;

/// What went wrong starting or running the proxy. Never carries key bytes
/// or record contents.
#[derive(Debug)]
#[non_exhaustive]
pub enum ProxyError {
    /// The configuration (or a keyset it names) is unusable.
    Config(String),
    /// A listener could not be bound.
    Bind {
        /// The address.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// Another I/O failure.
    Io(std::io::Error),
}

impl fmt::Display for ProxyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProxyError::Config(what) => write!(f, "configuration: {what}"),
            ProxyError::Bind { addr, source } => write!(f, "listening on {addr}: {source}"),
            ProxyError::Io(e) => write!(f, "i/o: {e}"),
        }
    }
}

impl std::error::Error for ProxyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ProxyError::Bind { source, .. } => Some(source),
            ProxyError::Io(e) => Some(e),
            ProxyError::Config(_) => None,
        }
    }
}

impl From<std::io::Error> for ProxyError {
    fn from(e: std::io::Error) -> Self {
        ProxyError::Io(e)
    }
}
