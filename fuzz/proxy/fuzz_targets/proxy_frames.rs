//! Arbitrary bytes into the proxy's decoding: frames (the size prefix),
//! Produce requests, Fetch responses, and record batches of a policy
//! topic (values and keys encrypted, the key keyset in rotation).
//!
//! Nothing may panic and nothing may allocate past the frame limit. A
//! partition's batches that encrypt must decrypt again; uncompressed ones
//! decrypt to exactly the bytes that came (the header kept, the records
//! as they were).
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use tombstone_crypt::{KeyTemplate, Keyset};
use tombstone_crypt_proxy::__fuzz;
use tombstone_crypt_proxy::{Policies, TopicPolicy};

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
            let _ = __fuzz::decrypt(TOPIC, policy, &raw, LIMIT);
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
