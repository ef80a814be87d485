//! TLS: a client (librdkafka in confluent-kafka's wheel for Python, which
//! has TLS built in, `security.protocol=ssl`: the Rust tests' librdkafka is
//! built without OpenSSL) round-trips through
//! the proxy's TLS listeners; a client that trusts another CA, and a
//! plaintext client on the TLS port, fail cleanly and the proxy serves on.
//! To the brokers: the broker here (tansu) speaks plaintext, so a
//! TLS-terminating forwarder in the test stands before it; the proxy's
//! bootstrap connection goes through it with TLS (ApiVersions answered), and
//! fails against a forwarder whose certificate the configured CA did not
//! sign. With a broker of the test's own that advertises the forwarder,
//! the broker node's connection is TLS too, and records round-trip.
//!
//! The certificates are fixed test material in `tests/certs/`, made by
//! `tests/certs/make.sh` (openssl).

use crate::common;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{bootstrap, consume_all, create_topic, fresh_topic, start_proxy_json, Keys};
use tombstone_crypt_proxy::{Hooks, Policies};

fn cert(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/certs")
        .join(name)
}

fn listener_tls() -> String {
    format!(
        r#""tls":{{"cert_file":"{}","key_file":"{}"}},"#,
        cert("server.pem").display(),
        cert("server.key").display()
    )
}

/// The venv's Python with confluent-kafka (`TOMBSTONE_TINK_PYTHON`, set by
/// scripts/test.sh), or `None` with a line saying the test is skipped.
fn python() -> Option<String> {
    let py = std::env::var("TOMBSTONE_TINK_PYTHON").ok();
    if py.is_none() {
        eprintln!("skipped: TOMBSTONE_TINK_PYTHON (a Python with confluent-kafka) is not set");
    }
    py
}

/// Runs `tests/python/tls_client.py` with `args`: its JSON line, or its
/// error.
fn client(py: &str, args: &[&str]) -> Result<serde_json::Value, String> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/tls_client.py");
    let out = std::process::Command::new(py)
        .arg(script)
        .args(args)
        .output()
        .map_err(|e| e.to_string())?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line: serde_json::Value = serde_json::from_str(stdout.trim())
        .map_err(|e| format!("{e}: {stdout} {}", String::from_utf8_lossy(&out.stderr)))?;
    if out.status.success() {
        Ok(line)
    } else {
        Err(line.to_string())
    }
}

/// The broker's metadata through the proxy at `addr`, trusting `ca` (a
/// file of tests/certs/, or `None`: plaintext), within 5 s.
fn metadata(py: &str, addr: &str, ca: Option<&str>) -> Result<usize, String> {
    let ca = ca.map_or_else(|| "-".to_owned(), |c| cert(c).display().to_string());
    let line = client(py, &["metadata", addr, &ca])?;
    line["brokers"]
        .as_u64()
        .map(|n| n as usize)
        .ok_or_else(|| line.to_string())
}

/// Writes `over tls`, a tombstone and an empty value (keyed `k0` to `k2`)
/// to partition 0 of `topic` through the TLS listener at `addr` and reads
/// them back.
fn round_trip(py: &str, addr: &str, topic: &str) -> Vec<Option<Vec<u8>>> {
    let ca = cert("ca.pem").display().to_string();
    let line = client(py, &["roundtrip", addr, &ca, topic]).unwrap();
    line["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            v.as_str().map(|hex| {
                (0..hex.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                    .collect()
            })
        })
        .collect()
}

#[test]
fn a_tls_client_round_trips_through_the_tls_listener_and_values_are_sealed() {
    let Some(broker) = bootstrap() else {
        return;
    };
    let Some(py) = python() else { return };
    let topic = fresh_topic("tls");
    let keys = Keys::new(false);
    let proxy = start_proxy_json(
        &broker,
        keys.policies(&topic),
        Hooks::default(),
        None,
        &listener_tls(),
    );
    create_topic(&broker, &topic, 1);
    let values: [Option<&[u8]>; 3] = [Some(b"over tls"), None, Some(b"")];
    let got = round_trip(&py, &proxy.addr, &topic);
    let want: Vec<_> = values.iter().map(|v| v.map(<[u8]>::to_vec)).collect();
    assert_eq!(got, want, "read through the TLS listener");
    let direct = consume_all(&broker, &topic, 1).unwrap();
    assert_eq!(direct.len(), 3);
    assert_eq!(
        direct[0].value.as_ref().unwrap().len(),
        b"over tls".len() + 33
    );
    assert_eq!(direct[1].value, None);
}

