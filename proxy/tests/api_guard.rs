//! What the proxy passes: only the APIs it knows carry nothing its policy
//! covers (default deny), and no admin request that names a key-store topic
//! of subject keys.
//!
//! - ApiVersions through the proxy lists only the APIs it serves: none of
//!   the broker's own, none it does not know, not `ShareFetch` (which
//!   hands out records, ciphertext of policy topics and the key store's
//!   own).
//! - A request of an API it does not serve closes its connection, nothing
//!   forwarded, and the proxy keeps serving.
//! - DeleteRecords, DeleteTopics, CreatePartitions, AlterConfigs and
//!   IncrementalAlterConfigs naming a key-store topic (or a topic by id
//!   only) are answered `TOPIC_AUTHORIZATION_FAILED`, and the key store
//!   holds every record it held; the same requests on another topic pass,
//!   and with `key_store_admin` set they pass on the key store too.

use crate::common;

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::Duration;

use bytes::BytesMut;
use common::subjects::SubjectSetup;
use common::wire::send_frame;
use common::{bootstrap, consume_all, fresh_topic, start_proxy, start_proxy_json};
use kafka_protocol::messages as m;
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tombstone_crypt_proxy::Hooks;

const TOPIC_AUTHORIZATION_FAILED: i16 = 29;

fn frame<R: Encodable>(api: ApiKey, version: i16, request: &R) -> BytesMut {
    let mut header = RequestHeader::default();
    header.request_api_key = api as i16;
    header.request_api_version = version;
    header.correlation_id = 7;
    header.client_id = Some(StrBytes::from_static_str("guard"));
    let mut body = BytesMut::new();
    header
        .encode(&mut body, api.request_header_version(version))
        .unwrap();
    request.encode(&mut body, version).unwrap();
    body
}

fn answer<R: Decodable>(addr: &str, api: ApiKey, version: i16, body: &[u8]) -> R {
    maybe_answer(addr, api, version, body).expect("an answer")
}

/// The answer, or `None` when the connection closed first (the test
/// broker closes on some admin APIs it does not implement).
fn maybe_answer<R: Decodable>(addr: &str, api: ApiKey, version: i16, body: &[u8]) -> Option<R> {
    let mut out = send_frame(addr, body)?;
    let h = ResponseHeader::decode(&mut out, api.response_header_version(version)).unwrap();
    assert_eq!(h.correlation_id, 7);
    Some(R::decode(&mut out, version).unwrap())
}

fn name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_owned()))
}

/// The error codes of each admin request naming `topic`, through `addr`
/// (`None`: the connection closed without an answer).
fn admin_codes(addr: &str, topic: &str) -> Vec<(&'static str, Option<i16>)> {
    let mut codes = Vec::new();
    // DeleteRecords v2 (flexible): everything before offset 1.
    let mut p = m::delete_records_request::DeleteRecordsPartition::default();
    p.partition_index = 0;
    p.offset = 1;
    let mut t = m::delete_records_request::DeleteRecordsTopic::default();
    t.name = name(topic);
    t.partitions.push(p);
    let mut r = m::DeleteRecordsRequest::default();
    r.topics.push(t);
    r.timeout_ms = 5000;
    let resp: Option<m::DeleteRecordsResponse> = maybe_answer(
        addr,
        ApiKey::DeleteRecords,
        2,
        &frame(ApiKey::DeleteRecords, 2, &r),
    );
    codes.push((
        "DeleteRecords",
        resp.map(|r| r.topics[0].partitions[0].error_code),
    ));
    // CreatePartitions v0: one partition more, validated only.
    let mut t = m::create_partitions_request::CreatePartitionsTopic::default();
    t.name = name(topic);
    t.count = 2;
    let mut r = m::CreatePartitionsRequest::default();
    r.topics.push(t);
    r.timeout_ms = 5000;
    r.validate_only = true;
    let resp: Option<m::CreatePartitionsResponse> = maybe_answer(
        addr,
        ApiKey::CreatePartitions,
        0,
        &frame(ApiKey::CreatePartitions, 0, &r),
    );
    codes.push(("CreatePartitions", resp.map(|r| r.results[0].error_code)));
    // AlterConfigs v0 and IncrementalAlterConfigs v1 (flexible), validated
    // only.
    let mut c = m::alter_configs_request::AlterableConfig::default();
    c.name = StrBytes::from_static_str("retention.ms");
    c.value = Some(StrBytes::from_static_str("1"));
    let mut res = m::alter_configs_request::AlterConfigsResource::default();
    res.resource_type = 2;
    res.resource_name = StrBytes::from_string(topic.to_owned());
    res.configs.push(c);
    let mut r = m::AlterConfigsRequest::default();
    r.resources.push(res);
    r.validate_only = true;
    let resp: Option<m::AlterConfigsResponse> = maybe_answer(
        addr,
        ApiKey::AlterConfigs,
        0,
        &frame(ApiKey::AlterConfigs, 0, &r),
    );
    codes.push(("AlterConfigs", resp.map(|r| r.responses[0].error_code)));
    let mut c = m::incremental_alter_configs_request::AlterableConfig::default();
    c.name = StrBytes::from_static_str("cleanup.policy");
    c.config_operation = 0;
    c.value = Some(StrBytes::from_static_str("delete"));
    let mut res = m::incremental_alter_configs_request::AlterConfigsResource::default();
    res.resource_type = 2;
    res.resource_name = StrBytes::from_string(topic.to_owned());
    res.configs.push(c);
    let mut r = m::IncrementalAlterConfigsRequest::default();
    r.resources.push(res);
    r.validate_only = true;
    let resp: Option<m::IncrementalAlterConfigsResponse> = maybe_answer(
        addr,
        ApiKey::IncrementalAlterConfigs,
        1,
        &frame(ApiKey::IncrementalAlterConfigs, 1, &r),
    );
    codes.push((
        "IncrementalAlterConfigs",
        resp.map(|r| r.responses[0].error_code),
    ));
    codes
}

