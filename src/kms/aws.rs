//! AWS KMS (`aws-kms://arn:aws:kms:REGION:ACCOUNT:key/ID`): the `Encrypt`
//! and `Decrypt` actions of the KMS JSON API, signed with SigV4 here and
//! sent on the same synchronous HTTP client as Vault's.
//!
//! Why not the official SDK: `aws-sdk-kms` is async (a private tokio runtime
//! thread would be needed to call it from the synchronous serde layer) and
//! took 88 s to build here with rustls/ring (146 s with `aws-config`'s
//! defaults), for two JSON calls. SigV4 is a few HMACs; it is checked
//! against AWS's published test vector below and against botocore's
//! signer in `tests/aws_sigv4.rs`. What is signed is what is sent: the
//! endpoint's path (the canonical URI is that path normalized and encoded
//! as SigV4 does for services other than S3) and the `host` header (the
//! endpoint's host in lower case, with its port unless it is the scheme's
//! default), which is sent explicitly.
//!
//! Associated data is Tink's: `EncryptionContext = {"associatedData":
//! hex(ad)}` when it is not empty, and no `EncryptionContext` at all when it
//! is (the envelope's DEKs are wrapped that way).
//!
//! Secrets in memory: a request body holding a key (base64) is written
//! once into a buffer of its exact size, zeroized on drop; an answer's
//! `Plaintext` is read into zeroized buffers (see [`http`]).

use std::sync::Arc;
use std::time::SystemTime;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use crate::error::Error;
use crate::kms::http::{self, Json};
use crate::kms::{printable_uri, with_retries, KmsAead, KmsClient, KmsTimeouts};

/// The URI scheme of AWS KMS keys.
pub(crate) const SCHEME: &str = "aws-kms://";

/// AWS credentials: an access key id, its secret, and a session token for
/// temporary credentials.
#[derive(Clone)]
pub struct AwsCredentials {
    access_key_id: String,
    secret_access_key: Zeroizing<String>,
    session_token: Option<Zeroizing<String>>,
}

impl core::fmt::Debug for AwsCredentials {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("AwsCredentials")
            .field("access_key_id", &self.access_key_id)
            .finish_non_exhaustive()
    }
}

impl AwsCredentials {
    /// Long-term credentials.
    pub fn new(access_key_id: impl Into<String>, secret_access_key: impl Into<String>) -> Self {
        AwsCredentials {
            access_key_id: access_key_id.into(),
            secret_access_key: Zeroizing::new(secret_access_key.into()),
            session_token: None,
        }
    }

    /// The same with a session token (temporary credentials).
    #[must_use]
    pub fn with_session_token(mut self, token: impl Into<String>) -> Self {
        self.session_token = Some(Zeroizing::new(token.into()));
        self
    }

    fn from_env() -> Option<Self> {
        let id = std::env::var("AWS_ACCESS_KEY_ID").ok()?;
        let secret = std::env::var("AWS_SECRET_ACCESS_KEY").ok()?;
        let mut c = AwsCredentials::new(id, secret);
        if let Ok(t) = std::env::var("AWS_SESSION_TOKEN") {
            if !t.is_empty() {
                c = c.with_session_token(t);
            }
        }
        Some(c)
    }
}

/// A [`KmsClient`] for AWS KMS keys, `aws-kms://arn:PARTITION:kms:REGION:ACCOUNT:key/ID`
/// (or `:alias/NAME`), cargo feature `aws-kms`.
///
/// [`from_env`](AwsKmsClient::from_env) reads, when a key's AEAD is made:
/// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, and the
/// endpoint from `AWS_ENDPOINT_URL_KMS`, else `AWS_ENDPOINT_URL`, else
/// `https://kms.REGION.DOMAIN`: the region is the ARN's and the domain its
/// partition's (`aws` and `aws-us-gov`: `amazonaws.com`, `aws-cn`:
/// `amazonaws.com.cn`, `aws-eusc`: `amazonaws.eu`, `aws-iso`: `c2s.ic.gov`,
/// `aws-iso-b`: `sc2s.sgov.gov`, `aws-iso-e`: `cloud.adc-e.uk`,
/// `aws-iso-f`: `csp.hci.ic.gov`; another partition needs an explicit
/// endpoint). Profiles, SSO and instance metadata are not read: pass such
/// credentials with [`new`](AwsKmsClient::new).
#[derive(Clone, Debug)]
pub struct AwsKmsClient {
    credentials: Option<AwsCredentials>,
    endpoint: Option<String>,
    from_env: bool,
    timeouts: KmsTimeouts,
}