#[test]
fn negative_control_a_client_that_trusts_another_ca_is_refused() {
    let Some(broker) = bootstrap() else {
        return;
    };
    let Some(py) = python() else { return };
    let proxy = start_proxy_json(
        &broker,
        Policies::new(),
        Hooks::default(),
        None,
        &listener_tls(),
    );
    assert!(metadata(&py, &proxy.addr, Some("other-ca.pem")).is_err());
    assert!(metadata(&py, &proxy.addr, Some("ca.pem")).is_ok());
}

#[test]
fn a_plaintext_client_on_the_tls_port_fails_cleanly_and_the_proxy_serves_on() {
    let Some(broker) = bootstrap() else {
        return;
    };
    let Some(py) = python() else { return };
    let proxy = start_proxy_json(
        &broker,
        Policies::new(),
        Hooks::default(),
        None,
        &listener_tls(),
    );
    // An ApiVersions v0 request in plaintext: the proxy closes the
    // connection (at most a TLS alert), never a Kafka response, never a
    // hang.
    let mut s = std::net::TcpStream::connect(&proxy.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let body = [0u8, 18, 0, 0, 0, 0, 0, 7, 0, 4, b't', b'e', b's', b't'];
    s.write_all(&(body.len() as u32).to_be_bytes()).unwrap();
    s.write_all(&body).unwrap();
    let mut got = Vec::new();
    match s.read_to_end(&mut got) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("the connection was not closed: {e}"),
    }
    assert!(
        got.is_empty() || got[0] == 0x15,
        "not a TLS alert: {:02x?}",
        &got[..got.len().min(16)]
    );
    // librdkafka in plaintext gets no metadata.
    assert!(metadata(&py, &proxy.addr, None).is_err());
    // And a TLS client still does.
    assert!(metadata(&py, &proxy.addr, Some("ca.pem")).is_ok());
}

/// A TLS-terminating forwarder to `target` with the test certificate, in
/// its own thread; returns its address and the count of handshakes done.
fn tls_forwarder(target: String) -> (String, Arc<AtomicUsize>) {
    use tokio_rustls::rustls::crypto::ring::default_provider;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use tokio_rustls::rustls::ServerConfig;
    let chain = CertificateDer::pem_file_iter(cert("server.pem"))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(cert("server.key")).unwrap();
    let config = ServerConfig::builder_with_provider(Arc::new(default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let done = Arc::new(AtomicUsize::new(0));
    let count = done.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    return;
                };
                let acceptor = acceptor.clone();
                let target = target.clone();
                let count = count.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(socket).await else {
                        return;
                    };
                    count.fetch_add(1, Ordering::SeqCst);
                    let Ok(mut up) = tokio::net::TcpStream::connect(&target).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut up).await;
                });
            }
        });
    });
    (addr, done)
}

