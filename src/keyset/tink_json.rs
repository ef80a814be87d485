//! Tink's cleartext JSON keyset format: reading it
//! ([`Keyset::from_tink_json`]) and writing it ([`Keyset::to_tink_json`]),
//! the serde structs of Tink's keyset fields (which the binary proto of an
//! encrypted keyset, in `keyset/encrypted.rs`, is decoded into too), and
//! `Keyset::from_parsed`, which checks those fields and makes a keyset of
//! them. Key values pass through zeroized buffers only (base64, JSON
//! escapes, the written text), sized once so that none is reallocated.

use std::sync::Arc;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use super::{Entry, Inner, KeyStatus, Keyset, MAX_KEYS};
use crate::cipher::Backend;
use crate::error::printable;
use crate::error::{Error, KeysetErrorKind};
use crate::key_id::KeyId;
use crate::kms::KmsClients;
use crate::primitive::Primitive;
use crate::stats::Stats;

impl KeyStatus {
    fn as_tink(self) -> &'static str {
        match self {
            KeyStatus::Enabled => "ENABLED",
            KeyStatus::Disabled => "DISABLED",
        }
    }
}

impl Keyset {
    /// Reads a keyset in Tink's cleartext JSON keyset format.
    ///
    /// Keys with output prefix `TINK` are used; `DISABLED` keys are kept but
    /// never decrypt; `DESTROYED` keys are dropped (with or without their
    /// `keyData`). `RAW`, `LEGACY` or `CRUNCHY` keys and key types this crate
    /// does not implement are rejected with an error that names them. As
    /// protobuf's JSON readers do, key ids may be written as unsigned or as
    /// signed 32-bit integers (older Tink writers print ids above 2^31 as
    /// negative numbers), and key values as standard or URL-safe base64,
    /// padded or not.
    ///
    /// # Security
    /// The JSON holds the keys in the clear: treat it as a secret. The text is
    /// not zeroized by this function (it is the caller's); the copies made
    /// while parsing are.
    ///
    /// # Errors
    /// [`Error::Keyset`], with a [`KeysetErrorKind`] and a detail naming what
    /// is wrong (never quoting key bytes).
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
        Keyset::from_tink_json_inner(json, None)
    }

    fn from_tink_json_inner(json: &str, kms: Option<&KmsClients>) -> Result<Self, Error> {
        // serde_json copies a string with an escape into a scratch buffer of
        // its own, grown as it goes and freed unzeroized: a key value with
        // an escaped character (`\/`, `\u003d`) would leave its base64
        // there. Such a text is read from a zeroized copy with those escapes
        // undone (the same JSON), so that every key value is borrowed.
        let unescaped;
        let json = if json.contains('\\') {
            unescaped = unescape_printable(json);
            std::str::from_utf8(&unescaped)
                .map_err(|_| Error::keyset(KeysetErrorKind::Json, "bad JSON (not UTF-8)"))?
        } else {
            json
        };
        let parsed: TinkKeysetIn = serde_json::from_str(json).map_err(|e| {
            // serde_json's message may quote the input (key bytes): keep only
            // the kind and the place.
            Error::keyset(
                KeysetErrorKind::Json,
                format!(
                    "bad JSON ({}) at line {} column {}",
                    json_kind(&e),
                    e.line(),
                    e.column()
                ),
            )
        })?;
        Keyset::from_parsed(parsed, kms)
    }

    /// A keyset from Tink's keyset fields, read from JSON or from the
    /// binary proto of an encrypted keyset.
    pub(crate) fn from_parsed(
        parsed: TinkKeysetIn,
        kms: Option<&KmsClients>,
    ) -> Result<Self, Error> {
        if parsed.key.len() > MAX_KEYS {
            return Err(Error::keyset(
                KeysetErrorKind::TooManyKeys,
                format!("more than {MAX_KEYS} keys"),
            ));
        }
        let backend = Backend::DEFAULT;
        let mut keys: Vec<Entry> = Vec::with_capacity(parsed.key.len());
        for (i, k) in parsed.key.iter().enumerate() {
            let id = key_id(k.key_id)?;
            let status = match k.status.as_str() {
                "ENABLED" => KeyStatus::Enabled,
                "DISABLED" => KeyStatus::Disabled,
                "DESTROYED" => continue,
                other => {
                    return Err(Error::keyset(
                        KeysetErrorKind::UnknownStatus,
                        format!("key {id}: unknown status {:?}", printable(other)),
                    ))
                }
            };
            if k.output_prefix_type != "TINK" {
                return Err(Error::keyset(
                    KeysetErrorKind::UnsupportedOutputPrefix,
                    format!(
                        "key {id}: output prefix {:?} is not supported (only TINK)",
                        printable(&k.output_prefix_type)
                    ),
                ));
            }
            if keys.iter().any(|e| e.id == id) {
                return Err(Error::keyset(
                    KeysetErrorKind::DuplicateKeyId,
                    format!("key id {id} appears twice"),
                ));
            }
            let data = k.key_data.as_ref().ok_or_else(|| {
                Error::keyset(KeysetErrorKind::Json, format!("key {id}: no keyData"))
            })?;
            let proto = decode_base64(&data.value).ok_or_else(|| {
                Error::keyset(
                    KeysetErrorKind::Base64,
                    format!("key {id} (entry {i}): value is not base64"),
                )
            })?;
            let primitive = Primitive::from_key_data(
                &data.type_url,
                &proto,
                data.key_material_type.as_deref(),
                backend,
                kms,
            )
            .map_err(|(kind, why)| Error::keyset(kind, format!("key {id}: {why}")))?;
            keys.push(Entry {
                id,
                status,
                primitive,
            });
        }
        let primary_id = key_id(
            parsed
                .primary_key_id
                .ok_or_else(|| Error::keyset(KeysetErrorKind::NoPrimary, "no primaryKeyId"))?,
        )?;
        let primary = keys
            .iter()
            .position(|e| e.id == primary_id)
            .ok_or_else(|| {
                Error::keyset(
                    KeysetErrorKind::BadPrimary,
                    format!(
                        "primary key {primary_id} is not an enabled or disabled key of the keyset"
                    ),
                )
            })?;
        if keys[primary].status != KeyStatus::Enabled {
            return Err(Error::keyset(
                KeysetErrorKind::BadPrimary,
                format!("primary key {primary_id} is not enabled"),
            ));
        }
        // One kind of key a keyset, as `add_key_with` keeps it: a
        // deterministic key beside randomized ones (or the other way round)
        // would pass a check of the primary and fail at its first use.
        let family = keys[primary].primitive.family();
        if let Some(other) = keys.iter().find(|e| e.primitive.family() != family) {
            return Err(Error::keyset(
                KeysetErrorKind::Template,
                format!(
                    "key {} is a {} key in a keyset of {} keys (its primary's): a keyset holds one kind",
                    other.id,
                    other.primitive.family().name(),
                    family.name()
                ),
            ));
        }
        Ok(Keyset {
            inner: Arc::new(Inner::new(primary, keys, backend, Stats::new())),
        })
    }

    /// [`from_tink_json`](Keyset::from_tink_json) with the KMS clients of
    /// envelope keys (`KmsEnvelopeAeadKey`) taken from `kms` only, not from
    /// the process-wide registry or the environment. No KMS is called.
    ///
    /// # Errors
    /// As [`from_tink_json`](Keyset::from_tink_json); an envelope key whose
    /// KEK URI no client of `kms` supports is an [`Error::Keyset`] of kind
    /// [`KeysetErrorKind::KmsClient`].
    pub fn from_tink_json_with(json: &str, kms: &KmsClients) -> Result<Self, Error> {
        Keyset::from_tink_json_inner(json, Some(kms))
    }

    /// Writes the keyset in Tink's cleartext JSON keyset format, which Tink
    /// (Java, Go, Python, C++) reads with its cleartext keyset reader.
    ///
    /// # Security
    /// The output holds every key in the clear: store it like a password,
    /// or better, encrypt it with a key management service. The copies made
    /// while writing it are zeroized; the returned text is the caller's.
    pub fn to_tink_json(&self) -> String {
        let keys: Vec<TinkKeyOut> = self
            .inner
            .keys
            .iter()
            .map(|e| {
                let (type_url, proto, material) = e.primitive.key_data();
                TinkKeyOut {
                    key_data: TinkKeyDataOut {
                        type_url,
                        value: Zeroizing::new(BASE64.encode(&proto[..])),
                        key_material_type: material,
                    },
                    status: e.status.as_tink(),
                    key_id: e.id.0,
                    output_prefix_type: "TINK",
                }
            })
            .collect();
        // Sized up front so the buffer never reallocates (a reallocation
        // would leave a copy of the key text in freed memory).
        let room = 64
            + keys
                .iter()
                .map(|k| 160 + k.key_data.type_url.len() + k.key_data.value.len())
                .sum::<usize>();
        let mut out = Vec::with_capacity(room);
        let ks = TinkKeysetOut {
            primary_key_id: self.primary().0,
            key: &keys,
        };
        serde_json::to_writer(&mut out, &ks).expect("a keyset always serializes");
        String::from_utf8(out).expect("serde_json writes UTF-8")
    }
}

