//! Topics by id through the proxy, on Apache Kafka: Produce v13 and Fetch
//! v13 and later name a topic by its id only. The proxy maps ids to names
//! from the Metadata responses it hands on (`src/topic_ids.rs`), encrypts
//! and decrypts by id as by name, keeps the key-store guard by id, and
//! answers an id it has not seen `UNKNOWN_TOPIC_ID`, never passing its
//! records as if no policy covered them.
//!
//! Controls: a proxy that learned no id fails the first test (every
//! request by id is `UNKNOWN_TOPIC_ID`); one that passed an unknown id as
//! a topic without a policy fails the second (ciphertext handed on, or
//! plaintext written).

use crate::common;

use bytes::Bytes;
use common::wire::{batch_of, call, decode_records, record, request};
use common::{apache_kafka, consume_all, create_topic, fresh_topic, start_proxy, Keys};
use kafka_protocol::messages as m;
use kafka_protocol::messages::{ApiKey, BrokerId};
use kafka_protocol::protocol::StrBytes;
use tombstone_crypt_proxy::Hooks;

const UNKNOWN_TOPIC_ID: i16 = 100;

/// A record's key and value, as read.
type Row = (Option<Bytes>, Option<Bytes>);
/// A record's key and value, as written.
type Written = (Option<&'static [u8]>, Option<&'static [u8]>);
const TOPIC_AUTHORIZATION_FAILED: i16 = 29;

/// The highest version of `api` that `addr` offers (its ApiVersions).
fn max_version(addr: &str, api: ApiKey) -> i16 {
    let mut req = m::ApiVersionsRequest::default();
    req.client_software_name = StrBytes::from_static_str("topic-ids-test");
    req.client_software_version = StrBytes::from_static_str("1");
    let r: m::ApiVersionsResponse = call(
        addr,
        ApiKey::ApiVersions,
        3,
        &request(ApiKey::ApiVersions, 3, 1, &req),
    )
    .expect("an ApiVersions answer");
    assert_eq!(r.error_code, 0, "ApiVersions");
    r.api_keys
        .iter()
        .find(|k| k.api_key == api as i16)
        .map(|k| k.max_version)
        .unwrap_or(-1)
}

/// The id of `topic`, from a Metadata v12 at `addr` (through the proxy,
/// this is what teaches it the id).
fn topic_id(addr: &str, topic: &str) -> uuid::Uuid {
    common::wire::topic_id(addr, topic).unwrap_or_else(|| panic!("no id for {topic}"))
}

/// A Produce v13 of `records` to partition 0 of the topic `id` at `addr`:
/// the partition's error code.
fn produce_by_id(addr: &str, id: uuid::Uuid, records: Bytes) -> i16 {
    let mut p = m::produce_request::PartitionProduceData::default();
    p.records = Some(records);
    let mut t = m::produce_request::TopicProduceData::default();
    t.topic_id = id;
    t.partition_data.push(p);
    let mut req = m::ProduceRequest::default();
    req.acks = -1;
    req.timeout_ms = 5000;
    req.topic_data.push(t);
    let resp: m::ProduceResponse = call(
        addr,
        ApiKey::Produce,
        13,
        &request(ApiKey::Produce, 13, 7, &req),
    )
    .expect("a Produce v13 answer");
    assert_eq!(resp.responses.len(), 1, "{resp:?}");
    assert_eq!(resp.responses[0].topic_id, id, "answered for another topic");
    resp.responses[0].partition_responses[0].error_code
}

/// A Fetch at `version` (13 and on: by id) of partition 0 of the topic
/// `id` from offset 0 at `addr`: the partition's error code and records.
fn fetch_by_id(addr: &str, id: uuid::Uuid, version: i16) -> (i16, Vec<Row>) {
    let mut fp = m::fetch_request::FetchPartition::default();
    fp.current_leader_epoch = -1;
    fp.last_fetched_epoch = -1;
    fp.log_start_offset = -1;
    fp.partition_max_bytes = 1 << 20;
    let mut ft = m::fetch_request::FetchTopic::default();
    ft.topic_id = id;
    ft.partitions.push(fp);
    let mut req = m::FetchRequest::default();
    req.replica_id = BrokerId(-1);
    req.max_wait_ms = 500;
    req.min_bytes = 1;
    req.max_bytes = 1 << 20;
    req.session_epoch = -1;
    req.topics.push(ft);
    let resp: m::FetchResponse = call(
        addr,
        ApiKey::Fetch,
        version,
        &request(ApiKey::Fetch, version, 8, &req),
    )
    .expect("a Fetch answer");
    let t = &resp.responses[0];
    assert_eq!(t.topic_id, id);
    let p = &t.partitions[0];
    let records = p
        .records
        .as_ref()
        .filter(|r| !r.is_empty())
        .map(decode_records)
        .unwrap_or_default()
        .into_iter()
        .map(|r| (r.key, r.value))
        .collect();
    (p.error_code, records)
}

