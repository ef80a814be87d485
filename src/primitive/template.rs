//! Key templates: [`KeyTemplate`], how to make a key (its type and
//! parameters, as Tink's key templates), and the two ways between a
//! template and a key: a fresh key made from a template
//! (`Primitive::generate`) and the template of a key's kind
//! (`Primitive::template`).

use zeroize::Zeroizing;

use super::{
    Family, Primitive, AES_GCM_TYPE_URL, AES_SIV_TYPE_URL, KMS_ENVELOPE_TYPE_URL, TYPE_URL_PREFIX,
};
use crate::cipher::{AesGcmKey, AesSivKey, Backend, SIV_KEY_LEN};
use crate::error::Error;
use crate::kms::dek::{DekPolicy, EnvelopeKey};
use crate::kms::KmsClients;

/// How to make a key: its type and parameters, as Tink's key templates.
///
/// ```
/// use tombstone_crypt::{KeyTemplate, Keyset};
///
/// let mut keyset = Keyset::generate_with(KeyTemplate::aes128_gcm())?;
/// keyset.rotate_with(KeyTemplate::aes256_gcm())?;
/// assert_eq!(keyset.len(), 2);
/// # Ok::<(), tombstone_crypt::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyTemplate {
    kind: TemplateKind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum TemplateKind {
    AesGcm {
        key_len: u8,
    },
    AesSiv,
    KmsEnvelope {
        kek_uri: String,
        dek_len: u8,
        clients: Option<KmsClients>,
        policy: DekPolicy,
    },
}

impl KeyTemplate {
    /// AES-128-GCM, output prefix TINK (Tink's `AES128_GCM`).
    pub fn aes128_gcm() -> Self {
        KeyTemplate {
            kind: TemplateKind::AesGcm { key_len: 16 },
        }
    }

    /// AES-256-GCM, output prefix TINK (Tink's `AES256_GCM`): the default.
    pub fn aes256_gcm() -> Self {
        KeyTemplate {
            kind: TemplateKind::AesGcm { key_len: 32 },
        }
    }

    /// AES-SIV with a 64-byte key, output prefix TINK (Tink's
    /// `AES256_SIV`): deterministic encryption, for record keys only.
    ///
    /// # Security
    /// Deterministic encryption reveals which plaintexts are equal. That is
    /// what lets compaction see two records of one key; never use it for
    /// values.
    pub fn aes256_siv() -> Self {
        KeyTemplate {
            kind: TemplateKind::AesSiv,
        }
    }

    /// Envelope encryption under the KMS key `kek_uri` (Tink's
    /// `KmsEnvelopeAeadKey` with an AES-256-GCM DEK template), output prefix
    /// TINK. The keyset holds no secret, only the URI; values are encrypted
    /// under data keys (DEKs) that the KMS wraps, each used up to the limits
    /// of a [`DekPolicy`] (default: [`DekPolicy::default`]).
    ///
    /// The URI's [`KmsClient`](crate::kms::KmsClient) is looked up when a key is
    /// made from the template: in the clients given with
    /// [`with_kms_clients`](KeyTemplate::with_kms_clients), else in the
    /// process-wide registry ([`register_kms_client`](crate::kms::register_kms_client))
    /// and the built-in clients (features `aws-kms`, `vault`).
    ///
    /// # Security
    /// Whoever may use the KMS key decrypts every value; destroying it
    /// destroys every value (crypto-shredding). See SECURITY.md.
    pub fn kms_envelope(kek_uri: impl Into<String>) -> Self {
        KeyTemplate {
            kind: TemplateKind::KmsEnvelope {
                kek_uri: kek_uri.into(),
                dek_len: 32,
                clients: None,
                policy: DekPolicy::default(),
            },
        }
    }

    /// The same template, finding the KMS client in `clients` rather than
    /// the registry (envelope templates only; others are returned as they
    /// are).
    #[must_use]
    pub fn with_kms_clients(mut self, clients: KmsClients) -> Self {
        if let TemplateKind::KmsEnvelope { clients: c, .. } = &mut self.kind {
            *c = Some(clients);
        }
        self
    }

    /// The same template with other DEK limits (envelope templates only;
    /// others are returned as they are).
    #[must_use]
    pub fn with_dek_policy(mut self, policy: DekPolicy) -> Self {
        if let TemplateKind::KmsEnvelope { policy: p, .. } = &mut self.kind {
            *p = policy;
        }
        self
    }

    /// Tink's type URL of the keys this template makes.
    pub fn type_url(&self) -> &'static str {
        match self.kind {
            TemplateKind::AesGcm { .. } => AES_GCM_TYPE_URL,
            TemplateKind::AesSiv => AES_SIV_TYPE_URL,
            TemplateKind::KmsEnvelope { .. } => KMS_ENVELOPE_TYPE_URL,
        }
    }

    /// What keys of this template are for.
    pub(crate) fn family(&self) -> Family {
        match self.kind {
            TemplateKind::AesGcm { .. } | TemplateKind::KmsEnvelope { .. } => Family::Aead,
            TemplateKind::AesSiv => Family::Deterministic,
        }
    }

    /// The type's short name, without Tink's type URL prefix
    /// (`"AesGcmKey"`).
    pub fn type_name(&self) -> &'static str {
        self.type_url()
            .strip_prefix(TYPE_URL_PREFIX)
            .unwrap_or(self.type_url())
    }
}

impl Default for KeyTemplate {
    fn default() -> Self {
        KeyTemplate::aes256_gcm()
    }
}

impl Primitive {
    /// A fresh key made from `template`, expanded for `backend`.
    pub(crate) fn generate(template: &KeyTemplate, backend: Backend) -> Result<Self, Error> {
        match &template.kind {
            &TemplateKind::AesGcm { key_len } => {
                let mut bytes = Zeroizing::new([0u8; 32]);
                crate::random::fill_from_os(&mut bytes[..]);
                Ok(Primitive::AesGcm(AesGcmKey::new(
                    &bytes[..usize::from(key_len)],
                    backend,
                )?))
            }
            TemplateKind::AesSiv => {
                let mut bytes = Zeroizing::new([0u8; SIV_KEY_LEN]);
                crate::random::fill_from_os(&mut bytes[..]);
                Ok(Primitive::AesSiv(AesSivKey::new(&bytes[..])?))
            }
            TemplateKind::KmsEnvelope {
                kek_uri,
                dek_len,
                clients,
                policy,
            } => EnvelopeKey::new(kek_uri, *dek_len, clients.as_ref(), *policy, backend)
                .map(Primitive::KmsEnvelope),
        }
    }

    /// The template that makes keys of this one's kind.
    pub(crate) fn template(&self) -> KeyTemplate {
        match self {
            Primitive::AesGcm(k) => KeyTemplate {
                kind: TemplateKind::AesGcm {
                    key_len: if k.bytes().len() == 16 { 16 } else { 32 },
                },
            },
            Primitive::AesSiv(_) => KeyTemplate {
                kind: TemplateKind::AesSiv,
            },
            Primitive::KmsEnvelope(k) => KeyTemplate {
                kind: TemplateKind::KmsEnvelope {
                    kek_uri: k.kek_uri().to_owned(),
                    dek_len: k.dek_len(),
                    clients: k.clients().cloned(),
                    policy: k.policy(),
                },
            },
        }
    }
}
