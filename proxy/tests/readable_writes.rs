//! Found, closed: a batch the proxy took on Produce that it could never
//! hand back on Fetch.
//!
//! On Produce the proxy decodes the client's plaintext batch within the
//! request's budget (`max_decoded_bytes_per_request`, 4 times
//! `max_frame_bytes`), costed from its record count and its bytes. On
//! Fetch the same records come back encrypted: every value is 33 bytes
//! longer, so the same count costs more to decode. A batch of many small
//! records that just fit the budget on Produce did not fit it on Fetch:
//! its partition was answered `CORRUPT_MESSAGE` on every Fetch from that
//! offset, for every client, until retention removed the batch.
//!
//! Now the proxy costs the encrypted batch as a Fetch will, and refuses
//! on Produce what a Fetch could not hand back: `MESSAGE_TOO_LARGE`,
//! nothing written (the Java producer splits its batch on it). A batch
//! half as long is taken and reads back whole.

use crate::common;

use common::wire::{batch_of, decode_records, raw_fetch, raw_produce, record};
use common::{apache_kafka, consume_all, create_topic, fresh_topic, start_proxy_with, Keys};
use tombstone_crypt_proxy::Hooks;

const MAX_FRAME: usize = 1 << 20;
const MESSAGE_TOO_LARGE: i16 = 10;

/// A batch of `n` records of an empty value, no key.
fn empties(n: usize) -> bytes::Bytes {
    let recs: Vec<_> = (0..n).map(|i| record(None, Some(b""), i as i64)).collect();
    batch_of(&recs).freeze()
}

#[test]
fn what_the_proxy_takes_on_produce_it_hands_back_on_fetch() {
    let Some(broker) = apache_kafka() else {
        return;
    };
    let topic = fresh_topic("readable");
    create_topic(&broker, &topic, 1);
    let keys = Keys::new(false);
    let proxy = start_proxy_with(
        &broker,
        keys.policies(&topic),
        Hooks::default(),
        Some(MAX_FRAME),
    );
    // 14,000 empty values: ~8 bytes each as plaintext (112 KB, well within
    // the 1 MiB frame and its 4 MiB decoding budget), ~41 bytes each
    // encrypted: past that budget on the way back.
    let raw = empties(14_000);
    assert!(raw.len() < MAX_FRAME / 4, "{} bytes", raw.len());
    let (code, msg) = raw_produce(&proxy.addr, &topic, raw, 9);
    assert_eq!(
        code, MESSAGE_TOO_LARGE,
        "a batch a Fetch could not hand back was answered {code} ({msg:?})"
    );
    assert!(
        msg.as_deref()
            .is_some_and(|m| m.contains("max_decoded_bytes_per_request")),
        "{msg:?}"
    );
    assert!(
        consume_all(&broker, &topic, 1).unwrap().is_empty(),
        "written"
    );
    // Half as many: taken, and every consumer reads them back.
    let n = 7_000;
    let (code, msg) = raw_produce(&proxy.addr, &topic, empties(n), 9);
    assert_eq!(code, 0, "the Produce was refused: {msg:?}");
    let (code, bytes) = raw_fetch(&proxy.addr, &topic);
    assert_eq!(
        code, 0,
        "the proxy took the batch and its Fetch is answered {code}"
    );
    assert_eq!(decode_records(&bytes).len(), n);
}