impl AwsKmsClient {
    /// A client with explicit credentials; the endpoint is the ARN region's
    /// unless [`with_endpoint`](AwsKmsClient::with_endpoint) sets one. The
    /// environment is not read.
    pub fn new(credentials: AwsCredentials) -> Self {
        AwsKmsClient {
            credentials: Some(credentials),
            endpoint: None,
            from_env: false,
            timeouts: KmsTimeouts::default(),
        }
    }

    /// A client configured from the environment (see the type's docs).
    pub fn from_env() -> Self {
        AwsKmsClient {
            credentials: None,
            endpoint: None,
            from_env: true,
            timeouts: KmsTimeouts::default(),
        }
    }

    /// The same client talking to `endpoint`: `http://` or `https://`, a
    /// host, an optional port and an optional path, which requests are
    /// sent to (`https://kms.example:8443/kms/`; no query, no user
    /// information; an empty path is `/`).
    #[must_use]
    pub fn with_endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.endpoint = Some(endpoint.into());
        self
    }

    /// The same client with other timeouts and retries.
    #[must_use]
    pub fn with_timeouts(mut self, timeouts: KmsTimeouts) -> Self {
        self.timeouts = timeouts;
        self
    }
}

/// The parts of a key's ARN this client uses.
#[derive(Debug, PartialEq, Eq)]
struct Arn<'a> {
    /// The whole ARN (`arn:...`), the `KeyId` of requests.
    arn: &'a str,
    /// `aws`, `aws-cn`, ...
    partition: &'a str,
    region: &'a str,
}

/// `aws-kms://arn:PARTITION:kms:REGION:ACCOUNT:key/ID` -> its ARN.
fn parse_uri(uri: &str) -> Result<Arn<'_>, Error> {
    let bad = || {
        Error::kms_msg(format!(
            "{:?} is not aws-kms://arn:PARTITION:kms:REGION:ACCOUNT:key/ID",
            printable_uri(uri)
        ))
    };
    let arn = uri.strip_prefix(SCHEME).ok_or_else(bad)?;
    let mut parts = arn.splitn(6, ':');
    let (Some("arn"), Some(partition), Some("kms"), Some(region), Some(account), Some(res)) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return Err(bad());
    };
    let word = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if !partition.starts_with("aws")
        || !word(partition)
        || !word(region)
        || !account.bytes().all(|b| b.is_ascii_digit())
        || !(res.starts_with("key/") || res.starts_with("alias/"))
        || !res
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_/".contains(&b))
    {
        return Err(bad());
    }
    Ok(Arn {
        arn,
        partition,
        region,
    })
}

/// The partitions whose KMS endpoints this client knows:
/// `https://kms.REGION.DOMAIN` (botocore's partition table).
const PARTITIONS: [(&str, &str); 8] = [
    ("aws", "amazonaws.com"),
    ("aws-cn", "amazonaws.com.cn"),
    ("aws-us-gov", "amazonaws.com"),
    ("aws-eusc", "amazonaws.eu"),
    ("aws-iso", "c2s.ic.gov"),
    ("aws-iso-b", "sc2s.sgov.gov"),
    ("aws-iso-e", "cloud.adc-e.uk"),
    ("aws-iso-f", "csp.hci.ic.gov"),
];

