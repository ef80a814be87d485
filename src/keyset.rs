//! Keys, key ids, statuses and Tink's cleartext JSON keyset format.
//! Nothing here knows about values, codecs or stores.

use core::fmt;
use std::sync::Arc;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use rand::{Rng as _, TryRng as _};
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use crate::cipher::KeyMaterial;
use crate::error::Error;

/// The type URL of Tink's AES-GCM key.
pub(crate) const AES_GCM_TYPE_URL: &str = "type.googleapis.com/google.crypto.tink.AesGcmKey";

/// The most keys a keyset may hold (a bound on hostile keyset JSON).
pub const MAX_KEYS: usize = 4096;

/// A key's id: the 32-bit number that Tink writes, big-endian, after the
/// version byte of every ciphertext.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyId(pub u32);

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A key's status, as in Tink.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyStatus {
    /// The key decrypts (and encrypts, when primary).
    Enabled,
    /// The key is kept but never decrypts; it can be enabled again.
    Disabled,
}

impl KeyStatus {
    fn as_tink(self) -> &'static str {
        match self {
            KeyStatus::Enabled => "ENABLED",
            KeyStatus::Disabled => "DISABLED",
        }
    }
}

#[derive(Clone)]
pub(crate) struct Entry {
    pub(crate) id: KeyId,
    pub(crate) status: KeyStatus,
    pub(crate) material: KeyMaterial,
}

#[derive(Clone)]
struct Inner {
    primary: usize,
    keys: Vec<Entry>,
}

/// A set of AES-GCM keys with one primary: values are encrypted under the
/// primary key and decrypted under whichever enabled key their key id names.
///
/// Cheap to clone: clones share the same immutable key material. Calls that
/// change a keyset ([`rotate`](Keyset::rotate), [`disable`](Keyset::disable),
/// ...) change only the handle they are called on; serializers built from
/// another clone keep the keys they were built with.
///
/// # Security
/// Key bytes are zeroized when the last clone is dropped (best effort: copies
/// the allocator or the OS made earlier are out of reach). `Debug` shows key
/// ids and statuses only.
///
/// ```
/// use tombstone_crypt::Keyset;
///
/// let mut keyset = Keyset::generate();
/// let old = keyset.primary();
/// let new = keyset.rotate();
/// assert_ne!(old, new);
/// assert_eq!(keyset.primary(), new);
/// assert_eq!(keyset.len(), 2);
/// ```
#[derive(Clone)]
pub struct Keyset {
    inner: Arc<Inner>,
}

impl fmt::Debug for Keyset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Keys<'a>(&'a [Entry]);
        impl fmt::Debug for Keys<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_list()
                    .entries(
                        self.0
                            .iter()
                            .map(|e| (e.id, e.status, e.material.bytes().len() * 8)),
                    )
                    .finish()
            }
        }
        f.debug_struct("Keyset")
            .field("primary", &self.primary())
            .field("keys (id, status, bits)", &Keys(&self.inner.keys))
            .finish_non_exhaustive()
    }
}

fn fresh_key_bytes() -> Zeroizing<[u8; 32]> {
    let mut bytes = Zeroizing::new([0u8; 32]);
    // Keys come straight from the OS; values' nonces use a thread-local CSPRNG.
    if rand::rngs::SysRng.try_fill_bytes(&mut bytes[..]).is_err() {
        // Fall back to the OS-seeded thread RNG, which panics only if the OS
        // cannot provide randomness at all.
        rand::rng().fill_bytes(&mut bytes[..]);
    }
    bytes
}

impl Keyset {
    /// A new keyset with one fresh AES-256-GCM key, which is primary.
    ///
    /// # Panics
    /// If the operating system cannot provide randomness.
    pub fn generate() -> Self {
        let bytes = fresh_key_bytes();
        let material = KeyMaterial::from_bytes(&bytes[..]).expect("32 bytes is an AES-256 key");
        let id = KeyId(rand::rng().next_u32());
        Keyset {
            inner: Arc::new(Inner {
                primary: 0,
                keys: vec![Entry {
                    id,
                    status: KeyStatus::Enabled,
                    material,
                }],
            }),
        }
    }

