//! A topic's id, asked of the broker: what tells a topic from one deleted
//! and made again under its name.
//!
//! Apache Kafka names each topic by an id (Metadata v10 and later, Kafka
//! 2.8+), new each time a topic is created. rdkafka does not expose it, so
//! [`topic_identity`] asks with a Metadata request of its own
//! (kafka-protocol's messages) over a connection of its own, made with the
//! client's own settings:
//!
//! - `bootstrap.servers` (tried in order), `security.protocol`
//!   (`plaintext`, `ssl`, `sasl_plaintext`, `sasl_ssl`);
//! - TLS (rustls, ring): the CAs of `ssl.ca.location` (a PEM file) or
//!   `ssl.ca.pem`, the host name checked; a client certificate from
//!   `ssl.certificate.location` and `ssl.key.location` (PEM);
//! - SASL: `sasl.mechanism` (or `sasl.mechanisms`) `PLAIN`,
//!   `SCRAM-SHA-256` or `SCRAM-SHA-512`, with `sasl.username` and
//!   `sasl.password`.
//!
//! Any other choice (GSSAPI, OAUTHBEARER, a key under a password, a PKCS#12
//! store, the system's CAs, no host name check) gives
//! [`TopicIdentity::Unknown`], saying why, and so does a broker without
//! topic ids: the caller then knows a topic by its records alone, as it
//! did before. The password never appears in an error.
//!
//! The request is Metadata v12 (Kafka 3.1 and later). Answers are read
//! within one deadline for the whole lookup and parsed by hand within
//! their bytes (every count checked against what is left before anything
//! is sized from it): kafka-protocol's decoders reserve an array's claimed
//! count first, so a few bytes from a hostile broker aborted the process.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, MetadataRequest, RequestHeader, SaslAuthenticateRequest, SaslHandshakeRequest,
    TopicName,
};
use kafka_protocol::protocol::{Encodable, HeaderVersion, StrBytes};
use rdkafka::config::ClientConfig;
use zeroize::Zeroizing;

use crate::Error;

mod parse;
mod scram;

/// The largest answer read (a Metadata answer for one topic is a few KiB).
const MAX_FRAME: usize = 1 << 20;

/// A topic's id: 16 bytes, printed as Kafka prints it (base64url without
/// padding).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicId([u8; 16]);

impl TopicId {
    /// The id of these bytes.
    pub fn from_bytes(bytes: [u8; 16]) -> TopicId {
        TopicId(bytes)
    }

    /// Its bytes.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }
}

impl std::fmt::Display for TopicId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use base64::Engine as _;
        f.write_str(&base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(self.0))
    }
}

impl std::fmt::Debug for TopicId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TopicId({self})")
    }
}

impl std::str::FromStr for TopicId {
    type Err = Error;

    /// Kafka's form (base64url without padding, 22 characters).
    fn from_str(s: &str) -> Result<TopicId, Error> {
        use base64::Engine as _;
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(s)
            .ok()
            .and_then(|b| <[u8; 16]>::try_from(b).ok())
            .ok_or_else(|| Error::Kafka {
                detail: format!("{s:?} is not a topic id (22 characters of base64url)"),
                cause: None,
            })?;
        Ok(TopicId(bytes))
    }
}

/// What the broker says of a topic's identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TopicIdentity {
    /// The topic's id.
    Known(TopicId),
    /// No id could be asked for or was given, and why (settings this
    /// lookup does not speak, a broker without topic ids).
    Unknown(String),
}

fn err(detail: String) -> Error {
    Error::Kafka {
        detail,
        cause: None,
    }
}

