//! Key types as data: what each keyset entry holds, chosen by Tink type URL
//! when a key is generated or imported, and the templates that make keys.
//!
//! A key's type decides its primitive and its wire format (`envelope`); the
//! serde wrappers, the stores and [`Keyset::encrypt`](crate::Keyset::encrypt)
//! only ever ask the keyset, so a new key type slots in here and in the wire
//! format without touching them.

use zeroize::Zeroizing;

use crate::cipher::{AesGcmKey, AesSivKey, Backend, NONCE_LEN, SIV_KEY_LEN, SIV_LEN, TAG_LEN};
use crate::error::{Error, KeysetErrorKind};

/// Tink's type URL prefix.
const TYPE_URL_PREFIX: &str = "type.googleapis.com/google.crypto.tink.";
/// The type URL of Tink's AES-GCM key.
pub(crate) const AES_GCM_TYPE_URL: &str = "type.googleapis.com/google.crypto.tink.AesGcmKey";
/// The type URL of Tink's AES-SIV key.
pub(crate) const AES_SIV_TYPE_URL: &str = "type.googleapis.com/google.crypto.tink.AesSivKey";

/// The key types this crate reads and writes, for error messages.
const SUPPORTED: &str = "AesGcmKey, AesSivKey";

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

/// What a key does, with its material: one expanded primitive per key.
#[derive(Clone)]
pub(crate) enum Primitive {
    /// AES-GCM (Tink's `AesGcmKey`): randomized AEAD for values.
    AesGcm(AesGcmKey),
    /// AES-SIV (Tink's `AesSivKey`): deterministic AEAD for record keys.
    AesSiv(AesSivKey),
}

impl Primitive {
    /// A fresh key made from `template`, expanded for `backend`.
    pub(crate) fn generate(template: &KeyTemplate, backend: Backend) -> Result<Self, Error> {
        match template.kind {
            TemplateKind::AesGcm { key_len } => {
                let mut bytes = Zeroizing::new([0u8; 32]);
                crate::keyset::fill_from_os(&mut bytes[..]);
                Ok(Primitive::AesGcm(AesGcmKey::new(
                    &bytes[..usize::from(key_len)],
                    backend,
                )?))
            }
            TemplateKind::AesSiv => {
                let mut bytes = Zeroizing::new([0u8; SIV_KEY_LEN]);
                crate::keyset::fill_from_os(&mut bytes[..]);
                Ok(Primitive::AesSiv(AesSivKey::new(&bytes[..])?))
            }
        }
    }

    /// What the key is for.
    pub(crate) fn family(&self) -> Family {
        match self {
            Primitive::AesGcm(_) => Family::Aead,
            Primitive::AesSiv(_) => Family::Deterministic,
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
        }
    }

    /// Tink's type URL of this key.
    pub(crate) fn type_url(&self) -> &'static str {
        match self {
            Primitive::AesGcm(_) => AES_GCM_TYPE_URL,
            Primitive::AesSiv(_) => AES_SIV_TYPE_URL,
        }
    }

    /// A short human name of the key's type, for `Debug` and listings.
    pub(crate) fn describe(&self) -> &'static str {
        match self {
            Primitive::AesGcm(k) if k.bytes().len() == 16 => "AES-128-GCM",
            Primitive::AesGcm(_) => "AES-256-GCM",
            Primitive::AesSiv(_) => "AES-256-SIV",
        }
    }

    /// The shortest ciphertext this key writes (an empty plaintext's).
    pub(crate) fn min_ciphertext_len(&self) -> usize {
        match self {
            Primitive::AesGcm(_) => PREFIX_LEN + NONCE_LEN + TAG_LEN,
            Primitive::AesSiv(_) => PREFIX_LEN + SIV_LEN,
        }
    }

    /// The same key expanded for `backend`.
    pub(crate) fn with_backend(&self, backend: Backend) -> Result<Self, Error> {
        match self {
            Primitive::AesGcm(k) => k.with_backend(backend).map(Primitive::AesGcm),
            // One implementation: RustCrypto's `aes-siv`.
            Primitive::AesSiv(_) => Ok(self.clone()),
        }
    }

    /// Reads a key from Tink's `KeyData`: its type URL, its serialized proto
    /// and its key material type.
    pub(crate) fn from_key_data(
        type_url: &str,
        value: &[u8],
        material_type: Option<&str>,
        backend: Backend,
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
        }
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