/// The default endpoint of a key: `https://kms.REGION.DOMAIN`, the domain
/// being its partition's; an unknown partition is an error, not a guess.
fn default_endpoint(key_uri: &str, arn: &Arn<'_>) -> Result<String, Error> {
    let domain = PARTITIONS
        .iter()
        .find(|(p, _)| *p == arn.partition)
        .map(|(_, d)| *d)
        .ok_or_else(|| {
            let known: Vec<&str> = PARTITIONS.iter().map(|(p, _)| *p).collect();
            Error::kms_msg(format!(
                "{}: unknown AWS partition {:?} (known: {}); give its KMS endpoint with \
                 AwsKmsClient::with_endpoint or AWS_ENDPOINT_URL_KMS",
                printable_uri(key_uri),
                arn.partition,
                known.join(", ")
            ))
        })?;
    Ok(format!("https://kms.{}.{domain}", arn.region))
}

/// Where requests go, and how that is signed.
#[derive(Debug, PartialEq, Eq)]
struct Endpoint {
    /// The URL requests are sent to: the endpoint as given, `/` added
    /// when it has no path.
    url: String,
    /// The `host` header, sent and signed: the host in lower case, and the
    /// port unless it is the scheme's default.
    host: String,
    /// SigV4's canonical URI of the URL's path.
    canonical_uri: String,
}

/// Whether `b` may be in the path of an endpoint as it is (RFC 3986's
/// `pchar` and `/`; `%` starts an escape).
fn path_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/%".contains(&b)
}

/// Parses an endpoint URL (see [`AwsKmsClient::with_endpoint`]).
fn parse_endpoint(endpoint: &str) -> Result<Endpoint, Error> {
    let bad = |why: &str| Error::kms_msg(format!("bad AWS KMS endpoint {endpoint:?}: {why}"));
    let (scheme, rest) = endpoint
        .split_once("://")
        .ok_or_else(|| bad("not http://HOST or https://HOST"))?;
    let default_port = if scheme.eq_ignore_ascii_case("https") {
        443
    } else if scheme.eq_ignore_ascii_case("http") {
        80
    } else {
        return Err(bad("the scheme is neither http nor https"));
    };
    if rest.contains(['?', '#']) {
        return Err(bad("a query or a fragment is not supported"));
    }
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    if authority.contains('@') {
        return Err(bad("user information is not supported"));
    }
    // `[v6]:port` or `name:port`; the port is optional.
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => {
            let (addr, after) = v6.split_once(']').ok_or_else(|| bad("no ] after [IPv6"))?;
            if addr.is_empty()
                || !addr
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() || b":.".contains(&b))
            {
                return Err(bad("not an IPv6 address in [...]"));
            }
            let port = match after {
                "" => None,
                p => Some(p.strip_prefix(':').ok_or_else(|| bad("junk after ]"))?),
            };
            (&authority[..addr.len() + 2], port)
        }
        None => match authority.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        },
    };
    let host_ok = |h: &str| {
        h.starts_with('[')
            || (!h.is_empty()
                && h.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b)))
    };
    if !host_ok(host) {
        return Err(bad(
            "no host, or a host with characters a host name cannot have",
        ));
    }
    let port = match port {
        None => None,
        Some(p) => Some(
            p.parse::<u16>()
                .ok()
                .filter(|_| p.bytes().all(|b| b.is_ascii_digit()))
                .ok_or_else(|| bad("the port is not a number from 0 to 65535"))?,
        ),
    };
    if !path.bytes().all(path_byte) {
        return Err(bad(
            "the path has characters that must be percent-encoded (%XX)",
        ));
    }
    let path_bytes = path.as_bytes();
    for (i, b) in path_bytes.iter().enumerate() {
        if *b == b'%'
            && !(path_bytes.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && path_bytes.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
        {
            return Err(bad("a % in the path is not followed by two hex digits"));
        }
    }
    let host = match port {
        Some(p) if p != default_port => format!("{}:{p}", host.to_ascii_lowercase()),
        _ => host.to_ascii_lowercase(),
    };
    let (url, path) = if path.is_empty() {
        (format!("{endpoint}/"), "/")
    } else {
        (endpoint.to_owned(), path)
    };
    Ok(Endpoint {
        url,
        host,
        canonical_uri: canonical_uri(path),
    })
}

