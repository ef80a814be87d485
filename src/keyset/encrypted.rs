//! Tink's encrypted keyset format: the binary `Keyset` protobuf, encrypted
//! by a KMS key, in Tink's JSON envelope
//! `{"encryptedKeyset": base64, "keysetInfo": {...}}`.
//!
//! The binary `Keyset` codec is hand-written and bounded (see `proto`):
//! decoding never allocates from a length read off the wire, never panics,
//! and refuses more than [`MAX_KEYS`] keys.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use super::tink_json::{TinkKeyDataIn, TinkKeyIn, TinkKeysetIn};
use super::{KeyStatus, Keyset, MAX_KEYS};
use crate::error::{Error, KeysetErrorKind};
use crate::kms::{printable_uri, KmsClients};
use crate::proto::{fields, Value, Writer};
use crate::stats::KmsOp;

fn status_code(s: KeyStatus) -> u64 {
    match s {
        KeyStatus::Enabled => 1,
        KeyStatus::Disabled => 2,
    }
}

fn status_name(code: u64) -> &'static str {
    match code {
        1 => "ENABLED",
        2 => "DISABLED",
        3 => "DESTROYED",
        _ => "UNKNOWN_STATUS",
    }
}

fn prefix_name(code: u64) -> &'static str {
    match code {
        1 => "TINK",
        2 => "LEGACY",
        3 => "RAW",
        4 => "CRUNCHY",
        _ => "UNKNOWN_PREFIX",
    }
}

fn material_code(name: &str) -> u64 {
    match name {
        "SYMMETRIC" => 1,
        "ASYMMETRIC_PRIVATE" => 2,
        "ASYMMETRIC_PUBLIC" => 3,
        "REMOTE" => 4,
        _ => 0,
    }
}

fn material_name(code: u64) -> &'static str {
    match code {
        1 => "SYMMETRIC",
        2 => "ASYMMETRIC_PRIVATE",
        3 => "ASYMMETRIC_PUBLIC",
        4 => "REMOTE",
        _ => "UNKNOWN_KEYMATERIAL",
    }
}

/// The bytes of a protobuf varint.
fn varint_len(v: u64) -> usize {
    // 7 bits a byte; 0 still takes one.
    (64 - v.leading_zeros() as usize).div_ceil(7).max(1)
}

/// The bytes of a varint field as `Writer::uint` writes it (0 omitted).
fn uint_len(field: u64, v: u64) -> usize {
    if v == 0 {
        0
    } else {
        varint_len(field << 3) + varint_len(v)
    }
}

/// The bytes of a length-delimited field of `len` bytes.
fn bytes_len(field: u64, len: usize) -> usize {
    varint_len((field << 3) | 2) + varint_len(len as u64) + len
}

/// The bytes of a string field as `Writer::string` writes it (empty
/// omitted).
fn string_len(field: u64, s: &str) -> usize {
    if s.is_empty() {
        0
    } else {
        bytes_len(field, s.len())
    }
}

/// A writer whose buffer holds exactly `len` bytes without growing: a
/// buffer that grows while it holds a key leaves a copy of it in the block
/// it was moved out of, which zeroizing never reaches.
fn sized(len: usize) -> Writer {
    Writer {
        buf: Zeroizing::new(Vec::with_capacity(len)),
    }
}

