//! The changelog's topic: the settings of the one it creates, created
//! compacted or checked to be, and checked to exist.

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::error::RDKafkaErrorCode;

use super::*;
use crate::error::Error;

/// How [`KafkaChangelog`] creates its topic when it is missing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TopicSettings {
    /// The replication factor; `-1` asks for the broker's
    /// `default.replication.factor` (Kafka 2.4 and later).
    pub replication_factor: i32,
    /// How many partitions a missing topic gets (1 by default; one per
    /// store task, as Kafka Streams creates them).
    pub partitions: i32,
}

impl TopicSettings {
    /// The same settings with `partitions` partitions.
    #[must_use]
    pub fn with_partitions(self, partitions: i32) -> Self {
        TopicSettings { partitions, ..self }
    }

    /// The same settings with another replication factor.
    #[must_use]
    pub fn with_replication_factor(self, replication_factor: i32) -> Self {
        TopicSettings {
            replication_factor,
            ..self
        }
    }
}

impl Default for TopicSettings {
    /// One partition, the broker's default replication factor.
    fn default() -> Self {
        TopicSettings {
            replication_factor: -1,
            partitions: 1,
        }
    }
}

/// Creates `topic` compacted (with `settings`; without, a missing topic is
/// an error), or checks that the existing one is.
pub(super) fn ensure_compacted_topic(
    config: &ClientConfig,
    topic: &str,
    settings: Option<TopicSettings>,
    timeout: Duration,
) -> Result<(), Error> {
    use rdkafka::admin::{ConfigSource, ResourceSpecifier};
    let admin: AdminClient<DefaultClientContext> =
        config.create().map_err(|e| kafka_err("admin client", e))?;
    let opts = AdminOptions::new().operation_timeout(Some(timeout));
    if let Some(settings) = settings {
        let new = NewTopic::new(
            topic,
            settings.partitions,
            TopicReplication::Fixed(settings.replication_factor),
        )
        .set("cleanup.policy", "compact");
        let results = futures_executor::block_on(admin.create_topics([&new], &opts))
            .map_err(|e| kafka_err("create topic", e))?;
        for r in results {
            match r {
                Ok(_) => return Ok(()),
                Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((t, code)) => return Err(kafka_err(&format!("create topic {t}"), code)),
            }
        }
    } else {
        topic_exists(config, topic, timeout)?;
    }
    // It exists: it must be compacted.
    let described = futures_executor::block_on(
        admin.describe_configs([&ResourceSpecifier::Topic(topic)], &opts),
    )
    .map_err(|e| kafka_err("describe topic", e))?;
    for r in described {
        let resource = r.map_err(|code| kafka_err(&format!("describe topic {topic}"), code))?;
        let policy = resource
            .get("cleanup.policy")
            .filter(|e| !matches!(e.source, ConfigSource::Unknown))
            .and_then(|e| e.value.clone())
            .unwrap_or_else(|| "delete".to_owned());
        if !policy.split(',').any(|p| p.trim() == "compact") {
            return Err(Error::changelog_msg(format!(
                "kafka: topic {topic} has cleanup.policy={policy}, not compact: old records would be deleted and a restore from it would be incomplete"
            )));
        }
    }
    Ok(())
}

/// Checks that `topic` exists, by a metadata request that does not create
/// it (a consumer's: `allow.auto.create.topics` is false).
pub(super) fn topic_exists(
    config: &ClientConfig,
    topic: &str,
    timeout: Duration,
) -> Result<(), Error> {
    let mut config = config.clone();
    config.set("allow.auto.create.topics", "false");
    let consumer: BaseConsumer = config
        .create()
        .map_err(|e| kafka_err("metadata client", e))?;
    let metadata = consumer
        .fetch_metadata(Some(topic), timeout)
        .map_err(|e| kafka_err(&format!("metadata of {topic}"), e))?;
    let found = metadata
        .topics()
        .iter()
        .any(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty());
    if found {
        Ok(())
    } else {
        Err(Error::changelog_msg(format!(
            "kafka: topic {topic} does not exist (a mistyped name? it is not created here)"
        )))
    }
}
