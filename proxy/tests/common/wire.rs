//! Raw Kafka frames for the attack suites: v2 record batches built by
//! hand, one Produce or Fetch on a connection of its own, the records a
//! Fetch gave back.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, BrokerId, FetchRequest, FetchResponse, ProduceRequest, ProduceResponse, RequestHeader,
    ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

/// Now, in milliseconds since the epoch: a record's creation timestamp
/// (a broker's time-based retention deletes a record of a date long past
/// at once: Apache Kafka's default keeps 7 days).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A record at `offset`, not idempotent, created now.
pub fn record(key: Option<&[u8]>, value: Option<&[u8]>, offset: i64) -> Record {
    Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset,
        // kafka-protocol's encoder keeps records in one batch while offset
        // minus sequence is constant: base sequence -1 (none). With -1 on
        // every record, records at several offsets were encoded as one
        // batch each, which Apache Kafka refuses in one partition of a
        // Produce v3 and later (INVALID_RECORD).
        sequence: offset as i32 - 1,
        timestamp: now_ms() + offset,
        key: key.map(Bytes::copy_from_slice),
        value: value.map(Bytes::copy_from_slice),
        headers: Default::default(),
    }
}

/// `r` with the header `name: value` added.
pub fn with_header(mut r: Record, name: &str, value: &[u8]) -> Record {
    r.headers.insert(
        StrBytes::from_string(name.to_owned()),
        Some(Bytes::copy_from_slice(value)),
    );
    r
}

/// One uncompressed v2 batch of `records`.
pub fn batch_of(records: &[Record]) -> BytesMut {
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut buf, records.iter(), &options).unwrap();
    buf
}

