//! Key types as data: what each keyset entry holds, chosen by Tink type URL
//! when a key is generated or imported; each type's prefix and minimum
//! lengths, and Tink's `KeyData` of each (the envelope key's proto
//! included). The templates that make keys are in `template`.
//!
//! A key's type decides its primitive and its wire format (`envelope`); the
//! serde wrappers, the stores and [`Keyset::encrypt`](crate::Keyset::encrypt)
//! only ever ask the keyset, so a new key type slots in here and in the wire
//! format without touching them.

use zeroize::Zeroizing;

use crate::cipher::{AesGcmKey, AesSivKey, Backend, NONCE_LEN, SIV_KEY_LEN, SIV_LEN, TAG_LEN};
use crate::error::{printable, Error, KeysetErrorKind};
use crate::kms::dek::{DekPolicy, EnvelopeKey};
use crate::kms::KmsClients;
use crate::proto::{key_proto, parse_key_proto};

mod template;

pub use self::template::KeyTemplate;

/// Tink's type URL prefix.
const TYPE_URL_PREFIX: &str = "type.googleapis.com/google.crypto.tink.";
/// The type URL of Tink's AES-GCM key.
pub(crate) const AES_GCM_TYPE_URL: &str = "type.googleapis.com/google.crypto.tink.AesGcmKey";
/// The type URL of Tink's AES-SIV key.
pub(crate) const AES_SIV_TYPE_URL: &str = "type.googleapis.com/google.crypto.tink.AesSivKey";

/// The type URL of Tink's KMS envelope AEAD key.
pub(crate) const KMS_ENVELOPE_TYPE_URL: &str =
    "type.googleapis.com/google.crypto.tink.KmsEnvelopeAeadKey";

/// The key types this crate reads and writes, for error messages.
const SUPPORTED: &str = "AesGcmKey, AesSivKey, KmsEnvelopeAeadKey";

/// What a key's primitive is for. A keyset holds keys of one family: Tink
/// builds one primitive from a keyset, and a value encrypted under one
/// family never decrypts under the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Family {
    /// Randomized authenticated encryption (Tink's `Aead`), for values.
    Aead,
    /// Deterministic authenticated encryption (Tink's `DeterministicAead`),
    /// for record keys.
    Deterministic,
}

impl Family {
    /// What keys of this family do, for error messages.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Family::Aead => "AEAD (values)",
            Family::Deterministic => "deterministic AEAD (record keys)",
        }
    }
}

/// Bytes of the output prefix TINK: the version byte and the key id.
pub(crate) const PREFIX_LEN: usize = 5;

/// The shortest envelope ciphertext: prefix, EDEK length, a one-byte EDEK,
/// nonce and tag.
pub(crate) const KMS_MIN_LEN: usize = PREFIX_LEN + 4 + 1 + NONCE_LEN + TAG_LEN;

/// What a key does, with its material: one expanded primitive per key.
#[derive(Clone)]
pub(crate) enum Primitive {
    /// AES-GCM (Tink's `AesGcmKey`): randomized AEAD for values.
    AesGcm(AesGcmKey),
    /// AES-SIV (Tink's `AesSivKey`): deterministic AEAD for record keys.
    AesSiv(AesSivKey),
    /// Envelope encryption under a key in a KMS (Tink's
    /// `KmsEnvelopeAeadKey`): randomized AEAD for values, each under an
    /// AES-GCM data key that the KMS wraps.
    KmsEnvelope(EnvelopeKey),
}

impl Primitive {
    /// What the key is for.
    pub(crate) fn family(&self) -> Family {
        match self {
            Primitive::AesGcm(_) | Primitive::KmsEnvelope(_) => Family::Aead,
            Primitive::AesSiv(_) => Family::Deterministic,
        }
    }