    /// Adds a fresh AES-256-GCM key, enabled but not primary, and returns its
    /// id. Use this to stage a key everywhere before making it primary with
    /// [`set_primary`](Keyset::set_primary).
    ///
    /// # Panics
    /// If the operating system cannot provide randomness.
    pub fn add_key(&mut self) -> KeyId {
        let bytes = fresh_key_bytes();
        let material = KeyMaterial::from_bytes(&bytes[..]).expect("32 bytes is an AES-256 key");
        let mut id = KeyId(rand::rng().next_u32());
        while self.find(id).is_some() {
            id = KeyId(rand::rng().next_u32());
        }
        Arc::make_mut(&mut self.inner).keys.push(Entry {
            id,
            status: KeyStatus::Enabled,
            material,
        });
        id
    }

    /// Adds a fresh AES-256-GCM key and makes it primary; the old keys stay
    /// and keep decrypting. Returns the new primary's id.
    ///
    /// # Panics
    /// If the operating system cannot provide randomness.
    pub fn rotate(&mut self) -> KeyId {
        let id = self.add_key();
        let inner = Arc::make_mut(&mut self.inner);
        inner.primary = inner.keys.len() - 1;
        id
    }

    /// Makes the enabled key `id` primary.
    ///
    /// # Errors
    /// [`Error::KeyNotFound`] if no such key, [`Error::KeyDisabled`] if it is
    /// disabled.
    pub fn set_primary(&mut self, id: KeyId) -> Result<(), Error> {
        let i = self.find(id).ok_or(Error::KeyNotFound(id))?;
        if self.inner.keys[i].status != KeyStatus::Enabled {
            return Err(Error::KeyDisabled(id));
        }
        Arc::make_mut(&mut self.inner).primary = i;
        Ok(())
    }

    /// Disables key `id`: it stays in the keyset but decrypts nothing.
    ///
    /// # Errors
    /// [`Error::KeyNotFound`] if no such key, [`Error::PrimaryKey`] if it is
    /// the primary.
    pub fn disable(&mut self, id: KeyId) -> Result<(), Error> {
        self.set_status(id, KeyStatus::Disabled)
    }

    /// Enables key `id` again.
    ///
    /// # Errors
    /// [`Error::KeyNotFound`] if no such key.
    pub fn enable(&mut self, id: KeyId) -> Result<(), Error> {
        self.set_status(id, KeyStatus::Enabled)
    }

    /// Removes key `id` for good (Tink's "destroy"): values under it can no
    /// longer be decrypted by this keyset.
    ///
    /// # Errors
    /// [`Error::KeyNotFound`] if no such key, [`Error::PrimaryKey`] if it is
    /// the primary.
    pub fn remove(&mut self, id: KeyId) -> Result<(), Error> {
        let i = self.find(id).ok_or(Error::KeyNotFound(id))?;
        if i == self.inner.primary {
            return Err(Error::PrimaryKey(id));
        }
        let inner = Arc::make_mut(&mut self.inner);
        inner.keys.remove(i);
        if inner.primary > i {
            inner.primary -= 1;
        }
        Ok(())
    }

    fn set_status(&mut self, id: KeyId, status: KeyStatus) -> Result<(), Error> {
        let i = self.find(id).ok_or(Error::KeyNotFound(id))?;
        if i == self.inner.primary && status != KeyStatus::Enabled {
            return Err(Error::PrimaryKey(id));
        }
        Arc::make_mut(&mut self.inner).keys[i].status = status;
        Ok(())
    }

    fn find(&self, id: KeyId) -> Option<usize> {
        self.inner.keys.iter().position(|e| e.id == id)
    }

    /// The primary key's id: every new value is encrypted under it.
    pub fn primary(&self) -> KeyId {
        self.inner.keys[self.inner.primary].id
    }

