//! Produce: a request's policy partitions encrypted (or refused), and its
//! response with the refused partitions merged in.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::produce_request::ProduceRequest;
use kafka_protocol::messages::produce_response::{
    PartitionProduceResponse, ProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use uuid::Uuid;

use super::codec::{decode_response, encode_response, rewrite, NodeMap};
use super::versions::decodable;
use crate::codes::{TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_ID};
use crate::config::Policies;
use crate::hooks::Hooks;
use crate::topic_ids::TopicIds;

/// A partition of a Produce the proxy refused: not forwarded, answered by
/// the proxy with `CORRUPT_MESSAGE`.
#[derive(Clone, Debug)]
pub(crate) struct Refused {
    pub(crate) topic: TopicName,
    /// The topic's id, as a Produce v13 and on names it (else nil).
    pub(crate) topic_id: Uuid,
    pub(crate) partition: i32,
    pub(crate) reason: String,
    /// The error code the client gets.
    pub(crate) code: i16,
}

/// A partition whose batch the write rule grew (`count` tombstones of
/// older key forms at its front), or whose idempotent producer the proxy
/// follows (`producer`: its id and epoch, `crate::sequences`), or both.
#[derive(Clone, Debug)]
pub(crate) struct Added {
    pub(crate) topic: TopicName,
    /// The topic's id, as a Produce v13 and on names it (else nil).
    pub(crate) topic_id: Uuid,
    pub(crate) partition: i32,
    pub(crate) count: i32,
    /// The idempotent producer whose line this batch started or moved on:
    /// confirmed once the broker takes the batch.
    pub(crate) producer: Option<(i64, i16)>,
}

/// What to do with a Produce request.
#[derive(Debug)]
pub(crate) enum ProduceAction {
    /// No policy topic in it: forward the frame as it came.
    Unchanged {
        /// The request's acks (0: no response comes).
        acks: i16,
    },
    /// Forward this frame; merge the refused partitions into the response,
    /// and move each partition of `added` on by its count (the write
    /// rule's tombstones at the front of its batch: the client's first
    /// record is that many offsets after the batch's base offset).
    Forward {
        frame: Bytes,
        refused: Vec<Refused>,
        acks: i16,
        added: Vec<Added>,
    },
    /// Every partition was refused: answer with this response (none when
    /// acks=0).
    Answer {
        response: Option<Bytes>,
        refused: Vec<Refused>,
    },
}

/// Encrypts the policy topics' partitions of a Produce request.
///
/// # Errors
/// The request cannot be decoded or encoded (the connection is then closed:
/// nothing of it is forwarded).
pub(crate) fn produce_request(
    frame: &Bytes,
    version: i16,
    policies: &Policies,
    hooks: &Hooks,
    budget: &crate::budget::Budget,
    sequences: &crate::sequences::Sequences,
    ids: &TopicIds,
) -> Result<ProduceAction, String> {
    let range = decodable(ApiKey::Produce).ok_or("produce")?;
    if version < range.min || version > range.max {
        return Err(format!(
            "a Produce v{version}: the proxy reads v{range} (ApiVersions said so)"
        ));
    }
    crate::bounds::produce_request(frame, version)
        .map_err(|e| format!("a Produce v{version} request that does not decode: {e}"))?;
    let mut buf = frame.clone();
    let header = RequestHeader::decode(&mut buf, ApiKey::Produce.request_header_version(version))
        .map_err(|e| format!("decoding a Produce v{version} request header: {e:#}"))?;
    let mut request = ProduceRequest::decode(&mut buf, version)
        .map_err(|e| format!("decoding a Produce v{version} request: {e:#}"))?;
    if !buf.is_empty() {
        return Err(format!(
            "a Produce v{version} request has bytes past its end"
        ));
    }
    // Each topic's name: its own, or (v13 and on) the one its id names.
    let names: Vec<Option<TopicName>> = request
        .topic_data
        .iter()
        .map(|t| {
            if version >= 13 {
                ids.name(t.topic_id.as_bytes())
            } else {
                Some(t.name.clone())
            }
        })
        .collect();
    let watched = |name: &Option<TopicName>| match name {
        Some(n) => policies.get(n.as_str()).is_some() || policies.guards(n.as_str()),
        // An id the proxy does not know may name a policy topic.
        None => !policies.is_empty() || policies.guards_any(),
    };
    if !names.iter().any(watched) {
        return Ok(ProduceAction::Unchanged { acks: request.acks });
    }
    let mut refused = Vec::new();
    let mut added = Vec::new();
    for (topic, name) in request.topic_data.iter_mut().zip(names) {
        let topic_id = topic.topic_id;
        let Some(name) = name else {
            // Named by an id no Metadata response has said: the client
            // refreshes its metadata (through the proxy) and retries.
            for p in &topic.partition_data {
                crate::stats::add(crate::stats::Event::PartitionsRefused, 1);
                refused.push(Refused {
                    topic: TopicName::default(),
                    topic_id,
                    partition: p.index,
                    reason: format!(
                        "topic id {topic_id}, which no Metadata response through the proxy has \
                         named"
                    ),
                    code: UNKNOWN_TOPIC_ID,
                });
            }
            topic.partition_data.clear();
            continue;
        };
        if policies.guards(name.as_str()) {
            // A key-store topic: a record written there by a client could
            // remove a subject's key, or undo a shred once compacted.
            for p in &topic.partition_data {
                crate::stats::add(crate::stats::Event::PartitionsRefused, 1);
                refused.push(Refused {
                    topic: name.clone(),
                    topic_id,
                    partition: p.index,
                    reason: "a key-store topic of subject keys: not written through the proxy"
                        .into(),
                    code: TOPIC_AUTHORIZATION_FAILED,
                });
            }
            topic.partition_data.clear();
            continue;
        }
        let Some(policy) = policies.get(name.as_str()) else {
            continue;
        };
        topic.partition_data.retain_mut(|p| {
            let Some(records) = &p.records else {
                return true;
            };
            // Names and numbers only: never a key or a value.
            let _span =
                tracing::debug_span!("partition", topic = name.as_str(), partition = p.index)
                    .entered();
            let index = p.index;
            let mut followed = None;
            let mut sequence = |batch: crate::sequences::Batch, more, grows| {
                let base = sequences.forward(name.as_str(), index, batch, more, grows)?;
                if batch.idempotent() && grows {
                    followed = Some((batch.producer_id, batch.producer_epoch));
                }
                Ok(base)
            };
            match crate::batch::encrypt(
                name.as_str(),
                policy,
                hooks,
                records,
                budget,
                &mut sequence,
            ) {
                Ok(encrypted) => {
                    p.records = Some(encrypted.records);
                    if encrypted.added > 0 || followed.is_some() {
                        added.push(Added {
                            topic: name.clone(),
                            topic_id,
                            partition: p.index,
                            count: encrypted.added,
                            producer: followed,
                        });
                    }
                    true
                }
                Err(refusal) => {
                    crate::stats::add(crate::stats::Event::PartitionsRefused, 1);
                    refused.push(Refused {
                        topic: name.clone(),
                        topic_id,
                        partition: p.index,
                        reason: refusal.reason,
                        code: refusal.code,
                    });
                    false
                }
            }
        });
    }
    request.topic_data.retain(|t| !t.partition_data.is_empty());
    let acks = request.acks;
    if request.topic_data.is_empty() {
        let response = (acks != 0)
            .then(|| answer_refused(version, header.correlation_id, &refused))
            .transpose()?;
        return Ok(ProduceAction::Answer { response, refused });
    }
    // Sized up front: grown by doubling, a 1 MB request took five blocks,
    // their copies and the page faults of each fresh one.
    let header_version = ApiKey::Produce.request_header_version(version);
    let size = header
        .compute_size(header_version)
        .and_then(|h| Ok(h + request.compute_size(version)?))
        .unwrap_or(0);
    let mut out = BytesMut::with_capacity(size);
    header
        .encode(&mut out, header_version)
        .and_then(|()| request.encode(&mut out, version))
        .map_err(|e| format!("encoding a Produce v{version} request: {e:#}"))?;
    Ok(ProduceAction::Forward {
        frame: out.freeze(),
        refused,
        acks,
        added,
    })
}

/// A Produce response that refuses every partition of `refused`.
pub(crate) fn answer_refused(
    version: i16,
    correlation: i32,
    refused: &[Refused],
) -> Result<Bytes, String> {
    let mut response = ProduceResponse::default();
    merge_refused(&mut response, refused, version);
    let mut rh = ResponseHeader::default();
    rh.correlation_id = correlation;
    encode_response(&rh, &response, ApiKey::Produce, version)
}

/// Whether `t` of a Produce response at `version` is the topic `name`
/// (up to v12) or `id` (v13 and on).
fn names(t: &TopicProduceResponse, version: i16, name: &TopicName, id: Uuid) -> bool {
    if version >= 13 {
        t.topic_id == id
    } else {
        t.name == *name
    }
}

/// The most partitions of one Produce response given an error message:
/// the rest carry their error code alone. A request of 64 KiB can name
/// 10,000 partitions, and a message each made its answer 30 times its size.
const MESSAGES_PER_RESPONSE: usize = 16;

fn merge_refused(response: &mut ProduceResponse, refused: &[Refused], version: i16) {
    // Where each topic's entry is (by id from v13, else by name), so that a
    // request of many topics costs one lookup each, not a scan.
    let key = |name: &TopicName, id: Uuid| {
        if version >= 13 {
            (None, id)
        } else {
            (Some(name.clone()), Uuid::nil())
        }
    };
    let mut at: std::collections::HashMap<(Option<TopicName>, Uuid), usize> = response
        .responses
        .iter()
        .enumerate()
        .map(|(i, t)| (key(&t.name, t.topic_id), i))
        .collect();
    for (n, r) in refused.iter().enumerate() {
        let mut p = PartitionProduceResponse::default();
        p.index = r.partition;
        p.error_code = r.code;
        p.base_offset = -1;
        if version >= 8 && n < MESSAGES_PER_RESPONSE {
            p.error_message = Some(StrBytes::from_string(format!(
                "tombstone-crypt proxy refused the partition: {}",
                r.reason
            )));
        }
        let k = key(&r.topic, r.topic_id);
        match at.get(&k) {
            Some(&i) => response.responses[i].partition_responses.push(p),
            None => {
                let mut t = TopicProduceResponse::default();
                if version >= 13 {
                    t.topic_id = r.topic_id;
                } else {
                    t.name = r.topic.clone();
                }
                t.partition_responses.push(p);
                at.insert(k, response.responses.len());
                response.responses.push(t);
            }
        }
    }
}

/// A Produce response with the refused partitions merged in and node
/// endpoints rewritten; `None` when it passes as it came. Each followed
/// producer's line whose batch the broker took is confirmed in
/// `sequences`.
pub(crate) fn produce_response(
    frame: &Bytes,
    version: i16,
    refused: &[Refused],
    added: &[Added],
    map: &NodeMap<'_>,
    sequences: &crate::sequences::Sequences,
) -> Result<Option<Bytes>, String> {
    if refused.is_empty() && added.is_empty() && version < 10 {
        return Ok(None);
    }
    let (header, mut body): (_, ProduceResponse) =
        decode_response(frame, ApiKey::Produce, version)?;
    let grown = added.iter().any(|a| a.count > 0);
    for a in added {
        let Some((producer_id, epoch)) = a.producer else {
            continue;
        };
        let taken = body
            .responses
            .iter()
            .filter(|t| names(t, version, &a.topic, a.topic_id))
            .flat_map(|t| t.partition_responses.iter())
            .any(|p| p.index == a.partition && p.error_code == 0);
        if taken {
            sequences.confirm(a.topic.as_str(), a.partition, producer_id, epoch);
        }
    }
    if refused.is_empty() && !grown && body.node_endpoints.is_empty() {
        return Ok(None);
    }
    for a in added.iter().filter(|a| a.count > 0) {
        let partitions = body
            .responses
            .iter_mut()
            .filter(|t| names(t, version, &a.topic, a.topic_id))
            .flat_map(|t| t.partition_responses.iter_mut())
            .filter(|p| p.index == a.partition);
        for p in partitions {
            // The client's first record: after the tombstones. A record
            // error names a record of the batch as forwarded; one of the
            // tombstones is the batch's (the batch is refused whole).
            if p.base_offset >= 0 {
                p.base_offset = p.base_offset.saturating_add(i64::from(a.count));
            }
            for e in &mut p.record_errors {
                e.batch_index = (e.batch_index - a.count).max(0);
            }
        }
    }
    merge_refused(&mut body, refused, version);
    for n in &mut body.node_endpoints {
        rewrite(map, n.node_id.0, &mut n.host, &mut n.port)?;
    }
    encode_response(&header, &body, ApiKey::Produce, version).map(Some)
}
