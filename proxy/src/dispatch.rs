//! What the proxy does with each request and each response, sans IO: the
//! one place that matches on a request's API key.
//!
//! A client's request is [`routed`](route): forwarded as it came,
//! forwarded encrypted (Produce), answered by the proxy itself (a Produce
//! whose every partition is refused, an admin request that names a
//! key-store topic, an ApiVersions newer than the proxy), or refused with
//! its connection closed ([`Refusal`]: an API the proxy does not serve,
//! a request shorter than its header, one it reads and cannot). Each
//! routed request owes its client a [`Pending`] response or nothing
//! (Produce with acks=0), in request order. A broker's response is then
//! [`handed on`](respond) as its [`Then`] says.
//!
//! `server` reads and writes the frames, keeps the order, and logs what
//! these return; it never looks inside a request.

use std::fmt;

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;

use crate::api::{self, NodeMap, ProduceAction, Refused, Undecryptable};
use crate::budget::Budget;
use crate::config::Policies;
use crate::hooks::Hooks;
use crate::sequences::Sequences;
use crate::stats::{self, Event};
use crate::topic_ids::TopicIds;

/// What dispatching reads: the proxy's policies and the state it keeps
/// across connections.
pub(crate) struct Context<'a> {
    /// The topics' policies and the key-store topics they guard.
    pub(crate) policies: &'a Policies,
    /// The negative controls' broken behaviours (off but in tests).
    pub(crate) hooks: &'a Hooks,
    /// Idempotent producers' sequences, where the write rule grew a batch.
    pub(crate) sequences: &'a Sequences,
    /// Topic ids to names, from the brokers' Metadata responses.
    pub(crate) topic_ids: &'a TopicIds,
    /// Whether admin requests that name a key-store topic pass.
    pub(crate) key_store_admin: bool,
}

/// What a client is owed for one request, in request order.
pub(crate) enum Pending {
    /// A response the proxy wrote.
    Local(Bytes),
    /// The broker's response to this correlation id, then `then`.
    Upstream {
        /// The request's correlation id, which the response must carry.
        correlation: i32,
        /// What to do with the response.
        then: Then,
    },
}

/// What to do with a broker's response.
pub(crate) enum Then {
    /// Hand it on as it came.
    Pass,
    /// A Produce response: the refused partitions merged in, the node
    /// endpoints rewritten, the grown batches' sequences followed.
    Produce {
        version: i16,
        refused: Vec<Refused>,
        added: Vec<api::Added>,
    },
    /// A Fetch response: the policy topics' records decrypted.
    Fetch { version: i16 },
    /// A Metadata response: the brokers' addresses the proxy's.
    Metadata { version: i16 },
    /// A FindCoordinator response: the coordinators' addresses the proxy's.
    FindCoordinator { version: i16 },
    /// A DescribeCluster response: the brokers' addresses the proxy's.
    DescribeCluster { version: i16 },
    /// An ApiVersions response: only what the proxy serves.
    ApiVersions { version: i16 },
}

/// A request routed: what its client is owed and what goes to the broker.
pub(crate) struct Routed {
    /// What the client is owed (nothing for a Produce with acks=0).
    pub(crate) owe: Option<Pending>,
    /// The frame for the broker: the client's, or the encrypted one.
    pub(crate) send: Option<Bytes>,
    /// What was refused and answered without closing the connection.
    pub(crate) answered: Answered,
}

/// What a request had refused while its connection goes on.
pub(crate) enum Answered {
    /// Nothing.
    Nothing,
    /// Partitions of a Produce, each answered with its error code, nothing
    /// of them written.
    Partitions(Vec<Refused>),
    /// An admin request that names a key-store topic, answered
    /// `TOPIC_AUTHORIZATION_FAILED`, nothing forwarded.
    KeyStoreAdmin(ApiKey),
}

