//! Rolling a partition's active segment on Apache Kafka without a record
//! any reader sees: an empty aborted transaction's marker.
//!
//! Apache Kafka's log cleaner never compacts the active segment, and a
//! segment rolls only when something is appended after `segment.ms`. A
//! test that wants everything it wrote compacted must append after it; a
//! record would be read by every reader the test checks. A control batch
//! is read by none: this module finds the transaction coordinator
//! (FindCoordinator, which also makes the transaction state topic on a
//! broker's first transaction), opens a transaction (InitProducerId),
//! adds the partitions to it (AddPartitionsToTxn v3, as a client before
//! KIP-890's second part), writes nothing, and aborts it (EndTxn): the
//! transaction coordinator then appends an abort marker to each partition,
//! which rolls its segment once `segment.ms` has passed since the
//! segment's first record.
//!
//! The coordinator is asked at the bootstrap address and answered at its
//! own; the partitions' leaders append the markers.
#![allow(dead_code)]

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, EndTxnRequest, FindCoordinatorRequest, InitProducerIdRequest,
    ProducerId, RequestHeader, ResponseHeader, TopicName, TransactionalId,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};

/// Errors the coordinator answers while it starts or finishes a previous
/// step: the request is sent again.
const RETRIABLE: [i16; 5] = [
    14, // COORDINATOR_LOAD_IN_PROGRESS
    15, // COORDINATOR_NOT_AVAILABLE
    16, // NOT_COORDINATOR
    51, // CONCURRENT_TRANSACTIONS
    7,  // REQUEST_TIMED_OUT
];

static CALLS: AtomicU64 = AtomicU64::new(0);

struct Connection {
    stream: TcpStream,
    correlation: i32,
}

impl Connection {
    fn open(bootstrap: &str) -> Connection {
        let stream = TcpStream::connect(bootstrap)
            .unwrap_or_else(|e| panic!("roll: connect to {bootstrap}: {e}"));
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        Connection {
            stream,
            correlation: 0,
        }
    }

    fn call<R: Request>(&mut self, version: i16, req: &R) -> R::Response {
        self.correlation += 1;
        let mut header = RequestHeader::default();
        header.request_api_key = R::KEY;
        header.request_api_version = version;
        header.correlation_id = self.correlation;
        header.client_id = Some(StrBytes::from_static_str("tombstone-tests-roll"));
        let mut body = BytesMut::new();
        header
            .encode(&mut body, R::header_version(version))
            .unwrap();
        req.encode(&mut body, version).unwrap();
        self.stream
            .write_all(&(body.len() as i32).to_be_bytes())
            .unwrap();
        self.stream.write_all(&body).unwrap();
        let mut len = [0u8; 4];
        self.stream.read_exact(&mut len).expect("roll: no answer");
        let len = usize::try_from(i32::from_be_bytes(len)).expect("roll: a negative length");
        assert!(len < 1 << 20, "roll: an answer of {len} bytes");
        let mut frame = vec![0u8; len];
        self.stream.read_exact(&mut frame).unwrap();
        let mut frame = Bytes::from(frame);
        let h = ResponseHeader::decode(&mut frame, R::Response::header_version(version)).unwrap();
        assert_eq!(h.correlation_id, self.correlation);
        R::Response::decode(&mut frame, version).unwrap()
    }
}

/// Sends `step` until it answers an error that is not [`RETRIABLE`], for
/// 30 s at most; panics on any other error.
fn until_done(what: &str, mut step: impl FnMut() -> i16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match step() {
            0 => return,
            e if RETRIABLE.contains(&e) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
            }
            e => panic!("roll: {what} answered error {e}"),
        }
    }
}

/// Appends an abort marker to each of `partitions` of `topic` (and nothing
/// else): each partition's active segment rolls if its first record is
/// older than the topic's `segment.ms`. Consumers never deliver a marker;
/// it takes an offset.
pub fn append_markers(bootstrap: &str, topic: &str, partitions: i32) {
    let n = CALLS.fetch_add(1, Ordering::SeqCst);
    let id = TransactionalId(StrBytes::from_string(format!(
        "tombstone-tests-roll-{}-{n}",
        std::process::id()
    )));
    let mut coordinator = String::new();
    {
        let mut conn = Connection::open(bootstrap);
        until_done("FindCoordinator", || {
            let mut req = FindCoordinatorRequest::default();
            req.key = id.0.clone();
            req.key_type = 1; // a transaction's
            let resp = conn.call(3, &req);
            coordinator = format!("{}:{}", resp.host.as_str(), resp.port);
            resp.error_code
        });
    }
    let mut conn = Connection::open(&coordinator);
    let mut producer = (ProducerId(-1), -1i16);
    until_done("InitProducerId", || {
        let mut req = InitProducerIdRequest::default();
        req.transactional_id = Some(id.clone());
        req.transaction_timeout_ms = 60_000;
        req.producer_id = ProducerId(-1);
        req.producer_epoch = -1;
        let resp = conn.call(1, &req);
        producer = (resp.producer_id, resp.producer_epoch);
        resp.error_code
    });
    until_done("AddPartitionsToTxn", || {
        let mut t = AddPartitionsToTxnTopic::default();
        t.name = TopicName(StrBytes::from_string(topic.to_owned()));
        t.partitions = (0..partitions).collect();
        let mut req = AddPartitionsToTxnRequest::default();
        req.v3_and_below_transactional_id = id.clone();
        req.v3_and_below_producer_id = producer.0;
        req.v3_and_below_producer_epoch = producer.1;
        req.v3_and_below_topics = vec![t];
        let resp = conn.call(3, &req);
        if resp.error_code != 0 {
            return resp.error_code;
        }
        resp.results_by_topic_v3_and_below
            .iter()
            .flat_map(|t| t.results_by_partition.iter())
            .map(|p| p.partition_error_code)
            .find(|&e| e != 0)
            .unwrap_or(0)
    });
    until_done("EndTxn", || {
        let mut req = EndTxnRequest::default();
        req.transactional_id = id.clone();
        req.producer_id = producer.0;
        req.producer_epoch = producer.1;
        req.committed = false;
        conn.call(3, &req).error_code
    });
}