fn written() -> Vec<Written> {
    vec![
        (Some(b"acct-1"), Some(b"SECRET-BY-ID")),
        (Some(b"acct-2"), None),
        (Some(b"acct-3"), Some(b"")),
    ]
}

fn batch() -> Bytes {
    let recs: Vec<_> = written()
        .iter()
        .enumerate()
        .map(|(i, (k, v))| record(*k, *v, i as i64))
        .collect();
    batch_of(&recs).freeze()
}

fn as_bytes(rows: &[Written]) -> Vec<Row> {
    rows.iter()
        .map(|(k, v)| (k.map(Bytes::from_static), v.map(Bytes::from_static)))
        .collect()
}

/// Produce v13 and Fetch v13 and later by id: encrypted on the broker
/// (a null stays null, an empty value is encrypted), read back as written
/// by id and by name; the key-store guard holds by id.
#[test]
fn produce_and_fetch_by_topic_id_encrypt_and_decrypt() {
    let Some(broker) = apache_kafka() else {
        return;
    };
    let topic = fresh_topic("by-id");
    let guarded = fresh_topic("by-id-guarded");
    create_topic(&broker, &topic, 1);
    create_topic(&broker, &guarded, 1);
    let keys = Keys::new(true);
    let proxy = start_proxy(
        &broker,
        keys.policies(&topic).with_guarded_topic(&guarded),
        Hooks::default(),
    );
    // The proxy offers what the broker does: Produce v13, Fetch past it.
    let produce_max = max_version(&proxy.addr, ApiKey::Produce);
    let fetch_max = max_version(&proxy.addr, ApiKey::Fetch);
    assert!(
        produce_max >= 13 && fetch_max >= 13,
        "the proxy offers Produce v{produce_max}, Fetch v{fetch_max}"
    );
    let id = topic_id(&proxy.addr, &topic);
    assert_eq!(produce_by_id(&proxy.addr, id, batch()), 0);
    // The broker holds ciphertext: no plaintext key or value, the
    // tombstone null, the empty value a ciphertext.
    let raw = consume_all(&broker, &topic, 1).unwrap();
    assert_eq!(raw.len(), 3, "{raw:?}");
    for (r, (k, v)) in raw.iter().zip(written()) {
        assert_ne!(r.key.as_deref(), k, "a plaintext key on the broker");
        match v {
            None => assert_eq!(r.value, None, "the tombstone is not null"),
            Some(v) => {
                let c = r.value.as_deref().unwrap();
                assert!(c.len() > v.len() + 16, "not a ciphertext: {c:?}");
                if !v.is_empty() {
                    assert!(
                        !c.windows(v.len()).any(|w| w == v),
                        "plaintext on the broker"
                    );
                }
            }
        }
    }
    // Read back by id, at every Fetch version from 13 the proxy offers,
    // and by name.
    for version in 13..=fetch_max {
        let (code, got) = fetch_by_id(&proxy.addr, id, version);
        assert_eq!(code, 0, "Fetch v{version}");
        assert_eq!(got, as_bytes(&written()), "Fetch v{version}");
    }
    let by_name = consume_all(&proxy.addr, &topic, 1).unwrap();
    let by_name: Vec<_> = by_name
        .into_iter()
        .map(|c| (c.key.map(Bytes::from), c.value.map(Bytes::from)))
        .collect();
    assert_eq!(by_name, as_bytes(&written()));
    // The key-store topic, by id: neither written nor read.
    let gid = topic_id(&proxy.addr, &guarded);
    assert_eq!(
        produce_by_id(&proxy.addr, gid, batch()),
        TOPIC_AUTHORIZATION_FAILED
    );
    assert!(consume_all(&broker, &guarded, 1).unwrap().is_empty());
    let (code, got) = fetch_by_id(&proxy.addr, gid, fetch_max);
    assert_eq!((code, got.len()), (TOPIC_AUTHORIZATION_FAILED, 0));
}

