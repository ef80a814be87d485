//! Found, closed: a client's Produce was encrypted on the tokio worker
//! that runs its connection (`server.rs`, `in_place`: `block_in_place`
//! only when a KMS may be called). A request of many small records took
//! that worker for as long as encrypting it took (bounded by the decode
//! budget, not by time); a client with as many connections as the runtime
//! has workers, each sending such requests back to back, held every
//! worker: no other client's request (not even ApiVersions) was answered
//! meanwhile. Now a Produce and a Fetch response of policy topics run in
//! `block_in_place`: the worker hands its other connections on.
//!
//! Measured against the hostile requests themselves, not a clock: another
//! client's ApiVersions must be answered in less than half the time one of
//! the hostile requests takes through the proxy (without the fix it waited
//! about as long as one).

use crate::common;

use std::io::{Read as _, Write as _};
use std::time::{Duration, Instant};

use common::wire::{batch_of, produce_body, record};
use common::{apache_kafka, create_topic, fresh_topic, start_proxy, Keys};
use kafka_protocol::messages as m;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::StrBytes;
use tombstone_crypt_proxy::Hooks;

#[test]
fn a_client_with_two_connections_does_not_starve_the_others() {
    let Some(broker) = apache_kafka() else {
        return;
    };
    let topic = fresh_topic("busy");
    create_topic(&broker, &topic, 1);
    let keys = Keys::new(false);
    // The test kit's proxy runs on a runtime of 2 workers.
    let proxy = start_proxy(&broker, keys.policies(&topic), Hooks::default());
    // 200,000 empty values: ~1.8 MB, well within every limit.
    let recs: Vec<_> = (0..200_000).map(|i| record(None, Some(b""), i)).collect();
    let body = produce_body(&topic, batch_of(&recs).freeze(), 9);
    let mut hostile = Vec::new();
    for _ in 0..2 {
        let addr = proxy.addr.clone();
        let body = body.clone();
        hostile.push(std::thread::spawn(move || -> Option<Duration> {
            let start = Instant::now();
            let mut s = std::net::TcpStream::connect(&addr).unwrap();
            for _ in 0..3 {
                if s.write_all(&(body.len() as i32).to_be_bytes()).is_err()
                    || s.write_all(&body).is_err()
                {
                    return None;
                }
            }
            // Its 3 answers (the broker refuses the encrypted batch as too
            // large: the proxy's work is done by then).
            s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
            for _ in 0..3 {
                let mut len = [0u8; 4];
                if s.read_exact(&mut len).is_err() {
                    return None;
                }
                let mut frame = vec![0u8; i32::from_be_bytes(len) as usize];
                if s.read_exact(&mut frame).is_err() {
                    return None;
                }
            }
            // One request's time through the proxy, on average.
            Some(start.elapsed() / 3)
        }));
    }
    std::thread::sleep(Duration::from_secs(1));
    // Another client's ApiVersions, while the two connections' requests
    // are encrypted.
    let mut req = m::ApiVersionsRequest::default();
    req.client_software_name = StrBytes::from_static_str("victim");
    req.client_software_version = StrBytes::from_static_str("1");
    let frame = common::wire::request(ApiKey::ApiVersions, 3, 1, &req);
    let mut worst = Duration::ZERO;
    for _ in 0..5 {
        let t = Instant::now();
        let answer = common::wire::send_frame(&proxy.addr, &frame);
        let took = t.elapsed();
        assert!(answer.is_some(), "no answer");
        worst = worst.max(took);
    }
    let per_request = hostile
        .into_iter()
        .filter_map(|h| h.join().ok().flatten())
        .min()
        .expect("the hostile requests were answered");
    eprintln!(
        "another client's ApiVersions: at worst {worst:?}; a hostile request: {per_request:?}"
    );
    assert!(
        worst * 2 < per_request,
        "an ApiVersions of another client waited {worst:?} while one client's Produce \
         requests (each {per_request:?} through the proxy) held the proxy's workers"
    );
}
