//! Each read and write of a topic's policy, its refusals, and the
//! classifications that audit and repair count by.

use super::*;
use crate::shred::MemoryKeyStore;
use crate::KeyTemplate;

fn subjects() -> TopicPolicy {
    let store = Arc::new(MemoryKeyStore::new());
    let keys = SubjectKeys::create(Keyset::generate(), store).unwrap();
    TopicPolicy::subject_keys(Arc::new(keys))
}

#[test]
fn a_value_is_classified_completely_under_a_keyset() {
    let keyset = Keyset::generate();
    let policy = TopicPolicy::keyset(keyset.clone());
    let id = keyset.primary();
    let sealed = policy
        .write_value("t", Some(b"k"), Some(b"v"))
        .unwrap()
        .unwrap();
    let classify = |v: Option<&[u8]>| policy.classify_value("t", Some(b"k"), v).unwrap();
    assert!(matches!(classify(None), ValueRead::Tombstone));
    assert!(matches!(
        classify(Some(&sealed)),
        ValueRead::Value { ref plaintext, key_id: Some(k) } if &plaintext[..] == b"v" && k == id
    ));
    // Moved to another key: not authentic there, under the key it names.
    assert!(matches!(
        policy.classify_value("t", Some(b"j"), Some(&sealed)).unwrap(),
        ValueRead::Unreadable { key_id: Some(k), .. } if k == id
    ));
    // Under a key this keyset lacks: unreadable when it has a
    // ciphertext's room, a plaintext when it is shorter.
    let other = Keyset::generate();
    let foreign = TopicPolicy::keyset(other.clone())
        .write_value("t", Some(b"k"), Some(b"v"))
        .unwrap()
        .unwrap();
    assert!(matches!(
        classify(Some(&foreign)),
        ValueRead::Unreadable { key_id: Some(k), why: Error::UnknownKeyId(_) } if k == other.primary()
    ));
    let short = &foreign[..crate::envelope::OVERHEAD - 1];
    assert!(matches!(
        classify(Some(short)),
        ValueRead::Foreign(Foreign::Plaintext)
    ));
    assert!(matches!(
        classify(Some(b"{}")),
        ValueRead::Foreign(Foreign::Plaintext)
    ));
    assert!(matches!(
        classify(Some(b"")),
        ValueRead::Foreign(Foreign::Plaintext)
    ));
    // A subject-key value: not a plaintext, never read by a keyset.
    let subject = subjects()
        .write_value("t", Some(b"k"), Some(b"v"))
        .unwrap()
        .unwrap();
    assert!(matches!(
        classify(Some(&subject)),
        ValueRead::Foreign(Foreign::SubjectKeys)
    ));
}

#[test]
fn a_value_is_classified_completely_under_subject_keys() {
    let policy = subjects();
    let sealed = policy
        .write_value("t", Some(b"k"), Some(b"v"))
        .unwrap()
        .unwrap();
    let classify = |k: Option<&[u8]>, v: &[u8]| policy.classify_value("t", k, Some(v)).unwrap();
    assert!(matches!(
        classify(Some(b"k"), &sealed),
        ValueRead::Value { ref plaintext, key_id: None } if &plaintext[..] == b"v"
    ));
    assert!(matches!(
        classify(None, &sealed),
        ValueRead::Unreadable {
            why: Error::MissingRecordKey,
            ..
        }
    ));
    // Every present value is read as one: a plaintext is unreadable.
    assert!(matches!(
        classify(Some(b"k"), b"{}"),
        ValueRead::Unreadable { .. }
    ));
    policy.subject_key_set().unwrap().shred(b"k").unwrap();
    assert!(matches!(classify(Some(b"k"), &sealed), ValueRead::Shredded));
}