/// A key id as Tink's JSON writes it: unsigned, or (older writers) signed
/// 32-bit.
fn key_id(n: i64) -> Result<KeyId, Error> {
    if let Ok(id) = u32::try_from(n) {
        return Ok(KeyId(id));
    }
    i32::try_from(n).map(|id| KeyId(id as u32)).map_err(|_| {
        Error::keyset(
            KeysetErrorKind::Json,
            format!("key id {n} is not a 32-bit integer"),
        )
    })
}

/// Standard or URL-safe base64, padded or not, into a zeroized buffer sized
/// once (no reallocation leaves a copy behind).
fn decode_base64(text: &str) -> Option<Zeroizing<Vec<u8>>> {
    use base64::alphabet;
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    const CONFIG: GeneralPurposeConfig =
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent);
    const STANDARD: GeneralPurpose = GeneralPurpose::new(&alphabet::STANDARD, CONFIG);
    const URL_SAFE: GeneralPurpose = GeneralPurpose::new(&alphabet::URL_SAFE, CONFIG);
    let mut buf = Zeroizing::new(vec![0u8; text.len() / 4 * 3 + 3]);
    for engine in [STANDARD, URL_SAFE] {
        if let Ok(n) = engine.decode_slice(text.as_bytes(), &mut buf[..]) {
            buf.truncate(n);
            return Some(buf);
        }
    }
    None
}