/// The binary `Keyset` proto of `keyset` (a secret: zeroized on drop).
/// Every buffer that holds key bytes is sized exactly before the first
/// byte is written, so none is reallocated.
pub(crate) fn encode(keyset: &Keyset) -> Zeroizing<Vec<u8>> {
    /// One key's fields and the sizes of its two nested messages.
    struct Part<'a> {
        entry: &'a crate::keyset::Entry,
        type_url: &'static str,
        value: Zeroizing<Vec<u8>>,
        material: u64,
        data_len: usize,
        key_len: usize,
    }
    let entries = keyset.entries();
    let mut keys = Vec::with_capacity(entries.len());
    for entry in entries {
        let (type_url, value, material) = entry.primitive.key_data();
        let material = material_code(material);
        let data_len = string_len(1, type_url) + bytes_len(2, value.len()) + uint_len(3, material);
        let key_len = bytes_len(1, data_len)
            + uint_len(2, status_code(entry.status))
            + uint_len(3, u64::from(entry.id.0))
            + uint_len(4, 1);
        keys.push(Part {
            entry,
            type_url,
            value,
            material,
            data_len,
            key_len,
        });
    }
    let primary = u64::from(keyset.primary().0);
    let total = uint_len(1, primary) + keys.iter().map(|k| bytes_len(2, k.key_len)).sum::<usize>();
    let mut out = sized(total);
    out.uint(1, primary);
    for k in &keys {
        let mut data = sized(k.data_len);
        data.string(1, k.type_url)
            .bytes(2, &k.value)
            .uint(3, k.material);
        debug_assert_eq!(data.buf.len(), k.data_len);
        let mut key = sized(k.key_len);
        key.bytes(1, &data.buf)
            .uint(2, status_code(k.entry.status))
            .uint(3, u64::from(k.entry.id.0))
            .uint(4, 1);
        debug_assert_eq!(key.buf.len(), k.key_len);
        out.bytes(2, &key.buf);
    }
    debug_assert_eq!(out.buf.len(), total);
    out.buf
}

fn bad(why: impl Into<String>) -> Error {
    Error::keyset(KeysetErrorKind::KeyFormat, why)
}

fn u32_field(v: u64, what: &str) -> Result<i64, Error> {
    u32::try_from(v)
        .map(i64::from)
        .map_err(|_| bad(format!("{what} {v} is not a 32-bit integer")))
}

/// Reads a binary `Keyset` proto into the fields the JSON reader fills.
pub(crate) fn decode(bytes: &[u8]) -> Result<TinkKeysetIn, Error> {
    let mut primary = 0;
    let mut keys = Vec::new();
    for f in fields(bytes) {
        match f.map_err(bad)? {
            (1, Value::Varint(v)) => primary = u32_field(v, "primary key id")?,
            (2, Value::Bytes(k)) => {
                if keys.len() >= MAX_KEYS {
                    return Err(Error::keyset(
                        KeysetErrorKind::TooManyKeys,
                        format!("more than {MAX_KEYS} keys"),
                    ));
                }
                keys.push(decode_key(k)?);
            }
            (1 | 2, _) => return Err(bad("Keyset has a field of the wrong type")),
            _ => {}
        }
    }
    Ok(TinkKeysetIn {
        primary_key_id: Some(primary),
        key: keys,
    })
}

fn decode_key(bytes: &[u8]) -> Result<TinkKeyIn, Error> {
    let (mut data, mut status, mut id, mut prefix) = (None, 0, 0, 0);
    for f in fields(bytes) {
        match f.map_err(bad)? {
            (1, Value::Bytes(d)) => data = Some(decode_key_data(d)?),
            (2, Value::Varint(v)) => status = v,
            (3, Value::Varint(v)) => id = u32_field(v, "key id")?,
            (4, Value::Varint(v)) => prefix = v,
            (1..=4, _) => return Err(bad("Keyset.Key has a field of the wrong type")),
            _ => {}
        }
    }
    Ok(TinkKeyIn {
        key_data: data,
        status: status_name(status).to_owned(),
        key_id: id,
        output_prefix_type: prefix_name(prefix).to_owned(),
    })
}