/// Recomputes a v2 batch's CRC (over attributes to the end).
pub fn fix_crc(batch: &mut [u8]) {
    let crc = crc32c::crc32c(&batch[21..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
}

/// Sends one request frame on a new connection and reads its answer
/// (`None`: the connection closed first).
pub fn send_frame(addr: &str, body: &[u8]) -> Option<Bytes> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(&(body.len() as i32).to_be_bytes()).unwrap();
    s.write_all(body).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let mut len = [0u8; 4];
    s.read_exact(&mut len).ok()?;
    let mut frame = vec![0u8; i32::from_be_bytes(len) as usize];
    s.read_exact(&mut frame).ok()?;
    Some(Bytes::from(frame))
}

/// The body of a request frame: `req` at `version` under a header of
/// `api` and `correlation`.
pub fn request<R: Encodable>(api: ApiKey, version: i16, correlation: i32, req: &R) -> BytesMut {
    let mut header = RequestHeader::default();
    header.request_api_key = api as i16;
    header.request_api_version = version;
    header.correlation_id = correlation;
    header.client_id = Some(StrBytes::from_static_str("hostile"));
    let mut body = BytesMut::new();
    header
        .encode(&mut body, api.request_header_version(version))
        .unwrap();
    req.encode(&mut body, version).unwrap();
    body
}

/// Sends the request frame `body` (`api` at `version`) on a new connection
/// and decodes its answer (`None`: closed, or not such an answer).
pub fn call<Resp: Decodable>(addr: &str, api: ApiKey, version: i16, body: &[u8]) -> Option<Resp> {
    let mut out = send_frame(addr, body)?;
    ResponseHeader::decode(&mut out, api.response_header_version(version)).ok()?;
    Resp::decode(&mut out, version).ok()
}

/// A new idempotent producer's id and epoch, asked of `broker`
/// (InitProducerId v1, no transactional id).
pub fn init_producer_id(broker: &str) -> (i64, i16) {
    let mut req = kafka_protocol::messages::InitProducerIdRequest::default();
    // Not transactional: null (the default is an empty id).
    req.transactional_id = None;
    req.transaction_timeout_ms = 60000;
    req.producer_id = kafka_protocol::messages::ProducerId(-1);
    req.producer_epoch = -1;
    let body = request(ApiKey::InitProducerId, 1, 1, &req);
    let r: kafka_protocol::messages::InitProducerIdResponse =
        call(broker, ApiKey::InitProducerId, 1, &body).expect("an InitProducerId answer");
    assert_eq!(r.error_code, 0);
    (r.producer_id.0, r.producer_epoch)
}

/// The id of `topic`, from a Metadata v12 at `addr` (through a proxy,
/// this is what teaches it the id); `None` when it has none.
pub fn topic_id(addr: &str, topic: &str) -> Option<uuid::Uuid> {
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    use kafka_protocol::messages::{MetadataRequest, MetadataResponse};
    let mut t = MetadataRequestTopic::default();
    t.name = Some(TopicName(StrBytes::from_string(topic.to_owned())));
    let mut r = MetadataRequest::default();
    r.topics = Some(vec![t]);
    let resp: MetadataResponse = call(
        addr,
        ApiKey::Metadata,
        12,
        &request(ApiKey::Metadata, 12, 1, &r),
    )?;
    let t = resp.topics.first()?;
    (t.error_code == 0 && !t.topic_id.is_nil()).then_some(t.topic_id)
}

/// A Produce (`version`, acks=-1) of `records` to partition 0 of `topic`
/// at `addr`: the partition's error code and message (`(-100, None)`: the
/// connection closed without an answer).
pub fn raw_produce(addr: &str, topic: &str, records: Bytes, version: i16) -> (i16, Option<String>) {
    let body = produce_body(topic, records, version);
    let Some(mut frame) = send_frame(addr, &body) else {
        return (-100, None);
    };
    let h = ResponseHeader::decode(&mut frame, ApiKey::Produce.response_header_version(version))
        .unwrap();
    assert_eq!(h.correlation_id, 4242);
    let resp = ProduceResponse::decode(&mut frame, version).unwrap();
    let part = &resp.responses[0].partition_responses[0];
    (
        part.error_code,
        part.error_message.as_ref().map(|m| m.as_str().to_owned()),
    )
}

/// The body of a Produce request frame (`version`, acks=-1, correlation id
/// 4242) of `records` to partition 0 of `topic`.
pub fn produce_body(topic: &str, records: Bytes, version: i16) -> BytesMut {
    let mut p = PartitionProduceData::default();
    p.index = 0;
    p.records = Some(records);
    let mut t = TopicProduceData::default();
    t.name = TopicName(StrBytes::from_string(topic.to_owned()));
    t.partition_data.push(p);
    let mut req = ProduceRequest::default();
    req.acks = -1;
    req.timeout_ms = 5000;
    req.topic_data.push(t);
    let mut header = RequestHeader::default();
    header.request_api_key = ApiKey::Produce as i16;
    header.request_api_version = version;
    header.correlation_id = 4242;
    header.client_id = Some(StrBytes::from_static_str("attack"));
    let mut body = BytesMut::new();
    header
        .encode(&mut body, ApiKey::Produce.request_header_version(version))
        .unwrap();
    req.encode(&mut body, version).unwrap();
    body
}

/// A Fetch v11 of partition 0 of `topic` from offset 0 at `addr`: the
/// partition's error code and its record bytes (`(-100, empty)`: the
/// connection closed without an answer).
pub fn raw_fetch(addr: &str, topic: &str) -> (i16, Bytes) {
    let version = 11;
    let body = fetch_body(topic, 99, 500);
    let Some(mut frame) = send_frame(addr, &body) else {
        return (-100, Bytes::new());
    };
    ResponseHeader::decode(&mut frame, ApiKey::Fetch.response_header_version(version)).unwrap();
    let resp = FetchResponse::decode(&mut frame, version).unwrap();
    let p = &resp.responses[0].partitions[0];
    (p.error_code, p.records.clone().unwrap_or_default())
}

/// The body of a Fetch v11 request frame (correlation id `correlation`,
/// waiting at most `max_wait_ms`) of partition 0 of `topic` from offset 0.
pub fn fetch_body(topic: &str, correlation: i32, max_wait_ms: i32) -> BytesMut {
    let version = 11;
    let mut fp = FetchPartition::default();
    fp.partition = 0;
    fp.current_leader_epoch = -1;
    fp.fetch_offset = 0;
    fp.last_fetched_epoch = -1;
    fp.log_start_offset = -1;
    fp.partition_max_bytes = 1 << 20;
    let mut ft = FetchTopic::default();
    ft.topic = TopicName(StrBytes::from_string(topic.to_owned()));
    ft.partitions.push(fp);
    let mut req = FetchRequest::default();
    req.replica_id = BrokerId(-1);
    req.max_wait_ms = max_wait_ms;
    req.min_bytes = 1;
    req.max_bytes = 1 << 20;
    req.isolation_level = 0;
    req.session_id = 0;
    req.session_epoch = -1;
    req.topics.push(ft);
    let mut header = RequestHeader::default();
    header.request_api_key = ApiKey::Fetch as i16;
    header.request_api_version = version;
    header.correlation_id = correlation;
    header.client_id = Some(StrBytes::from_static_str("attack"));
    let mut body = BytesMut::new();
    header
        .encode(&mut body, ApiKey::Fetch.request_header_version(version))
        .unwrap();
    req.encode(&mut body, version).unwrap();
    body
}

/// Every record of the batches in `raw`.
pub fn decode_records(raw: &Bytes) -> Vec<Record> {
    let mut b = raw.clone();
    RecordBatchDecoder::decode_all(&mut b)
        .unwrap()
        .into_iter()
        .flat_map(|s| s.records)
        .collect()
}

/// Whether `needle` is somewhere in `hay`.
pub fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// A raw Fetch of `topic` at `proxy`: its error code and records (none on
/// an error).
pub fn fetch_records(proxy: &str, topic: &str) -> (i16, Vec<Record>) {
    let (code, raw) = raw_fetch(proxy, topic);
    let recs = if code == 0 {
        decode_records(&raw)
    } else {
        Vec::new()
    };
    (code, recs)
}

/// Polls a raw Fetch of `topic` through `proxy` until `done` holds for the
/// partition's (error code, records) or `secs` pass; the last answer.
pub fn fetch_until(
    proxy: &str,
    topic: &str,
    secs: u64,
    done: impl Fn(i16, &[Record]) -> bool,
) -> (i16, Vec<Record>) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let (code, recs) = fetch_records(proxy, topic);
        if done(code, &recs) || Instant::now() > deadline {
            return (code, recs);
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Records as (offset, key, value) text, to print.
pub fn show(recs: &[Record]) -> Vec<(i64, String, Option<String>)> {
    recs.iter()
        .map(|r| {
            (
                r.offset,
                String::from_utf8_lossy(r.key.as_deref().unwrap_or_default()).into_owned(),
                r.value
                    .as_deref()
                    .map(|v| String::from_utf8_lossy(v).into_owned()),
            )
        })
        .collect()
}

/// `b` in lowercase hex.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
