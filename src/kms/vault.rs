//! Vault and OpenBao transit (`hcvault://HOST[:PORT]/MOUNT/keys/NAME`),
//! as Tink's Vault AEAD speaks it: `POST /v1/MOUNT/encrypt/NAME
//! {"plaintext": base64, "context": ""}` gives `vault:v1:...`, which is the
//! wrapped key; `/decrypt/NAME` reverses it.

use std::sync::Arc;

use serde::Deserialize;
use zeroize::Zeroizing;

use crate::error::Error;
use crate::kms::http::{self, Json};
use crate::kms::{printable_uri, with_retries, KmsAead, KmsClient, KmsTimeouts};

/// The URI scheme of Vault keys.
pub(crate) const SCHEME: &str = "hcvault://";

/// A [`KmsClient`] for Vault or OpenBao transit keys,
/// `hcvault://HOST[:PORT]/MOUNT/keys/NAME` (cargo feature `vault`).
///
/// The server's address is `VAULT_ADDR` (scheme included) when
/// [`from_env`](VaultClient::from_env) is used and it is set, else
/// `https://HOST:PORT` from the URI; the token is `VAULT_TOKEN`. Or set both
/// explicitly with [`new`](VaultClient::new) / [`with_address`](VaultClient::with_address).
#[derive(Clone)]
pub struct VaultClient {
    address: Option<String>,
    token: Option<Zeroizing<String>>,
    from_env: bool,
    timeouts: KmsTimeouts,
}

impl core::fmt::Debug for VaultClient {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("VaultClient")
            .field("address", &self.address)
            .field("from_env", &self.from_env)
            .field("timeouts", &self.timeouts)
            .finish_non_exhaustive()
    }
}

impl VaultClient {
    /// A client with an explicit token; the address comes from each key
    /// URI (`https://HOST:PORT`) unless [`with_address`](VaultClient::with_address)
    /// sets one. The environment is not read.
    pub fn new(token: impl Into<String>) -> Self {
        VaultClient {
            address: None,
            token: Some(Zeroizing::new(token.into())),
            from_env: false,
            timeouts: KmsTimeouts::default(),
        }
    }

    /// A client configured from `VAULT_ADDR` and `VAULT_TOKEN`, read when a
    /// key's AEAD is made.
    pub fn from_env() -> Self {
        VaultClient {
            address: None,
            token: None,
            from_env: true,
            timeouts: KmsTimeouts::default(),
        }
    }

    /// The same client talking to `address` (`https://vault.example:8200`,
    /// scheme included) whatever the key URI's host.
    #[must_use]
    pub fn with_address(mut self, address: impl Into<String>) -> Self {
        self.address = Some(address.into());
        self
    }

    /// The same client with other timeouts and retries.
    #[must_use]
    pub fn with_timeouts(mut self, timeouts: KmsTimeouts) -> Self {
        self.timeouts = timeouts;
        self
    }
}

impl KmsClient for VaultClient {
    fn supports(&self, key_uri: &str) -> bool {
        key_uri.starts_with(SCHEME)
    }

    fn get_aead(&self, key_uri: &str) -> Result<Arc<dyn KmsAead>, Error> {
        let (host, mount, name) = parse_uri(key_uri)?;
        let env_addr = if self.from_env {
            std::env::var("VAULT_ADDR").ok().filter(|a| !a.is_empty())
        } else {
            None
        };
        let address = self
            .address
            .clone()
            .or(env_addr)
            .unwrap_or_else(|| format!("https://{host}"));
        let address = address.trim_end_matches('/').to_owned();
        let token = match &self.token {
            Some(t) => t.clone(),
            None => Zeroizing::new(std::env::var("VAULT_TOKEN").map_err(|_| {
                Error::kms_msg(format!(
                    "{}: VAULT_TOKEN is not set",
                    printable_uri(key_uri)
                ))
            })?),
        };
        Ok(Arc::new(VaultAead {
            encrypt_url: format!("{address}/v1/{mount}/encrypt/{name}"),
            decrypt_url: format!("{address}/v1/{mount}/decrypt/{name}"),
            uri: key_uri.to_owned(),
            token,
            agent: http::agent(&self.timeouts),
            timeouts: self.timeouts,
        }))
    }
}

/// `hcvault://HOST[:PORT]/MOUNT/keys/NAME` -> (`HOST[:PORT]`, `MOUNT`, `NAME`).
fn parse_uri(uri: &str) -> Result<(&str, &str, &str), Error> {
    let bad = || {
        Error::kms_msg(format!(
            "{:?} is not hcvault://HOST[:PORT]/MOUNT/keys/NAME",
            printable_uri(uri)
        ))
    };
    let rest = uri.strip_prefix(SCHEME).ok_or_else(bad)?;
    let (host, path) = rest.split_once('/').ok_or_else(bad)?;
    let (mount, name) = path.rsplit_once("/keys/").ok_or_else(bad)?;
    let ok = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.:/".contains(&b))
            && !s.contains("..")
    };
    if host.is_empty() || !ok(host) || !ok(mount) || !ok(name) || name.contains('/') {
        return Err(bad());
    }
    Ok((host, mount, name))
}

struct VaultAead {
    encrypt_url: String,
    decrypt_url: String,
    uri: String,
    token: Zeroizing<String>,
    agent: std::panic::AssertUnwindSafe<ureq::Agent>,
    timeouts: KmsTimeouts,
}