#[test]
fn a_record_key_is_classified_under_enabled_and_disabled_keys() {
    let mut keys = Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap();
    let old = keys.primary();
    let policy = TopicPolicy::keyset(Keyset::generate())
        .with_record_keys(keys.clone())
        .unwrap();
    let wire = policy
        .write_key("t", b"alice")
        .unwrap()
        .unwrap()
        .primary()
        .to_vec();
    let decrypted = |p: &TopicPolicy| match p.classify_key("t", &wire) {
        KeyRead::Decrypted {
            plaintext,
            key_id,
            enabled,
        } => {
            assert_eq!(&plaintext[..], b"alice");
            assert_eq!(key_id, old);
            Some(enabled)
        }
        _ => None,
    };
    assert_eq!(decrypted(&policy), Some(true));
    keys.rotate();
    keys.disable(old).unwrap();
    let rotated = TopicPolicy::keyset(Keyset::generate())
        .with_record_keys(keys)
        .unwrap();
    // Its key disabled: told, and told as no reader's.
    assert_eq!(decrypted(&rotated), Some(false));
    assert!(rotated.read_key("t", &wire).is_err());
    // Another topic's, another keyset's, no key: unreadable.
    assert_eq!(rotated.classify_key("u", &wire), KeyRead::Unreadable);
    let stranger = TopicPolicy::keyset(Keyset::generate())
        .with_record_keys(Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap())
        .unwrap();
    assert_eq!(stranger.classify_key("t", &wire), KeyRead::Unreadable);
    assert_eq!(stranger.classify_key("t", b"alice"), KeyRead::Unreadable);
    assert_eq!(
        TopicPolicy::keyset(Keyset::generate()).classify_key("t", b"alice"),
        KeyRead::AsWritten
    );
}

#[test]
fn a_values_format_comes_from_the_policy_not_its_first_byte() {
    let ks = Keyset::generate();
    let whole = TopicPolicy::keyset(ks);
    let subj = subjects();
    let under_keyset = whole.write_value("t", Some(b"k"), Some(b"v")).unwrap();
    let under_subject = subj.write_value("t", Some(b"k"), Some(b"v")).unwrap();
    assert_eq!(under_subject.as_ref().unwrap()[0], crate::shred::FORMAT);
    // Each reads its own.
    assert_eq!(
        whole
            .read_value("t", Some(b"k"), under_keyset.as_deref())
            .unwrap(),
        Read::Value(Zeroizing::new(b"v".to_vec()))
    );
    assert_eq!(
        subj.read_value("t", Some(b"k"), under_subject.as_deref())
            .unwrap(),
        Read::Value(Zeroizing::new(b"v".to_vec()))
    );
    // Neither reads the other's, nor a plaintext that starts with `S`:
    // errors, never a delete.
    for (policy, other) in [(&whole, &under_subject), (&subj, &under_keyset)] {
        assert!(policy
            .read_value("t", Some(b"k"), other.as_deref())
            .is_err());
    }
    let s_plain = b"Some plaintext that starts with S and is long enough".to_vec();
    assert!(subj.read_value("t", Some(b"k"), Some(&s_plain)).is_err());
    assert!(whole.read_value("t", Some(b"k"), Some(&s_plain)).is_err());
}

#[test]
fn only_a_shred_reads_as_a_delete_and_tombstones_stay_tombstones() {
    let subj = subjects();
    let v = subj.write_value("t", Some(b"alice"), Some(b"")).unwrap();
    assert!(v.is_some(), "an empty value is a value");
    assert_eq!(subj.write_value("t", Some(b"alice"), None).unwrap(), None);
    assert_eq!(
        subj.read_value("t", Some(b"alice"), None).unwrap(),
        Read::Tombstone
    );
    assert_eq!(
        subj.read_value("t", Some(b"alice"), v.as_deref()).unwrap(),
        Read::Value(Zeroizing::new(Vec::new()))
    );
    // Under another key's context it does not authenticate: an error.
    assert!(subj.read_value("t", Some(b"bob"), v.as_deref()).is_err());
    subj.subject_key_set().unwrap().shred(b"alice").unwrap();
    assert_eq!(
        subj.read_value("t", Some(b"alice"), v.as_deref()).unwrap(),
        Read::Shredded
    );
    // Copied under another key, a shredded value is still an error,
    // never a delete of that key: it names alice, not bob.
    assert!(subj.read_value("t", Some(b"bob"), v.as_deref()).is_err());
    let mut forged = v.clone().unwrap();
    forged[crate::shred::OVERHEAD - 16..].fill(0);
    assert!(subj.read_value("t", Some(b"bob"), Some(&forged)).is_err());
    // A keyset policy never reads a present value as a delete.
    let whole = TopicPolicy::keyset(Keyset::generate());
    let e = whole.write_value("t", Some(b"k"), Some(b"")).unwrap();
    assert!(!whole
        .read_value("t", Some(b"k"), e.as_deref())
        .unwrap()
        .is_delete());
}