fn upstream_tls(ca: &str) -> String {
    format!(r#""upstream_tls":{{"ca_file":"{}"}},"#, cert(ca).display())
}

/// An ApiVersions v0 request on a new plaintext connection to `addr`:
/// whether a response with its correlation id and no error came back.
fn api_versions(addr: &str) -> Result<(), String> {
    let mut s = std::net::TcpStream::connect(addr).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let body = [0u8, 18, 0, 0, 0, 0, 0, 7, 0, 4, b't', b'e', b's', b't'];
    s.write_all(&(body.len() as u32).to_be_bytes()).unwrap();
    s.write_all(&body).unwrap();
    let mut head = [0u8; 10];
    s.read_exact(&mut head)
        .map_err(|e| format!("no response: {e}"))?;
    if head[4..8] != [0, 0, 0, 7] || head[8..10] != [0, 0] {
        return Err(format!("not the answer: {head:02x?}"));
    }
    Ok(())
}

// The proxy's bootstrap connection goes through the forwarder; librdkafka
// would go on to the broker node (its plaintext address), so the request
// here is a raw ApiVersions on the bootstrap listener.
#[test]
fn the_proxy_reaches_a_tls_broker_that_its_ca_signed_and_no_other() {
    let Some(broker) = bootstrap() else {
        return;
    };
    let (forwarder, handshakes) = tls_forwarder(broker.clone());
    // Trusting the CA that signed the forwarder's certificate: answered,
    // over TLS.
    let proxy = start_proxy_json(
        &forwarder,
        Policies::new(),
        Hooks::default(),
        None,
        &upstream_tls("ca.pem"),
    );
    api_versions(&proxy.addr).unwrap();
    assert_eq!(handshakes.load(Ordering::SeqCst), 1);
    drop(proxy);
    // Negative controls: trusting another CA, or no TLS at all, gets no
    // answer (and no handshake completes).
    let other = start_proxy_json(
        &forwarder,
        Policies::new(),
        Hooks::default(),
        None,
        &upstream_tls("other-ca.pem"),
    );
    assert!(api_versions(&other.addr).is_err());
    let plain = start_proxy_json(&forwarder, Policies::new(), Hooks::default(), None, "");
    assert!(api_versions(&plain.addr).is_err());
    assert_eq!(handshakes.load(Ordering::SeqCst), 1);
    // The same request beside the forwarder, straight to the proxy's
    // broker in plaintext, is answered: the check can pass.
    let direct = start_proxy_json(&broker, Policies::new(), Hooks::default(), None, "");
    api_versions(&direct.addr).unwrap();
}

/// Every connection to the brokers is TLS, the broker nodes' as the
/// bootstrap's: a broker of the test's own advertises a TLS forwarder in
/// front of it, so librdkafka, through the proxy, reaches the node only
/// over the proxy's TLS connection to the forwarder. A topic made,
/// records with a tombstone produced and consumed back through the proxy;
/// on the broker (one Fetch straight to its plaintext port) the values are
/// sealed. The control: a proxy that trusts another CA gets no record
/// written. (Named for the compacting stage, where the test command runs
/// the suites that start a broker of their own.)
#[test]
fn every_connection_to_a_tls_broker_is_tls_compacting_broker() {
    use common::own_broker::{free_port, OwnBroker};
    use common::wire::{contains, decode_records, raw_fetch};
    let port = free_port();
    let (forwarder, handshakes) = tls_forwarder(format!("127.0.0.1:{port}"));
    let broker = OwnBroker::start_on(port, Some(forwarder.clone()));
    let topic = fresh_topic("tls-nodes");
    let keys = Keys::new(true);
    let proxy = start_proxy_json(
        &forwarder,
        keys.policies(&topic),
        Hooks::default(),
        None,
        &upstream_tls("ca.pem"),
    );
    create_topic(&proxy.addr, &topic, 1);
    let records: Vec<common::Rec> = vec![
        (Some(b"k1".to_vec()), Some(b"SECRET-OVER-TLS-1".to_vec())),
        (Some(b"k2".to_vec()), Some(b"SECRET-OVER-TLS-2".to_vec())),
        (Some(b"k1".to_vec()), None),
    ];
    common::produce_ok(&proxy.addr, &topic, 0, &records, "none");
    let back = consume_all(&proxy.addr, &topic, 1).unwrap();
    let got: Vec<common::Rec> = back.into_iter().map(|c| (c.key, c.value)).collect();
    assert_eq!(got, records, "read back through the proxy");
    // The bootstrap's connection and at least one to the broker node,
    // each a TLS handshake with the forwarder.
    assert!(handshakes.load(Ordering::SeqCst) >= 2);
    let (code, raw) = raw_fetch(&broker.addr(), &topic);
    assert_eq!(code, 0);
    assert_eq!(decode_records(&raw).len(), 3);
    assert!(
        !contains(&raw, b"SECRET-OVER-TLS"),
        "plaintext on the broker"
    );
    // The control: trusting another CA, the proxy reaches no broker, and
    // nothing more is written.
    let other = start_proxy_json(
        &forwarder,
        keys.policies(&topic),
        Hooks::default(),
        None,
        &upstream_tls("other-ca.pem"),
    );
    let sent = common::produce(&other.addr, &topic, 0, &records[..1], "none");
    assert!(sent.iter().all(Result::is_err), "{sent:?}");
    let (_, raw) = raw_fetch(&broker.addr(), &topic);
    assert_eq!(decode_records(&raw).len(), 3);
}