/// `json` in a zeroized buffer of its size, with each JSON escape in a
/// string that stands for a printable ASCII character other than `"` and
/// `\` (`\/`, `\u0041`) replaced by that character, in place: the same
/// JSON, which serde_json then reads without unescaping key material into
/// its scratch buffer.
fn unescape_printable(json: &str) -> Zeroizing<Vec<u8>> {
    let mut buf = Zeroizing::new(json.as_bytes().to_vec());
    crate::json_text::unescape_printable(&mut buf);
    buf
}

fn json_kind(e: &serde_json::Error) -> &'static str {
    match e.classify() {
        serde_json::error::Category::Io => "I/O",
        serde_json::error::Category::Syntax => "syntax error",
        serde_json::error::Category::Data => "wrong shape for a Tink keyset",
        serde_json::error::Category::Eof => "unexpected end",
    }
}

fn zeroizing_string<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Zeroizing<String>, D::Error> {
    String::deserialize(d).map(Zeroizing::new)
}

fn serialize_zeroizing<S: serde::Serializer>(
    v: &Zeroizing<String>,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.serialize_str(v)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TinkKeysetIn {
    #[serde(default)]
    pub(crate) primary_key_id: Option<i64>,
    pub(crate) key: Vec<TinkKeyIn>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TinkKeyIn {
    #[serde(default)]
    pub(crate) key_data: Option<TinkKeyDataIn>,
    pub(crate) status: String,
    pub(crate) key_id: i64,
    #[serde(default)]
    pub(crate) output_prefix_type: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TinkKeyDataIn {
    pub(crate) type_url: String,
    #[serde(deserialize_with = "zeroizing_string")]
    pub(crate) value: Zeroizing<String>,
    #[serde(default)]
    pub(crate) key_material_type: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct TinkKeysetOut<'a> {
    primary_key_id: u32,
    key: &'a [TinkKeyOut],
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct TinkKeyOut {
    key_data: TinkKeyDataOut,
    status: &'static str,
    key_id: u32,
    output_prefix_type: &'static str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct TinkKeyDataOut {
    type_url: &'static str,
    #[serde(serialize_with = "serialize_zeroizing")]
    value: Zeroizing<String>,
    key_material_type: &'static str,
}
