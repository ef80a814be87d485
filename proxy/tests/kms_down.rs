//! A KMS that is down, under an envelope keyset (`KmsEnvelopeAeadKey`,
//! loaded from its file as the proxy's configuration loads it): a Produce
//! that needs a new data key is refused (`CORRUPT_MESSAGE`, retriable) and
//! nothing reaches the broker; once the KMS is back the same records are
//! written, encrypted; a Fetch that needs a data key unwrapped is refused,
//! never plaintext, ciphertext or null, and reads once the KMS is back.
//! The KMS is the library's fake one (feature `test-hooks`), registered
//! for the process: one test in this binary. With a negative control: a
//! proxy that forwards plaintext writes while the KMS is down.

use crate::common;

use common::{bootstrap, consume_all, create_topic, fresh_topic, produce, start_proxy};
use tombstone_crypt::__fuzz::FakeKms;
use tombstone_crypt::{KeyTemplate, Keyset};
use tombstone_crypt_proxy::{load_keyset, Hooks, Policies, TopicPolicy};

const URI: &str = "fake-kms://proxy-kms-down";

fn records() -> Vec<common::Rec> {
    vec![
        (Some(b"a".to_vec()), Some(b"value-a".to_vec())),
        (Some(b"b".to_vec()), None),
        (Some(b"c".to_vec()), Some(b"value-c".to_vec())),
    ]
}

#[test]
fn a_kms_that_is_down_refuses_writes_and_reads_and_never_lets_plaintext_through() {
    let Some(broker) = bootstrap() else {
        return;
    };
    let kms = FakeKms::new();
    tombstone_crypt::kms::register_kms_client(kms.clone());
    let dir = std::env::temp_dir().join(fresh_topic("kms-down"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("values.json");
    let keyset = Keyset::generate_with(KeyTemplate::kms_envelope(URI)).unwrap();
    std::fs::write(&file, keyset.to_tink_json()).unwrap();
    let policies = |topic: &str| {
        Policies::new().with_topic(topic, TopicPolicy::keyset(load_keyset(&file).unwrap()))
    };

    let topic = fresh_topic("kms-down");
    create_topic(&broker, &topic, 1);
    let writer = start_proxy(&broker, policies(&topic), Hooks::default());
    kms.set_down(true);
    let results = produce(&writer.addr, &topic, 0, &records(), "none");
    assert!(
        results.iter().all(Result::is_err),
        "written while the KMS is down: {results:?}"
    );
    assert_eq!(consume_all(&broker, &topic, 1).unwrap(), vec![]);

    kms.set_down(false);
    let results = produce(&writer.addr, &topic, 0, &records(), "none");
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let direct = consume_all(&broker, &topic, 1).unwrap();
    assert_eq!(direct.len(), 3);
    for (d, (_, v)) in direct.iter().zip(records()) {
        match (&d.value, v) {
            (None, None) => {}
            (Some(c), Some(v)) => assert!(!c.windows(v.len()).any(|w| w == v), "plaintext"),
            other => panic!("{other:?}"),
        }
    }

    // A reader with its own copy of the keyset (no data key cached).
    let reader = start_proxy(&broker, policies(&topic), Hooks::default());
    kms.set_down(true);
    let e = consume_all(&reader.addr, &topic, 1).unwrap_err();
    assert!(
        e.contains("Invalid message") || e.contains("CORRUPT"),
        "{e}"
    );
    kms.set_down(false);
    let read = consume_all(&reader.addr, &topic, 1).unwrap();
    let values: Vec<_> = read.iter().map(|c| c.value.clone()).collect();
    let sent: Vec<_> = records().into_iter().map(|(_, v)| v).collect();
    assert_eq!(values, sent);

    // The negative control: a proxy that forwards plaintext writes while
    // the KMS is down.
    let mut plaintext = Hooks::default();
    plaintext.skip_encryption = true;
    let control = fresh_topic("kms-down-control");
    create_topic(&broker, &control, 1);
    let broken = start_proxy(&broker, policies(&control), plaintext);
    kms.set_down(true);
    let results = produce(&broken.addr, &control, 0, &records(), "none");
    assert!(results.iter().all(Result::is_ok));
    let direct = consume_all(&broker, &control, 1).unwrap();
    assert_eq!(direct[0].value.as_deref(), Some(&b"value-a"[..]));
    kms.set_down(false);
    let _ = std::fs::remove_dir_all(dir);
}