/// SigV4's canonical URI of a request path (as sent, percent-encoded) for
/// services other than S3, as botocore computes it: dot segments and empty
/// segments removed (RFC 3986 5.2.4, and AWS's merging of `//`), a final
/// `/` kept, then every byte but the unreserved ones and `/` encoded
/// (`%` too: the path is encoded twice).
fn canonical_uri(path: &str) -> String {
    let mut segments: Vec<&str> = Vec::new();
    for s in path.split('/') {
        match s {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            s => segments.push(s),
        }
    }
    let mut normalized = String::from("/");
    normalized.push_str(&segments.join("/"));
    if path.ends_with('/') && !segments.is_empty() {
        normalized.push('/');
    }
    let mut out = String::with_capacity(normalized.len());
    for b in normalized.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl KmsClient for AwsKmsClient {
    fn supports(&self, key_uri: &str) -> bool {
        key_uri.starts_with(SCHEME)
    }

    fn get_aead(&self, key_uri: &str) -> Result<Arc<dyn KmsAead>, Error> {
        Ok(Arc::new(self.aead(key_uri)?))
    }
}

impl AwsKmsClient {
    fn aead(&self, key_uri: &str) -> Result<AwsAead, Error> {
        let arn = parse_uri(key_uri)?;
        let credentials = match &self.credentials {
            Some(c) => c.clone(),
            None => AwsCredentials::from_env().ok_or_else(|| {
                Error::kms_msg(format!(
                    "{}: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set",
                    printable_uri(key_uri)
                ))
            })?,
        };
        let env = |name: &str| {
            if self.from_env {
                std::env::var(name).ok().filter(|v| !v.is_empty())
            } else {
                None
            }
        };
        let endpoint = match self
            .endpoint
            .clone()
            .or_else(|| env("AWS_ENDPOINT_URL_KMS"))
            .or_else(|| env("AWS_ENDPOINT_URL"))
        {
            Some(e) => e,
            None => default_endpoint(key_uri, &arn)?,
        };
        let Endpoint {
            url,
            host,
            canonical_uri,
        } = parse_endpoint(&endpoint)?;
        Ok(AwsAead {
            uri: key_uri.to_owned(),
            arn: arn.arn.to_owned(),
            region: arn.region.to_owned(),
            url,
            host,
            canonical_uri,
            credentials,
            agent: http::agent(&self.timeouts),
            timeouts: self.timeouts,
        })
    }

    /// Test hook (cargo feature `test-hooks`): the URL a request of
    /// `action` with `body` for `key_uri` is sent to, and the headers it is
    /// sent with (`host` and `authorization` included), signed at
    /// `unix_time`.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn __signed_request(
        &self,
        key_uri: &str,
        unix_time: u64,
        action: &str,
        body: &[u8],
    ) -> Result<(String, Vec<(String, String)>), Error> {
        let aead = self.aead(key_uri)?;
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(unix_time);
        let headers = aead.headers(action, body, t);
        Ok((
            aead.url.clone(),
            headers
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect(),
        ))
    }
}

struct AwsAead {
    uri: String,
    arn: String,
    region: String,
    url: String,
    host: String,
    canonical_uri: String,
    credentials: AwsCredentials,
    agent: std::panic::AssertUnwindSafe<ureq::Agent>,
    timeouts: KmsTimeouts,
}

impl core::fmt::Debug for AwsAead {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("AwsAead")
            .field("uri", &self.uri)
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Answer {
    #[serde(default)]
    ciphertext_blob: Option<String>,
    #[serde(default, deserialize_with = "http::zeroizing_opt")]
    plaintext: Option<Zeroizing<String>>,
}

impl AwsAead {
    /// The headers of a request of `action` with `body` sent at `t`, sorted
    /// by name, `host` and `authorization` included: all of them are sent,
    /// all but `authorization` are signed.
    fn headers(&self, action: &str, body: &[u8], t: SystemTime) -> Vec<(&'static str, String)> {
        let amz_date = amz_date(t);
        let mut headers = vec![
            ("content-type", "application/x-amz-json-1.1".to_owned()),
            ("host", self.host.clone()),
            ("x-amz-date", amz_date.clone()),
        ];
        if let Some(t) = &self.credentials.session_token {
            headers.push(("x-amz-security-token", t.to_string()));
        }
        headers.push(("x-amz-target", format!("TrentService.{action}")));
        let auth = sign(
            &self.credentials,
            &self.region,
            "kms",
            "POST",
            &self.canonical_uri,
            &headers,
            body,
            &amz_date,
        );
        headers.push(("authorization", auth));
        headers
    }

