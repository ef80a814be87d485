//! Frames that lie about their length, and record batches the proxy
//! cannot decode: the connection is closed or the partition refused with
//! a clear error, nothing is written, and the proxy keeps serving other
//! connections.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use common::wire::raw_produce;
use common::{
    bootstrap, consume_all, create_topic, fresh_topic, produce_ok, start_proxy_with, Keys,
};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use tombstone_crypt_proxy::Hooks;

/// Whether the proxy closes `stream` (EOF or reset) within 5 s.
fn closed(stream: &mut TcpStream) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = [0u8; 64];
    match stream.read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => matches!(
            e.kind(),
            std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
        ),
    }
}

fn batch(value: &'static [u8]) -> Bytes {
    let r = Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: -1,
        timestamp: common::wire::now_ms(),
        key: Some(Bytes::from_static(b"k")),
        value: Some(Bytes::from_static(value)),
        headers: Default::default(),
    };
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut buf, [&r], &options).unwrap();
    buf.freeze()
}

#[test]
fn lying_frames_close_their_connection_and_the_proxy_keeps_serving() {
    let Some(broker) = bootstrap() else {
        return;
    };
    let topic = fresh_topic("frames");
    let keys = Keys::new(false);
    let proxy = start_proxy_with(
        &broker,
        keys.policies(&topic),
        Hooks::default(),
        Some(1 << 20),
    );
    // A length past the limit (2 GiB), a negative one, one past the
    // configured 1 MiB, one shorter than a request header, and a frame that
    // ends before its length.
    let lies: [&[u8]; 4] = [
        &[0x7f, 0xff, 0xff, 0xff, 0, 18, 0, 0],
        &[0xff, 0xff, 0xff, 0xf0, 0, 0, 0, 0],
        &[0x00, 0x10, 0x00, 0x01, 0, 18, 0, 0],
        &[0, 0, 0, 3, 0, 18, 0],
    ];
    for lie in lies {
        let mut s = TcpStream::connect(&proxy.addr).unwrap();
        s.write_all(lie).unwrap();
        assert!(closed(&mut s), "{lie:?} left the connection open");
    }
    let mut s = TcpStream::connect(&proxy.addr).unwrap();
    s.write_all(&[0, 0, 0, 100, 0, 18, 0, 0, 0, 0]).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    assert!(closed(&mut s));
    // Other connections are served: a policy topic round trips.
    create_topic(&proxy.addr, &topic, 1);
    produce_ok(
        &proxy.addr,
        &topic,
        0,
        &[(Some(b"k".to_vec()), Some(b"v".to_vec()))],
        "snappy",
    );
    let got = consume_all(&proxy.addr, &topic, 1).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].value.as_deref(), Some(&b"v"[..]));
}

#[test]
fn a_batch_the_proxy_cannot_decode_is_refused_and_nothing_is_written() {
    let Some(broker) = bootstrap() else {
        return;
    };
    let topic = fresh_topic("bad-batch");
    let keys = Keys::new(true);
    create_topic(&broker, &topic, 1);
    let proxy = start_proxy_with(&broker, keys.policies(&topic), Hooks::default(), None);
    // A batch whose CRC does not match (a value byte flipped), garbage,
    // and a batch cut short.
    let good = batch(b"plaintext value");
    let mut flipped = BytesMut::from(&good[..]);
    let n = flipped.len();
    flipped[n - 3] ^= 0x20;
    let cut = good.slice(..good.len() - 4);
    for bad in [
        flipped.freeze(),
        Bytes::from_static(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]),
        cut,
    ] {
        let (code, message) = raw_produce(&proxy.addr, &topic, bad, 9);
        assert_eq!(code, 2, "CORRUPT_MESSAGE");
        let message = message.unwrap();
        assert!(
            message.contains("tombstone-crypt proxy refused"),
            "{message}"
        );
    }
    // Nothing of it reached the broker; a good batch through the same path
    // does.
    assert_eq!(consume_all(&broker, &topic, 1).unwrap(), vec![]);
    let (code, _) = raw_produce(&proxy.addr, &topic, good, 9);
    assert_eq!(code, 0);
    let direct = consume_all(&broker, &topic, 1).unwrap();
    assert_eq!(direct.len(), 1);
    assert_ne!(direct[0].value.as_deref(), Some(&b"plaintext value"[..]));
    let through = consume_all(&proxy.addr, &topic, 1).unwrap();
    assert_eq!(through[0].value.as_deref(), Some(&b"plaintext value"[..]));
}
