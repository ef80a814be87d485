//! Faults around the proxy: a client that drops its connection in the
//! middle of a request, and a broker restarted while a producer writes
//! through the proxy. What reaches the broker is whole and encrypted; the
//! proxy keeps serving. With negative controls: a proxy that forwards
//! plaintext fails the checks.

use crate::common;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use common::own_broker::OwnBroker;
use common::{
    bootstrap, consume_all, create_topic, fresh_topic, produce, produce_ok, start_proxy, Consumed,
    Keys,
};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use tombstone_crypt::{Bytes as BytesSerde, Context, DecryptingDeserializer, Deserializer};
use tombstone_crypt_proxy::Hooks;

/// A Produce v9 frame (acks=-1) of one batch of `values` (keys `k0`..)
/// to partition 0 of `topic`, with its length prefix.
fn produce_frame(topic: &str, values: &[&str]) -> Vec<u8> {
    let records: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, v)| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: i as i32 - 1,
            timestamp: common::wire::now_ms(),
            key: Some(Bytes::from(format!("k{i}"))),
            value: Some(Bytes::from(v.to_string())),
            headers: Default::default(),
        })
        .collect();
    let mut batch = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut batch, records.iter(), &options).unwrap();
    let body = common::wire::produce_body(topic, batch.freeze(), 9);
    let mut frame = (body.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    frame
}

/// Every record on the broker (`direct`) is a ciphertext of its plaintext
/// (keys are plaintext: a value keyset only) that decrypts to one of
/// `allowed`; returns the plaintexts.
fn sealed(
    topic: &str,
    keys: &Keys,
    direct: &[Consumed],
    allowed: &[String],
) -> Result<Vec<String>, String> {
    let de = DecryptingDeserializer::new(BytesSerde, keys.values.clone());
    let mut out = Vec::new();
    for r in direct {
        let Some(v) = &r.value else {
            return Err(format!("offset {}: a tombstone nobody wrote", r.offset));
        };
        if allowed
            .iter()
            .any(|a| v.windows(a.len().max(1)).any(|w| w == a.as_bytes()))
        {
            return Err(format!("offset {}: plaintext on the broker", r.offset));
        }
        let ctx = match &r.key {
            Some(k) => Context::new(topic).with_key(k),
            None => Context::new(topic),
        };
        let plain = de
            .deserialize(&ctx, Some(&v[..]))
            .map_err(|e| format!("offset {}: not a ciphertext of the keyset: {e}", r.offset))?
            .ok_or("a value decrypted to nothing")?;
        let plain = String::from_utf8(plain).map_err(|e| e.to_string())?;
        if !allowed.contains(&plain) {
            return Err(format!("offset {}: {plain:?} was never written", r.offset));
        }
        out.push(plain);
    }
    Ok(out)
}

