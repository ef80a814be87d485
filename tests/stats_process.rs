//! The process's totals (`stats::process`), exactly: this binary runs one
//! test, so nothing else counts meanwhile. A dropped keyset's counts stay
//! in them; they never go down.

use tombstone_crypt::stats::{process, Snapshot};
use tombstone_crypt::Keyset;

#[test]
fn process_totals_are_every_keysets_dropped_ones_included() {
    let before = process();
    let kept = Keyset::generate();
    {
        let dropped = Keyset::generate();
        for _ in 0..25 {
            dropped.encrypt(b"v", b"").unwrap();
        }
        let ct = kept.encrypt(b"w", b"").unwrap();
        kept.decrypt(&ct, b"").unwrap();
        assert!(kept.decrypt(&ct[..9], b"").is_err());
        let mid = process();
        assert_eq!(mid.values_encrypted, before.values_encrypted + 26);
    }
    let after = process();
    assert_eq!(
        after.values_encrypted,
        before.values_encrypted + 26,
        "{after:?}"
    );
    assert_eq!(after.values_decrypted, before.values_decrypted + 1);
    assert_eq!(
        after.decrypt_failures.truncated,
        before.decrypt_failures.truncated + 1
    );
    // A new keyset starts at zero.
    assert_eq!(Keyset::generate().stats(), Snapshot::default());
}
