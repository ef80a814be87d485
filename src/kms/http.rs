//! The one HTTP client of the built-in KMS clients: synchronous (`ureq`,
//! rustls on ring), so the serde layer can call it from any thread,
//! inside a tokio runtime included, with no runtime of its own. No proxy
//! from the environment is used: KMS traffic goes where the key URI or the
//! configured address says.
//!
//! Requests and answers carry keys (base64 data keys, whole keysets), so
//! no buffer that held one goes back to the allocator unzeroized:
//! - request bodies are written once into a buffer of their exact size
//!   ([`json_body`]), zeroized on drop;
//! - an answer is read into a zeroized buffer that, when it must grow,
//!   moves into a larger one and zeroizes the old one ([`read_zeroizing`]);
//!   JSON escapes of printable characters are undone in place first, so
//!   that `serde_json` reads a base64 string where it is instead of
//!   copying it into its own scratch buffer; the plaintext lands in
//!   [`zeroizing_opt`]'s exact-size string, decoded by
//!   [`base64_zeroizing`];
//! - ureq's connection buffers (where the body is copied to be sent and
//!   the answer is received) are zeroized when the connection is dropped
//!   ([`Wiped`]). Over TLS, rustls's own record buffers are out of reach.

use std::io::Read;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use ureq::unversioned::resolver::DefaultResolver;
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, DefaultConnector, NextTimeout, Transport,
};
use zeroize::{Zeroize as _, Zeroizing};

use crate::error::Error;
use crate::kms::{Failed, KmsTimeouts};

/// The most response bytes read from a KMS (its answers are a few hundred).
const MAX_RESPONSE: u64 = 1 << 20;

/// An HTTP agent with the timeouts of `t`, whose connections zeroize their
/// buffers when dropped (through `ureq::unversioned`, the part of ureq
/// outside its semver promise: a ureq release may need this adapted, which
/// shows as a build error, never as a silent change). Asserted unwind-safe (ureq's agent holds trait
/// objects that are not marked so): a panic inside it could at worst leave
/// a pooled connection unusable, never a state of this crate half-updated,
/// and keysets stay `UnwindSafe` as before.
pub(crate) fn agent(t: &KmsTimeouts) -> AssertUnwindSafe<ureq::Agent> {
    let config = ureq::Agent::config_builder()
        .timeout_global(Some(t.request))
        .http_status_as_error(false)
        .proxy(None)
        .max_redirects(0)
        .build();
    AssertUnwindSafe(ureq::Agent::with_parts(
        config,
        DefaultConnector::new().chain(Wiping),
        DefaultResolver::default(),
    ))
}

/// The last connector of the agent's chain: wraps the connection (TCP, or
/// TLS over it) in [`Wiped`].
#[derive(Debug)]
struct Wiping;

impl<In: Transport> Connector<In> for Wiping {
    type Out = Wiped<In>;

    fn connect(
        &self,
        _: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        Ok(chained.map(Wiped))
    }
}

/// A connection whose input and output buffers (the request as sent, the
/// answer as received) are zeroized when it is dropped: closed, evicted
/// from the pool, or with its agent.
#[derive(Debug)]
struct Wiped<T: Transport>(T);

impl<T: Transport> Wiped<T> {
    /// Zeroizes both buffers, whole: the input's unread bytes are
    /// consumed first, so that the buffer it gives to append to is all of
    /// it.
    fn wipe(&mut self) {
        let buffers = self.0.buffers();
        buffers.output().zeroize();
        let unread = buffers.input().len();
        buffers.input_consume(unread);
        buffers.input_append_buf().zeroize();
    }
}

impl<T: Transport> Drop for Wiped<T> {
    fn drop(&mut self) {
        self.wipe();
    }
}

impl<T: Transport> Transport for Wiped<T> {
    fn buffers(&mut self) -> &mut dyn Buffers {
        self.0.buffers()
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        self.0.transmit_output(amount, timeout)
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        self.0.await_input(timeout)
    }

    fn is_open(&mut self) -> bool {
        self.0.is_open()
    }

    fn is_tls(&self) -> bool {
        self.0.is_tls()
    }
}

/// POSTs `body` to `url` with `headers` and reads the JSON answer of an
/// HTTP 200 as `A`. Transport failures, HTTP 429 and 5xx are retryable;
/// another status or an answer of the wrong shape is not. The answer's
/// bytes (which may hold a data key) are zeroized once read.
#[cfg_attr(not(any(feature = "aws-kms", feature = "vault")), allow(dead_code))]
pub(crate) fn post_json<A: serde::de::DeserializeOwned>(
    agent: &ureq::Agent,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    what: &str,
) -> Result<A, Failed> {
    let (status, mut text) = post(agent, url, headers, body, what)?;
    if status != 200 {
        return Err(Failed {
            retry: retryable(status),
            error: Error::kms_msg(format!(
                "{what}: HTTP {status}: {}",
                excerpt(&String::from_utf8_lossy(&text))
            )),
        });
    }
    crate::json_text::unescape_printable(&mut text);
    serde_json::from_slice::<A>(&text).map_err(|e| Failed {
        retry: false,
        error: Error::kms(format!("{what}: unexpected answer"), e),
    })
}