impl core::fmt::Debug for VaultAead {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("VaultAead")
            .field("uri", &self.uri)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct Answer {
    data: AnswerData,
}

#[derive(Deserialize)]
struct AnswerData {
    #[serde(default)]
    ciphertext: Option<String>,
    #[serde(default, deserialize_with = "http::zeroizing_opt")]
    plaintext: Option<Zeroizing<String>>,
}

impl VaultAead {
    fn call(&self, url: &str, body: &Zeroizing<Vec<u8>>, what: &str) -> Result<Answer, Error> {
        let what = format!("{what} with {}", printable_uri(&self.uri));
        with_retries(&self.timeouts, || {
            http::post_json::<Answer>(
                &self.agent,
                url,
                &[
                    ("X-Vault-Token", self.token.as_str()),
                    ("Content-Type", "application/json"),
                ],
                body,
                &what,
            )
        })
    }
}

impl KmsAead for VaultAead {
    fn encrypt(&self, plaintext: &[u8], associated_data: &[u8]) -> Result<Vec<u8>, Error> {
        no_ad(associated_data, &self.uri)?;
        let body = encrypt_body(plaintext)?;
        let answer = self.call(&self.encrypt_url, &body, "Vault transit encrypt")?;
        match answer.data.ciphertext {
            Some(c) if c.starts_with("vault:") => Ok(c.into_bytes()),
            _ => Err(Error::kms_msg(format!(
                "Vault transit encrypt with {}: no vault: ciphertext in the answer",
                printable_uri(&self.uri)
            ))),
        }
    }

    fn decrypt(
        &self,
        ciphertext: &[u8],
        associated_data: &[u8],
    ) -> Result<Zeroizing<Vec<u8>>, Error> {
        no_ad(associated_data, &self.uri)?;
        let text = std::str::from_utf8(ciphertext)
            .ok()
            .filter(|t| t.starts_with("vault:") && t.bytes().all(|b| b.is_ascii_graphic()))
            .ok_or_else(|| {
                Error::kms_msg(format!(
                    "not a Vault ciphertext for {} (expected vault:v1:...)",
                    printable_uri(&self.uri)
                ))
            })?;
        let body = decrypt_body(text)?;
        let answer = self.call(&self.decrypt_url, &body, "Vault transit decrypt")?;
        let b64 = answer.data.plaintext.ok_or_else(|| {
            Error::kms_msg(format!(
                "Vault transit decrypt with {}: no plaintext in the answer",
                printable_uri(&self.uri)
            ))
        })?;
        http::base64_zeroizing(b64.as_bytes()).map_err(|e| {
            Error::kms(
                format!(
                    "Vault transit decrypt with {}: plaintext is not base64",
                    printable_uri(&self.uri)
                ),
                e,
            )
        })
    }
}

/// The body of a transit encrypt request, `{"plaintext": base64,
/// "context": ""}`. The plaintext is a data key or a whole keyset: the body
/// is written once into a zeroized buffer of its exact size
/// ([`http::json_body`]), never into a JSON value or a buffer that grows
/// (whose old blocks would be freed with the key in them).
fn encrypt_body(plaintext: &[u8]) -> Result<Zeroizing<Vec<u8>>, Error> {
    http::json_body(&Json::Object(&[
        ("plaintext", Json::Base64(plaintext)),
        ("context", Json::Str("")),
    ]))
}

/// The body of a transit decrypt request, `{"ciphertext": "vault:v1:...",
/// "context": ""}` (no secret in it; written the same way).
fn decrypt_body(ciphertext: &str) -> Result<Zeroizing<Vec<u8>>, Error> {
    http::json_body(&Json::Object(&[
        ("ciphertext", Json::Str(ciphertext)),
        ("context", Json::Str("")),
    ]))
}

/// Tink's Vault AEAD takes no associated data (Vault's `context` is for
/// derived keys); refusing it beats ignoring it.
fn no_ad(associated_data: &[u8], uri: &str) -> Result<(), Error> {
    if associated_data.is_empty() {
        Ok(())
    } else {
        Err(Error::kms_msg(format!(
            "{}: Vault transit takes no associated data (use an empty one)",
            printable_uri(uri)
        )))
    }
}

#[cfg(test)]
mod tests {
    use base64::engine::general_purpose::STANDARD as BASE64;
    use base64::Engine as _;

    use super::*;

    #[test]
    fn request_bodies_are_transit_json_of_their_exact_size() {
        for pt in [&b""[..], b"k", b"ke", b"key", &[0xfb; 34], &[0xff; 1000]] {
            let body = encrypt_body(pt).unwrap();
            assert_eq!(body.len(), body.capacity());
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(
                v,
                serde_json::json!({"plaintext": BASE64.encode(pt), "context": ""})
            );
        }
        let text = "vault:v1:AbC+/=";
        let body = decrypt_body(text).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v, serde_json::json!({"ciphertext": text, "context": ""}));
    }

    #[test]
    fn uris() {
        assert_eq!(
            parse_uri("hcvault://127.0.0.1:18200/transit/keys/k").unwrap(),
            ("127.0.0.1:18200", "transit", "k")
        );
        assert_eq!(
            parse_uri("hcvault://vault.example/team/transit/keys/k-1").unwrap(),
            ("vault.example", "team/transit", "k-1")
        );
        for bad in [
            "hcvault://",
            "hcvault://h/keys/k",
            "hcvault://h/transit/keys/",
            "hcvault://h/transit/keys/a/b",
            "hcvault://h/../keys/k",
            "hcvault://h/t?x/keys/k",
            "aws-kms://x",
        ] {
            assert!(parse_uri(bad).is_err(), "{bad}");
        }
    }
}