/// Asks the broker of `config` (its `bootstrap.servers`, tried in order,
/// and security settings: see the module) for `topic`'s id, the whole
/// lookup within `timeout` (at most an hour).
///
/// # Errors
/// No bootstrap server answered, the TLS or SASL handshake failed, or the
/// broker answered `topic` with an error (it does not exist, say).
pub fn topic_identity(
    config: &ClientConfig,
    topic: &str,
    timeout: Duration,
) -> Result<TopicIdentity, Error> {
    let settings = match Settings::of(config) {
        Ok(s) => s,
        Err(unsupported) => return Ok(TopicIdentity::Unknown(unsupported)),
    };
    // At most an hour: a deadline past what `Instant` can hold would
    // panic.
    let deadline = Instant::now() + timeout.min(Duration::from_secs(3600));
    let mut last = None;
    for (i, server) in settings.servers.iter().enumerate() {
        // Each server its share of what is left: one that accepts and
        // never answers does not take the others' time.
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let share = left / u32::try_from(settings.servers.len() - i).unwrap_or(u32::MAX);
        let until = Instant::now() + share;
        match Connection::open(server, &settings, until).and_then(|mut c| c.identity(topic)) {
            Ok(identity) => return Ok(identity),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| err("topic id: no bootstrap.servers".into())))
}

/// How to reach the broker.
struct Settings {
    servers: Vec<String>,
    tls: Option<Arc<rustls::ClientConfig>>,
    sasl: Option<Sasl>,
}

enum Mechanism {
    Plain,
    Scram(Scram),
}

#[derive(Clone, Copy)]
enum Scram {
    Sha256,
    Sha512,
}

struct Sasl {
    mechanism: Mechanism,
    name: &'static str,
    username: String,
    password: Zeroizing<String>,
}

impl Settings {
    /// The settings, or why this lookup cannot use them.
    fn of(config: &ClientConfig) -> Result<Settings, String> {
        let get = |k: &str| setting(config, k);
        let servers: Vec<String> = get("bootstrap.servers")
            .or_else(|| get("metadata.broker.list"))
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            // librdkafka takes `PLAINTEXT://host:port` too.
            .map(|s| s.rsplit("://").next().unwrap_or(s).to_owned())
            .collect();
        if servers.is_empty() {
            return Err("no bootstrap.servers".into());
        }
        let protocol = get("security.protocol")
            .unwrap_or("plaintext")
            .to_ascii_lowercase();
        let (tls, sasl) = match protocol.as_str() {
            "plaintext" => (false, false),
            "ssl" => (true, false),
            "sasl_plaintext" => (false, true),
            "sasl_ssl" => (true, true),
            other => return Err(format!("security.protocol {other:?}")),
        };
        let tls = if tls { Some(tls_config(config)?) } else { None };
        let sasl = if sasl {
            let mechanism = get("sasl.mechanism")
                .or_else(|| get("sasl.mechanisms"))
                .unwrap_or("GSSAPI")
                .to_ascii_uppercase();
            let (mechanism, name) = match mechanism.as_str() {
                "PLAIN" => (Mechanism::Plain, "PLAIN"),
                "SCRAM-SHA-256" => (Mechanism::Scram(Scram::Sha256), "SCRAM-SHA-256"),
                "SCRAM-SHA-512" => (Mechanism::Scram(Scram::Sha512), "SCRAM-SHA-512"),
                other => return Err(format!("sasl.mechanism {other:?}")),
            };
            let username = get("sasl.username")
                .ok_or("SASL without sasl.username")?
                .to_owned();
            let password = Zeroizing::new(
                config
                    .get("sasl.password")
                    .ok_or("SASL without sasl.password")?
                    .to_owned(),
            );
            Some(Sasl {
                mechanism,
                name,
                username,
                password,
            })
        } else {
            None
        };
        Ok(Settings { servers, tls, sasl })
    }
}

/// A setting's value, trimmed; `None` when unset or empty.
fn setting<'a>(config: &'a ClientConfig, key: &str) -> Option<&'a str> {
    config.get(key).map(str::trim).filter(|v| !v.is_empty())
}

