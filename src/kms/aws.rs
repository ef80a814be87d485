//! AWS KMS (`aws-kms://arn:aws:kms:REGION:ACCOUNT:key/ID`): the `Encrypt`
//! and `Decrypt` actions of the KMS JSON API, signed with SigV4 here and
//! sent on the same synchronous HTTP client as Vault's.
//!
//! Why not the official SDK: `aws-sdk-kms` is async (a private tokio runtime
//! thread would be needed to call it from the synchronous serde layer) and
//! took 88 s to build here with rustls/ring (146 s with `aws-config`'s
//! defaults), for two JSON calls. SigV4 is a few HMACs; it is checked
//! against AWS's published test vector below.
//!
//! Associated data is Tink's: `EncryptionContext = {"associatedData":
//! hex(ad)}` when it is not empty, and no `EncryptionContext` at all when it
//! is (the envelope's DEKs are wrapped that way).

use std::sync::Arc;
use std::time::SystemTime;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use crate::error::Error;
use crate::kms::http;
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

/// A [`KmsClient`] for AWS KMS keys, `aws-kms://arn:aws:kms:REGION:ACCOUNT:key/ID`
/// (or `:alias/NAME`), cargo feature `aws-kms`.
///
/// [`from_env`](AwsKmsClient::from_env) reads, when a key's AEAD is made:
/// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, and the
/// endpoint from `AWS_ENDPOINT_URL_KMS`, else `AWS_ENDPOINT_URL`, else
/// `https://kms.REGION.amazonaws.com` (the region is the ARN's). Profiles,
/// SSO and instance metadata are not read: pass such credentials with
/// [`new`](AwsKmsClient::new).
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

    /// The same client talking to `endpoint` (`https://...`, scheme included).
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

/// `aws-kms://arn:aws:kms:REGION:ACCOUNT:key/ID` -> (ARN, REGION).
fn parse_uri(uri: &str) -> Result<(&str, &str), Error> {
    let bad = || {
        Error::kms_msg(format!(
            "{:?} is not aws-kms://arn:aws:kms:REGION:ACCOUNT:key/ID",
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
        || !word(region)
        || !account.bytes().all(|b| b.is_ascii_digit())
        || !(res.starts_with("key/") || res.starts_with("alias/"))
        || !res
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_/".contains(&b))
    {
        return Err(bad());
    }
    Ok((arn, region))
}

impl KmsClient for AwsKmsClient {
    fn supports(&self, key_uri: &str) -> bool {
        key_uri.starts_with(SCHEME)
    }

    fn get_aead(&self, key_uri: &str) -> Result<Arc<dyn KmsAead>, Error> {
        let (arn, region) = parse_uri(key_uri)?;
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
        let endpoint = self
            .endpoint
            .clone()
            .or_else(|| env("AWS_ENDPOINT_URL_KMS"))
            .or_else(|| env("AWS_ENDPOINT_URL"))
            .unwrap_or_else(|| format!("https://kms.{region}.amazonaws.com"));
        let endpoint = endpoint.trim_end_matches('/').to_owned();
        let host = endpoint
            .split_once("://")
            .map(|(_, rest)| rest.split('/').next().unwrap_or(rest))
            .filter(|h| !h.is_empty())
            .ok_or_else(|| Error::kms_msg(format!("bad AWS KMS endpoint {endpoint:?}")))?
            .to_owned();
        Ok(Arc::new(AwsAead {
            uri: key_uri.to_owned(),
            arn: arn.to_owned(),
            region: region.to_owned(),
            url: format!("{endpoint}/"),
            host,
            credentials,
            agent: http::agent(&self.timeouts),
            timeouts: self.timeouts,
        }))
    }
}

struct AwsAead {
    uri: String,
    arn: String,
    region: String,
    url: String,
    host: String,
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
    fn call(&self, action: &str, body: &Zeroizing<Vec<u8>>) -> Result<Answer, Error> {
        let what = format!("AWS KMS {action} with {}", printable_uri(&self.uri));
        let target = format!("TrentService.{action}");
        with_retries(&self.timeouts, || {
            let amz_date = amz_date(SystemTime::now());
            let mut headers = vec![
                ("content-type", "application/x-amz-json-1.1".to_owned()),
                ("host", self.host.clone()),
                ("x-amz-date", amz_date.clone()),
            ];
            if let Some(t) = &self.credentials.session_token {
                headers.push(("x-amz-security-token", t.to_string()));
            }
            headers.push(("x-amz-target", target.clone()));
            let auth = sign(
                &self.credentials,
                &self.region,
                "kms",
                "POST",
                "/",
                &headers,
                body,
                &amz_date,
            );
            let mut send: Vec<(&str, &str)> = headers
                .iter()
                .filter(|(k, _)| *k != "host")
                .map(|(k, v)| (*k, v.as_str()))
                .collect();
            send.push(("authorization", auth.as_str()));
            http::post_json::<Answer>(&self.agent, &self.url, &send, body, &what)
        })
    }

    fn request(&self, field: &str, data: &[u8], ad: &[u8]) -> Result<Zeroizing<Vec<u8>>, Error> {
        let b64 = Zeroizing::new(BASE64.encode(data));
        let mut req = serde_json::Map::new();
        req.insert("KeyId".into(), self.arn.clone().into());
        req.insert(field.into(), b64.as_str().into());
        if !ad.is_empty() {
            req.insert(
                "EncryptionContext".into(),
                serde_json::json!({ "associatedData": hex(ad) }),
            );
        }
        serde_json::to_vec(&req)
            .map(Zeroizing::new)
            .map_err(|e| Error::kms("encoding an AWS KMS request", e))
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
        let mut out = Zeroizing::new(vec![0u8; b64.len() / 4 * 3 + 3]);
        let n = BASE64
            .decode_slice(b64.as_bytes(), &mut out[..])
            .map_err(|e| Error::kms("AWS KMS Decrypt: Plaintext is not base64", e))?;
        out.truncate(n);
        Ok(out)
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

/// The SigV4 `Authorization` header of a request with no query string;
/// `headers` are lower-case, sorted by name, and include `host` and
/// `x-amz-date`.
#[allow(clippy::too_many_arguments)]
fn sign(
    c: &AwsCredentials,
    region: &str,
    service: &str,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &[u8],
    amz_date: &str,
) -> String {
    let date = &amz_date[..8.min(amz_date.len())];
    let canonical_headers: String = headers
        .iter()
        .map(|(k, v)| format!("{k}:{}\n", v.trim()))
        .collect();
    let signed: Vec<&str> = headers.iter().map(|(k, _)| *k).collect();
    let signed = signed.join(";");
    let canonical = format!(
        "{method}\n{path}\n\n{canonical_headers}\n{signed}\n{}",
        hex(&Sha256::digest(body))
    );
    let scope = format!("{date}/{region}/{service}/aws4_request");
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        hex(&Sha256::digest(canonical.as_bytes()))
    );
    let k = Zeroizing::new(format!("AWS4{}", c.secret_access_key.as_str()));
    let k = Zeroizing::new(hmac(k.as_bytes(), date.as_bytes()));
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

    #[test]
    fn uris() {
        assert_eq!(
            parse_uri("aws-kms://arn:aws:kms:us-east-1:123456789012:key/ab-12")
                .unwrap()
                .1,
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