    /// Tink's type URL of this key.
    pub(crate) fn type_url(&self) -> &'static str {
        match self {
            Primitive::AesGcm(_) => AES_GCM_TYPE_URL,
            Primitive::AesSiv(_) => AES_SIV_TYPE_URL,
            Primitive::KmsEnvelope(_) => KMS_ENVELOPE_TYPE_URL,
        }
    }

    /// A short human name of the key's type, for `Debug` and listings.
    pub(crate) fn describe(&self) -> &'static str {
        match self {
            Primitive::AesGcm(k) if k.bytes().len() == 16 => "AES-128-GCM",
            Primitive::AesGcm(_) => "AES-256-GCM",
            Primitive::AesSiv(_) => "AES-256-SIV",
            Primitive::KmsEnvelope(k) if k.dek_len() == 16 => "KMS envelope, AES-128-GCM DEKs",
            Primitive::KmsEnvelope(_) => "KMS envelope, AES-256-GCM DEKs",
        }
    }

    /// The shortest ciphertext this key writes (an empty plaintext's).
    pub(crate) fn min_ciphertext_len(&self) -> usize {
        match self {
            Primitive::AesGcm(_) => PREFIX_LEN + NONCE_LEN + TAG_LEN,
            Primitive::AesSiv(_) => PREFIX_LEN + SIV_LEN,
            Primitive::KmsEnvelope(_) => KMS_MIN_LEN,
        }
    }

    /// The bytes this key most likely adds to a plaintext (a size hint):
    /// the shortest ciphertext, plus the current EDEK for an envelope key.
    #[inline]
    pub(crate) fn overhead(&self) -> usize {
        match self {
            Primitive::KmsEnvelope(k) => (KMS_MIN_LEN - 1).saturating_add(k.edek_len_hint().max(1)),
            other => other.min_ciphertext_len(),
        }
    }

    /// The same key expanded for `backend`.
    pub(crate) fn with_backend(&self, backend: Backend) -> Result<Self, Error> {
        match self {
            Primitive::AesGcm(k) => k.with_backend(backend).map(Primitive::AesGcm),
            // One implementation: RustCrypto's `aes-siv`.
            Primitive::AesSiv(_) => Ok(self.clone()),
            Primitive::KmsEnvelope(k) if k.backend() == backend => Ok(self.clone()),
            Primitive::KmsEnvelope(k) => {
                Ok(Primitive::KmsEnvelope(k.reconfigured(k.policy(), backend)))
            }
        }
    }

    /// Reads a key from Tink's `KeyData`: its type URL, its serialized proto
    /// and its key material type. An envelope key finds its KMS client in
    /// `kms`, else in the registry (no KMS call).
    pub(crate) fn from_key_data(
        type_url: &str,
        value: &[u8],
        material_type: Option<&str>,
        backend: Backend,
        kms: Option<&KmsClients>,
    ) -> Result<Self, (KeysetErrorKind, String)> {
        match type_url {
            AES_GCM_TYPE_URL => {
                check_material(material_type, "SYMMETRIC")?;
                let key = parse_key_proto(value, "AesGcmKey", 0x1a)
                    .map_err(|why| (KeysetErrorKind::KeyFormat, why))?;
                AesGcmKey::new(key, backend)
                    .map(Primitive::AesGcm)
                    .map_err(|_| {
                        (
                            KeysetErrorKind::KeyFormat,
                            format!("AES key must be 16 or 32 bytes, got {}", key.len()),
                        )
                    })
            }
            AES_SIV_TYPE_URL => {
                check_material(material_type, "SYMMETRIC")?;
                let key = parse_key_proto(value, "AesSivKey", 0x12)
                    .map_err(|why| (KeysetErrorKind::KeyFormat, why))?;
                AesSivKey::new(key).map(Primitive::AesSiv).map_err(|_| {
                    (
                        KeysetErrorKind::KeyFormat,
                        format!("AES-SIV key must be {SIV_KEY_LEN} bytes, got {}", key.len()),
                    )
                })
            }
            KMS_ENVELOPE_TYPE_URL => {
                check_material(material_type, "REMOTE")?;
                let (kek_uri, dek_len) =
                    parse_envelope_proto(value).map_err(|why| (KeysetErrorKind::KeyFormat, why))?;
                EnvelopeKey::new(&kek_uri, dek_len, kms, DekPolicy::default(), backend)
                    .map(Primitive::KmsEnvelope)
                    .map_err(|e| (KeysetErrorKind::KmsClient, e.to_string()))
            }
            other => Err((
                KeysetErrorKind::UnsupportedKeyType,
                format!(
                    "key type {:?} is not supported (supported: {SUPPORTED})",
                    printable(other)
                ),
            )),
        }
    }

    /// Tink's `KeyData` of this key: type URL, serialized proto (a secret for
    /// symmetric keys) and key material type.
    pub(crate) fn key_data(&self) -> (&'static str, Zeroizing<Vec<u8>>, &'static str) {
        match self {
            Primitive::AesGcm(k) => (
                AES_GCM_TYPE_URL,
                Zeroizing::new(key_proto(0x1a, k.bytes())),
                "SYMMETRIC",
            ),
            Primitive::AesSiv(k) => (
                AES_SIV_TYPE_URL,
                Zeroizing::new(key_proto(0x12, k.bytes())),
                "SYMMETRIC",
            ),
            // No secret: the KEK URI and the DEK template.
            Primitive::KmsEnvelope(k) => (
                KMS_ENVELOPE_TYPE_URL,
                envelope_proto(k.kek_uri(), k.dek_len()),
                "REMOTE",
            ),
        }
    }
}