/// DeleteTopics v4 (flexible) of `topic` through `addr`: its error code.
fn delete_topic(addr: &str, topic: &str) -> Option<i16> {
    let mut r = m::DeleteTopicsRequest::default();
    r.topic_names.push(name(topic));
    r.timeout_ms = 5000;
    let resp: Option<m::DeleteTopicsResponse> = maybe_answer(
        addr,
        ApiKey::DeleteTopics,
        4,
        &frame(ApiKey::DeleteTopics, 4, &r),
    );
    resp.map(|r| r.responses[0].error_code)
}

#[test]
fn admin_requests_on_a_key_store_topic_are_refused_and_apis_the_proxy_does_not_serve_too() {
    let Some(broker) = bootstrap() else {
        return;
    };
    let s = SubjectSetup::new(&broker, "guard");
    let topic = fresh_topic("guard-profiles");
    common::create_topic(&broker, &topic, 1);
    let policies = s.policies(&s.entry(&topic)).unwrap();
    let held = consume_all(&broker, &s.key_topic, 1).unwrap().len();
    assert!(held > 0, "the key store holds its naming key");
    let refused_before = tombstone_crypt_proxy::stats::process().admin_refused;
    let proxy = start_proxy(&broker, policies.clone(), Hooks::default());
    for (api, code) in admin_codes(&proxy.addr, &s.key_topic) {
        assert_eq!(
            code,
            Some(TOPIC_AUTHORIZATION_FAILED),
            "{api} on the key store"
        );
    }
    assert_eq!(
        delete_topic(&proxy.addr, &s.key_topic),
        Some(TOPIC_AUTHORIZATION_FAILED)
    );
    // By id only (DeleteTopics v6): the proxy cannot tell which topic.
    let mut t = m::delete_topics_request::DeleteTopicState::default();
    t.topic_id = uuid::Uuid::from_bytes([7; 16]);
    let mut r = m::DeleteTopicsRequest::default();
    r.topics.push(t);
    r.timeout_ms = 5000;
    let resp: m::DeleteTopicsResponse = answer(
        &proxy.addr,
        ApiKey::DeleteTopics,
        6,
        &frame(ApiKey::DeleteTopics, 6, &r),
    );
    assert_eq!(resp.responses[0].error_code, TOPIC_AUTHORIZATION_FAILED);
    assert!(tombstone_crypt_proxy::stats::process().admin_refused >= refused_before + 6);
    // The key store holds what it held.
    assert_eq!(consume_all(&broker, &s.key_topic, 1).unwrap().len(), held);
    // On another topic the same requests reach the broker: whatever it
    // answers (the test broker closes on some it does not implement), the
    // proxy refused none of them.
    let before = tombstone_crypt_proxy::stats::process();
    for (api, code) in admin_codes(&proxy.addr, &topic) {
        assert_ne!(code, Some(TOPIC_AUTHORIZATION_FAILED), "{api} on {topic}");
    }
    let after = tombstone_crypt_proxy::stats::process();
    assert_eq!(
        (after.admin_refused, after.frames_refused),
        (before.admin_refused, before.frames_refused),
        "the proxy refused an admin request on an ordinary topic"
    );
    // With key_store_admin, they pass on the key store too.
    let open = start_proxy_json(
        &broker,
        policies,
        Hooks::default(),
        None,
        r#""key_store_admin": true,"#,
    );
    let before = tombstone_crypt_proxy::stats::process();
    for (api, code) in admin_codes(&open.addr, &s.key_topic) {
        assert_ne!(
            code,
            Some(TOPIC_AUTHORIZATION_FAILED),
            "{api} with key_store_admin"
        );
    }
    let after = tombstone_crypt_proxy::stats::process();
    assert_eq!(
        (after.admin_refused, after.frames_refused),
        (before.admin_refused, before.frames_refused)
    );

    // Default deny, in the same test (the counters above are the
    // process's).
    only_the_apis_the_proxy_serves_are_listed_and_others_are_refused(&broker);
}

