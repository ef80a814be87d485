//! What the fuzz targets and the seed generator share: a fixed keyset, a few
//! contexts, the AAD policies and the structured inputs. No checks live
//! here; each target in `fuzz_targets/` states its own.

use std::sync::OnceLock;

use arbitrary::Arbitrary;
use tombstone_crypt::{AadPolicy, Context, KeyId, Keyset};

/// The fixed keyset's primary: AES-256, key bytes `0x11` x 32.
pub const PRIMARY: KeyId = KeyId(1_234_567);
/// An enabled secondary key: AES-128, key bytes `0x22` x 16.
pub const SECONDARY: KeyId = KeyId(2_345_678);
/// A disabled key: AES-256, key bytes `0x33` x 32.
pub const DISABLED: KeyId = KeyId(3_456_789);

/// The fixed keyset in Tink's cleartext JSON (test keys, never secret).
pub const KEYSET_JSON: &str = r#"{"primaryKeyId":1234567,"key":[
{"keyData":{"typeUrl":"type.googleapis.com/google.crypto.tink.AesGcmKey","value":"GiAREREREREREREREREREREREREREREREREREREREREREQ==","keyMaterialType":"SYMMETRIC"},"status":"ENABLED","keyId":1234567,"outputPrefixType":"TINK"},
{"keyData":{"typeUrl":"type.googleapis.com/google.crypto.tink.AesGcmKey","value":"GhAiIiIiIiIiIiIiIiIiIiIi","keyMaterialType":"SYMMETRIC"},"status":"ENABLED","keyId":2345678,"outputPrefixType":"TINK"},
{"keyData":{"typeUrl":"type.googleapis.com/google.crypto.tink.AesGcmKey","value":"GiAzMzMzMzMzMzMzMzMzMzMzMzMzMzMzMzMzMzMzMzMzMw==","keyMaterialType":"SYMMETRIC"},"status":"DISABLED","keyId":3456789,"outputPrefixType":"TINK"}
]}"#;

/// The fixed AES-SIV (deterministic) keyset: an enabled primary (key bytes
/// `0x44` x 64) and a disabled key (`0x55` x 64). Test keys, never secret.
pub const SIV_KEYSET_JSON: &str = r#"{"primaryKeyId":4567890,"key":[
{"keyData":{"typeUrl":"type.googleapis.com/google.crypto.tink.AesSivKey","value":"EkBERERERERERERERERERERERERERERERERERERERERERERERERERERERERERERERERERERERERERERERERERERE","keyMaterialType":"SYMMETRIC"},"status":"ENABLED","keyId":4567890,"outputPrefixType":"TINK"},
{"keyData":{"typeUrl":"type.googleapis.com/google.crypto.tink.AesSivKey","value":"EkBVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVVV","keyMaterialType":"SYMMETRIC"},"status":"DISABLED","keyId":5678901,"outputPrefixType":"TINK"}
]}"#;

/// The primary of [`SIV_KEYSET_JSON`].
pub const SIV_PRIMARY: KeyId = KeyId(4_567_890);

/// The fixed AES-SIV keyset, read once.
pub fn siv_keyset() -> &'static Keyset {
    static KEYSET: OnceLock<Keyset> = OnceLock::new();
    KEYSET.get_or_init(|| {
        Keyset::from_tink_json(SIV_KEYSET_JSON).expect("the fixed SIV keyset is valid")
    })
}

/// The fixed keyset, read once.
pub fn keyset() -> &'static Keyset {
    static KEYSET: OnceLock<Keyset> = OnceLock::new();
    KEYSET.get_or_init(|| Keyset::from_tink_json(KEYSET_JSON).expect("the fixed keyset is valid"))
}

/// The raw bytes of a key of the fixed keyset (for the `__fuzz` hooks).
pub fn key_bytes(id: KeyId) -> Option<&'static [u8]> {
    const K1: [u8; 32] = [0x11; 32];
    const K2: [u8; 16] = [0x22; 16];
    const K3: [u8; 32] = [0x33; 32];
    match id {
        PRIMARY => Some(&K1),
        SECONDARY => Some(&K2),
        DISABLED => Some(&K3),
        _ => None,
    }
}

