//! Confluent's Schema Registry and DEK registry over HTTP: the endpoints
//! Confluent's clients use for CSFLE and CSPE, through the KMS clients'
//! HTTP client (timeouts, retries of transport failures, 429 and 5xx,
//! zeroized buffers; no proxy from the environment).

use std::fmt;
use std::panic::AssertUnwindSafe;

use base64::Engine as _;
use serde_json::Value;

use super::DekAlgorithm;
use crate::error::Error;
use crate::kms::{http, with_retries, Failed, KmsTimeouts};

/// A client of a Schema Registry (with its DEK registry) at a base URL
/// (`http://host:8081`, or `https://...`). `Debug` shows the URL, never
/// the credentials.
///
/// ```no_run
/// use tombstone_crypt::confluent::Registry;
///
/// let registry = Registry::new("http://127.0.0.1:8081")?.with_basic_auth("user", "secret");
/// let (id, schema) = registry.latest("customers-value")?;
/// # Ok::<(), tombstone_crypt::Error>(())
/// ```
pub struct Registry {
    base: String,
    auth: Option<zeroize::Zeroizing<String>>,
    timeouts: KmsTimeouts,
    agent: AssertUnwindSafe<ureq::Agent>,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("url", &self.base)
            .field("auth", &self.auth.as_ref().map(|_| ".."))
            .finish_non_exhaustive()
    }
}

