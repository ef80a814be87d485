//! The KEK that wraps a Confluent DEK, chosen by its KMS type as Confluent
//! names it: `local-kms` ([`LocalKms`]), `aws-kms` and `hcvault` (this
//! crate's KMS clients, [`KmsClient`](crate::kms::KmsClient)).

use std::sync::Arc;

use super::dek::{Dek, DekAlgorithm, LocalKms};
use crate::error::{printable, Error};
use crate::kms::{KmsAead, KmsClients};

/// Where a KEK lives: Confluent's `kmsType` and `kmsKeyId`.
pub(crate) type KekPlace = (String, String);

/// A KEK ready to wrap and unwrap DEKs.
pub(crate) enum Kek<'a> {
    /// `local-kms`: the key derived from the secret.
    Local(&'a LocalKms),
    /// A key in a KMS, as Tink's remote AEAD with empty associated data
    /// (what Confluent's drivers call).
    Remote(Arc<dyn KmsAead>),
}

impl Kek<'_> {
    /// A DEK's `encryptedKeyMaterial` (before base64).
    pub(crate) fn wrap(&self, dek: &Dek) -> Result<Vec<u8>, Error> {
        match self {
            Kek::Local(k) => k.wrap(dek),
            Kek::Remote(aead) => aead.encrypt(&dek.key_material(), &[]),
        }
    }

    /// The DEK of an `encryptedKeyMaterial`.
    pub(crate) fn unwrap(
        &self,
        algorithm: DekAlgorithm,
        version: u32,
        wrapped: &[u8],
    ) -> Result<Dek, Error> {
        match self {
            Kek::Local(k) => k.unwrap(algorithm, version, wrapped),
            Kek::Remote(aead) => {
                let material = aead.decrypt(wrapped, &[])?;
                Dek::from_key_material(algorithm, version, &material)
            }
        }
    }
}

/// The KEK named `name` that lives at `place`: the local secret for
/// `local-kms`; for `aws-kms` the key `aws-kms://{kmsKeyId}` (an ARN), for
/// `hcvault` the key `hcvault://{host:port/mount/keys/name}` of the
/// `kmsKeyId` URL, from `clients` when given, else from the process-wide
/// KMS registry and the built-in clients configured from the environment.
/// A Vault key goes to the server `VAULT_ADDR` names, never to one a
/// schema or the registry names: without `VAULT_ADDR` such a KEK is
/// refused (Confluent's driver would send the Vault token to the address
/// in the key id, which anyone who can register a schema or a KEK
/// chooses). With `clients` given (whose Vault client may take its address
/// from the key id), the key id's address must be `VAULT_ADDR` or one of
/// `vault_allowed`.
pub(crate) fn resolve<'a>(
    name: &str,
    place: &KekPlace,
    local: Option<&'a LocalKms>,
    clients: Option<&KmsClients>,
    vault_allowed: &[String],
) -> Result<Kek<'a>, Error> {
    let (kms_type, key_id) = place;
    match kms_type.as_str() {
        "local-kms" => local.map(Kek::Local).ok_or_else(|| {
            Error::confluent(format!(
                "KEK {:?} is local-kms, and no local-kms secret was given",
                printable(name)
            ))
        }),
        "aws-kms" => {
            let uri = format!("aws-kms://{key_id}");
            Ok(Kek::Remote(crate::kms::resolve(&uri, clients)?))
        }
        "hcvault" => {
            let (origin, host_path) = split_url(key_id).ok_or_else(|| {
                Error::confluent(format!(
                    "KEK {:?}: the hcvault key id {:?} is not http(s)://HOST[:PORT]/MOUNT/keys/NAME",
                    printable(name),
                    printable(key_id)
                ))
            })?;
            if clients.is_some() {
                let env = std::env::var("VAULT_ADDR").ok();
                vault_address_allowed(origin, env.as_deref(), vault_allowed)?;
            }
            vault_aead(&format!("hcvault://{host_path}"), origin, clients)
        }
        other => Err(Error::confluent(format!(
            "KEK {:?} is in {:?}, which is not supported here (local-kms, aws-kms, hcvault)",
            printable(name),
            printable(other)
        ))),
    }
}

/// Whether a Vault KEK at `origin` may be opened with the clients given:
/// only at `VAULT_ADDR` or an address allowed.
fn vault_address_allowed(
    origin: &str,
    vault_addr: Option<&str>,
    allowed: &[String],
) -> Result<(), Error> {
    let same = |a: &str| a.trim_end_matches('/').eq_ignore_ascii_case(origin);
    if vault_addr.is_some_and(same) || allowed.iter().any(|a| same(a)) {
        return Ok(());
    }
    Err(Error::confluent(format!(
        "a KEK in Vault at {:?} (named by the schema or the registry), which is neither VAULT_ADDR nor an address \
         allowed (ConfluentJson::allowing_vault_address): a Vault token is never sent to an address a schema names",
        printable(origin)
    )))
}