/// The contexts a selector byte picks from (its low two bits).
pub const CONTEXTS: [(&str, Option<&[u8]>); 4] = [
    ("orders", Some(b"order-1")),
    ("orders", None),
    ("", Some(b"")),
    ("events-store", Some(&[0x00, 0xff, 0x01])),
];

/// The context picked by `selector`.
pub fn context(selector: u8) -> Context<'static> {
    let (topic, key) = CONTEXTS[usize::from(selector & 3)];
    match key {
        Some(k) => Context::new(topic).with_key(k),
        None => Context::new(topic),
    }
}

/// The AAD policy picked by `selector` (bits 2 and 3).
pub fn policy(selector: u8) -> AadPolicy {
    Policy::ALL[usize::from((selector >> 2) & 3) % 3].into()
}

/// The selector byte for context `ctx` (0..4) and policy `policy` (0..3).
pub fn selector(ctx: u8, policy: u8) -> u8 {
    (ctx & 3) | ((policy % 3) << 2)
}

/// An AAD policy as fuzz input.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// [`AadPolicy::TopicAndKey`].
    TopicAndKey,
    /// [`AadPolicy::Topic`].
    Topic,
    /// [`AadPolicy::None`].
    None,
}

impl Policy {
    /// Every policy, in the order of [`policy`]'s index.
    pub const ALL: [Policy; 3] = [Policy::TopicAndKey, Policy::Topic, Policy::None];
}

impl From<Policy> for AadPolicy {
    fn from(p: Policy) -> Self {
        match p {
            Policy::TopicAndKey => AadPolicy::TopicAndKey,
            Policy::Topic => AadPolicy::Topic,
            Policy::None => AadPolicy::None,
        }
    }
}

/// A small serde type for the `Bincode` codec (no floats: equality must be
/// reflexive).
#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Small {
    /// An integer (varint in bincode).
    pub id: u64,
    /// A string (length-prefixed UTF-8).
    pub name: String,
    /// A sequence (length-prefixed).
    pub tags: Vec<u16>,
    /// An option.
    pub flag: Option<bool>,
    /// An enum with data.
    pub kind: Kind,
}

/// The enum inside [`Small`].
#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A unit variant.
    Plain,
    /// A tuple variant.
    Sized(u32),
    /// A struct variant.
    Named {
        /// Bytes.
        data: Vec<u8>,
    },
}

/// The input of the `roundtrip` target.
#[derive(Arbitrary, Clone, Debug)]
pub struct RoundtripInput {
    /// The value; `None` is a tombstone.
    pub value: Option<Vec<u8>>,
    /// The topic.
    pub topic: String,
    /// The record key.
    pub key: Option<Vec<u8>>,
    /// The policy the value is encrypted under.
    pub policy: Policy,
    /// The policy a second decryption tries (it works iff the AADs agree).
    pub other_policy: Policy,
}

/// One operation of the `store_ops` target; keys are `k0` to `k5`.
#[derive(Arbitrary, Clone, Debug)]
pub enum Op {
    /// `put(key, value)`; `None` is a delete, `Some(empty)` a value.
    Put(u8, Option<Vec<u8>>),
    /// `delete(key)`.
    Delete(u8),
    /// `get(key)`.
    Get(u8),
    /// `all()`.
    All,
    /// `range(from, to)`, both inclusive.
    Range(u8, u8),
    /// `flush()`.
    Flush,
    /// A new primary key; the store is rebuilt over the same bytes.
    Rotate,
    /// Compacts the changelog in place.
    Compact,
    /// Loses the local state and restores it from the changelog into a
    /// fresh store.
    Restore,
}

/// The input of the `store_ops` target.
#[derive(Arbitrary, Clone, Debug)]
pub struct StoreInput {
    /// The AAD policy of the value serdes.
    pub policy: Policy,
    /// The operations, in order (only the first [`MAX_OPS`] run).
    pub ops: Vec<Op>,
}

/// The most operations one `store_ops` input runs.
pub const MAX_OPS: usize = 64;

/// The record key of `k`.
pub fn store_key(k: u8) -> String {
    format!("k{}", k % 6)
}
