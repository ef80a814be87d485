//! Graceful shutdown: a request in flight when the proxy is told to stop
//! (a Fetch the broker holds for its max wait) is still answered, then the
//! proxy stops listening.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use common::{bootstrap, create_topic, fresh_topic, start_proxy, Keys};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{
    ApiKey, FetchRequest, FetchResponse, RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tombstone_crypt_proxy::Hooks;

#[test]
fn a_request_in_flight_at_shutdown_is_answered() {
    let Some(broker) = bootstrap() else {
        return;
    };
    let topic = fresh_topic("shutdown");
    let keys = Keys::new(false);
    create_topic(&broker, &topic, 1);
    let mut proxy = start_proxy(&broker, keys.policies(&topic), Hooks::default());
    let version = 12;
    let mut partition = FetchPartition::default();
    partition.partition = 0;
    partition.fetch_offset = 0;
    partition.partition_max_bytes = 1 << 20;
    let mut t = FetchTopic::default();
    t.topic = TopicName(StrBytes::from_string(topic.clone()));
    t.partitions.push(partition);
    let mut req = FetchRequest::default();
    req.max_wait_ms = 1500;
    req.min_bytes = 1;
    req.topics.push(t);
    let mut header = RequestHeader::default();
    header.request_api_key = ApiKey::Fetch as i16;
    header.request_api_version = version;
    header.correlation_id = 4242;
    header.client_id = Some(StrBytes::from_static_str("shutdown"));
    let mut body = BytesMut::new();
    header
        .encode(&mut body, ApiKey::Fetch.request_header_version(version))
        .unwrap();
    req.encode(&mut body, version).unwrap();
    let mut s = TcpStream::connect(&proxy.addr).unwrap();
    s.write_all(&(body.len() as i32).to_be_bytes()).unwrap();
    s.write_all(&body).unwrap();
    let sent = Instant::now();
    std::thread::sleep(Duration::from_millis(200));
    proxy.signal_stop();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut len = [0u8; 4];
    s.read_exact(&mut len)
        .expect("the in-flight Fetch is answered");
    let mut frame = vec![0u8; i32::from_be_bytes(len) as usize];
    s.read_exact(&mut frame).unwrap();
    let waited = sent.elapsed();
    let mut frame = Bytes::from(frame);
    let h =
        ResponseHeader::decode(&mut frame, ApiKey::Fetch.response_header_version(version)).unwrap();
    assert_eq!(h.correlation_id, 4242);
    let resp = FetchResponse::decode(&mut frame, version).unwrap();
    assert_eq!(resp.responses.len(), 1);
    eprintln!("the in-flight Fetch was answered {waited:?} after it was sent");
    // Then the connection ends and the proxy stops listening.
    let mut rest = [0u8; 1];
    assert_eq!(s.read(&mut rest).unwrap_or(0), 0);
    let addr = proxy.addr.clone();
    proxy.join();
    assert!(
        TcpStream::connect(&addr).is_err(),
        "still listening after shutdown"
    );
}
