//! A process that forks and goes on encrypting in both parent and child
//! never repeats a nonce (AES-GCM under one key: a repeat gives away the
//! XOR of two plaintexts and the key's authentication subkey).
//!
//! Both processes encrypt under the same keyset, the parent having
//! encrypted before the fork (so a thread-local generator holds state to
//! copy); no nonce of the child's is one of the parent's. With nonces from
//! `rand`'s `ThreadRng`, which is not reseeded on `fork()`, the child drew
//! exactly its parent's nonces (every one of them: this test failed so).
#![cfg(unix)]

use std::collections::HashSet;

use tombstone_crypt::{Bytes, Context, EncryptingSerializer, Keyset, Serializer as _};

/// Values per process.
const N: usize = 2000;

/// The nonces of `N` values: bytes 5..17 of each (`0x01 | key id |
/// nonce | ciphertext | tag`).
fn nonces(ser: &EncryptingSerializer<Bytes>) -> Vec<u8> {
    let ctx = Context::new("fork").with_key(b"k");
    let mut out = Vec::with_capacity(N * 12);
    for _ in 0..N {
        let ct = ser.serialize(&ctx, Some(&b"a value"[..])).unwrap().unwrap();
        out.extend_from_slice(&ct[5..17]);
    }
    out
}

#[test]
fn a_forked_child_never_repeats_its_parents_nonces() {
    let ser = EncryptingSerializer::new(Bytes, Keyset::generate());
    // Draw before forking: whatever generator state there is, the child
    // starts with a copy of it.
    let before = nonces(&ser);
    let (child, parent) = fork_child::fork_both(|| nonces(&ser), || nonces(&ser));
    assert_eq!(child.len(), N * 12);
    let mut seen: HashSet<&[u8]> = before.chunks(12).chain(parent.chunks(12)).collect();
    assert_eq!(seen.len(), 2 * N, "the parent repeated a nonce");
    let repeated = child.chunks(12).filter(|n| !seen.insert(n)).count();
    assert_eq!(
        repeated, 0,
        "{repeated} of the child's {N} nonces were its parent's (or its own)"
    );
}