#[test]
fn keys_follow_the_write_rule_and_headers_their_names() {
    let mut keys = Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap();
    let policy = TopicPolicy::keyset(Keyset::generate())
        .with_record_keys(keys.clone())
        .unwrap()
        .with_headers(["x-ssn"])
        .unwrap();
    let before = policy.write_key("t", b"alice").unwrap().unwrap();
    assert_eq!(before.older().len(), 0);
    keys.rotate_with(KeyTemplate::aes256_siv()).unwrap();
    let rotated = TopicPolicy::keyset(Keyset::generate())
        .with_record_keys(keys)
        .unwrap();
    let forms = rotated.write_key("t", b"alice").unwrap().unwrap();
    assert_eq!(forms.older(), [before.primary().to_vec()]);
    assert_eq!(
        &rotated.read_key("t", forms.primary()).unwrap()[..],
        b"alice"
    );
    assert_eq!(
        &rotated.read_key("t", before.primary()).unwrap()[..],
        b"alice"
    );
    assert!(rotated.read_key("t", b"alice").is_err());

    let h = policy
        .write_header("t", Some(b"k"), "x-ssn", b"123")
        .unwrap()
        .unwrap();
    assert_eq!(
        policy
            .read_header("t", Some(b"k"), "x-ssn", &h)
            .unwrap()
            .as_deref()
            .map(|v| &v[..]),
        Some(&b"123"[..])
    );
    assert!(policy
        .read_header("t", Some(b"k"), "x-other-name", &h)
        .unwrap()
        .is_none());
    // Moved to another name (that the policy encrypts), key or topic.
    let two = policy.clone().with_headers(["x-ssn", "x-id"]).unwrap();
    assert!(two.read_header("t", Some(b"k"), "x-id", &h).is_err());
    assert!(policy.read_header("t", Some(b"j"), "x-ssn", &h).is_err());
    assert!(policy.read_header("u", Some(b"k"), "x-ssn", &h).is_err());
    // A value's ciphertext is not a header's.
    let v = policy
        .write_value("t", Some(b"k"), Some(b"123"))
        .unwrap()
        .unwrap();
    assert!(policy.read_header("t", Some(b"k"), "x-ssn", &v).is_err());
    assert!(policy
        .write_header("t", Some(b"k"), "other", b"1")
        .unwrap()
        .is_none());
}

/// Values in another format: a tombstone is read and written as one;
/// a present value is refused both ways (never read as a delete, never
/// written as it came); record keys read as under any policy.
#[test]
fn a_policy_of_foreign_values_keeps_tombstones_and_refuses_values() {
    let keys = Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap();
    let p = TopicPolicy::foreign_values()
        .with_record_keys(keys)
        .unwrap();
    assert_eq!(
        p.read_value("t", Some(b"k"), None).unwrap(),
        Read::Tombstone
    );
    assert_eq!(p.write_value("t", Some(b"k"), None).unwrap(), None);
    let confluent = b"\x00\x00\x00\x00\x01{\"a\":1}";
    assert!(p.read_value("t", Some(b"k"), Some(confluent)).is_err());
    assert!(p.read_value("t", Some(b"k"), Some(b"")).is_err());
    assert!(p.write_value("t", Some(b"k"), Some(b"v")).is_err());
    assert!(matches!(
        p.classify_value("t", Some(b"k"), Some(confluent)).unwrap(),
        ValueRead::Unreadable { key_id: None, .. }
    ));
    assert!(matches!(
        p.classify_value("t", Some(b"k"), None).unwrap(),
        ValueRead::Tombstone
    ));
    // Record keys are this policy's all the same.
    let forms = p.write_key("t", b"k").unwrap().unwrap();
    let wire = forms.primary().to_vec();
    assert_eq!(&p.read_key("t", &wire).unwrap()[..], b"k");
    assert!(p.value_keyset().is_none() && p.subject_key_set().is_none());
    assert!(!p.may_block());
    // Nothing of a value keyset to bind or to encrypt headers under.
    assert!(TopicPolicy::foreign_values()
        .with_aad(AadPolicy::Topic)
        .is_err());
    assert!(TopicPolicy::foreign_values().with_headers(["h"]).is_err());
}

#[test]
fn what_a_policy_cannot_hold_is_refused() {
    assert!(TopicPolicy::keyset(Keyset::generate())
        .with_record_keys(Keyset::generate())
        .is_err());
    assert!(subjects().with_headers(["x"]).is_err());
    assert!(subjects().with_aad(AadPolicy::Topic).is_err());
    assert!(subjects().with_aad(AadPolicy::TopicAndKey).is_ok());
    assert!(subjects().may_block());
    assert!(!TopicPolicy::keyset(Keyset::generate()).may_block());
    assert!(matches!(
        subjects().write_value("t", None, Some(b"v")),
        Err(Error::MissingRecordKey)
    ));
}