/// An id no Metadata response through this proxy has named: Produce and
/// Fetch are answered `UNKNOWN_TOPIC_ID` (nothing written, no records
/// handed on) until the client asks Metadata through the proxy; then they
/// work.
#[test]
fn an_id_the_proxy_has_not_seen_is_unknown_until_metadata_names_it() {
    let Some(broker) = apache_kafka() else {
        return;
    };
    let topic = fresh_topic("by-id-unseen");
    create_topic(&broker, &topic, 1);
    let keys = Keys::new(false);
    let proxy = start_proxy(&broker, keys.policies(&topic), Hooks::default());
    // The id, from the broker itself: the proxy has not seen it.
    let id = topic_id(&broker, &topic);
    assert_eq!(produce_by_id(&proxy.addr, id, batch()), UNKNOWN_TOPIC_ID);
    assert!(
        consume_all(&broker, &topic, 1).unwrap().is_empty(),
        "a Produce by an unknown id was written"
    );
    // Records written by name through another proxy process (a client's
    // Metadata through this one would teach it the id): a Fetch by the
    // unknown id hands none of them on.
    let writer = start_proxy(&broker, keys.policies(&topic), Hooks::default());
    common::produce_ok(
        &writer.addr,
        &topic,
        0,
        &[(Some(b"k".to_vec()), Some(b"v".to_vec()))],
        "none",
    );
    let (code, got) = fetch_by_id(&proxy.addr, id, 13);
    assert_eq!(code, UNKNOWN_TOPIC_ID, "{got:?}");
    assert!(
        got.is_empty(),
        "records handed on by an unknown id: {got:?}"
    );
    // Once Metadata through the proxy names it, by id works.
    assert_eq!(topic_id(&proxy.addr, &topic), id);
    let (code, got) = fetch_by_id(&proxy.addr, id, 13);
    assert_eq!(code, 0);
    assert_eq!(
        got,
        vec![(
            Some(Bytes::from_static(b"k")),
            Some(Bytes::from_static(b"v"))
        )]
    );
    assert_eq!(produce_by_id(&proxy.addr, id, batch()), 0);
}

/// A topic without a policy is written and read by id as it came, and a
/// proxy without policies passes an unknown id: it has nothing to guard.
#[test]
fn a_topic_without_a_policy_passes_by_id() {
    let Some(broker) = apache_kafka() else {
        return;
    };
    let topic = fresh_topic("by-id-plain");
    let other = fresh_topic("by-id-policy");
    create_topic(&broker, &topic, 1);
    let keys = Keys::new(false);
    let proxy = start_proxy(&broker, keys.policies(&other), Hooks::default());
    let id = topic_id(&proxy.addr, &topic);
    assert_eq!(produce_by_id(&proxy.addr, id, batch()), 0);
    let raw: Vec<_> = consume_all(&broker, &topic, 1)
        .unwrap()
        .into_iter()
        .map(|c| (c.key.map(Bytes::from), c.value.map(Bytes::from)))
        .collect();
    assert_eq!(
        raw,
        as_bytes(&written()),
        "a topic without a policy was changed"
    );
    let bare = start_proxy(
        &broker,
        tombstone_crypt_proxy::Policies::new(),
        Hooks::default(),
    );
    let (code, got) = fetch_by_id(&bare.addr, id, 13);
    assert_eq!((code, got), (0, as_bytes(&written())));
}