    fn call(&self, action: &str, body: &Zeroizing<Vec<u8>>) -> Result<Answer, Error> {
        let what = format!("AWS KMS {action} with {}", printable_uri(&self.uri));
        with_retries(&self.timeouts, || {
            let headers = self.headers(action, body, SystemTime::now());
            let send: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            http::post_json::<Answer>(&self.agent, &self.url, &send, body, &what)
        })
    }

    /// The body of a request: `{"KeyId": ARN, FIELD: base64(data)}`, and
    /// `"EncryptionContext": {"associatedData": hex(ad)}` when `ad` is not
    /// empty; written once, at its exact size, into a zeroized buffer.
    fn request(&self, field: &str, data: &[u8], ad: &[u8]) -> Result<Zeroizing<Vec<u8>>, Error> {
        let context = [("associatedData", Json::Hex(ad))];
        let fields = [
            ("KeyId", Json::Str(&self.arn)),
            (field, Json::Base64(data)),
            ("EncryptionContext", Json::Object(&context)),
        ];
        let n = if ad.is_empty() { 2 } else { 3 };
        http::json_body(&Json::Object(&fields[..n]))
    }
}

impl KmsAead for AwsAead {
    fn encrypt(&self, plaintext: &[u8], associated_data: &[u8]) -> Result<Vec<u8>, Error> {
        let body = self.request("Plaintext", plaintext, associated_data)?;
        let answer = self.call("Encrypt", &body)?;
        answer
            .ciphertext_blob
            .and_then(|b| BASE64.decode(b).ok())
            .ok_or_else(|| {
                Error::kms_msg(format!(
                    "AWS KMS Encrypt with {}: no CiphertextBlob in the answer",
                    printable_uri(&self.uri)
                ))
            })
    }

    fn decrypt(
        &self,
        ciphertext: &[u8],
        associated_data: &[u8],
    ) -> Result<Zeroizing<Vec<u8>>, Error> {
        let body = self.request("CiphertextBlob", ciphertext, associated_data)?;
        let answer = self.call("Decrypt", &body)?;
        let b64 = answer.plaintext.ok_or_else(|| {
            Error::kms_msg(format!(
                "AWS KMS Decrypt with {}: no Plaintext in the answer",
                printable_uri(&self.uri)
            ))
        })?;
        http::base64_zeroizing(b64.as_bytes())
            .map_err(|e| Error::kms("AWS KMS Decrypt: Plaintext is not base64", e))
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// `YYYYMMDDTHHMMSSZ` of `t` (UTC).
fn amz_date(t: SystemTime) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

type HmacSha256 = Hmac<Sha256>;

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    // HMAC takes keys of any length.
    match HmacSha256::new_from_slice(key) {
        Ok(mut m) => {
            m.update(data);
            m.finalize().into_bytes().to_vec()
        }
        Err(_) => Vec::new(),
    }
}

/// The SigV4 `Authorization` header of a request with no query string to
/// `canonical_uri` (already normalized and encoded); `headers` are
/// lower-case, sorted by name, include `host` and `x-amz-date`, and are all
/// signed (values trimmed, inner runs of spaces made one, as SigV4 says).
#[allow(clippy::too_many_arguments)]
fn sign(
    c: &AwsCredentials,
    region: &str,
    service: &str,
    method: &str,
    canonical_uri: &str,
    headers: &[(&str, String)],
    body: &[u8],
    amz_date: &str,
) -> String {
    let date = &amz_date[..8.min(amz_date.len())];
    let canonical_headers: String = headers
        .iter()
        .map(|(k, v)| {
            format!(
                "{k}:{}\n",
                v.split_whitespace().collect::<Vec<_>>().join(" ")
            )
        })
        .collect();
    let signed: Vec<&str> = headers.iter().map(|(k, _)| *k).collect();
    let signed = signed.join(";");
    let canonical = format!(
        "{method}\n{canonical_uri}\n\n{canonical_headers}\n{signed}\n{}",
        hex(&Sha256::digest(body))
    );
    let scope = format!("{date}/{region}/{service}/aws4_request");
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        hex(&Sha256::digest(canonical.as_bytes()))
    );
    let secret = c.secret_access_key.as_bytes();
    let mut k = Zeroizing::new(Vec::with_capacity(4 + secret.len()));
    k.extend_from_slice(b"AWS4");
    k.extend_from_slice(secret);
    let k = Zeroizing::new(hmac(&k, date.as_bytes()));
    let k = Zeroizing::new(hmac(&k, region.as_bytes()));
    let k = Zeroizing::new(hmac(&k, service.as_bytes()));
    let k = Zeroizing::new(hmac(&k, b"aws4_request"));
    let signature = hex(&hmac(&k, to_sign.as_bytes()));
    format!(
        "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed}, Signature={signature}",
        c.access_key_id
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `get-vanilla` of AWS's SigV4 test suite.
    #[test]
    fn sigv4_matches_the_published_vector() {
        let c = AwsCredentials::new("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY");
        let headers = [
            ("host", "example.amazonaws.com".to_owned()),
            ("x-amz-date", "20150830T123600Z".to_owned()),
        ];
        let auth = sign(
            &c,
            "us-east-1",
            "service",
            "GET",
            "/",
            &headers,
            b"",
            "20150830T123600Z",
        );
        assert_eq!(
            auth,
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
             SignedHeaders=host;x-amz-date, \
             Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
        );
    }

    #[test]
    fn dates() {
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_440_938_160);
        assert_eq!(amz_date(t), "20150830T123600Z");
        assert_eq!(amz_date(SystemTime::UNIX_EPOCH), "19700101T000000Z");
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(951_782_400);
        assert_eq!(amz_date(t), "20000229T000000Z");
    }