    /// The ids and statuses of all keys, in keyset order.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = (KeyId, KeyStatus)> + '_ {
        self.inner.keys.iter().map(|e| (e.id, e.status))
    }

    /// How many keys the keyset holds (enabled and disabled).
    pub fn len(&self) -> usize {
        self.inner.keys.len()
    }

    /// Always `false`: a keyset has at least its primary key.
    pub fn is_empty(&self) -> bool {
        self.inner.keys.is_empty()
    }

    pub(crate) fn primary_entry(&self) -> &Entry {
        &self.inner.keys[self.inner.primary]
    }

    /// The key that may decrypt a value under `id`.
    pub(crate) fn decrypting_key(&self, id: KeyId) -> Result<&KeyMaterial, Error> {
        // The primary first: nearly every value is under it.
        let primary = self.primary_entry();
        if primary.id == id {
            return Ok(&primary.material);
        }
        match self.inner.keys.iter().find(|e| e.id == id) {
            Some(e) if e.status == KeyStatus::Enabled => Ok(&e.material),
            Some(_) => Err(Error::KeyDisabled(id)),
            None => Err(Error::UnknownKeyId(id)),
        }
    }

    /// Reads a keyset in Tink's cleartext JSON keyset format.
    ///
    /// Keys with output prefix `TINK` are used; `DISABLED` keys are kept but
    /// never decrypt; `DESTROYED` keys are dropped. `RAW`, `LEGACY` or
    /// `CRUNCHY` keys, key types other than AES-GCM and key sizes other than
    /// 128 and 256 bits are rejected.
    ///
    /// # Security
    /// The JSON holds the keys in the clear: treat it as a secret. The text is
    /// not zeroized by this function (it is the caller's).
    ///
    /// # Errors
    /// [`Error::Keyset`], naming what is wrong (never quoting key bytes).
    ///
    /// ```
    /// use tombstone_crypt::Keyset;
    ///
    /// let keyset = Keyset::generate();
    /// let json = keyset.to_tink_json();
    /// let back = Keyset::from_tink_json(&json)?;
    /// assert_eq!(back.primary(), keyset.primary());
    /// assert!(Keyset::from_tink_json("{}").is_err());
    /// # Ok::<(), tombstone_crypt::Error>(())
    /// ```
    pub fn from_tink_json(json: &str) -> Result<Self, Error> {
        let parsed: TinkKeyset = serde_json::from_str(json).map_err(|e| {
            // serde_json's message may quote the input (key bytes): keep only
            // the kind and the place.
            Error::Keyset(format!(
                "bad JSON ({}) at line {} column {}",
                json_kind(&e),
                e.line(),
                e.column()
            ))
        })?;
        if parsed.key.len() > MAX_KEYS {
            return Err(Error::Keyset(format!("more than {MAX_KEYS} keys")));
        }
        let mut keys: Vec<Entry> = Vec::with_capacity(parsed.key.len());
        for (i, k) in parsed.key.iter().enumerate() {
            let id = KeyId(k.key_id);
            let status = match k.status.as_str() {
                "ENABLED" => KeyStatus::Enabled,
                "DISABLED" => KeyStatus::Disabled,
                "DESTROYED" => continue,
                other => {
                    return Err(Error::Keyset(format!(
                        "key {id}: unknown status {:?}",
                        printable(other)
                    )))
                }
            };
            if k.output_prefix_type != "TINK" {
                return Err(Error::Keyset(format!(
                    "key {id}: output prefix {:?} is not supported (only TINK)",
                    printable(&k.output_prefix_type)
                )));
            }
            if k.key_data.type_url != AES_GCM_TYPE_URL {
                return Err(Error::Keyset(format!(
                    "key {id}: key type {:?} is not supported (only {AES_GCM_TYPE_URL})",
                    printable(&k.key_data.type_url)
                )));
            }
            if let Some(t) = &k.key_data.key_material_type {
                if t != "SYMMETRIC" {
                    return Err(Error::Keyset(format!(
                        "key {id}: key material type {:?} is not SYMMETRIC",
                        printable(t)
                    )));
                }
            }
            if keys.iter().any(|e| e.id == id) {
                return Err(Error::Keyset(format!("key id {id} appears twice")));
            }
            let proto =
                Zeroizing::new(BASE64.decode(k.key_data.value.as_bytes()).map_err(|_| {
                    Error::Keyset(format!("key {id} (entry {i}): value is not base64"))
                })?);
            let key_bytes = parse_aes_gcm_key_proto(&proto)
                .map_err(|why| Error::Keyset(format!("key {id}: {why}")))?;
            let material = KeyMaterial::from_bytes(key_bytes).map_err(|_| {
                Error::Keyset(format!(
                    "key {id}: AES key must be 16 or 32 bytes, got {}",
                    key_bytes.len()
                ))
            })?;
            keys.push(Entry {
                id,
                status,
                material,
            });
        }
        let primary_id = KeyId(
            parsed
                .primary_key_id
                .ok_or_else(|| Error::Keyset("no primaryKeyId".into()))?,
        );
        let primary = keys
            .iter()
            .position(|e| e.id == primary_id)
            .ok_or_else(|| {
                Error::Keyset(format!(
                    "primary key {primary_id} is not an enabled or disabled key of the keyset"
                ))
            })?;
        if keys[primary].status != KeyStatus::Enabled {
            return Err(Error::Keyset(format!(
                "primary key {primary_id} is not enabled"
            )));
        }
        Ok(Keyset {
            inner: Arc::new(Inner { primary, keys }),
        })
    }

    /// Writes the keyset in Tink's cleartext JSON keyset format, which Tink
    /// (Java, Go, Python, C++) reads with its cleartext keyset reader.
    ///
    /// # Security
    /// The output holds every key in the clear: store it like a password,
    /// or better, encrypt it with a key management service.
    pub fn to_tink_json(&self) -> String {
        let key = self
            .inner
            .keys
            .iter()
            .map(|e| {
                let proto = Zeroizing::new(aes_gcm_key_proto(e.material.bytes()));
                TinkKey {
                    key_data: TinkKeyData {
                        type_url: AES_GCM_TYPE_URL.to_owned(),
                        value: BASE64.encode(&proto[..]),
                        key_material_type: Some("SYMMETRIC".to_owned()),
                    },
                    status: e.status.as_tink().to_owned(),
                    key_id: e.id.0,
                    output_prefix_type: "TINK".to_owned(),
                }
            })
            .collect();
        let ks = TinkKeyset {
            primary_key_id: Some(self.primary().0),
            key,
        };
        serde_json::to_string(&ks).expect("a keyset always serializes")
    }
}

