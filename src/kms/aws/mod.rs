//! AWS KMS (`aws-kms://arn:aws:kms:REGION:ACCOUNT:key/ID`): the `Encrypt`
//! and `Decrypt` actions of the KMS JSON API, signed with SigV4 here and
//! sent on the same synchronous HTTP client as Vault's. Which endpoint a
//! key's requests go to is in `endpoint.rs`, how they are signed in
//! `sigv4.rs`.
//!
//! Why not the official SDK: `aws-sdk-kms` is async (a private tokio runtime
//! thread would be needed to call it from the synchronous serde layer) and
//! took 88 s to build here with rustls/ring (146 s with `aws-config`'s
//! defaults), for two JSON calls. SigV4 is a few HMACs; it is checked
//! against AWS's published test vector (in `sigv4.rs`) and against botocore's
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
use serde::Deserialize;
use zeroize::Zeroizing;

use crate::error::Error;
use crate::kms::http::{self, Json};
use crate::kms::{printable_uri, with_retries, KmsAead, KmsClient, KmsTimeouts};

mod endpoint;
mod sigv4;

pub(crate) use endpoint::SCHEME;
use endpoint::{default_endpoint, parse_endpoint, parse_uri, Endpoint};
use sigv4::{amz_date, sign};

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
            &self.credentials.access_key_id,
            &self.credentials.secret_access_key,
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

#[cfg(test)]
mod tests {
    use super::sigv4::hex;
    use super::*;

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
}