/// rustls with the CAs and client certificate the settings name.
fn tls_config(config: &ClientConfig) -> Result<Arc<rustls::ClientConfig>, String> {
    let get = |k: &str| setting(config, k);
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    if get("ssl.endpoint.identification.algorithm").is_some_and(|a| a.eq_ignore_ascii_case("none"))
    {
        return Err("ssl.endpoint.identification.algorithm none (the host name unchecked)".into());
    }
    for unsupported in [
        "ssl.key.password",
        "ssl.keystore.location",
        "ssl.engine.location",
        "ssl.providers",
    ] {
        if get(unsupported).is_some() {
            return Err(format!("{unsupported} is set"));
        }
    }
    let cas: Vec<CertificateDer<'static>> = match (get("ssl.ca.location"), get("ssl.ca.pem")) {
        (Some(path), None) if path != "probe" => CertificateDer::pem_file_iter(path)
            .and_then(|i| i.collect::<Result<Vec<_>, _>>())
            .map_err(|e| format!("ssl.ca.location {path}: {e}"))?,
        (None, Some(pem)) => CertificateDer::pem_slice_iter(pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("ssl.ca.pem: {e}"))?,
        _ => return Err("TLS without one ssl.ca.location file or ssl.ca.pem".into()),
    };
    let mut roots = rustls::RootCertStore::empty();
    for ca in cas {
        roots
            .add(ca)
            .map_err(|e| format!("a CA certificate: {e}"))?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| format!("TLS: {e}"))?
    .with_root_certificates(roots);
    let config = match (get("ssl.certificate.location"), get("ssl.key.location")) {
        (None, None) => builder.with_no_client_auth(),
        (Some(cert), Some(key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .and_then(|i| i.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("ssl.certificate.location {cert}: {e}"))?;
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| format!("ssl.key.location {key}: {e}"))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("the client certificate: {e}"))?
        }
        _ => return Err("one of ssl.certificate.location and ssl.key.location".into()),
    };
    Ok(Arc::new(config))
}

/// A stream, plain or TLS.
enum Stream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

struct Connection {
    stream: Stream,
    server: String,
    correlation: i32,
    /// The whole lookup's end: every read and write waits only what is
    /// left of it.
    deadline: Instant,
}

impl Connection {
    fn open(server: &str, settings: &Settings, deadline: Instant) -> Result<Connection, Error> {
        let fail = |what: String| err(format!("topic id: {server}: {what}"));
        let left = || {
            deadline
                .checked_duration_since(Instant::now())
                .filter(|d| !d.is_zero())
                .ok_or_else(|| fail("timed out".into()))
        };
        let addr = server
            .to_socket_addrs()
            .map_err(|e| fail(format!("resolve: {e}")))?
            .next()
            .ok_or_else(|| fail("resolves to no address".into()))?;
        let tcp = TcpStream::connect_timeout(&addr, left()?)
            .map_err(|e| fail(format!("connect: {e}")))?;
        let stream = match &settings.tls {
            None => Stream::Plain(tcp),
            Some(tls) => {
                let host = server.rsplit_once(':').map_or(server, |(h, _)| h);
                let host = host.trim_start_matches('[').trim_end_matches(']');
                let name = rustls::pki_types::ServerName::try_from(host.to_owned())
                    .map_err(|e| fail(format!("a TLS server name: {e}")))?;
                let conn = rustls::ClientConnection::new(tls.clone(), name)
                    .map_err(|e| fail(format!("TLS: {e}")))?;
                Stream::Tls(Box::new(rustls::StreamOwned::new(conn, tcp)))
            }
        };
        let mut conn = Connection {
            stream,
            server: server.to_owned(),
            correlation: 0,
            deadline,
        };
        if let Some(sasl) = &settings.sasl {
            conn.authenticate(sasl)?;
        }
        Ok(conn)
    }

    fn fail(&self, what: impl std::fmt::Display) -> Error {
        err(format!("topic id: {}: {what}", self.server))
    }