/// A value from the input, cut short and stripped of control characters, for
/// an error message (only used for fields that hold no secrets).
fn printable(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(64).collect()
}

fn json_kind(e: &serde_json::Error) -> &'static str {
    match e.classify() {
        serde_json::error::Category::Io => "I/O",
        serde_json::error::Category::Syntax => "syntax error",
        serde_json::error::Category::Data => "wrong shape for a Tink keyset",
        serde_json::error::Category::Eof => "unexpected end",
    }
}

/// Encodes Tink's `AesGcmKey { version = 0, key_value }` proto. Version 0 is
/// the proto3 default and is omitted, as Tink itself writes it.
fn aes_gcm_key_proto(key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + key.len());
    out.push(0x1a); // field 3, length-delimited
    out.push(u8::try_from(key.len()).expect("AES keys are 16 or 32 bytes"));
    out.extend_from_slice(key);
    out
}

/// Decodes Tink's `AesGcmKey` proto: `version` (field 1, varint, must be 0)
/// and `key_value` (field 3, bytes). Any other field is rejected.
fn parse_aes_gcm_key_proto(proto: &[u8]) -> Result<&[u8], String> {
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
                        "AesGcmKey version {version} is not supported (only 0)"
                    ));
                }
            }
            0x1a => {
                let (len, tail) = read_varint(rest)?;
                let len = usize::try_from(len)
                    .ok()
                    .filter(|&l| l <= tail.len())
                    .ok_or("AesGcmKey key_value runs past the end")?;
                if key.is_some() {
                    return Err("AesGcmKey key_value appears twice".into());
                }
                key = Some(&tail[..len]);
                rest = &tail[len..];
            }
            other => {
                return Err(format!(
                    "AesGcmKey has an unexpected field tag 0x{other:02x}"
                ));
            }
        }
    }
    key.ok_or_else(|| "AesGcmKey has no key_value".to_owned())
}

fn read_varint(input: &[u8]) -> Result<(u64, &[u8]), String> {
    let mut value = 0u64;
    for (i, &b) in input.iter().enumerate().take(10) {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok((value, &input[i + 1..]));
        }
    }
    Err("AesGcmKey has a malformed varint".into())
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct TinkKeyset {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    primary_key_id: Option<u32>,
    key: Vec<TinkKey>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct TinkKey {
    key_data: TinkKeyData,
    status: String,
    key_id: u32,
    output_prefix_type: String,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct TinkKeyData {
    type_url: String,
    value: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    key_material_type: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proto_accepts_explicit_version_zero() {
        let mut p = vec![0x08, 0x00];
        p.extend(aes_gcm_key_proto(&[7u8; 32]));
        assert_eq!(parse_aes_gcm_key_proto(&p).unwrap(), &[7u8; 32][..]);
    }

    #[test]
    fn proto_rejects_bad_shapes() {
        assert!(parse_aes_gcm_key_proto(&[]).is_err());
        assert!(parse_aes_gcm_key_proto(&[0x08, 0x01, 0x1a, 0x00]).is_err());
        assert!(parse_aes_gcm_key_proto(&[0x1a, 0x21, 0x00]).is_err());
        assert!(parse_aes_gcm_key_proto(&[
            0x1a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01
        ])
        .is_err());
        assert!(parse_aes_gcm_key_proto(&[0x12, 0x00]).is_err());
    }
}