/// `http(s)://HOST[:PORT]/REST` -> (`http(s)://HOST[:PORT]`,
/// `HOST[:PORT]/REST`).
fn split_url(url: &str) -> Option<(&str, &str)> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))?;
    let slash = rest.find('/').filter(|&i| i > 0)?;
    Some((&url[..url.len() - rest.len() + slash], rest))
}

#[cfg(feature = "vault")]
fn vault_aead(
    uri: &str,
    origin: &str,
    clients: Option<&KmsClients>,
) -> Result<Kek<'static>, Error> {
    use crate::kms::KmsClient as _;
    if clients.is_some() {
        return Ok(Kek::Remote(crate::kms::resolve(uri, clients)?));
    }
    vault_address_configured(origin, std::env::var("VAULT_ADDR").ok().as_deref())?;
    Ok(Kek::Remote(
        crate::kms::VaultClient::from_env().get_aead(uri)?,
    ))
}

/// Whether a Vault KEK at `origin` (named by a schema or the registry) may
/// be used: only with `VAULT_ADDR` set (the token then goes there, the
/// user's own server).
#[cfg(any(feature = "vault", test))]
fn vault_address_configured(origin: &str, vault_addr: Option<&str>) -> Result<(), Error> {
    match vault_addr {
        Some(a) if !a.is_empty() => Ok(()),
        _ => Err(Error::confluent(format!(
            "a KEK in Vault at {:?} (named by the schema or the registry): set VAULT_ADDR to the Vault server the KEK is on; a Vault token is never sent to an address a schema names",
            printable(origin)
        ))),
    }
}

#[cfg(not(feature = "vault"))]
fn vault_aead(
    uri: &str,
    _origin: &str,
    clients: Option<&KmsClients>,
) -> Result<Kek<'static>, Error> {
    Ok(Kek::Remote(crate::kms::resolve(uri, clients)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vault_url_splits_into_origin_and_key_path() {
        assert_eq!(
            split_url("http://127.0.0.1:8200/transit/keys/k1"),
            Some(("http://127.0.0.1:8200", "127.0.0.1:8200/transit/keys/k1"))
        );
        assert_eq!(
            split_url("https://vault.example/transit/keys/k1"),
            Some(("https://vault.example", "vault.example/transit/keys/k1"))
        );
        assert_eq!(split_url("vault.example/transit/keys/k1"), None);
        assert_eq!(split_url("http:///transit/keys/k1"), None);
        assert_eq!(split_url("http://host"), None);
    }

    #[test]
    fn a_vault_address_named_by_a_schema_is_used_only_when_configured() {
        let refused = vault_address_configured("http://attacker:8200", None).unwrap_err();
        assert!(refused.to_string().contains("set VAULT_ADDR"), "{refused}");
        assert!(vault_address_configured("http://attacker:8200", Some("")).is_err());
        assert!(
            vault_address_configured("http://attacker:8200", Some("http://127.0.0.1:8200")).is_ok()
        );
    }

    #[test]
    fn a_vault_address_with_clients_given_must_be_allowed() {
        let allowed = ["https://vault.example:8200/".to_owned()];
        assert!(vault_address_allowed("https://vault.example:8200", None, &allowed).is_ok());
        assert!(
            vault_address_allowed("http://127.0.0.1:8200", Some("http://127.0.0.1:8200"), &[])
                .is_ok()
        );
        let e = vault_address_allowed(
            "http://attacker:8200",
            Some("http://127.0.0.1:8200"),
            &allowed,
        )
        .unwrap_err();
        assert!(e.to_string().contains("never sent"), "{e}");
        assert!(vault_address_allowed("http://attacker:8200", None, &[]).is_err());
    }

    #[test]
    fn unknown_and_unconfigured_keks_are_clear_errors() {
        let place = |t: &str, k: &str| (t.to_owned(), k.to_owned());
        let e = resolve("k", &place("gcp-kms", "projects/x"), None, None, &[])
            .err()
            .unwrap();
        assert!(e.to_string().contains("not supported here"), "{e}");
        let e = resolve("k", &place("local-kms", ""), None, None, &[])
            .err()
            .unwrap();
        assert!(e.to_string().contains("no local-kms secret"), "{e}");
        let e = resolve("k", &place("hcvault", "transit/keys/k1"), None, None, &[])
            .err()
            .unwrap();
        assert!(e.to_string().contains("is not http(s)://"), "{e}");
        let local = LocalKms::new("s");
        assert!(matches!(
            resolve("k", &place("local-kms", "x"), Some(&local), None, &[]),
            Ok(Kek::Local(_))
        ));
    }
}