    /// The ARN's partition decides the default endpoint's domain (as in
    /// botocore's partitions); an unknown partition is an error.
    #[test]
    fn the_partition_decides_the_domain() {
        let c = AwsKmsClient::new(AwsCredentials::new("a", "b"));
        for (partition, region, url) in [
            ("aws", "us-east-1", "https://kms.us-east-1.amazonaws.com/"),
            (
                "aws-cn",
                "cn-north-1",
                "https://kms.cn-north-1.amazonaws.com.cn/",
            ),
            (
                "aws-us-gov",
                "us-gov-west-1",
                "https://kms.us-gov-west-1.amazonaws.com/",
            ),
            (
                "aws-iso",
                "us-iso-east-1",
                "https://kms.us-iso-east-1.c2s.ic.gov/",
            ),
            (
                "aws-iso-b",
                "us-isob-east-1",
                "https://kms.us-isob-east-1.sc2s.sgov.gov/",
            ),
            (
                "aws-iso-e",
                "eu-isoe-west-1",
                "https://kms.eu-isoe-west-1.cloud.adc-e.uk/",
            ),
            (
                "aws-iso-f",
                "us-isof-south-1",
                "https://kms.us-isof-south-1.csp.hci.ic.gov/",
            ),
            (
                "aws-eusc",
                "eusc-de-east-1",
                "https://kms.eusc-de-east-1.amazonaws.eu/",
            ),
        ] {
            let uri = format!("aws-kms://arn:{partition}:kms:{region}:123456789012:key/k");
            assert_eq!(c.aead(&uri).unwrap().url, url, "{uri}");
        }
        for partition in ["aws-mars", "awsx", "aws-", "aws-iso-z"] {
            let uri = format!("aws-kms://arn:{partition}:kms:us-east-1:123456789012:key/k");
            let e = c.aead(&uri).unwrap_err().to_string();
            assert!(e.contains("partition"), "{uri}: {e}");
        }
        // An explicit endpoint wins over the partition's.
        let c = c.with_endpoint("http://127.0.0.1:4566");
        let uri = "aws-kms://arn:aws-cn:kms:cn-north-1:123456789012:key/k";
        assert_eq!(c.aead(uri).unwrap().url, "http://127.0.0.1:4566/");
    }

