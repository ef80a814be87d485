//! The APIs the proxy reads and rewrites, sans IO: Produce (encrypt),
//! Fetch (decrypt), ApiVersions (versions it can decode), and the
//! responses that carry broker addresses (Metadata, FindCoordinator,
//! DescribeCluster, Produce's node endpoints).
//!
//! One file per job: `codec` (heads, a response decoded and encoded again,
//! a broker's address rewritten), `versions` (what the proxy reads,
//! forwards or guards, and ApiVersions), `admin` (admin requests naming a
//! key-store topic), `produce`, `fetch`, and `brokers` (the responses
//! that carry brokers' addresses).

mod admin;
mod brokers;
mod codec;
mod fetch;
mod produce;
mod versions;

pub(crate) use admin::admin_request;
pub(crate) use brokers::{describe_cluster_response, find_coordinator_response, metadata_response};
pub(crate) use codec::{request_head, response_correlation, NodeMap};
pub(crate) use fetch::{fetch_response, Undecryptable};
pub(crate) use produce::{produce_request, produce_response, Added, ProduceAction, Refused};
pub(crate) use versions::{
    admin_guarded, api_versions_response, api_versions_unsupported, decodable, forwarded_unread,
};