/// ApiVersions v3 through `addr`: the API keys listed.
fn api_keys(addr: &str) -> Vec<i16> {
    let mut r = m::ApiVersionsRequest::default();
    r.client_software_name = StrBytes::from_static_str("guard");
    r.client_software_version = StrBytes::from_static_str("1");
    let resp: m::ApiVersionsResponse = answer(
        addr,
        ApiKey::ApiVersions,
        3,
        &frame(ApiKey::ApiVersions, 3, &r),
    );
    assert_eq!(resp.error_code, 0);
    resp.api_keys.iter().map(|k| k.api_key).collect()
}

fn only_the_apis_the_proxy_serves_are_listed_and_others_are_refused(broker: &str) {
    let broker = broker.to_owned();
    let topic = fresh_topic("deny");
    let keys = common::Keys::new(false);
    common::create_topic(&broker, &topic, 1);
    let proxy = start_proxy(&broker, keys.policies(&topic), Hooks::default());
    let direct = api_keys(&broker);
    let through = api_keys(&proxy.addr);
    // Every key listed is one the proxy serves, and each the broker lists
    // that the proxy serves stays.
    for k in &through {
        assert!(direct.contains(k), "{k} listed and not the broker's");
    }
    let served = [
        0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 22, 36,
    ];
    for k in served {
        if direct.contains(&k) {
            assert!(through.contains(&k), "API key {k} left out");
        }
    }
    for k in [
        4, 5, 6, 7, 27, 52, 53, 54, 56, 58, 62, 63, 64, 67, 70, 76, 77, 78, 79,
    ] {
        assert!(!through.contains(&k), "API key {k} listed");
    }
    // A ShareFetch (78), a broker's LeaderAndIsr (4) and a key no API has:
    // the connection closes, nothing is forwarded.
    for key in [78i16, 4, 999] {
        let mut body = BytesMut::new();
        body.extend_from_slice(&key.to_be_bytes());
        body.extend_from_slice(&0i16.to_be_bytes());
        body.extend_from_slice(&7i32.to_be_bytes());
        body.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
        let mut s = TcpStream::connect(&proxy.addr).unwrap();
        s.write_all(&(body.len() as i32).to_be_bytes()).unwrap();
        s.write_all(&body).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 16];
        let closed = match s.read(&mut buf) {
            Ok(n) => n == 0,
            Err(e) => matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
            ),
        };
        assert!(closed, "API key {key}: the connection stayed open");
    }
    // The proxy serves on.
    assert!(api_keys(&proxy.addr).contains(&0));
}

/// An ApiVersions at a version past the proxy's (a client newer than it:
/// kafka-clients 4.4 asks v5) is answered by the proxy, as a broker answers
/// a version it does not speak: `UNSUPPORTED_VERSION` in v0's shape,
/// listing the ApiVersions versions the proxy reads; on the same
/// connection the client then asks at the highest of them and is served.
/// Before, the proxy forwarded it and could not read the broker's answer:
/// it closed the connection, and the Java client never connected.
#[test]
fn an_api_versions_past_the_proxys_is_answered_unsupported_and_the_client_asks_again() {
    let Some(broker) = common::apache_kafka() else {
        return;
    };
    let proxy = start_proxy(
        &broker,
        tombstone_crypt_proxy::Policies::new(),
        Hooks::default(),
    );
    let mut s = TcpStream::connect(&proxy.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut ask = |version: i16| -> bytes::Bytes {
        let mut r = m::ApiVersionsRequest::default();
        r.client_software_name = StrBytes::from_static_str("guard");
        r.client_software_version = StrBytes::from_static_str("1");
        // Past v4 the request is encoded as v4's (what a newer version
        // adds, the proxy never reads).
        let mut body = frame(ApiKey::ApiVersions, version.min(4), &r);
        body[2..4].copy_from_slice(&version.to_be_bytes());
        s.write_all(&(body.len() as i32).to_be_bytes()).unwrap();
        s.write_all(&body).unwrap();
        let mut len = [0u8; 4];
        s.read_exact(&mut len).unwrap();
        let mut out = vec![0u8; i32::from_be_bytes(len) as usize];
        s.read_exact(&mut out).unwrap();
        bytes::Bytes::from(out)
    };
    let mut out = ask(5);
    let header = ResponseHeader::decode(&mut out, 0).unwrap();
    assert_eq!(header.correlation_id, 7);
    let resp = m::ApiVersionsResponse::decode(&mut out, 0).unwrap();
    assert_eq!(resp.error_code, 35, "UNSUPPORTED_VERSION");
    let own = resp
        .api_keys
        .iter()
        .find(|k| k.api_key == ApiKey::ApiVersions as i16)
        .expect("ApiVersions' own versions listed");
    let max = own.max_version;
    assert!(max >= 3, "v{max}");
    // Asked again at that version, on the same connection: the broker's
    // list, filtered.
    let mut out = ask(max);
    ResponseHeader::decode(&mut out, 0).unwrap();
    let resp = m::ApiVersionsResponse::decode(&mut out, max).unwrap();
    assert_eq!(resp.error_code, 0);
    assert!(
        resp.api_keys.iter().any(|k| k.api_key == 0),
        "Produce listed"
    );
}
