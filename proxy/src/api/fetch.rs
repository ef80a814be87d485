//! Fetch: a response's policy partitions decrypted.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::fetch_response::{FetchResponse, PartitionData};
use kafka_protocol::messages::{ApiKey, ResponseHeader};
use kafka_protocol::protocol::Decodable;

use super::codec::{decode_response, encode_response, rewrite, NodeMap};
use crate::codes::{CORRUPT_MESSAGE, TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_ID};
use crate::config::Policies;
use crate::hooks::Hooks;
use crate::topic_ids::TopicIds;

/// A partition of a Fetch response the proxy could not decrypt.
#[derive(Debug)]
pub(crate) struct Undecryptable {
    pub(crate) topic: String,
    pub(crate) partition: i32,
    pub(crate) reason: String,
}

/// A Fetch response whose partitions' records are wiped when it is dropped:
/// the batches decrypted into it. The broker's own (slices of its frame)
/// are only let go.
struct Decrypted {
    body: FetchResponse,
    wipe: bool,
}

impl Drop for Decrypted {
    fn drop(&mut self) {
        for topic in &mut self.body.responses {
            for p in &mut topic.partitions {
                if let Some(records) = p.records.take() {
                    crate::wipe::bytes(records, self.wipe);
                }
            }
        }
    }
}

/// A Fetch response with the policy topics' records decrypted (a
/// partition that does not decrypt gets `CORRUPT_MESSAGE` and no records);
/// `None` when it passes as it came; beside it, the partitions it could
/// not decrypt. The response frame holds the plaintext: the caller wipes
/// it once written.
pub(crate) fn fetch_response(
    frame: &Bytes,
    version: i16,
    policies: &Policies,
    hooks: &Hooks,
    map: &NodeMap<'_>,
    budget: &crate::budget::Budget,
    ids: &TopicIds,
) -> Result<(Option<Bytes>, Vec<Undecryptable>), String> {
    let mut failed = Vec::new();
    // Without a policy or a guard only the node endpoints (v16 and on)
    // change: the brokers' addresses are the proxy's.
    let watching = !policies.is_empty() || policies.guards_any();
    if !watching && version < 16 {
        return Ok((None, failed));
    }
    crate::bounds::fetch_response(frame, version)
        .map_err(|e| format!("a Fetch v{version} response that does not decode: {e}"))?;
    let (header, body): (_, FetchResponse) = match decode_response(frame, ApiKey::Fetch, version) {
        Ok(decoded) => decoded,
        Err(e) if e.contains("Tag 0 is not valid") => {
            match without_node_endpoints(frame, version) {
                Some(stripped) => {
                    // The stripped frame is walked too: only it is decoded.
                    crate::bounds::fetch_response(&stripped, version).map_err(|e| {
                        format!("a Fetch v{version} response that does not decode: {e}")
                    })?;
                    decode_response(&stripped, ApiKey::Fetch, version)?
                }
                None => return Err(e),
            }
        }
        Err(e) => return Err(e),
    };
    let mut body = Decrypted {
        body,
        wipe: hooks.wipes(),
    };
    let mut changed = false;
    for topic in body.body.responses.iter_mut().filter(|_| watching) {
        // Its name: its own, or (v13 and on) the one its id names.
        let known = if version >= 13 {
            ids.name(topic.topic_id.as_bytes())
        } else {
            Some(topic.topic.clone())
        };
        let Some(name) = known.map(|n| n.as_str().to_owned()) else {
            // An id no Metadata response through the proxy has named: it
            // may be a policy topic or a key-store topic, so nothing of it
            // is handed on; the client refreshes its metadata and retries.
            changed |= withhold(&mut topic.partitions, UNKNOWN_TOPIC_ID);
            continue;
        };
        if policies.guards(&name) {
            // A key-store topic: its records (subjects' wrapped keys, the
            // records of shreds) are not handed to clients.
            changed |= withhold(&mut topic.partitions, TOPIC_AUTHORIZATION_FAILED);
            continue;
        }
        let Some(policy) = policies.get(&name) else {
            continue;
        };
        for p in &mut topic.partitions {
            let Some(records) = &p.records else {
                continue;
            };
            if records.is_empty() {
                continue;
            }
            changed = true;
            let _span = tracing::debug_span!(
                "partition",
                topic = name.as_str(),
                partition = p.partition_index
            )
            .entered();
            match crate::batch::decrypt(&name, policy, hooks, records, budget) {
                Ok(plain) => p.records = Some(plain),
                Err(reason) => {
                    crate::stats::add(crate::stats::Event::PartitionsUndecryptable, 1);
                    p.error_code = CORRUPT_MESSAGE;
                    p.records = Some(Bytes::new());
                    failed.push(Undecryptable {
                        topic: name.clone(),
                        partition: p.partition_index,
                        reason,
                    });
                }
            }
        }
    }
    for n in &mut body.body.node_endpoints {
        changed = true;
        rewrite(map, n.node_id.0, &mut n.host, &mut n.port)?;
    }
    if !changed {
        return Ok((None, failed));
    }
    encode_response(&header, &body.body, ApiKey::Fetch, version).map(|out| (Some(out), failed))
}