/// POSTs `body` to `url` with `headers`: the status and the body.
#[cfg_attr(not(any(feature = "aws-kms", feature = "vault")), allow(dead_code))]
fn post(
    agent: &ureq::Agent,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    what: &str,
) -> Result<(u16, Zeroizing<Vec<u8>>), Failed> {
    request(agent, url, headers, Some(body), what)
}

/// GETs `url` (no `body`) or POSTs `body` to it, with `headers`: the
/// status and the answer's body, read into a zeroized buffer. Transport
/// failures are retryable.
pub(crate) fn request(
    agent: &ureq::Agent,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
    what: &str,
) -> Result<(u16, Zeroizing<Vec<u8>>), Failed> {
    let fail = |e: ureq::Error| Failed {
        retry: true,
        error: Error::Kms {
            detail: format!("{what}: HTTP request to {url} failed"),
            cause: Some(Arc::new(e)),
        },
    };
    let mut resp = match body {
        Some(body) => {
            let mut req = agent.post(url);
            for (k, v) in headers {
                req = req.header(*k, *v);
            }
            req.send(body)
        }
        None => {
            let mut req = agent.get(url);
            for (k, v) in headers {
                req = req.header(*k, *v);
            }
            req.call()
        }
    }
    .map_err(fail)?;
    let status = resp.status().as_u16();
    let size = resp
        .headers()
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(4096, |n| n.min(MAX_RESPONSE));
    let mut reader = resp.body_mut().with_config().limit(MAX_RESPONSE).reader();
    let text = read_zeroizing(&mut reader, usize::try_from(size).unwrap_or(4096))
        .map_err(|e| fail(ureq::Error::from(e)))?;
    Ok((status, text))
}