fn decode_key_data(bytes: &[u8]) -> Result<TinkKeyDataIn, Error> {
    let (mut type_url, mut value, mut material) = (&[][..], &[][..], 0);
    for f in fields(bytes) {
        match f.map_err(bad)? {
            (1, Value::Bytes(b)) => type_url = b,
            (2, Value::Bytes(b)) => value = b,
            (3, Value::Varint(v)) => material = v,
            (1..=3, _) => return Err(bad("KeyData has a field of the wrong type")),
            _ => {}
        }
    }
    let type_url = std::str::from_utf8(type_url)
        .map_err(|_| bad("KeyData type_url is not UTF-8"))?
        .to_owned();
    Ok(TinkKeyDataIn {
        type_url,
        value: Zeroizing::new(BASE64.encode(value)),
        key_material_type: Some(material_name(material).to_owned()),
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct EncryptedIn {
    encrypted_keyset: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EncryptedOut<'a> {
    encrypted_keyset: String,
    keyset_info: Info<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Info<'a> {
    primary_key_id: u32,
    key_info: Vec<KeyInfo<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct KeyInfo<'a> {
    type_url: &'a str,
    status: &'static str,
    key_id: u32,
    output_prefix_type: &'static str,
}

impl Keyset {
    /// Reads Tink's encrypted keyset (`{"encryptedKeyset": ..., "keysetInfo":
    /// ...}`, as Tink's `KeysetHandle.write` with a KMS AEAD writes it): the
    /// KMS key `kek_uri` decrypts the keyset, bound to `associated_data`
    /// (for AWS KMS Tink passes it as the encryption context
    /// `{"associatedData": hex}`; Vault takes none). One KMS call. The KMS
    /// client is found as for [`KeyTemplate::kms_envelope`](crate::KeyTemplate::kms_envelope).
    ///
    /// # Errors
    /// [`Error::Kms`] if the KMS fails or refuses (another key, another
    /// associated data, a damaged blob); [`Error::Keyset`] if the JSON or
    /// the decrypted keyset is malformed.
    pub fn from_encrypted_tink_json(
        json: &str,
        kek_uri: &str,
        associated_data: &[u8],
    ) -> Result<Self, Error> {
        read_encrypted(json, kek_uri, associated_data, None)
    }

    /// [`from_encrypted_tink_json`](Keyset::from_encrypted_tink_json) with the
    /// KMS clients (for the keyset's KEK and for its envelope keys) taken
    /// from `kms` only.
    ///
    /// # Errors
    /// As [`from_encrypted_tink_json`](Keyset::from_encrypted_tink_json).
    pub fn from_encrypted_tink_json_with(
        json: &str,
        kek_uri: &str,
        associated_data: &[u8],
        kms: &KmsClients,
    ) -> Result<Self, Error> {
        read_encrypted(json, kek_uri, associated_data, Some(kms))
    }

    /// Writes the keyset in Tink's encrypted keyset format, encrypted by the
    /// KMS key `kek_uri` and bound to `associated_data`; Tink reads it with
    /// `KeysetHandle.read_with_associated_data` (or `read` when empty). One
    /// KMS call. The output holds no key in the clear.
    ///
    /// # Errors
    /// [`Error::Kms`] if no client supports `kek_uri` or the KMS fails.
    pub fn to_encrypted_tink_json(
        &self,
        kek_uri: &str,
        associated_data: &[u8],
    ) -> Result<String, Error> {
        write_encrypted(self, kek_uri, associated_data, None)
    }

    /// [`to_encrypted_tink_json`](Keyset::to_encrypted_tink_json) with the KMS
    /// client taken from `kms` only.
    ///
    /// # Errors
    /// As [`to_encrypted_tink_json`](Keyset::to_encrypted_tink_json).
    pub fn to_encrypted_tink_json_with(
        &self,
        kek_uri: &str,
        associated_data: &[u8],
        kms: &KmsClients,
    ) -> Result<String, Error> {
        write_encrypted(self, kek_uri, associated_data, Some(kms))
    }
}

fn read_encrypted(
    json: &str,
    kek_uri: &str,
    ad: &[u8],
    kms: Option<&KmsClients>,
) -> Result<Keyset, Error> {
    let parsed: EncryptedIn = serde_json::from_str(json).map_err(|e| {
        Error::keyset(
            KeysetErrorKind::Json,
            format!(
                "not a Tink encrypted keyset (line {} column {})",
                e.line(),
                e.column()
            ),
        )
    })?;
    let blob = BASE64
        .decode(parsed.encrypted_keyset.trim())
        .map_err(|_| Error::keyset(KeysetErrorKind::Base64, "encryptedKeyset is not base64"))?;
    let remote = crate::kms::resolve(kek_uri, kms)?;
    let uri = printable_uri(kek_uri);
    let bytes = crate::stats::process_kms_call(KmsOp::Decrypt, &uri, || remote.decrypt(&blob, ad))
        .map_err(|e| match e {
            Error::Kms { detail, cause } => Error::Kms {
                detail: format!(
                    "decrypting a keyset with {}: {detail}",
                    printable_uri(kek_uri)
                ),
                cause,
            },
            other => other,
        })?;
    Keyset::from_parsed(decode(&bytes)?, kms)
}

fn write_encrypted(
    keyset: &Keyset,
    kek_uri: &str,
    ad: &[u8],
    kms: Option<&KmsClients>,
) -> Result<String, Error> {
    let remote = crate::kms::resolve(kek_uri, kms)?;
    let uri = printable_uri(kek_uri);
    let blob = crate::stats::process_kms_call(KmsOp::Encrypt, &uri, || {
        remote.encrypt(&encode(keyset), ad)
    })?;
    let out = EncryptedOut {
        encrypted_keyset: BASE64.encode(blob),
        keyset_info: Info {
            primary_key_id: keyset.primary().0,
            key_info: keyset
                .entries()
                .iter()
                .map(|e| KeyInfo {
                    type_url: e.primitive.type_url(),
                    status: match e.status {
                        KeyStatus::Enabled => "ENABLED",
                        KeyStatus::Disabled => "DISABLED",
                    },
                    key_id: e.id.0,
                    output_prefix_type: "TINK",
                })
                .collect(),
        },
    };
    serde_json::to_string(&out).map_err(|e| Error::kms("encoding an encrypted keyset", e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::KeyTemplate;

    #[test]
    fn binary_keysets_round_trip() {
        let mut ks = Keyset::generate();
        ks.rotate_with(KeyTemplate::aes128_gcm()).unwrap();
        let first = ks.keys().next().unwrap().0;
        ks.disable(first).unwrap();
        let bytes = encode(&ks);
        let back = Keyset::from_parsed(decode(&bytes).unwrap(), None).unwrap();
        assert_eq!(back.to_tink_json(), ks.to_tink_json());
        assert_eq!(*encode(&back), *bytes);
    }

    #[test]
    fn keysets_are_encoded_into_buffers_of_their_exact_size() {
        let varints = [
            0,
            1,
            127,
            128,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX,
        ];
        for v in varints {
            let mut w = Writer::new();
            w.uint(1, v);
            assert_eq!(w.buf.len(), uint_len(1, v), "{v}");
        }
        for len in [0, 1, 127, 128, 300, 16_384] {
            let mut w = Writer::new();
            w.bytes(2, &vec![7; len]);
            assert_eq!(w.buf.len(), bytes_len(2, len), "{len}");
        }
        let mut ks = Keyset::generate();
        for _ in 0..20 {
            ks.rotate_with(KeyTemplate::aes128_gcm()).unwrap();
            ks.rotate();
        }
        let first = ks.keys().next().unwrap().0;
        ks.disable(first).unwrap();
        for ks in [
            Keyset::generate(),
            ks,
            Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap(),
        ] {
            let bytes = encode(&ks);
            assert_eq!(bytes.len(), bytes.capacity());
            let back = Keyset::from_parsed(decode(&bytes).unwrap(), None).unwrap();
            assert_eq!(back.to_tink_json(), ks.to_tink_json());
        }
    }

    #[test]
    fn hostile_bytes_never_panic() {
        let bytes = encode(&Keyset::generate());
        for n in 0..bytes.len() {
            let _ = decode(&bytes[..n]).and_then(|p| Keyset::from_parsed(p, None));
        }
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut b = bytes.to_vec();
                b[i] ^= 1 << bit;
                let _ = decode(&b).and_then(|p| Keyset::from_parsed(p, None));
            }
        }
        // A key count past the limit is refused without reading on.
        let mut many = Vec::new();
        for _ in 0..=MAX_KEYS {
            many.extend_from_slice(&[0x12, 0x00]);
        }
        assert_eq!(
            decode(&many).err().and_then(|e| e.keyset_kind()),
            Some(KeysetErrorKind::TooManyKeys)
        );
    }
}
