//! Inputs the fuzz target `proxy_frames` (fuzz/proxy/) found, kept as
//! regressions; no broker needed.

use bytes::Bytes;
use tombstone_crypt::Keyset;
use tombstone_crypt_proxy::{__fuzz, Policies, TopicPolicy};

fn policies() -> Policies {
    Policies::new().with_prefix("", TopicPolicy::keyset(Keyset::generate()))
}

/// A Fetch v12 response whose aborted transactions claim billions of
/// entries (a varint past 5 bytes, which kafka-protocol reads): it
/// reserved them all before reading one, and the failed allocation
/// aborted the process. Now the frame is walked first, each count checked
/// against the bytes left, and the response is refused.
#[test]
fn a_fetch_response_array_count_past_its_bytes_is_refused_not_an_abort() {
    let input = include_bytes!("fixtures/fetch-v12-aborted-transactions-count.bin");
    assert_eq!(
        &input[..2],
        &[2, 12],
        "the fuzz target's mode and version bytes"
    );
    let e = __fuzz::fetch(
        &Bytes::copy_from_slice(&input[2..]),
        12,
        &policies(),
        1 << 20,
    )
    .unwrap_err();
    assert!(
        e.contains("a Fetch v12 response that does not decode"),
        "{e}"
    );
}

/// The same for a client's Produce: a topic array of 4 billion entries in
/// a few bytes.
#[test]
fn a_produce_request_array_count_past_its_bytes_is_refused_not_an_abort() {
    for version in [3i16, 8, 9, 12] {
        let mut frame = Vec::new();
        frame.extend_from_slice(&0i16.to_be_bytes());
        frame.extend_from_slice(&version.to_be_bytes());
        frame.extend_from_slice(&1i32.to_be_bytes());
        frame.extend_from_slice(&(-1i16).to_be_bytes()); // no client id
        if version >= 9 {
            frame.push(0); // header tags
            frame.push(0); // null transactional id (compact)
        } else {
            frame.extend_from_slice(&(-1i16).to_be_bytes());
        }
        frame.extend_from_slice(&(-1i16).to_be_bytes()); // acks
        frame.extend_from_slice(&5000i32.to_be_bytes());
        if version >= 9 {
            frame.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]); // 2^32 - 2 topics
        } else {
            frame.extend_from_slice(&i32::MAX.to_be_bytes());
        }
        frame.extend_from_slice(&[0; 16]);
        let e = __fuzz::produce(&Bytes::from(frame), &policies(), 1 << 20).unwrap_err();
        assert!(e.contains("elements in"), "v{version}: {e}");
    }
}

/// A Fetch v12 partition's known tagged field (tag 0, the diverging
/// epoch) whose size says otherwise than its struct: kafka-protocol reads
/// the struct and not the size, and the walk that skipped by the size
/// passed a frame kafka-protocol then read as a count of billions. The
/// walk reads known tags as kafka-protocol does.
#[test]
fn a_known_tag_whose_size_lies_is_walked_as_kafka_protocol_reads_it() {
    let input = include_bytes!("fixtures/fetch-v12-known-tag-size.bin");
    assert_eq!(&input[..2], &[2, 12]);
    let e = __fuzz::fetch(
        &Bytes::copy_from_slice(&input[2..]),
        12,
        &policies(),
        1 << 20,
    )
    .unwrap_err();
    assert!(e.contains("does not decode"), "{e}");
}

/// A Fetch v12 response that does not decode for another reason than the
/// node endpoints' tag: the fallback that drops that tag took a piece of
/// it for a tagged-field section, and decoded the result unwalked. The
/// fallback now runs only on that tag's error, and walks what it decodes.
#[test]
fn a_response_that_fails_otherwise_is_not_decoded_unwalked() {
    let input = include_bytes!("fixtures/fetch-v12-partitions-count.bin");
    assert_eq!(&input[..2], &[2, 12]);
    let e = __fuzz::fetch(
        &Bytes::copy_from_slice(&input[2..]),
        12,
        &policies(),
        1 << 20,
    )
    .unwrap_err();
    assert!(e.contains("decoding a Fetch v12 response"), "{e}");
}