/// Why a request closes its connection, nothing of it forwarded.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// Shorter than a request header.
    TooShort {
        /// The frame's length.
        len: usize,
    },
    /// An API the proxy does not know or serve (left out of its
    /// ApiVersions): default deny.
    Unserved {
        /// The API key.
        key: i16,
        /// The version.
        version: i16,
    },
    /// A request of an API the proxy reads that it cannot read or make
    /// again (its reason names no record contents).
    Unreadable {
        /// The API.
        api: ApiKey,
        /// The request's correlation id.
        correlation: i32,
        /// Why.
        reason: String,
    },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::TooShort { len } => {
                write!(f, "a request of {len} bytes, shorter than a request header")
            }
            Refusal::Unserved { key, version } => write!(
                f,
                "a request of API key {key} v{version}, which the proxy does not serve"
            ),
            Refusal::Unreadable {
                api,
                correlation,
                reason,
            } => write!(f, "a {api:?} (correlation id {correlation}): {reason}"),
        }
    }
}

/// Why a broker's response cannot be handed on (its connection closes).
#[derive(Debug)]
pub(crate) struct Unreadable {
    /// What the response answers.
    pub(crate) then: &'static str,
    /// Why (no record contents).
    pub(crate) reason: String,
}

impl fmt::Display for Unreadable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a {} response: {}", self.then, self.reason)
    }
}

/// A request's API key, version and correlation id.
///
/// # Errors
/// [`Refusal::TooShort`] (each refusal is counted as `frames_refused`).
pub(crate) fn head(frame: &[u8]) -> Result<(i16, i16, i32), Refusal> {
    api::request_head(frame).ok_or_else(|| {
        stats::add(Event::FramesRefused, 1);
        Refusal::TooShort { len: frame.len() }
    })
}

/// Whether routing a request of `key` may call a KMS or hold the CPU for
/// long (a Produce to policy topics), so that it runs where the runtime's
/// other connections are not held up.
pub(crate) fn request_is_heavy(cx: &Context<'_>, key: i16) -> bool {
    key == ApiKey::Produce as i16 && (cx.policies.may_block() || !cx.policies.is_empty())
}

/// Whether handing on a response may call a KMS or hold the CPU for long
/// (a Fetch of policy topics).
pub(crate) fn response_is_heavy(cx: &Context<'_>, then: &Then) -> bool {
    cx.policies.may_block() || (matches!(then, Then::Fetch { .. }) && !cx.policies.is_empty())
}

/// Routes the request `frame` (its head already read: `key`, `version`,
/// `correlation`), its decoding taking at most `budget`.
///
/// # Errors
/// A [`Refusal`]: the connection is closed, nothing forwarded.
pub(crate) fn route(
    cx: &Context<'_>,
    frame: &Bytes,
    (key, version, correlation): (i16, i16, i32),
    budget: &Budget,
) -> Result<Routed, Refusal> {
    let refused = |reason: String, api: ApiKey| {
        stats::add(Event::FramesRefused, 1);
        Refusal::Unreadable {
            api,
            correlation,
            reason,
        }
    };
    let upstream = |then| Routed {
        owe: Some(Pending::Upstream { correlation, then }),
        send: Some(Bytes::clone(frame)),
        answered: Answered::Nothing,
    };
    let local = |answer, answered| Routed {
        owe: Some(Pending::Local(answer)),
        send: None,
        answered,
    };
    Ok(match ApiKey::try_from(key) {
        Ok(ApiKey::Produce) => {
            let action = api::produce_request(
                frame,
                version,
                cx.policies,
                cx.hooks,
                budget,
                cx.sequences,
                cx.topic_ids,
            )
            .map_err(|reason| refused(reason, ApiKey::Produce))?;
            // A Produce with acks=0 owes its client nothing.
            let owe = |acks: i16, refused, added| {
                (acks != 0).then_some(Pending::Upstream {
                    correlation,
                    then: Then::Produce {
                        version,
                        refused,
                        added,
                    },
                })
            };
            match action {
                ProduceAction::Unchanged { acks } => Routed {
                    owe: owe(acks, Vec::new(), Vec::new()),
                    send: Some(Bytes::clone(frame)),
                    answered: Answered::Nothing,
                },
                ProduceAction::Forward {
                    frame: forwarded,
                    refused,
                    acks,
                    added,
                } => Routed {
                    owe: owe(acks, refused.clone(), added),
                    send: Some(forwarded),
                    answered: Answered::Partitions(refused),
                },
                ProduceAction::Answer { response, refused } => Routed {
                    owe: response.map(Pending::Local),
                    send: None,
                    answered: Answered::Partitions(refused),
                },
            }
        }
        Ok(ApiKey::Fetch) => upstream(Then::Fetch { version }),
        Ok(ApiKey::Metadata) => upstream(Then::Metadata { version }),
        Ok(ApiKey::FindCoordinator) => upstream(Then::FindCoordinator { version }),
        Ok(ApiKey::DescribeCluster) => upstream(Then::DescribeCluster { version }),
        Ok(ApiKey::ApiVersions)
            if api::decodable(ApiKey::ApiVersions).is_some_and(|r| version > r.max) =>
        {
            // A client newer than the proxy: told which versions the
            // proxy reads, as a broker tells it (nothing forwarded).
            let answer = api::api_versions_unsupported(correlation)
                .map_err(|reason| refused(reason, ApiKey::ApiVersions))?;
            local(answer, Answered::Nothing)
        }
        Ok(ApiKey::ApiVersions) => upstream(Then::ApiVersions { version }),
        Ok(api) if api::admin_guarded(api) && !cx.key_store_admin => {
            match api::admin_request(frame, api, version, correlation, cx.policies)
                .map_err(|reason| refused(reason, api))?
            {
                None => upstream(Then::Pass),
                Some(answer) => {
                    stats::add(Event::AdminRefused, 1);
                    local(answer, Answered::KeyStoreAdmin(api))
                }
            }
        }
        Ok(api) if api::forwarded_unread(api) || api::admin_guarded(api) => upstream(Then::Pass),
        _ => {
            stats::add(Event::FramesRefused, 1);
            return Err(Refusal::Unserved { key, version });
        }
    })
}