    /// Gives the socket what is left of the deadline, or fails.
    fn arm(&mut self) -> Result<(), Error> {
        let left = self
            .deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| self.fail("timed out"))?;
        let tcp = match &self.stream {
            Stream::Plain(s) => s,
            Stream::Tls(s) => s.get_ref(),
        };
        tcp.set_read_timeout(Some(left))
            .and_then(|()| tcp.set_write_timeout(Some(left)))
            .map_err(|e| self.fail(format!("socket: {e}")))
    }

    fn write_all(&mut self, mut bytes: &[u8]) -> Result<(), Error> {
        while !bytes.is_empty() {
            self.arm()?;
            match self.stream.write(bytes) {
                Ok(0) => return Err(self.fail("the connection closed")),
                Ok(n) => bytes = &bytes[n..],
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.fail(format!("write: {e}"))),
            }
        }
        self.arm()?;
        self.stream
            .flush()
            .map_err(|e| self.fail(format!("write: {e}")))
    }

    /// Reads `buf` whole, each read within what is left of the deadline
    /// (a broker that trickles its answer byte by byte is cut off there).
    fn read_exact(&mut self, buf: &mut [u8]) -> Result<(), Error> {
        let mut filled = 0;
        while filled < buf.len() {
            self.arm()?;
            match self.stream.read(&mut buf[filled..]) {
                Ok(0) => return Err(self.fail("the connection closed")),
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.fail(format!("read: {e}"))),
            }
        }
        Ok(())
    }

    /// Sends `req` (API `key`, `version`) and returns the answer's body,
    /// its header read (`flexible`: with tagged fields) and its
    /// correlation id checked.
    fn call<Q: Encodable + HeaderVersion>(
        &mut self,
        key: ApiKey,
        version: i16,
        req: &Q,
        flexible: bool,
    ) -> Result<Vec<u8>, Error> {
        self.correlation += 1;
        let mut header = RequestHeader::default();
        header.request_api_key = key as i16;
        header.request_api_version = version;
        header.correlation_id = self.correlation;
        header.client_id = Some(StrBytes::from_static_str("tombstone-crypt"));
        // The request may carry SASL credentials: wiped when dropped.
        let mut body = Zeroizing::new(vec![0u8; 4]);
        header
            .encode(&mut *body, Q::header_version(version))
            .and_then(|()| req.encode(&mut *body, version))
            .map_err(|e| self.fail(format!("encoding a request: {e}")))?;
        let len = i32::try_from(body.len() - 4).map_err(|_| self.fail("a request too long"))?;
        body[..4].copy_from_slice(&len.to_be_bytes());
        self.write_all(&body)?;
        let mut len = [0u8; 4];
        self.read_exact(&mut len)?;
        let len = usize::try_from(i32::from_be_bytes(len))
            .ok()
            .filter(|&n| (4..=MAX_FRAME).contains(&n))
            .ok_or_else(|| self.fail("an answer of a length out of bounds"))?;
        let mut frame = vec![0u8; len];
        self.read_exact(&mut frame)?;
        let mut r = Reader::new(&frame);
        let correlation = r.i32().map_err(|e| self.fail(e))?;
        if correlation != self.correlation {
            return Err(self.fail("an answer to another request"));
        }
        if flexible {
            r.tags().map_err(|e| self.fail(e))?;
        }
        let at = frame.len() - r.rest.len();
        frame.drain(..at);
        Ok(frame)
    }

    /// SaslHandshake v1 and SaslAuthenticate v2.
    fn authenticate(&mut self, sasl: &Sasl) -> Result<(), Error> {
        let mut hs = SaslHandshakeRequest::default();
        hs.mechanism = StrBytes::from_static_str(sasl.name);
        let answer = self.call(ApiKey::SaslHandshake, 1, &hs, false)?;
        let (error, mechanisms) = parse::sasl_handshake(&answer).map_err(|e| self.fail(e))?;
        if error != 0 {
            return Err(self.fail(format!(
                "the broker refused SASL {} (error {error}; it takes {mechanisms:?})",
                sasl.name,
            )));
        }
        match sasl.mechanism {
            Mechanism::Plain => {
                let mut token = Zeroizing::new(Vec::new());
                token.push(0);
                token.extend_from_slice(sasl.username.as_bytes());
                token.push(0);
                token.extend_from_slice(sasl.password.as_bytes());
                self.sasl_step(&token).map(|_| ())
            }
            Mechanism::Scram(hash) => {
                let nonce = scram::client_nonce();
                let mut client = scram::Client::new(hash, &sasl.username, &nonce);
                let server_first = self.sasl_step(client.first().as_bytes())?;
                let last = client
                    .last(&server_first, &sasl.password)
                    .map_err(|e| self.fail(format!("SCRAM: {e}")))?;
                let server_final = self.sasl_step(last.as_bytes())?;
                client
                    .verify(&server_final)
                    .map_err(|e| self.fail(format!("SCRAM: {e}")))
            }
        }
    }

    fn sasl_step(&mut self, token: &[u8]) -> Result<Vec<u8>, Error> {
        let mut req = SaslAuthenticateRequest::default();
        req.auth_bytes = Bytes::copy_from_slice(token);
        let answer = self.call(ApiKey::SaslAuthenticate, 2, &req, true)?;
        let (error, message, bytes) =
            parse::sasl_authenticate(&answer).map_err(|e| self.fail(e))?;
        if error != 0 {
            return Err(self.fail(format!(
                "SASL authentication failed (error {error}: {message})"
            )));
        }
        Ok(bytes)
    }

    /// Metadata v12 for `topic` (Kafka 3.1 and later; a broker that does
    /// not speak it closes the connection: an error).
    fn identity(&mut self, topic: &str) -> Result<TopicIdentity, Error> {
        let mut t = MetadataRequestTopic::default();
        t.name = Some(TopicName(StrBytes::from_string(topic.to_owned())));
        let mut req = MetadataRequest::default();
        req.topics = Some(vec![t]);
        req.allow_auto_topic_creation = false;
        let answer = self.call(ApiKey::Metadata, 12, &req, true)?;
        let topics = parse::metadata_v12(&answer).map_err(|e| self.fail(e))?;
        let found = topics
            .iter()
            .find(|t| t.name.as_deref() == Some(topic))
            .ok_or_else(|| self.fail(format!("the broker's Metadata has no topic {topic:?}")))?;
        if found.error != 0 {
            return Err(self.fail(format!(
                "the broker answered {topic:?} with error {}{}",
                found.error,
                if found.error == 3 {
                    " (no such topic)"
                } else {
                    ""
                }
            )));
        }
        if found.id == [0; 16] {
            return Ok(TopicIdentity::Unknown(
                "the broker names no topic id".into(),
            ));
        }
        Ok(TopicIdentity::Known(TopicId(found.id)))
    }
}