/// Half a Produce frame then a close, a whole Produce then a close at
/// once, then a client that produces and reads; `Err` names what is wrong
/// on the broker.
fn dropped_clients(broker: &str, hooks: Hooks) -> Result<(), String> {
    let topic = fresh_topic("dropped");
    let keys = Keys::new(false);
    create_topic(broker, &topic, 1);
    let proxy = start_proxy(broker, keys.policies(&topic), hooks);
    let half = produce_frame(&topic, &["half-0", "half-1", "half-2"]);
    let mut s = TcpStream::connect(&proxy.addr).unwrap();
    s.write_all(&half[..half.len() / 2]).unwrap();
    drop(s);
    let whole = produce_frame(&topic, &["whole-0", "whole-1", "whole-2"]);
    let mut s = TcpStream::connect(&proxy.addr).unwrap();
    s.write_all(&whole).unwrap();
    drop(s);
    // Others are still served.
    produce_ok(
        &proxy.addr,
        &topic,
        0,
        &[(Some(b"other".to_vec()), Some(b"other-0".to_vec()))],
        "none",
    );
    let direct = consume_all(broker, &topic, 1)?;
    let allowed: Vec<String> = ["whole-0", "whole-1", "whole-2", "other-0"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let plain = sealed(&topic, &keys, &direct, &allowed)?;
    // The dropped whole Produce is all there or not at all; nothing of the
    // half frame.
    let wholes = plain.iter().filter(|p| p.starts_with("whole-")).count();
    if wholes != 0 && wholes != 3 {
        return Err(format!(
            "{wholes} of the 3 records of one batch on the broker"
        ));
    }
    if plain.iter().filter(|p| *p == "other-0").count() != 1 {
        return Err(format!("the other client's record: {plain:?}"));
    }
    let through = consume_all(&proxy.addr, &topic, 1)?;
    assert!(through
        .iter()
        .any(|c| c.value.as_deref() == Some(&b"other-0"[..])));
    Ok(())
}

#[test]
fn a_client_dropped_mid_request_writes_nothing_partial_and_the_proxy_keeps_serving() {
    let Some(broker) = bootstrap() else {
        return;
    };
    dropped_clients(&broker, Hooks::default()).unwrap();
    let mut plaintext = Hooks::default();
    plaintext.skip_encryption = true;
    let e = dropped_clients(&broker, plaintext).unwrap_err();
    assert!(e.contains("plaintext on the broker"), "{e}");
}

/// Writes `n` records through a proxy with `hooks` to a broker of its
/// own, restarting the broker after `restart_after` of them when given;
/// checks every acknowledged record is on the broker, encrypted.
fn writes_across_a_restart(hooks: Hooks, n: usize, restart: bool) -> Result<usize, String> {
    let mut broker = OwnBroker::start();
    let topic = fresh_topic("restart");
    create_topic(&broker.addr(), &topic, 1);
    let keys = Keys::new(false);
    let proxy = start_proxy(&broker.addr(), keys.policies(&topic), hooks);
    let values: Vec<String> = (0..n).map(|i| format!("value-{i:04}")).collect();
    let records: Vec<common::Rec> = values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            (
                Some(format!("key-{}", i % 17).into_bytes()),
                Some(v.clone().into_bytes()),
            )
        })
        .collect();
    let acked = std::thread::scope(|s| {
        let producer = s.spawn(|| {
            let mut acked = Vec::new();
            // In chunks, so the restart falls between and inside them.
            for (c, chunk) in records.chunks(20).enumerate() {
                for (i, r) in produce(&proxy.addr, &topic, 0, chunk, "lz4")
                    .into_iter()
                    .enumerate()
                {
                    if r.is_ok() {
                        acked.push(values[c * 20 + i].clone());
                    }
                }
            }
            (acked, Instant::now())
        });
        let mut down_at = None;
        if restart {
            std::thread::sleep(Duration::from_millis(700));
            down_at = Some(Instant::now());
            broker.down();
            std::thread::sleep(Duration::from_millis(300));
            broker.up();
        }
        let (acked, finished) = producer.join().unwrap();
        if let Some(down_at) = down_at {
            // The restart fell while the producer was writing.
            assert!(
                finished > down_at,
                "the producer finished before the restart"
            );
        }
        acked
    });
    let direct = consume_all(&broker.addr(), &topic, 1)?;
    let on_broker = sealed(&topic, &keys, &direct, &values)?;
    for a in &acked {
        if !on_broker.contains(a) {
            return Err(format!("{a} was acknowledged and is not on the broker"));
        }
    }
    Ok(acked.len())
}

#[test]
fn every_acknowledged_record_is_on_the_broker_encrypted_after_a_broker_restart_compacting_broker() {
    let acked = writes_across_a_restart(Hooks::default(), 200, true).unwrap();
    assert!(acked > 0, "nothing acknowledged across the restart");
    eprintln!("{acked} of 200 records acknowledged across the broker's restart");
    // The control, without a restart: a proxy that forwards plaintext.
    let mut plaintext = Hooks::default();
    plaintext.skip_encryption = true;
    let e = writes_across_a_restart(plaintext, 20, false).unwrap_err();
    assert!(e.contains("plaintext on the broker"), "{e}");
}
