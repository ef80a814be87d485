//! The versions the proxy reads of each API, the APIs it forwards unread
//! or guards, and the ApiVersions responses that say so to clients.

use bytes::Bytes;
use kafka_protocol::messages::api_versions_response::ApiVersionsResponse;
use kafka_protocol::messages::{ApiKey, ResponseHeader};
use kafka_protocol::protocol::{Message, VersionRange};

use super::codec::{decode_response, encode_response};
use crate::codes::UNSUPPORTED_VERSION;

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
