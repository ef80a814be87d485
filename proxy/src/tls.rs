//! TLS with rustls (the ring provider): the listeners present a
//! certificate chain and its key from PEM files; the connections to the
//! brokers trust the CAs of a PEM file.

use std::path::Path;
use std::sync::Arc;

use tokio_rustls::rustls::crypto::ring::default_provider;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::config::{ListenerTls, UpstreamTls};
use crate::error::ProxyError;

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, ProxyError> {
    let fail =
        |what: String| ProxyError::Config(format!("the certificates {}: {what}", path.display()));
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| fail(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fail(e.to_string()))?;
    if certs.is_empty() {
        return Err(fail("no certificate in the file".into()));
    }
    Ok(certs)
}

/// The acceptor of the listeners: the chain of `cert_file` and the key of
/// `key_file` (PKCS#8, PKCS#1 or SEC1 PEM).
///
/// # Errors
/// [`ProxyError::Config`] naming the file that does not load (never with
/// key bytes), or when the key does not fit the certificate.
pub(crate) fn acceptor(tls: &ListenerTls) -> Result<TlsAcceptor, ProxyError> {
    let chain = certs(&tls.cert_file)?;
    let key = PrivateKeyDer::from_pem_file(&tls.key_file).map_err(|e| {
        ProxyError::Config(format!("the private key {}: {e}", tls.key_file.display()))
    })?;
    let config = ServerConfig::builder_with_provider(Arc::new(default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| ProxyError::Config(format!("TLS: {e}")))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| {
            ProxyError::Config(format!(
                "the certificate {} and key {}: {e}",
                tls.cert_file.display(),
                tls.key_file.display()
            ))
        })?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// The connector to the brokers: trusts the CAs of `ca_file` only.
///
/// # Errors
/// [`ProxyError::Config`] when the file does not load or holds no usable
/// CA certificate.
pub(crate) fn connector(tls: &UpstreamTls) -> Result<TlsConnector, ProxyError> {
    let mut roots = RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(certs(&tls.ca_file)?);
    if added == 0 {
        return Err(ProxyError::Config(format!(
            "the CA file {}: no usable certificate",
            tls.ca_file.display()
        )));
    }
    let config = ClientConfig::builder_with_provider(Arc::new(default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| ProxyError::Config(format!("TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(TlsConnector::from(Arc::new(config)))
}

/// The name a broker's certificate must hold: `configured`, else the host
/// of `addr` (`host:port`; an IP address is checked against the
/// certificate's IP addresses).
///
/// # Errors
/// A reason when the name is neither a DNS name nor an IP address.
pub(crate) fn server_name(
    addr: &str,
    configured: Option<&str>,
) -> Result<ServerName<'static>, String> {
    let host = match configured {
        Some(name) => name,
        None => {
            let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
            host.trim_start_matches('[').trim_end_matches(']')
        }
    };
    ServerName::try_from(host.to_owned())
        .map_err(|e| format!("{host:?} is not a name a certificate can hold: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names_from_broker_addresses() {
        assert!(matches!(
            server_name("127.0.0.1:9092", None),
            Ok(ServerName::IpAddress(_))
        ));
        assert!(matches!(
            server_name("[::1]:9092", None),
            Ok(ServerName::IpAddress(_))
        ));
        assert!(matches!(
            server_name("broker-1.example:9093", None),
            Ok(ServerName::DnsName(_))
        ));
        assert!(matches!(
            server_name("127.0.0.1:9092", Some("kafka.internal")),
            Ok(ServerName::DnsName(_))
        ));
        assert!(server_name("bad name:1", None).is_err());
    }

    #[test]
    fn a_missing_or_wrong_file_is_a_config_error_naming_it() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/certs");
        let good = ListenerTls {
            cert_file: dir.join("server.pem"),
            key_file: dir.join("server.key"),
        };
        assert!(acceptor(&good).is_ok());
        let swapped = ListenerTls {
            cert_file: dir.join("server.key"),
            key_file: dir.join("server.pem"),
        };
        let e = acceptor(&swapped).err().unwrap().to_string();
        assert!(e.contains("server.key"), "{e}");
        let e = connector(&UpstreamTls {
            ca_file: dir.join("missing.pem"),
            server_name: None,
        })
        .err()
        .unwrap()
        .to_string();
        assert!(e.contains("missing.pem"), "{e}");
        // The key's bytes are in no error.
        let key = std::fs::read_to_string(dir.join("server.key")).unwrap();
        let body: String = key.lines().filter(|l| !l.starts_with("-----")).collect();
        assert!(!e.contains(&body[..20]));
    }
}