/// Tink's `KmsEnvelopeAeadKey` proto, as Tink writes it: `{ version 0,
/// params { kek_uri, dek_template { AesGcmKey, AesGcmKeyFormat { key_size },
/// TINK } } }`.
fn envelope_proto(kek_uri: &str, dek_len: u8) -> Zeroizing<Vec<u8>> {
    use crate::proto::Writer;
    let mut format = Writer::new();
    format.uint(2, u64::from(dek_len));
    let mut template = Writer::new();
    template
        .string(1, AES_GCM_TYPE_URL)
        .bytes(2, &format.buf)
        .uint(3, 1);
    let mut params = Writer::new();
    params.string(1, kek_uri).bytes(2, &template.buf);
    let mut key = Writer::new();
    key.bytes(2, &params.buf);
    key.buf
}

/// Reads a `KmsEnvelopeAeadKey` proto: the KEK URI and the DEK size. The
/// DEK template must be AES-GCM (its output prefix is ignored, as Tink
/// does: a DEK's ciphertext carries none). Unknown fields are skipped, as
/// protobuf readers do.
fn parse_envelope_proto(proto: &[u8]) -> Result<(String, u8), String> {
    use crate::proto::{fields, Value};
    let mut params = None;
    for f in fields(proto) {
        match f? {
            (1, Value::Varint(0)) => {}
            (1, Value::Varint(v)) => {
                return Err(format!(
                    "KmsEnvelopeAeadKey version {v} is not supported (only 0)"
                ))
            }
            (2, Value::Bytes(b)) => params = Some(b),
            (1 | 2, _) => return Err("KmsEnvelopeAeadKey has a field of the wrong type".into()),
            _ => {}
        }
    }
    let params = params.ok_or("KmsEnvelopeAeadKey has no params")?;
    let (mut uri, mut template) = (None, None);
    for f in fields(params) {
        match f? {
            (1, Value::Bytes(b)) => uri = Some(b),
            (2, Value::Bytes(b)) => template = Some(b),
            (1 | 2, _) => {
                return Err("KmsEnvelopeAeadKey params have a field of the wrong type".into())
            }
            _ => {}
        }
    }
    let uri = std::str::from_utf8(uri.ok_or("KmsEnvelopeAeadKey has no kek_uri")?)
        .map_err(|_| "KmsEnvelopeAeadKey kek_uri is not UTF-8".to_owned())?;
    if uri.is_empty() {
        return Err("KmsEnvelopeAeadKey has an empty kek_uri".into());
    }
    let template = template.ok_or("KmsEnvelopeAeadKey has no dek_template")?;
    let (mut type_url, mut format) = (None, &[][..]);
    for f in fields(template) {
        match f? {
            (1, Value::Bytes(b)) => type_url = Some(b),
            (2, Value::Bytes(b)) => format = b,
            _ => {}
        }
    }
    if type_url != Some(AES_GCM_TYPE_URL.as_bytes()) {
        return Err(format!(
            "DEK template type {:?} is not supported (only AesGcmKey)",
            printable(&String::from_utf8_lossy(type_url.unwrap_or_default()))
        ));
    }
    let mut size = 0;
    for f in fields(format) {
        match f? {
            (2, Value::Varint(v)) => size = v,
            (3, Value::Varint(0)) | (1, _) => {}
            (3, Value::Varint(v)) => {
                return Err(format!("AesGcmKeyFormat version {v} is not supported"))
            }
            _ => {}
        }
    }
    match size {
        16 | 32 => Ok((uri.to_owned(), size as u8)),
        other => Err(format!("DEK key size {other} is not 16 or 32")),
    }
}

fn check_material(
    material_type: Option<&str>,
    want: &'static str,
) -> Result<(), (KeysetErrorKind, String)> {
    match material_type {
        None => Ok(()),
        Some(t) if t == want => Ok(()),
        Some(t) => Err((
            KeysetErrorKind::KeyMaterialType,
            format!("key material type {:?} is not {want}", printable(t)),
        )),
    }
}