/// Found by a hostile review, closed: the answers the proxy makes itself
/// were held outside every bound. A Produce v13 of 64 KiB that names
/// 10,900 partitions of an unknown topic id is answered by the proxy
/// (`UNKNOWN_TOPIC_ID`), with an error message each, 1.96 MB; up to 256 such
/// answers queued per connection for a client that never reads: 4
/// connections grew a proxy from 20 MB to 1.55 GB resident. Now an answer's
/// first 64 KiB come from its connection's allowance and the rest from the
/// responses' pool (`max_buffered_bytes`), held until written, and only
/// the first 16 partitions of an answer carry a message. Here 4 connections
/// of 100 such requests each, never read, against a pool of 16 MiB: 15 MiB
/// of growth (without the hold, 106 MiB).
#[test]
fn answers_of_the_proxy_s_own_that_nobody_reads_stay_within_the_pool() {
    let Some(apache) = apache_kafka() else {
        return;
    };
    let topic = fresh_topic("answers");
    create_topic(&apache, &topic, 1);
    let keys = Keys::new(false);
    let proxy = common::start_proxy_json(
        &apache,
        keys.policies(&topic),
        Hooks::default(),
        Some(8 << 20),
        &format!(r#""max_buffered_bytes": {},"#, 16 << 20),
    );
    let frame = |correlation: i32| {
        let mut t = m::produce_request::TopicProduceData::default();
        t.topic_id = uuid::Uuid::from_u128(0x5eed_0000_0000_0000_0000_0000_0000_0001);
        for i in 0..10_000 {
            let mut p = m::produce_request::PartitionProduceData::default();
            p.index = i;
            t.partition_data.push(p);
        }
        let mut req = m::ProduceRequest::default();
        req.acks = -1;
        req.timeout_ms = 5000;
        req.topic_data.push(t);
        let body = request(ApiKey::Produce, 13, correlation, &req);
        let mut f = (body.len() as i32).to_be_bytes().to_vec();
        f.extend_from_slice(&body);
        f
    };
    // One answer, read: what each of them is.
    let answer = common::wire::send_frame(&proxy.addr, &frame(1)[4..]).expect("an answer");
    assert!(
        answer.len() > 64 << 10,
        "an answer of {} bytes shows nothing",
        answer.len()
    );
    let frames: Vec<Vec<u8>> = (0..100).map(frame).collect();
    let frames = std::sync::Arc::new(frames);
    let rss_before = common::status_kib("VmRSS:");
    let unread: Vec<_> = (0..4)
        .map(|_| {
            let (addr, frames) = (proxy.addr.clone(), frames.clone());
            std::thread::spawn(move || {
                let mut s = std::net::TcpStream::connect(&addr).unwrap();
                s.set_write_timeout(Some(std::time::Duration::from_millis(500)))
                    .unwrap();
                let mut sent = 0;
                for f in frames.iter() {
                    if std::io::Write::write_all(&mut s, f).is_err() {
                        break;
                    }
                    sent += 1;
                }
                (s, sent)
            })
        })
        .collect();
    let unread: Vec<_> = unread.into_iter().map(|t| t.join().unwrap()).collect();
    std::thread::sleep(std::time::Duration::from_secs(2));
    let rss_after = common::status_kib("VmRSS:");
    eprintln!(
        "answers of {} bytes, {} requests sent on 4 connections never read: resident {} -> {} MiB",
        answer.len(),
        unread.iter().map(|(_, n)| n).sum::<usize>(),
        rss_before / 1024,
        rss_after / 1024
    );
    // Others are answered meanwhile: a small request, and the proxy's
    // own answer to another one of those (it waits for the pool).
    let small = send_frame_within(&proxy.addr, &versions_request(), 5);
    assert!(small.is_some(), "an ApiVersions was not answered");
    assert!(
        rss_after.saturating_sub(rss_before) < 40 << 10,
        "unread answers grew the proxy by {} MiB (a pool of 16 MiB)",
        (rss_after - rss_before) / 1024
    );
    drop(unread);
    let again = send_frame_within(&proxy.addr, &frame(2)[4..], 30);
    assert!(
        again.is_some(),
        "the pool was not given back: no answer after the readers left"
    );
}

/// An ApiVersions v3 request's frame body.
fn versions_request() -> Vec<u8> {
    let mut req = m::ApiVersionsRequest::default();
    req.client_software_name = StrBytes::from_static_str("t");
    req.client_software_version = StrBytes::from_static_str("1");
    request(ApiKey::ApiVersions, 3, 9, &req).to_vec()
}

/// Sends one request frame (`body`, without its length) on a new
/// connection and waits at most `secs` for its answer's frame.
fn send_frame_within(addr: &str, body: &[u8], secs: u64) -> Option<Vec<u8>> {
    use std::io::{Read as _, Write as _};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(secs)))
        .ok()?;
    s.write_all(&(body.len() as i32).to_be_bytes()).ok()?;
    s.write_all(body).ok()?;
    let mut len = [0u8; 4];
    s.read_exact(&mut len).ok()?;
    let mut out = vec![0u8; i32::from_be_bytes(len).max(0) as usize];
    s.read_exact(&mut out).ok()?;
    Some(out)
}
