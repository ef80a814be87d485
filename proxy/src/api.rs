//! The APIs the proxy reads and rewrites, sans IO: Produce (encrypt),
//! Fetch (decrypt), ApiVersions (versions it can decode), and the
//! responses that carry broker addresses (Metadata, FindCoordinator,
//! DescribeCluster, Produce's node endpoints).

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersionsResponse;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterResponse;
use kafka_protocol::messages::fetch_response::FetchResponse;
use kafka_protocol::messages::find_coordinator_response::FindCoordinatorResponse;
use kafka_protocol::messages::metadata_response::MetadataResponse;
use kafka_protocol::messages::produce_request::ProduceRequest;
use kafka_protocol::messages::produce_response::{
    PartitionProduceResponse, ProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, Message, StrBytes, VersionRange};

use uuid::Uuid;

use crate::codes::{
    CORRUPT_MESSAGE, TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_ID, UNSUPPORTED_VERSION,
};
use crate::config::Policies;
use crate::hooks::Hooks;
use crate::topic_ids::TopicIds;

/// A request's API key, version and correlation id: the first 8 bytes of
/// every request header version.
pub(crate) fn request_head(frame: &[u8]) -> Option<(i16, i16, i32)> {
    let b = frame.get(..8)?;
    Some((
        i16::from_be_bytes([b[0], b[1]]),
        i16::from_be_bytes([b[2], b[3]]),
        i32::from_be_bytes([b[4], b[5], b[6], b[7]]),
    ))
}