/// Every partition of `partitions` answered `code` with no records and no
/// offsets: a topic whose records are not handed to clients. Whether there
/// was any.
fn withhold(partitions: &mut [PartitionData], code: i16) -> bool {
    for p in partitions.iter_mut() {
        p.error_code = code;
        p.records = Some(Bytes::new());
        p.high_watermark = -1;
        p.last_stable_offset = -1;
        p.log_start_offset = -1;
        p.aborted_transactions = None;
    }
    !partitions.is_empty()
}

/// A Fetch response below v16 without its top-level tagged field 0 (the
/// node endpoints, v16+), which some brokers send at every flexible
/// version: a reader of the version must skip a tag it does not know, and
/// kafka-protocol refuses it instead. `None` when the response does not
/// fail there.
fn without_node_endpoints(frame: &Bytes, version: i16) -> Option<Bytes> {
    if !(12..16).contains(&version) {
        return None;
    }
    let mut buf = frame.clone();
    ResponseHeader::decode(&mut buf, ApiKey::Fetch.response_header_version(version)).ok()?;
    if FetchResponse::decode(&mut buf, version).is_ok() {
        return None;
    }
    // The decoder stopped right after the section's count, the first tag
    // (0) and its size: find the count's place, each a varint.
    let stopped = frame.len() - buf.len();
    (stopped.saturating_sub(15)..stopped)
        .rev()
        .find_map(|start| strip_tag_zero(frame, start, stopped))
}

/// `frame` with the tagged-field section at `start` (to its end) without
/// tag 0, if the section is there, its tag 0 first, its size read by
/// `stopped`.
fn strip_tag_zero(frame: &Bytes, start: usize, stopped: usize) -> Option<Bytes> {
    let mut at = start;
    let count = varint(frame, &mut at)?;
    let mut kept = Vec::new();
    for i in 0..count {
        let entry = at;
        let tag = varint(frame, &mut at)?;
        let size = usize::try_from(varint(frame, &mut at)?).ok()?;
        if i == 0 && (tag != 0 || at != stopped) {
            return None;
        }
        at = at.checked_add(size).filter(|end| *end <= frame.len())?;
        if tag != 0 {
            kept.extend_from_slice(&frame[entry..at]);
        }
    }
    if count == 0 || at != frame.len() || count > 0x7f {
        return None;
    }
    let mut out = BytesMut::with_capacity(frame.len());
    out.extend_from_slice(&frame[..start]);
    out.extend_from_slice(&[(count - 1) as u8]);
    out.extend_from_slice(&kept);
    Some(out.freeze())
}

