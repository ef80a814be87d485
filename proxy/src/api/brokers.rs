//! The responses that carry brokers' addresses (Metadata,
//! FindCoordinator, DescribeCluster), rewritten to the proxy's listeners.

use bytes::Bytes;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterResponse;
use kafka_protocol::messages::find_coordinator_response::FindCoordinatorResponse;
use kafka_protocol::messages::metadata_response::MetadataResponse;
use kafka_protocol::messages::ApiKey;

use super::codec::{decode_response, encode_response, rewrite, NodeMap};
use crate::topic_ids::TopicIds;

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