/// The response to hand on for the broker's `frame`, as `then` says, with
/// the Fetch partitions it could not decrypt (each answered
/// `CORRUPT_MESSAGE`, no records); its decoding taking at most `budget`.
/// `map` gives the proxy's address for a broker node.
///
/// # Errors
/// [`Unreadable`]: the connection is closed.
pub(crate) fn respond(
    cx: &Context<'_>,
    frame: Bytes,
    then: Then,
    map: &NodeMap<'_>,
    budget: &Budget,
) -> Result<(Bytes, Vec<Undecryptable>), Unreadable> {
    let named = |then: &'static str| move |reason| Unreadable { then, reason };
    Ok(match then {
        Then::Pass => (frame, Vec::new()),
        Then::Produce {
            version,
            refused,
            added,
        } => {
            let out = api::produce_response(&frame, version, &refused, &added, map, cx.sequences)
                .map_err(named("Produce"))?;
            (out.unwrap_or(frame), Vec::new())
        }
        Then::Fetch { version } => {
            let (out, failed) = api::fetch_response(
                &frame,
                version,
                cx.policies,
                cx.hooks,
                map,
                budget,
                cx.topic_ids,
            )
            .map_err(named("Fetch"))?;
            (out.unwrap_or(frame), failed)
        }
        Then::Metadata { version } => (
            api::metadata_response(&frame, version, map, cx.topic_ids)
                .map_err(named("Metadata"))?,
            Vec::new(),
        ),
        Then::FindCoordinator { version } => (
            api::find_coordinator_response(&frame, version, map)
                .map_err(named("FindCoordinator"))?,
            Vec::new(),
        ),
        Then::DescribeCluster { version } => (
            api::describe_cluster_response(&frame, version, map)
                .map_err(named("DescribeCluster"))?,
            Vec::new(),
        ),
        Then::ApiVersions { version } => (
            api::api_versions_response(&frame, version)
                .map_err(named("ApiVersions"))?
                .unwrap_or(frame),
            Vec::new(),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::{RequestHeader, TopicName};
    use kafka_protocol::protocol::{Encodable, StrBytes};

    fn frame_of(key: ApiKey, version: i16, body: &[u8]) -> Bytes {
        let mut out = bytes::BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(7)
            .with_client_id(Some(StrBytes::from_static_str("t")))
            .encode(&mut out, key.request_header_version(version))
            .unwrap();
        out.extend_from_slice(body);
        out.freeze()
    }

    fn with_context<R>(policies: &Policies, admin: bool, f: impl FnOnce(&Context<'_>) -> R) -> R {
        let hooks = Hooks::default();
        let sequences = Sequences::default();
        let ids = TopicIds::default();
        f(&Context {
            policies,
            hooks: &hooks,
            sequences: &sequences,
            topic_ids: &ids,
            key_store_admin: admin,
        })
    }

    fn budget() -> Budget {
        Budget::alone(1 << 20, 1 << 20)
    }

    #[test]
    fn a_frame_shorter_than_a_header_is_refused_by_its_length() {
        let refusal = head(&[0, 1, 0]).unwrap_err();
        assert!(matches!(refusal, Refusal::TooShort { len: 3 }), "{refusal}");
    }

    #[test]
    fn an_api_the_proxy_does_not_serve_is_refused_never_forwarded() {
        let policies = Policies::new();
        // An API key no Kafka version has, and one the proxy leaves out
        // (a share group's fetch is not read: its records would pass
        // in ciphertext, or worse, a client's plaintext would pass on).
        for (key, version) in [(32_000_i16, 0_i16), (ApiKey::ShareFetch as i16, 1)] {
            let frame = {
                let mut f = bytes::BytesMut::new();
                f.extend_from_slice(&key.to_be_bytes());
                f.extend_from_slice(&version.to_be_bytes());
                f.extend_from_slice(&7_i32.to_be_bytes());
                f.extend_from_slice(&[0xff, 0xff]);
                f.freeze()
            };
            let head = head(&frame).unwrap();
            let refused = with_context(&policies, false, |cx| {
                route(cx, &frame, head, &budget()).err()
            });
            assert!(
                matches!(refused, Some(Refusal::Unserved { key: k, version: v }) if k == key && v == version),
                "{refused:?}"
            );
        }
    }

    #[test]
    fn a_fetch_is_forwarded_as_it_came_and_its_response_decrypted() {
        let policies = Policies::new();
        let frame = frame_of(ApiKey::Fetch, 12, &[1, 2, 3]);
        let routed = with_context(&policies, false, |cx| {
            route(cx, &frame, head(&frame).unwrap(), &budget())
        })
        .unwrap();
        assert_eq!(routed.send.as_deref(), Some(&frame[..]));
        assert!(matches!(
            routed.owe,
            Some(Pending::Upstream {
                correlation: 7,
                then: Then::Fetch { version: 12 }
            })
        ));
    }

    #[test]
    fn an_admin_request_naming_a_key_store_topic_is_answered_not_forwarded() {
        use kafka_protocol::messages::delete_topics_request::DeleteTopicsRequest;
        let policies = Policies::new().with_guarded_topic("keys");
        let mut body = bytes::BytesMut::new();
        DeleteTopicsRequest::default()
            .with_topic_names(vec![TopicName(StrBytes::from_static_str("keys"))])
            .encode(&mut body, 4)
            .unwrap();
        let frame = frame_of(ApiKey::DeleteTopics, 4, &body);
        let routed = with_context(&policies, false, |cx| {
            route(cx, &frame, head(&frame).unwrap(), &budget())
        })
        .unwrap();
        assert!(routed.send.is_none(), "forwarded");
        assert!(matches!(routed.owe, Some(Pending::Local(_))));
        assert!(matches!(
            routed.answered,
            Answered::KeyStoreAdmin(ApiKey::DeleteTopics)
        ));
        // With key_store_admin on, it passes.
        let routed = with_context(&policies, true, |cx| {
            route(cx, &frame, head(&frame).unwrap(), &budget())
        })
        .unwrap();
        assert_eq!(routed.send.as_deref(), Some(&frame[..]));
    }

    #[test]
    fn a_produce_that_does_not_decode_is_refused_by_name() {
        let policies = Policies::new();
        let frame = frame_of(ApiKey::Produce, 9, &[0xff; 3]);
        let refused = with_context(&policies, false, |cx| {
            route(cx, &frame, head(&frame).unwrap(), &budget()).err()
        });
        match refused {
            Some(Refusal::Unreadable {
                api: ApiKey::Produce,
                correlation: 7,
                ref reason,
            }) => assert!(reason.contains("Produce v9"), "{reason}"),
            other => panic!("{other:?}"),
        }
    }
}