/// A value from the input, cut short and stripped of control characters, for
/// an error message (only used for fields that hold no secrets).
pub(crate) fn printable(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(64).collect()
}

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
    AesGcm { key_len: u8 },
    AesSiv,
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

    /// Tink's type URL of the keys this template makes.
    pub fn type_url(&self) -> &'static str {
        match self.kind {
            TemplateKind::AesGcm { .. } => AES_GCM_TYPE_URL,
            TemplateKind::AesSiv => AES_SIV_TYPE_URL,
        }
    }

    /// What keys of this template are for.
    pub(crate) fn family(&self) -> Family {
        match self.kind {
            TemplateKind::AesGcm { .. } => Family::Aead,
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

/// Encodes Tink's `AesGcmKey` or `AesSivKey` proto `{ version = 0,
/// key_value }`, the key value under `tag` (`0x1a`: field 3 of `AesGcmKey`;
/// `0x12`: field 2 of `AesSivKey`). Version 0 is the proto3 default and is
/// omitted, as Tink itself writes it.
fn key_proto(tag: u8, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + key.len());
    out.push(tag);
    // AES keys are 16, 32 or 64 bytes: one varint byte.
    out.push(key.len() as u8);
    out.extend_from_slice(key);
    out
}

/// Decodes such a proto: `version` (field 1, varint, must be 0) and the key
/// value (length-delimited, under `key_tag`). Any other field is rejected.
fn parse_key_proto<'a>(proto: &'a [u8], name: &str, key_tag: u8) -> Result<&'a [u8], String> {
    let mut rest = proto;
    let mut key = None;
    while let Some((&tag, tail)) = rest.split_first() {
        rest = tail;
        match tag {
            0x08 => {
                let (version, tail) = read_varint(rest)?;
                rest = tail;
                if version != 0 {
                    return Err(format!(
                        "{name} version {version} is not supported (only 0)"
                    ));
                }
            }
            t if t == key_tag => {
                let (len, tail) = read_varint(rest)?;
                let len = usize::try_from(len)
                    .ok()
                    .filter(|&l| l <= tail.len())
                    .ok_or_else(|| format!("{name} key_value runs past the end"))?;
                if key.is_some() {
                    return Err(format!("{name} key_value appears twice"));
                }
                key = Some(&tail[..len]);
                rest = &tail[len..];
            }
            other => {
                return Err(format!("{name} has an unexpected field tag 0x{other:02x}"));
            }
        }
    }
    key.ok_or_else(|| format!("{name} has no key_value"))
}

/// A protobuf varint of at most 64 bits; one that overflows is an error.
fn read_varint(input: &[u8]) -> Result<(u64, &[u8]), String> {
    let mut value = 0u64;
    for (i, &b) in input.iter().enumerate().take(10) {
        // The tenth byte holds bit 63 only.
        if i == 9 && b > 1 {
            break;
        }
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok((value, &input[i + 1..]));
        }
    }
    Err("malformed varint".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proto_accepts_explicit_version_zero() {
        let mut p = vec![0x08, 0x00];
        p.extend(key_proto(0x1a, &[7u8; 32]));
        assert_eq!(
            parse_key_proto(&p, "AesGcmKey", 0x1a).unwrap(),
            &[7u8; 32][..]
        );
        let mut p = vec![0x08, 0x00];
        p.extend(key_proto(0x12, &[7u8; 64]));
        assert_eq!(
            parse_key_proto(&p, "AesSivKey", 0x12).unwrap(),
            &[7u8; 64][..]
        );
        // The other type's field number is refused.
        assert!(parse_key_proto(&p, "AesGcmKey", 0x1a).is_err());
    }

    fn parse_key_gcm(p: &[u8]) -> Result<&[u8], String> {
        parse_key_proto(p, "AesGcmKey", 0x1a)
    }

    #[test]
    fn proto_rejects_bad_shapes() {
        assert!(parse_key_gcm(&[]).is_err());
        assert!(parse_key_gcm(&[0x08, 0x01, 0x1a, 0x00]).is_err());
        assert!(parse_key_gcm(&[0x1a, 0x21, 0x00]).is_err());
        assert!(parse_key_gcm(&[
            0x1a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01
        ])
        .is_err());
        assert!(parse_key_gcm(&[0x12, 0x00]).is_err());
    }

    #[test]
    fn varints_that_overflow_64_bits_are_rejected() {
        // 2^64 would wrap to 0 if the tenth byte's high bits were dropped.
        let overflow = [0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02];
        assert!(read_varint(&overflow).is_err());
        let mut version = vec![0x08];
        version.extend_from_slice(&overflow);
        version.extend(key_proto(0x1a, &[7u8; 32]));
        assert!(parse_key_gcm(&version).is_err());
        // u64::MAX is the largest varint and still reads.
        let max = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert_eq!(read_varint(&max).unwrap().0, u64::MAX);
    }
}
