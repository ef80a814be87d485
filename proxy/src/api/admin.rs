//! Admin requests that would name a key-store topic, answered by the proxy.

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, ResponseHeader, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::codec::encode_response;
use super::versions::decodable;
use crate::codes::TOPIC_AUTHORIZATION_FAILED;
use crate::config::Policies;

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