/// A bounded reader over an answer: every length and count is checked
/// against the bytes left before anything is sized from it.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { rest: bytes }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if n > self.rest.len() {
            return Err(format!(
                "an answer cut short ({n} bytes wanted, {} left)",
                self.rest.len()
            ));
        }
        let (a, b) = self.rest.split_at(n);
        self.rest = b;
        Ok(a)
    }

    fn i16(&mut self) -> Result<i16, String> {
        let b = self.take(2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    fn i32(&mut self) -> Result<i32, String> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn uvarint(&mut self) -> Result<u32, String> {
        let mut v: u32 = 0;
        for i in 0..5 {
            let b = self.take(1)?[0];
            v |= u32::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("a varint longer than 5 bytes".into())
    }

    /// A compact length (`n + 1`, 0 for null): `None` for null, else a
    /// length no longer than what is left.
    fn compact_len(&mut self) -> Result<Option<usize>, String> {
        match self.uvarint()? {
            0 => Ok(None),
            n => {
                let n = (n - 1) as usize;
                if n > self.rest.len() {
                    return Err(format!(
                        "a length of {n} with {} bytes left",
                        self.rest.len()
                    ));
                }
                Ok(Some(n))
            }
        }
    }

    fn compact_bytes(&mut self) -> Result<Option<&'a [u8]>, String> {
        match self.compact_len()? {
            None => Ok(None),
            Some(n) => self.take(n).map(Some),
        }
    }

    fn compact_string(&mut self) -> Result<Option<String>, String> {
        self.compact_bytes()?
            .map(|b| {
                std::str::from_utf8(b)
                    .map(str::to_owned)
                    .map_err(|_| "a string not UTF-8".to_owned())
            })
            .transpose()
    }

    /// A compact array's count, each element at least `min` bytes.
    fn compact_count(&mut self, min: usize) -> Result<usize, String> {
        let n = self.compact_len()?.unwrap_or(0);
        if n > self.rest.len() / min.max(1) {
            return Err(format!("{n} elements claimed in {} bytes", self.rest.len()));
        }
        Ok(n)
    }

    /// Tagged fields, skipped.
    fn tags(&mut self) -> Result<(), String> {
        let n = self.uvarint()? as usize;
        if n > self.rest.len() / 2 {
            return Err(format!("{n} tagged fields in {} bytes", self.rest.len()));
        }
        for _ in 0..n {
            self.uvarint()?;
            let size = self.uvarint()? as usize;
            self.take(size)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