/// Reads `r` to its end into a buffer zeroized on drop, `size` bytes
/// expected: the buffer starts one byte larger (the read that finds the
/// end needs room) and, when full, is moved into one twice as large and
/// zeroized, so that no copy of what was read is left behind.
fn read_zeroizing(r: &mut impl Read, size: usize) -> std::io::Result<Zeroizing<Vec<u8>>> {
    let mut buf = Zeroizing::new(Vec::with_capacity(size.saturating_add(1)));
    let cap = buf.capacity();
    buf.resize(cap, 0);
    let mut len = 0;
    loop {
        if len == buf.len() {
            let mut larger = Zeroizing::new(Vec::with_capacity(len.saturating_mul(2).max(64)));
            larger.extend_from_slice(&buf[..len]);
            let cap = larger.capacity();
            larger.resize(cap, 0);
            buf = larger;
        }
        match r.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(len);
    Ok(buf)
}

/// A JSON value of a KMS request body, for [`json_body`].
#[cfg_attr(not(feature = "aws-kms"), allow(dead_code))]
pub(crate) enum Json<'a> {
    /// A string (escaped where JSON needs it).
    Str(&'a str),
    /// Bytes as a padded standard base64 string: where a key goes.
    Base64(&'a [u8]),
    /// Bytes as a lower-case hex string.
    Hex(&'a [u8]),
    /// An object with these members, in this order.
    Object(&'a [(&'a str, Json<'a>)]),
}

/// The length of `s` as the inside of a JSON string.
fn escaped_len(s: &str) -> Option<usize> {
    s.bytes().try_fold(0usize, |n, b| {
        n.checked_add(match b {
            b'"' | b'\\' => 2,
            0..=0x1f => 6,
            _ => 1,
        })
    })
}

impl Json<'_> {
    /// The length of the value's JSON text (`None` if it overflows).
    fn len(&self) -> Option<usize> {
        let inside = match self {
            Json::Str(s) => escaped_len(s)?,
            Json::Base64(b) => base64::encoded_len(b.len(), true)?,
            Json::Hex(b) => b.len().checked_mul(2)?,
            Json::Object(members) => {
                let mut n = members.len().saturating_sub(1); // commas
                for (k, v) in *members {
                    // "k":v
                    n = n
                        .checked_add(escaped_len(k)?)?
                        .checked_add(3)?
                        .checked_add(v.len()?)?;
                }
                n
            }
        };
        inside.checked_add(2)
    }

    /// Appends the value's JSON text to `out`, within its capacity.
    fn write(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        match self {
            Json::Str(s) => write_str(out, s),
            Json::Base64(b) => {
                let n = base64::encoded_len(b.len(), true).ok_or_else(miscounted)?;
                put(out, b"\"")?;
                let start = out.len();
                room(out, n)?;
                out.resize(start + n, 0);
                BASE64
                    .encode_slice(b, &mut out[start..])
                    .map_err(|_| miscounted())?;
                put(out, b"\"")
            }
            Json::Hex(b) => {
                const DIGITS: &[u8; 16] = b"0123456789abcdef";
                put(out, b"\"")?;
                for x in *b {
                    put(
                        out,
                        &[DIGITS[usize::from(x >> 4)], DIGITS[usize::from(x & 15)]],
                    )?;
                }
                put(out, b"\"")
            }
            Json::Object(members) => {
                put(out, b"{")?;
                for (i, (k, v)) in members.iter().enumerate() {
                    if i > 0 {
                        put(out, b",")?;
                    }
                    write_str(out, k)?;
                    put(out, b":")?;
                    v.write(out)?;
                }
                put(out, b"}")
            }
        }
    }
}

fn miscounted() -> Error {
    Error::kms_msg("encoding a KMS request: its size was miscounted")
}

/// Fails unless `out` has room for `n` more bytes within its capacity (it
/// must never grow: a reallocation would leave a copy of its bytes behind).
fn room(out: &Vec<u8>, n: usize) -> Result<(), Error> {
    if out.capacity() - out.len() < n {
        return Err(miscounted());
    }
    Ok(())
}

/// Appends `bytes` to `out` within its capacity.
fn put(out: &mut Vec<u8>, bytes: &[u8]) -> Result<(), Error> {
    room(out, bytes.len())?;
    out.extend_from_slice(bytes);
    Ok(())
}

/// Appends `s` as a JSON string to `out` within its capacity.
fn write_str(out: &mut Vec<u8>, s: &str) -> Result<(), Error> {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    put(out, b"\"")?;
    for b in s.bytes() {
        match b {
            b'"' | b'\\' => put(out, &[b'\\', b])?,
            0..=0x1f => put(
                out,
                &[
                    b'\\',
                    b'u',
                    b'0',
                    b'0',
                    DIGITS[usize::from(b >> 4)],
                    DIGITS[usize::from(b & 15)],
                ],
            )?,
            _ => put(out, &[b])?,
        }
    }
    put(out, b"\"")
}

/// `value`'s JSON text, written once into a buffer allocated at its exact
/// size and zeroized on drop: the buffer never grows, so no copy of a key
/// in it is left in freed memory.
#[cfg_attr(not(feature = "aws-kms"), allow(dead_code))]
pub(crate) fn json_body(value: &Json<'_>) -> Result<Zeroizing<Vec<u8>>, Error> {
    let len = value
        .len()
        .ok_or_else(|| Error::kms_msg("encoding a KMS request: too large"))?;
    let mut out = Zeroizing::new(Vec::with_capacity(len));
    value.write(&mut out)?;
    if out.len() != len {
        return Err(miscounted());
    }
    Ok(out)
}

/// Decodes standard base64 into a buffer zeroized on drop, allocated once
/// (at most two bytes larger than the result).
#[cfg_attr(not(feature = "aws-kms"), allow(dead_code))]
pub(crate) fn base64_zeroizing(b64: &[u8]) -> Result<Zeroizing<Vec<u8>>, base64::DecodeSliceError> {
    let mut out = Zeroizing::new(vec![0u8; base64::decoded_len_estimate(b64.len())]);
    let n = BASE64.decode_slice(b64, &mut out[..])?;
    out.truncate(n);
    Ok(out)
}

/// Whether an HTTP status is worth retrying.
pub(crate) fn retryable(status: u16) -> bool {
    status == 429 || status >= 500
}

/// A short, printable excerpt of a KMS error body (it never holds key
/// material: those are only in successful answers).
#[cfg_attr(not(any(feature = "aws-kms", feature = "vault")), allow(dead_code))]
fn excerpt(body: &str) -> String {
    crate::error::printable_long(body, 300)
}

/// Deserializes an optional string into a zeroized buffer (a KMS answer's
/// plaintext is a key). The string is allocated once at its size; with
/// [`post_json`]'s answers `serde_json` borrows it from the zeroized
/// answer, with no copy of its own.
#[cfg_attr(not(any(feature = "aws-kms", feature = "vault")), allow(dead_code))]
pub(crate) fn zeroizing_opt<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<zeroize::Zeroizing<String>>, D::Error> {
    <Option<String> as serde::Deserialize>::deserialize(d).map(|o| o.map(zeroize::Zeroizing::new))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// Request bodies are exactly the size first counted (the buffer never
    /// grew) and the JSON `serde_json` writes for the same value.
    #[test]
    fn json_bodies_are_exact() {
        let key = [0x5a_u8; 32];
        let big = vec![0xa5_u8; 100_000];
        let ctx = [("associatedData", Json::Hex(b"\x00\xff"))];
        let members = [
            ("KeyId", Json::Str("arn:aws:kms:us-east-1:1:key/k")),
            ("Plaintext", Json::Base64(&key)),
            ("Big", Json::Base64(&big)),
            ("Odd \"\\\n\u{1}é", Json::Str("a\"b\\c\nd\u{7f}é\u{1f}")),
            ("Empty", Json::Object(&[])),
            ("EncryptionContext", Json::Object(&ctx)),
            ("None", Json::Base64(b"")),
        ];
        for n in 0..=members.len() {
            let body = json_body(&Json::Object(&members[..n])).unwrap();
            assert_eq!(body.capacity(), body.len());
            let mut want = serde_json::Map::new();
            for (k, v) in &members[..n] {
                let v = match v {
                    Json::Str(s) => Value::from(*s),
                    Json::Base64(b) => Value::from(BASE64.encode(b)),
                    Json::Object([]) => serde_json::json!({}),
                    Json::Object(_) => serde_json::json!({ "associatedData": "00ff" }),
                    Json::Hex(_) => unreachable!(),
                };
                want.insert((*k).to_owned(), v);
            }
            let got: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(got, Value::Object(want), "{n} members");
        }
        assert_eq!(&json_body(&Json::Str("")).unwrap()[..], b"\"\"");
    }

    /// A reader that gives at most `chunk` bytes a call, with interruptions.
    struct Trickle<'a> {
        data: &'a [u8],
        chunk: usize,
        calls: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            self.calls += 1;
            if self.calls % 3 == 0 {
                return Err(std::io::ErrorKind::Interrupted.into());
            }
            let n = self.chunk.min(out.len()).min(self.data.len());
            out[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    #[test]
    fn reads_whole_answers_whatever_the_size_said() {
        let data: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        for len in [0usize, 1, 63, 64, 65, 1000, 5000] {
            for size in [0, 1, len.saturating_sub(1), len, len + 1, 10_000] {
                for chunk in [1, 7, 4096] {
                    let mut r = Trickle {
                        data: &data[..len],
                        chunk,
                        calls: 0,
                    };
                    let got = read_zeroizing(&mut r, size).unwrap();
                    assert_eq!(&got[..], &data[..len], "{len} {size} {chunk}");
                    if size >= len {
                        // The size was right or more: one buffer, never moved.
                        assert_eq!(got.capacity(), size + 1);
                    }
                }
            }
        }
        struct Broken;
        impl Read for Broken {
            fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
                Err(std::io::ErrorKind::ConnectionReset.into())
            }
        }
        assert!(read_zeroizing(&mut Broken, 10).is_err());
    }

    #[test]
    fn base64_into_zeroized_buffers() {
        for n in 0..70 {
            let data: Vec<u8> = (0..n).map(|i| i as u8 ^ 0x3c).collect();
            let got = base64_zeroizing(BASE64.encode(&data).as_bytes()).unwrap();
            assert_eq!(&got[..], &data[..]);
            assert!(got.capacity() <= data.len() + 2);
        }
        assert!(base64_zeroizing(b"a").is_err());
        assert!(base64_zeroizing(b"!!!!").is_err());
    }

    /// A transport with ureq's own buffers, for [`Wiped`].
    #[derive(Debug)]
    struct Plain(ureq::unversioned::transport::LazyBuffers);

    impl Transport for Plain {
        fn buffers(&mut self) -> &mut dyn Buffers {
            &mut self.0
        }
        fn transmit_output(&mut self, _: usize, _: NextTimeout) -> Result<(), ureq::Error> {
            Ok(())
        }
        fn await_input(&mut self, _: NextTimeout) -> Result<bool, ureq::Error> {
            Ok(false)
        }
        fn is_open(&mut self) -> bool {
            true
        }
    }

    /// Both buffers of a connection, whole, are zeroized: the request sent,
    /// the answer read, and what was not read yet.
    #[test]
    fn connections_wipe_their_buffers() {
        for unread in [0, 10, 300] {
            let mut t = Wiped(Plain(ureq::unversioned::transport::LazyBuffers::new(
                1024, 512,
            )));
            let b = t.buffers();
            b.output()[..300].fill(0x41);
            b.input_append_buf()[..600].fill(0x42);
            b.input_appended(600);
            b.input_consume(600 - unread);
            t.wipe();
            let b = t.buffers();
            assert!(b.input().is_empty());
            assert_eq!(b.output().len(), 512);
            assert!(b.output().iter().all(|x| *x == 0));
            let input = b.input_append_buf();
            assert_eq!(input.len(), 1024, "the whole input buffer");
            assert!(input.iter().all(|x| *x == 0), "{unread} unread");
        }
    }
}