/// An unsigned varint at `*at`, advancing it.
fn varint(frame: &[u8], at: &mut usize) -> Option<u32> {
    let mut value: u32 = 0;
    for shift in (0..35).step_by(7) {
        let b = *frame.get(*at)?;
        *at += 1;
        value |= u32::from(b & 0x7f).checked_shl(shift)?;
        if b & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::protocol::StrBytes;

    /// A Fetch v12 response with a top-level tag 0 (an empty list of node
    /// endpoints), as tansu 0.6.0 sends it: kafka-protocol
    /// refuses it; the proxy drops the tag and hands the records on.
    #[test]
    fn a_fetch_v12_response_with_node_endpoints_tag_is_read() {
        let version = 12;
        let mut body = FetchResponse::default();
        let mut t = FetchableTopicResponse::default();
        t.topic = TopicName(StrBytes::from_static_str("t"));
        let mut p = PartitionData::default();
        p.records = Some(Bytes::new());
        t.partitions.push(p);
        body.responses.push(t);
        let mut header = ResponseHeader::default();
        header.correlation_id = 9;
        let plain = encode_response(&header, &body, ApiKey::Fetch, version).unwrap();
        assert_eq!(plain.last(), Some(&0), "no tagged fields");
        let mut tagged = BytesMut::from(&plain[..plain.len() - 1]);
        // One tagged field: tag 0, 1 byte, an empty compact array.
        tagged.extend_from_slice(&[1, 0, 1, 1]);
        let tagged = tagged.freeze();
        assert!(decode_response::<FetchResponse>(&tagged, ApiKey::Fetch, version).is_err());
        assert_eq!(
            without_node_endpoints(&tagged, version),
            Some(plain.clone())
        );
        // Another tag after it is kept.
        let mut two = BytesMut::from(&plain[..plain.len() - 1]);
        two.extend_from_slice(&[2, 0, 1, 1, 5, 2, 7, 7]);
        let mut kept = BytesMut::from(&plain[..plain.len() - 1]);
        kept.extend_from_slice(&[1, 5, 2, 7, 7]);
        assert_eq!(
            without_node_endpoints(&two.freeze(), version),
            Some(kept.freeze())
        );
        // A response that decodes, and one cut short, are left alone.
        assert_eq!(without_node_endpoints(&plain, version), None);
        assert_eq!(
            without_node_endpoints(&tagged.slice(..tagged.len() - 1), version),
            None
        );
        let policies = Policies::new();
        let map = |_: i32, h: &str, p: i32| Some((StrBytes::from_string(h.to_owned()), p));
        let policies = policies.with_topic(
            "t",
            crate::TopicPolicy::keyset(tombstone_crypt::Keyset::generate()),
        );
        let hooks = Hooks::default();
        assert!(fetch_response(
            &tagged,
            version,
            &policies,
            &hooks,
            &map,
            &crate::budget::Budget::alone(64 << 20, 1 << 20),
            &TopicIds::new(),
        )
        .is_ok());
    }

    /// Found by review: a proxy without policies handed a Fetch v16
    /// response's node endpoints on as the broker sent them (the brokers'
    /// own addresses: a client could go round the proxy). They are the
    /// proxy's now, with or without a policy.
    #[test]
    fn fetch_node_endpoints_are_rewritten_without_a_policy_too() {
        use kafka_protocol::messages::fetch_response::NodeEndpoint;
        use kafka_protocol::messages::BrokerId;
        let version = 16;
        let mut body = FetchResponse::default();
        let mut n = NodeEndpoint::default();
        n.node_id = BrokerId(1);
        n.host = StrBytes::from_static_str("broker.internal");
        n.port = 9092;
        body.node_endpoints.push(n);
        let mut header = ResponseHeader::default();
        header.correlation_id = 9;
        let frame = encode_response(&header, &body, ApiKey::Fetch, version).unwrap();
        let map = |_: i32, _: &str, _: i32| Some((StrBytes::from_static_str("proxy"), 19001));
        let (out, failed) = fetch_response(
            &frame,
            version,
            &Policies::new(),
            &Hooks::default(),
            &map,
            &crate::budget::Budget::alone(64 << 20, 1 << 20),
            &TopicIds::new(),
        )
        .unwrap();
        assert!(failed.is_empty());
        let out = out.expect("rewritten");
        let (_, back): (_, FetchResponse) = decode_response(&out, ApiKey::Fetch, version).unwrap();
        assert_eq!(back.node_endpoints[0].host.as_str(), "proxy");
        assert_eq!(back.node_endpoints[0].port, 19001);
    }
}
