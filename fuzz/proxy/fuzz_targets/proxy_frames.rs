//! Arbitrary bytes into the proxy's decoding: frames (the size prefix),
//! Produce requests, Fetch responses, and record batches of a policy
//! topic (values and keys encrypted, the key keyset in rotation).
//!
//! Nothing may panic and nothing may allocate past the frame limit. A
//! partition's batches that encrypt must decrypt again; uncompressed ones
//! decrypt to exactly the bytes that came (the header kept, the records
//! as they were). The fast paths (records transformed straight from their
//! bytes) against the general paths (decoded and encoded again): on Fetch
//! the same result, bytes or refusal; on Produce, under a key keyset not
//! in rotation (where the fast path runs), the same refusal, or batches of
//! the same length (uncompressed) that decrypt to the same bytes.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use tombstone_crypt::{KeyTemplate, Keyset};
use tombstone_crypt_proxy::__fuzz;
use tombstone_crypt_proxy::{Hooks, Policies, TopicPolicy};

/// The largest frame or decompressed batch the target reads.
const LIMIT: usize = 1 << 20;
const TOPIC: &str = "fuzzed";

fn policy() -> &'static (TopicPolicy, Policies) {
    static P: OnceLock<(TopicPolicy, Policies)> = OnceLock::new();
    P.get_or_init(|| {
        let values = Keyset::generate();
        let mut keys = Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap();
        keys.rotate_with(KeyTemplate::aes256_siv()).unwrap();
        let policy = TopicPolicy::keyset(values).with_record_keys(keys).unwrap();
        let policies = Policies::new().with_prefix("", policy.clone());
        (policy, policies)
    })
}

/// Values and keys encrypted, the key keyset not in rotation.
fn unrotated() -> &'static TopicPolicy {
    static P: OnceLock<TopicPolicy> = OnceLock::new();
    P.get_or_init(|| {
        let keys = Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap();
        TopicPolicy::keyset(Keyset::generate())
            .with_record_keys(keys)
            .unwrap()
    })
}

/// The hooks that take every batch through the general path.
fn general() -> Hooks {
    let mut hooks = Hooks::default();
    hooks.general_path = true;
    hooks
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let (policy, policies) = policy();
    match mode % 4 {
        // A frame from the wire, then the Produce path.
        0 => {
            if let Some(frame) = __fuzz::read_frame(rest, LIMIT) {
                assert!(frame.len() <= LIMIT);
                let _ = __fuzz::produce(&frame, policies, LIMIT);
            }
        }
        // A request body as the Produce path sees it.
        1 => {
            let _ = __fuzz::produce(&bytes::Bytes::copy_from_slice(rest), policies, LIMIT);
        }
        // A Fetch response body at a version the first byte picks.
        2 => {
            let Some((&v, body)) = rest.split_first() else {
                return;
            };
            let version = i16::from(v % 13);
            let _ = __fuzz::fetch(
                &bytes::Bytes::copy_from_slice(body),
                version,
                policies,
                LIMIT,
            );
        }
        // A partition's record batches: encrypt, then decrypt.
        _ => {
            let raw = bytes::Bytes::copy_from_slice(rest);
            let general = general();
            assert_eq!(
                __fuzz::decrypt(TOPIC, policy, &raw, LIMIT),
                __fuzz::decrypt_with(TOPIC, policy, &raw, LIMIT, &general),
                "the fast path reads what the general path reads"
            );
            let single = unrotated();
            match (
                __fuzz::encrypt(TOPIC, single, &raw, LIMIT),
                __fuzz::encrypt_with(TOPIC, single, &raw, LIMIT, &general),
            ) {
                (Ok((fast, _)), Ok((slow, _))) => {
                    if uncompressed(&raw) {
                        assert_eq!(fast.len(), slow.len(), "one length either way");
                    }
                    let read = |b| __fuzz::decrypt_with(TOPIC, single, b, LIMIT, &general);
                    assert_eq!(read(&fast), read(&slow), "one plaintext either way");
                }
                (Err(a), Err(b)) => assert_eq!(a, b, "one refusal either way"),
                (a, b) => panic!("the fast path {a:?}, the general path {b:?}"),
            }
            if let Ok((sealed, added)) = __fuzz::encrypt(TOPIC, policy, &raw, LIMIT) {
                let opened = __fuzz::decrypt(TOPIC, policy, &sealed, LIMIT)
                    .expect("what the proxy encrypted decrypts");
                // With the write rule's tombstones in front, the batch is
                // longer than it came.
                if uncompressed(&raw) && added == 0 {
                    assert_eq!(
                        opened, raw,
                        "an uncompressed batch round-trips byte for byte"
                    );
                }
            }
        }
    }
});

/// Whether every batch of `raw` is uncompressed (attributes' codec bits 0).
fn uncompressed(raw: &[u8]) -> bool {
    let mut rest = raw;
    while rest.len() >= 61 {
        let length = i32::from_be_bytes([rest[8], rest[9], rest[10], rest[11]]);
        let Ok(length) = usize::try_from(length) else {
            return false;
        };
        if rest[22] & 7 != 0 {
            return false;
        }
        let total = length.saturating_add(12).min(rest.len());
        rest = &rest[total..];
    }
    rest.is_empty()
}