/// Percent-encodes a path segment (a subject or KEK name).
fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl Registry {
    /// A client of the registry at `url`. Credentials in the URL
    /// (`https://user:password@host`) are taken out of it and sent as
    /// basic authentication: the URL kept, shown by `Debug` and in errors,
    /// has none.
    ///
    /// # Errors
    /// [`Error::Confluent`] if `url` is not `http://` or `https://`.
    pub fn new(url: &str) -> Result<Self, Error> {
        let Some((scheme, rest)) = url
            .strip_prefix("http://")
            .map(|r| ("http://", r))
            .or_else(|| url.strip_prefix("https://").map(|r| ("https://", r)))
        else {
            return Err(Error::confluent(
                "a registry URL starts with http:// or https://",
            ));
        };
        // The authority ends at the first `/`, `?` or `#`; credentials end
        // at its last `@`.
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (userinfo, host_and_path) = match rest[..authority_end].rfind('@') {
            Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
            None => (None, rest),
        };
        let timeouts = KmsTimeouts::default();
        let registry = Registry {
            base: format!("{scheme}{}", host_and_path.trim_end_matches('/')),
            auth: None,
            agent: http::agent(&timeouts),
            timeouts,
        };
        Ok(match userinfo {
            Some(info) => {
                let (user, password) = info.split_once(':').unwrap_or((info, ""));
                registry.with_basic_auth(user, password)
            }
            None => registry,
        })
    }

    /// Whether credentials go to the registry over plain `http://` (a
    /// caller should warn).
    pub fn sends_credentials_in_clear(&self) -> bool {
        self.auth.is_some() && self.base.starts_with("http://")
    }

    /// HTTP basic authentication (Confluent Cloud's API key and secret).
    #[must_use]
    pub fn with_basic_auth(self, user: &str, password: &str) -> Self {
        let pair = zeroize::Zeroizing::new(format!("{user}:{password}"));
        let token =
            zeroize::Zeroizing::new(base64::engine::general_purpose::STANDARD.encode(&*pair));
        Registry {
            auth: Some(zeroize::Zeroizing::new(format!("Basic {}", &*token))),
            ..self
        }
    }

    /// A bearer token.
    #[must_use]
    pub fn with_bearer_token(self, token: &str) -> Self {
        Registry {
            auth: Some(zeroize::Zeroizing::new(format!("Bearer {token}"))),
            ..self
        }
    }

    /// Time per request, attempts and backoff (default 5 s, 3, 100 ms).
    #[must_use]
    pub fn with_timeouts(self, timeouts: KmsTimeouts) -> Self {
        Registry {
            agent: http::agent(&timeouts),
            timeouts,
            ..self
        }
    }

    /// One call: the answer's JSON, `None` for HTTP 404, `Err(409)` kept
    /// apart for a conflict.
    fn call(
        &self,
        path: &str,
        body: Option<&Value>,
        what: &str,
    ) -> Result<Result<Option<Value>, u16>, Error> {
        let url = format!("{}{path}", self.base);
        let body = body.map(|b| b.to_string().into_bytes());
        let mut headers = vec![
            (
                "Accept",
                "application/vnd.schemaregistry.v1+json, application/json",
            ),
            ("Content-Type", "application/vnd.schemaregistry.v1+json"),
        ];
        if let Some(auth) = &self.auth {
            headers.push(("Authorization", auth.as_str()));
        }
        with_retries(&self.timeouts, || {
            let (status, text) = http::request(&self.agent, &url, &headers, body.as_deref(), what)
                .map_err(|f| Failed {
                    retry: f.retry,
                    error: Error::registry(format!(
                        "{what}: no answer from {url}{}",
                        std::error::Error::source(&f.error)
                            .map(|c| format!(": {c}"))
                            .unwrap_or_default()
                    )),
                })?;
            match status {
                200 => serde_json::from_slice(&text)
                    .map(|v| Ok(Some(v)))
                    .map_err(|_| Failed {
                        retry: false,
                        error: Error::registry(format!(
                            "{what}: the registry's answer is not JSON"
                        )),
                    }),
                404 => Ok(Ok(None)),
                409 => Ok(Err(409)),
                s => Err(Failed {
                    retry: http::retryable(s),
                    error: Error::registry(format!(
                        "{what}: HTTP {s}: {}",
                        crate::error::printable_long(&String::from_utf8_lossy(&text), 300)
                    )),
                }),
            }
        })
    }

    fn get(&self, path: &str, what: &str) -> Result<Option<Value>, Error> {
        self.call(path, None, what)?
            .map_err(|_| Error::confluent(format!("{what}: HTTP 409")))
    }

    /// The schema with id `id` (`GET /schemas/ids/{id}`): its text, type,
    /// references and rule set, as [`ConfluentJson::register`](super::ConfluentJson::register)
    /// takes it.
    ///
    /// # Errors
    /// [`Error::Confluent`] if there is none, or the registry fails.
    pub fn schema(&self, id: u32) -> Result<Value, Error> {
        self.get(&format!("/schemas/ids/{id}"), "get a schema")?
            .ok_or_else(|| Error::confluent(format!("schema id {id} is not in the registry")))
    }

    /// The latest schema of `subject` and its id (`GET
    /// /subjects/{subject}/versions/latest`).
    ///
    /// # Errors
    /// [`Error::Confluent`] if the subject has none, or the registry fails.
    pub fn latest(&self, subject: &str) -> Result<(u32, Value), Error> {
        let v = self
            .get(
                &format!("/subjects/{}/versions/latest", segment(subject)),
                "get a subject's latest schema",
            )?
            .ok_or_else(|| {
                Error::confluent(format!(
                    "subject {:?} has no schema in the registry",
                    crate::error::printable(subject)
                ))
            })?;
        let id = v
            .get("id")
            .and_then(Value::as_u64)
            .and_then(|i| u32::try_from(i).ok())
            .ok_or_else(|| Error::confluent("the registry's latest schema has no id"))?;
        Ok((id, v))
    }

    /// Registers `schema` under `subject` (`POST
    /// /subjects/{subject}/versions`): its id.
    ///
    /// # Errors
    /// [`Error::Confluent`] if the registry refuses it or fails.
    pub fn register(&self, subject: &str, schema: &Value) -> Result<u32, Error> {
        let v = self
            .call(
                &format!("/subjects/{}/versions", segment(subject)),
                Some(schema),
                "register a schema",
            )?
            .map_err(|_| Error::confluent("register a schema: HTTP 409"))?
            .ok_or_else(|| Error::confluent("register a schema: HTTP 404"))?;
        v.get("id")
            .and_then(Value::as_u64)
            .and_then(|i| u32::try_from(i).ok())
            .ok_or_else(|| Error::confluent("the registry's answer has no schema id"))
    }

    /// A KEK as the registry holds it: its KMS type (`kmsType`) and key id
    /// (`kmsKeyId`); `None` if there is none.
    ///
    /// # Errors
    /// [`Error::Confluent`] if the registry fails, the KEK lacks either
    /// field, or it is shared (the registry would unwrap its DEKs: not
    /// supported).
    pub fn kek(&self, name: &str) -> Result<Option<(String, String)>, Error> {
        let Some(k) = self.get(
            &format!("/dek-registry/v1/keks/{}", segment(name)),
            "get a KEK",
        )?
        else {
            return Ok(None);
        };
        if k.get("shared").and_then(Value::as_bool) == Some(true) {
            return Err(Error::confluent(
                "a shared KEK (the registry unwraps its DEKs): not supported",
            ));
        }
        let field = |f: &str| {
            k.get(f)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| Error::confluent(format!("a KEK without {f}")))
        };
        Ok(Some((field("kmsType")?, field("kmsKeyId")?)))
    }

    /// Creates a KEK (`POST /dek-registry/v1/keks`), not shared; a KEK of
    /// that name already there is kept.
    ///
    /// # Errors
    /// [`Error::Confluent`] if the registry fails.
    pub fn create_kek(&self, name: &str, kms_type: &str, kms_key_id: &str) -> Result<(), Error> {
        if self
            .get(
                &format!("/dek-registry/v1/keks/{}", segment(name)),
                "get a KEK",
            )?
            .is_some()
        {
            return Ok(());
        }
        let body = serde_json::json!({"name": name, "kmsType": kms_type, "kmsKeyId": kms_key_id, "shared": false});
        self.call("/dek-registry/v1/keks", Some(&body), "create a KEK")?
            .map(|_| ())
            .or(Ok(()))
    }

    /// A DEK as the registry holds it: its version and wrapped key material
    /// (`encryptedKeyMaterial`, decoded), and when it was made
    /// (milliseconds since the epoch); `version` `None` for the latest.
    /// `None` if there is none.
    ///
    /// # Errors
    /// [`Error::Confluent`] if the registry fails or the DEK has no wrapped
    /// material (a shared KEK's DEK is not supported).
    pub fn dek(
        &self,
        kek: &str,
        subject: &str,
        algorithm: DekAlgorithm,
        version: Option<u32>,
    ) -> Result<Option<(u32, Vec<u8>, u64)>, Error> {
        self.dek_with(kek, subject, algorithm, version, false)
    }

    /// As [`dek`](Registry::dek), a soft-deleted version included: what a
    /// reader asks for (a record written under a DEK version stays
    /// readable after the version is soft-deleted, as with Confluent's
    /// client).
    ///
    /// # Errors
    /// As [`dek`](Registry::dek).
    pub fn dek_to_read(
        &self,
        kek: &str,
        subject: &str,
        algorithm: DekAlgorithm,
        version: u32,
    ) -> Result<Option<(u32, Vec<u8>, u64)>, Error> {
        self.dek_with(kek, subject, algorithm, Some(version), true)
    }

    fn dek_with(
        &self,
        kek: &str,
        subject: &str,
        algorithm: DekAlgorithm,
        version: Option<u32>,
        deleted: bool,
    ) -> Result<Option<(u32, Vec<u8>, u64)>, Error> {
        let v = version.map_or_else(|| "-1".to_owned(), |v| v.to_string());
        let path = format!(
            "/dek-registry/v1/keks/{}/deks/{}/versions/{v}?algorithm={}{}",
            segment(kek),
            segment(subject),
            algorithm.name(),
            if deleted { "&deleted=true" } else { "" }
        );
        let Some(d) = self.get(&path, "get a DEK")? else {
            return Ok(None);
        };
        let version = d
            .get("version")
            .and_then(Value::as_u64)
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| Error::confluent("a DEK without a version"))?;
        let wrapped = d
            .get("encryptedKeyMaterial")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                Error::confluent(
                    "a DEK without encryptedKeyMaterial (a shared KEK's: not supported)",
                )
            })?;
        let wrapped = base64::engine::general_purpose::STANDARD
            .decode(wrapped)
            .map_err(|_| Error::confluent("a DEK's encryptedKeyMaterial is not base64"))?;
        let ts = d.get("ts").and_then(Value::as_u64).unwrap_or(0);
        Ok(Some((version, wrapped, ts)))
    }

    /// Creates a DEK (`POST /dek-registry/v1/keks/{kek}/deks/{subject}`):
    /// `false` if that version is there already (another writer made it
    /// first: read it back with [`dek`](Registry::dek)).
    ///
    /// # Errors
    /// [`Error::Confluent`] if the registry fails.
    pub fn create_dek(
        &self,
        kek: &str,
        subject: &str,
        algorithm: DekAlgorithm,
        version: u32,
        wrapped: &[u8],
    ) -> Result<bool, Error> {
        let body = serde_json::json!({
            "subject": subject, "version": version, "algorithm": algorithm.name(),
            "encryptedKeyMaterial": base64::engine::general_purpose::STANDARD.encode(wrapped),
        });
        let path = format!(
            "/dek-registry/v1/keks/{}/deks/{}",
            segment(kek),
            segment(subject)
        );
        match self.call(&path, Some(&body), "create a DEK")? {
            Ok(Some(_)) => Ok(true),
            Ok(None) => Err(Error::confluent("create a DEK: HTTP 404 (no such KEK?)")),
            Err(_) => Ok(false),
        }
    }
}