/// A response's correlation id: the first 4 bytes of every response header.
pub(crate) fn response_correlation(frame: &[u8]) -> Option<i32> {
    let b = frame.get(..4)?;
    Some(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// The versions of `api` the proxy can decode, for the APIs it reads.
pub(crate) fn decodable(api: ApiKey) -> Option<VersionRange> {
    use kafka_protocol::messages as m;
    // Produce v13 and Fetch v13 and on name topics by id: the proxy maps
    // ids to names from the broker's Metadata responses (`topic_ids`).
    Some(match api {
        ApiKey::Produce => m::ProduceRequest::VERSIONS,
        ApiKey::Fetch => m::FetchRequest::VERSIONS,
        ApiKey::Metadata => m::MetadataRequest::VERSIONS,
        ApiKey::FindCoordinator => m::FindCoordinatorRequest::VERSIONS,
        ApiKey::DescribeCluster => m::DescribeClusterRequest::VERSIONS,
        ApiKey::ApiVersions => m::ApiVersionsRequest::VERSIONS,
        // Walked for the topics they name, and answered here when one is
        // a key-store topic (`admin_request`).
        ApiKey::DeleteTopics => m::DeleteTopicsRequest::VERSIONS,
        ApiKey::DeleteRecords => m::DeleteRecordsRequest::VERSIONS,
        ApiKey::CreatePartitions => m::CreatePartitionsRequest::VERSIONS,
        ApiKey::AlterConfigs => m::AlterConfigsRequest::VERSIONS,
        ApiKey::IncrementalAlterConfigs => m::IncrementalAlterConfigsRequest::VERSIONS,
        _ => return None,
    })
}

/// The APIs the proxy forwards unread, both ways: each carries no records
/// and nothing of a topic's data that a policy covers (offsets, groups,
/// transactions' coordination, SASL, ACLs, configs described, quotas,
/// credentials, telemetry). Every other API (one this proxy does not know,
/// a broker's own, share groups' `ShareFetch`, which carries records) is
/// left out of ApiVersions and refused: default deny.
pub(crate) fn forwarded_unread(api: ApiKey) -> bool {
    use ApiKey as A;
    matches!(
        api,
        A::ListOffsets
            | A::OffsetCommit
            | A::OffsetFetch
            | A::JoinGroup
            | A::Heartbeat
            | A::LeaveGroup
            | A::SyncGroup
            | A::DescribeGroups
            | A::ListGroups
            | A::SaslHandshake
            | A::SaslAuthenticate
            | A::CreateTopics
            | A::InitProducerId
            | A::OffsetForLeaderEpoch
            | A::AddPartitionsToTxn
            | A::AddOffsetsToTxn
            | A::EndTxn
            | A::TxnOffsetCommit
            | A::DescribeAcls
            | A::CreateAcls
            | A::DeleteAcls
            | A::DescribeConfigs
            | A::AlterReplicaLogDirs
            | A::DescribeLogDirs
            | A::CreateDelegationToken
            | A::RenewDelegationToken
            | A::ExpireDelegationToken
            | A::DescribeDelegationToken
            | A::DeleteGroups
            | A::ElectLeaders
            | A::AlterPartitionReassignments
            | A::ListPartitionReassignments
            | A::OffsetDelete
            | A::DescribeClientQuotas
            | A::AlterClientQuotas
            | A::DescribeUserScramCredentials
            | A::AlterUserScramCredentials
            | A::DescribeQuorum
            | A::DescribeProducers
            | A::DescribeTransactions
            | A::ListTransactions
            | A::ConsumerGroupHeartbeat
            | A::ConsumerGroupDescribe
            | A::GetTelemetrySubscriptions
            | A::PushTelemetry
            | A::ListConfigResources
            | A::DescribeTopicPartitions
    )
}

/// The admin APIs that can remove or change a topic's records or settings
/// (DeleteTopics, DeleteRecords, CreatePartitions, AlterConfigs,
/// IncrementalAlterConfigs): forwarded unless they name a key-store topic.
pub(crate) fn admin_guarded(api: ApiKey) -> bool {
    matches!(
        api,
        ApiKey::DeleteTopics
            | ApiKey::DeleteRecords
            | ApiKey::CreatePartitions
            | ApiKey::AlterConfigs
            | ApiKey::IncrementalAlterConfigs
    )
}

/// Whether the proxy serves `api` at all (forwards it, reads it or
/// guards it): what ApiVersions lists.
pub(crate) fn served(api: ApiKey) -> bool {
    decodable(api).is_some() || forwarded_unread(api)
}

/// An admin request ([`admin_guarded`]) that names a key-store topic of
/// `policies` (or a topic by id, while there are such topics: the proxy
/// cannot tell which), answered here: every topic or resource it
/// names `TOPIC_AUTHORIZATION_FAILED`, nothing forwarded. `None`: it names
/// none, and is forwarded as it came.
///
/// # Errors
/// A request that does not walk (a count past its bytes) or cannot be
/// answered at its version: the connection is then closed.
pub(crate) fn admin_request(
    frame: &Bytes,
    api: ApiKey,
    version: i16,
    correlation: i32,
    policies: &Policies,
) -> Result<Option<Bytes>, String> {
    use kafka_protocol::messages as m;
    let range = decodable(api).ok_or("not an admin API")?;
    if version < range.min || version > range.max {
        return Err(format!(
            "a {api:?} v{version}: the proxy reads v{range} (ApiVersions said so)"
        ));
    }
    let named = crate::bounds::admin_topics(api as i16, frame, version)
        .map_err(|e| format!("a {api:?} v{version} request that does not walk: {e}"))?;
    // A topic id names a topic whatever name stands beside it (a decoy
    // name and the key store's id): while any topic is guarded, an entry
    // with an id is refused, as one without a name.
    let guarded = |n: &crate::bounds::Named| {
        let by_id = n.name.is_none() || n.topic_id != [0; 16];
        (by_id && policies.guards_any())
            || n.name
                .as_deref()
                .is_some_and(|name| n.resource_type == 2 && policies.guards(name))
    };
    if !named.iter().any(guarded) {
        return Ok(None);
    }
    let message = Some(StrBytes::from_static_str(
        "tombstone-crypt proxy refused: the request names a key-store topic of subject keys \
         (or a topic by id only), whose records and settings are not changed through the proxy",
    ));
    let name = |n: &crate::bounds::Named| n.name.clone().unwrap_or_default();
    let topic = |n: &crate::bounds::Named| TopicName(StrBytes::from_string(name(n)));
    let mut header = ResponseHeader::default();
    header.correlation_id = correlation;
    let out = match api {
        ApiKey::DeleteTopics => {
            let mut body = m::DeleteTopicsResponse::default();
            for n in &named {
                let mut r = m::delete_topics_response::DeletableTopicResult::default();
                r.name = n.name.as_ref().map(|_| topic(n));
                r.topic_id = uuid::Uuid::from_bytes(n.topic_id);
                r.error_code = TOPIC_AUTHORIZATION_FAILED;
                r.error_message = message.clone();
                body.responses.push(r);
            }
            encode_response(&header, &body, api, version)
        }
        ApiKey::DeleteRecords => {
            let mut body = m::DeleteRecordsResponse::default();
            for n in &named {
                let mut t = m::delete_records_response::DeleteRecordsTopicResult::default();
                t.name = topic(n);
                for p in &n.partitions {
                    let mut r = m::delete_records_response::DeleteRecordsPartitionResult::default();
                    r.partition_index = *p;
                    r.low_watermark = -1;
                    r.error_code = TOPIC_AUTHORIZATION_FAILED;
                    t.partitions.push(r);
                }
                body.topics.push(t);
            }
            encode_response(&header, &body, api, version)
        }
        ApiKey::CreatePartitions => {
            let mut body = m::CreatePartitionsResponse::default();
            for n in &named {
                let mut r = m::create_partitions_response::CreatePartitionsTopicResult::default();
                r.name = topic(n);
                r.error_code = TOPIC_AUTHORIZATION_FAILED;
                r.error_message = message.clone();
                body.results.push(r);
            }
            encode_response(&header, &body, api, version)
        }
        ApiKey::AlterConfigs => {
            let mut body = m::AlterConfigsResponse::default();
            for n in &named {
                let mut r = m::alter_configs_response::AlterConfigsResourceResponse::default();
                r.resource_type = n.resource_type;
                r.resource_name = StrBytes::from_string(name(n));
                r.error_code = TOPIC_AUTHORIZATION_FAILED;
                r.error_message = message.clone();
                body.responses.push(r);
            }
            encode_response(&header, &body, api, version)
        }
        _ => {
            let mut body = m::IncrementalAlterConfigsResponse::default();
            for n in &named {
                let mut r =
                    m::incremental_alter_configs_response::AlterConfigsResourceResponse::default();
                r.resource_type = n.resource_type;
                r.resource_name = StrBytes::from_string(name(n));
                r.error_code = TOPIC_AUTHORIZATION_FAILED;
                r.error_message = message.clone();
                body.responses.push(r);
            }
            encode_response(&header, &body, api, version)
        }
    }?;
    Ok(Some(out))
}

fn decode_response<M: Decodable>(
    frame: &Bytes,
    api: ApiKey,
    version: i16,
) -> Result<(ResponseHeader, M), String> {
    let mut buf = frame.clone();
    let header = ResponseHeader::decode(&mut buf, api.response_header_version(version))
        .map_err(|e| format!("decoding a {api:?} v{version} response header: {e:#}"))?;
    let body = M::decode(&mut buf, version)
        .map_err(|e| format!("decoding a {api:?} v{version} response: {e:#}"))?;
    if !buf.is_empty() {
        return Err(format!(
            "a {api:?} v{version} response has {} bytes past its end",
            buf.len()
        ));
    }
    Ok((header, body))
}

fn encode_response<M: Encodable>(
    header: &ResponseHeader,
    body: &M,
    api: ApiKey,
    version: i16,
) -> Result<Bytes, String> {
    let header_version = api.response_header_version(version);
    // Sized up front, so it does not grow: a block it grew out of would be
    // freed unwiped (a Fetch response holds decrypted records). Wiped if
    // the encoding fails half-way.
    let size = header
        .compute_size(header_version)
        .and_then(|h| Ok(h + body.compute_size(version)?))
        .unwrap_or(0);
    let mut buf = crate::wipe::Buf::with_capacity(size, true);
    header
        .encode(buf.inner(), header_version)
        .and_then(|()| body.encode(buf.inner(), version))
        .map_err(|e| format!("encoding a {api:?} v{version} response: {e:#}"))?;
    Ok(buf.freeze())
}

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

fn merge_refused(response: &mut ProduceResponse, refused: &[Refused], version: i16) {
    for r in refused {
        let mut p = PartitionProduceResponse::default();
        p.index = r.partition;
        p.error_code = r.code;
        p.base_offset = -1;
        if version >= 8 {
            p.error_message = Some(StrBytes::from_string(format!(
                "tombstone-crypt proxy refused the partition: {}",
                r.reason
            )));
        }
        match response
            .responses
            .iter_mut()
            .find(|t| names(t, version, &r.topic, r.topic_id))
        {
            Some(t) => t.partition_responses.push(p),
            None => {
                let mut t = TopicProduceResponse::default();
                if version >= 13 {
                    t.topic_id = r.topic_id;
                } else {
                    t.name = r.topic.clone();
                }
                t.partition_responses.push(p);
                response.responses.push(t);
            }
        }
    }
}

/// Maps a broker (node id, its host and port) to the proxy's listener for
/// it; `None` when the proxy cannot serve it.
pub(crate) type NodeMap<'a> = dyn Fn(i32, &str, i32) -> Option<(StrBytes, i32)> + 'a;

fn rewrite(
    map: &NodeMap<'_>,
    node: i32,
    host: &mut StrBytes,
    port: &mut i32,
) -> Result<(), String> {
    if node < 0 {
        return Ok(());
    }
    let (h, p) = map(node, host.as_str(), *port)
        .ok_or_else(|| format!("no listener for broker node {node}"))?;
    *host = h;
    *port = p;
    Ok(())
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
            for p in &mut topic.partitions {
                changed = true;
                p.error_code = UNKNOWN_TOPIC_ID;
                p.records = Some(Bytes::new());
                p.high_watermark = -1;
                p.last_stable_offset = -1;
                p.log_start_offset = -1;
                p.aborted_transactions = None;
            }
            continue;
        };
        if policies.guards(&name) {
            // A key-store topic: its records (subjects' wrapped keys, the
            // records of shreds) are not handed to clients.
            for p in &mut topic.partitions {
                changed = true;
                p.error_code = TOPIC_AUTHORIZATION_FAILED;
                p.records = Some(Bytes::new());
                p.high_watermark = -1;
                p.last_stable_offset = -1;
                p.log_start_offset = -1;
                p.aborted_transactions = None;
            }
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

/// A Metadata response with every broker's address the proxy's; each
/// topic's id beside its name goes into `ids` (`crate::topic_ids`).
pub(crate) fn metadata_response(
    frame: &Bytes,
    version: i16,
    map: &NodeMap<'_>,
    ids: &TopicIds,
) -> Result<Bytes, String> {
    let (header, mut body): (_, MetadataResponse) =
        decode_response(frame, ApiKey::Metadata, version)?;
    for t in &body.topics {
        if let Some(name) = &t.name {
            ids.learn(*t.topic_id.as_bytes(), name);
        }
    }
    for b in &mut body.brokers {
        rewrite(map, b.node_id.0, &mut b.host, &mut b.port)?;
    }
    encode_response(&header, &body, ApiKey::Metadata, version)
}

/// A FindCoordinator response with the coordinators' addresses the
/// proxy's (the single one of v0-v3, the list of v4+).
pub(crate) fn find_coordinator_response(
    frame: &Bytes,
    version: i16,
    map: &NodeMap<'_>,
) -> Result<Bytes, String> {
    let (header, mut body): (_, FindCoordinatorResponse) =
        decode_response(frame, ApiKey::FindCoordinator, version)?;
    if version < 4 {
        if body.error_code == 0 {
            rewrite(map, body.node_id.0, &mut body.host, &mut body.port)?;
        }
    } else {
        for c in &mut body.coordinators {
            if c.error_code == 0 {
                rewrite(map, c.node_id.0, &mut c.host, &mut c.port)?;
            }
        }
    }
    encode_response(&header, &body, ApiKey::FindCoordinator, version)
}

/// A DescribeCluster response with every broker's address the proxy's.
pub(crate) fn describe_cluster_response(
    frame: &Bytes,
    version: i16,
    map: &NodeMap<'_>,
) -> Result<Bytes, String> {
    let (header, mut body): (_, DescribeClusterResponse) =
        decode_response(frame, ApiKey::DescribeCluster, version)?;
    for b in &mut body.brokers {
        rewrite(map, b.broker_id.0, &mut b.host, &mut b.port)?;
    }
    encode_response(&header, &body, ApiKey::DescribeCluster, version)
}

/// An ApiVersions response with the APIs the proxy reads clamped to the
/// versions both the broker and the proxy handle; `None` when it passes
/// as it came (an error, such as the v0 answer to a version the broker
/// does not know, goes to the client as the broker wrote it).
/// The proxy's own answer to an ApiVersions at a version it cannot read
/// (a client newer than its kafka-protocol): `UNSUPPORTED_VERSION` in
/// v0's shape, listing ApiVersions' versions the proxy reads, as a broker
/// answers a version it does not speak. The client asks again at the
/// highest of them (KIP-511).
pub(crate) fn api_versions_unsupported(correlation: i32) -> Result<Bytes, String> {
    use kafka_protocol::messages::api_versions_response::ApiVersion;
    let range = decodable(ApiKey::ApiVersions).ok_or("ApiVersions")?;
    let mut own = ApiVersion::default();
    own.api_key = ApiKey::ApiVersions as i16;
    own.min_version = range.min;
    own.max_version = range.max;
    let mut body = ApiVersionsResponse::default();
    body.error_code = UNSUPPORTED_VERSION;
    body.api_keys.push(own);
    let mut header = ResponseHeader::default();
    header.correlation_id = correlation;
    encode_response(&header, &body, ApiKey::ApiVersions, 0)
}

pub(crate) fn api_versions_response(frame: &Bytes, version: i16) -> Result<Option<Bytes>, String> {
    // The header is v0 (a correlation id) at every version, and the error
    // code comes first.
    let error = frame
        .get(4..6)
        .map(|b| i16::from_be_bytes([b[0], b[1]]))
        .ok_or("an ApiVersions response shorter than its error code")?;
    // An error answer is filtered as well, never handed on whole: in v0's
    // shape for UNSUPPORTED_VERSION (a version the broker does not speak),
    // at the request's version otherwise.
    let decoded = decode_response(frame, ApiKey::ApiVersions, version);
    let (version, (header, mut body)): (i16, (_, ApiVersionsResponse)) = match decoded {
        Ok(d) => (version, d),
        Err(_) if error != 0 => (0, decode_response(frame, ApiKey::ApiVersions, 0)?),
        Err(e) => return Err(e),
    };
    body.api_keys.retain_mut(|a| {
        // Default deny: an API this proxy does not know, or does not
        // serve, is left out.
        let Ok(api) = ApiKey::try_from(a.api_key) else {
            return false;
        };
        if !served(api) {
            return false;
        }
        let Some(ours) = decodable(api) else {
            return true;
        };
        let both = ours.intersect(&VersionRange {
            min: a.min_version,
            max: a.max_version,
        });
        if both.is_empty() {
            tracing::warn!(
                "the broker's {api:?} versions {}..{} and the proxy's {ours} do not meet: \
                 {api:?} left out of ApiVersions",
                a.min_version,
                a.max_version
            );
            return false;
        }
        a.min_version = both.min;
        a.max_version = both.max;
        true
    });
    encode_response(&header, &body, ApiKey::ApiVersions, version).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};

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

    /// Default deny: ApiVersions keeps only what the proxy serves: not a
    /// broker's own API, not ShareFetch, not a key no API has.
    #[test]
    fn api_versions_lists_only_what_the_proxy_serves() {
        use kafka_protocol::messages::api_versions_response::ApiVersion;
        let mut body = ApiVersionsResponse::default();
        for key in [0i16, 1, 2, 4, 20, 27, 52, 78, 79, 999] {
            let mut v = ApiVersion::default();
            v.api_key = key;
            v.min_version = 0;
            v.max_version = 9;
            body.api_keys.push(v);
        }
        let header = ResponseHeader::default();
        let version = 3;
        let frame = encode_response(&header, &body, ApiKey::ApiVersions, version).unwrap();
        let out = api_versions_response(&frame, version).unwrap().unwrap();
        let (_, back): (_, ApiVersionsResponse) =
            decode_response(&out, ApiKey::ApiVersions, version).unwrap();
        let keys: Vec<i16> = back.api_keys.iter().map(|k| k.api_key).collect();
        assert_eq!(keys, vec![0, 1, 2, 20]);
        // An UNSUPPORTED_VERSION answer to a v3 request, in v0's shape:
        // filtered too.
        let mut error = body.clone();
        error.error_code = 35;
        let frame = encode_response(&header, &error, ApiKey::ApiVersions, 0).unwrap();
        let out = api_versions_response(&frame, version).unwrap().unwrap();
        let (_, back): (_, ApiVersionsResponse) =
            decode_response(&out, ApiKey::ApiVersions, 0).unwrap();
        let keys: Vec<i16> = back.api_keys.iter().map(|k| k.api_key).collect();
        assert_eq!((back.error_code, keys), (35, vec![0, 1, 2, 20]));
    }
}