    /// Request bodies are the JSON the KMS API takes, written into a buffer
    /// of their exact size (it never grew: no copy of the key was left in
    /// memory given back).
    #[test]
    fn request_bodies_are_exact() {
        let c = AwsKmsClient::new(AwsCredentials::new("a", "b"));
        let aead = c
            .aead("aws-kms://arn:aws:kms:us-east-1:123456789012:alias/a_b-c/d")
            .unwrap();
        let big = vec![0xa5; 70_000];
        for (field, data, ad) in [
            ("Plaintext", &[7u8; 32][..], &b""[..]),
            ("Plaintext", &[1, 2, 3, 4, 5][..], &b"\x00\xffad"[..]),
            ("CiphertextBlob", &b""[..], &b"x"[..]),
            ("Plaintext", &big[..], &big[..1000]),
        ] {
            let body = aead.request(field, data, ad).unwrap();
            assert_eq!(
                body.capacity(),
                body.len(),
                "{field} of {} bytes",
                data.len()
            );
            let got: serde_json::Value = serde_json::from_slice(&body).unwrap();
            let mut want = serde_json::json!({
                "KeyId": "arn:aws:kms:us-east-1:123456789012:alias/a_b-c/d",
                field: BASE64.encode(data),
            });
            if !ad.is_empty() {
                want["EncryptionContext"] = serde_json::json!({ "associatedData": hex(ad) });
            }
            assert_eq!(got, want);
        }
    }

    #[test]
    fn endpoints() {
        for (endpoint, url, host, canonical) in [
            (
                "http://127.0.0.1:4566",
                "http://127.0.0.1:4566/",
                "127.0.0.1:4566",
                "/",
            ),
            (
                "http://127.0.0.1:80/",
                "http://127.0.0.1:80/",
                "127.0.0.1",
                "/",
            ),
            ("https://h:443/kms/", "https://h:443/kms/", "h", "/kms/"),
            ("https://h:80/kms", "https://h:80/kms", "h:80", "/kms"),
            (
                "HTTP://Kms.Example:8080/a/../b//c/./",
                "HTTP://Kms.Example:8080/a/../b//c/./",
                "kms.example:8080",
                "/b/c/",
            ),
            (
                "http://[::1]:80/x:y",
                "http://[::1]:80/x:y",
                "[::1]",
                "/x%3Ay",
            ),
            ("http://[::1]:8080", "http://[::1]:8080/", "[::1]:8080", "/"),
            (
                "http://h/%41%2f+=@",
                "http://h/%41%2f+=@",
                "h",
                "/%2541%252f%2B%3D%40",
            ),
            ("http://h/..", "http://h/..", "h", "/"),
        ] {
            let e = parse_endpoint(endpoint).unwrap();
            assert_eq!(
                (e.url.as_str(), e.host.as_str(), e.canonical_uri.as_str()),
                (url, host, canonical),
                "{endpoint}"
            );
        }
        for bad in [
            "kms.example",
            "ftp://h",
            "http://",
            "http:///kms",
            "http://h:x",
            "http://h:70000",
            "http://h:+1",
            "http://u:p@h",
            "http://h/?q=1",
            "http://h#f",
            "http://h/a b",
            "http://h/%zz",
            "http://h/%4",
            "http://[::1",
            "http://[::1]x",
            "http://[]",
            "http://h\\x",
        ] {
            assert!(parse_endpoint(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn uris() {
        assert_eq!(
            parse_uri("aws-kms://arn:aws:kms:us-east-1:123456789012:key/ab-12")
                .unwrap()
                .region,
            "us-east-1"
        );
        assert!(parse_uri("aws-kms://arn:aws:kms:us-east-1:123456789012:alias/x").is_ok());
        for bad in [
            "aws-kms://",
            "aws-kms://arn:aws:s3:us-east-1:1:key/x",
            "aws-kms://arn:aws:kms::1:key/x",
            "aws-kms://arn:aws:kms:r:1:user/x",
            "aws-kms://arn:aws:kms:r/x:1:key/x",
        ] {
            assert!(parse_uri(bad).is_err(), "{bad}");
        }
    }
}
