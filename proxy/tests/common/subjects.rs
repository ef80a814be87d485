//! A key store of subject keys on a topic of its own, under a KEK of its
//! own, for the suites of the proxy's subject-key topics.

use std::path::PathBuf;
use std::sync::Arc;

use tombstone_crypt::kafka::{KafkaChangelog, KafkaKeyStore};
use tombstone_crypt::shred::SubjectKeys;
use tombstone_crypt::Keyset;
use tombstone_crypt_proxy::{Hooks, Policies, ProxyConfig};

use super::{config, create_topic_with, fresh_topic, start_proxy, RunningProxy};

/// A key store on the broker, its KEK in a file `kek.json` of `dir`.
pub struct SubjectSetup {
    /// Where the KEK and the configuration files are.
    pub dir: PathBuf,
    /// The KEK.
    pub kek: Keyset,
    /// The key-store topic.
    pub key_topic: String,
    /// The broker.
    pub broker: String,
}

impl SubjectSetup {
    /// A key store on `key_topic` (made here, compacted, with
    /// `min.compaction.lag.ms=0`) under a new KEK, made as `shred
    /// create-key-store` makes it.
    pub fn on_topic(broker: &str, name: &str, key_topic: String) -> Self {
        let dir = std::env::temp_dir().join(fresh_topic(&format!("attack-{name}")));
        std::fs::create_dir_all(&dir).unwrap();
        let kek = Keyset::generate();
        std::fs::write(dir.join("kek.json"), kek.to_tink_json()).unwrap();
        create_topic_with(
            broker,
            &key_topic,
            1,
            &[
                ("cleanup.policy", "compact"),
                ("min.compaction.lag.ms", "0"),
            ],
        );
        let log = KafkaChangelog::existing(config(broker), &key_topic).unwrap();
        SubjectKeys::create(kek.clone(), Arc::new(KafkaKeyStore::new(log))).unwrap();
        SubjectSetup {
            dir,
            kek,
            key_topic,
            broker: broker.to_owned(),
        }
    }

    /// A key store on a new topic.
    pub fn new(broker: &str, name: &str) -> Self {
        Self::on_topic(broker, name, fresh_topic(&format!("{name}-keys")))
    }

    /// Another instance on the same key store (as the command line's
    /// `shred`).
    pub fn instance(&self) -> SubjectKeys {
        let log = KafkaChangelog::existing(config(&self.broker), &self.key_topic).unwrap();
        SubjectKeys::open(self.kek.clone(), Arc::new(KafkaKeyStore::new(log))).unwrap()
    }

    /// The proxy's policies of the topic entries `entries` (JSON), through
    /// its configuration file.
    pub fn policies(&self, entries: &str) -> Result<Policies, String> {
        let text = format!(
            r#"{{"listen":"127.0.0.1:1","bootstrap":"{}","topics":[{entries}]}}"#,
            self.broker
        );
        let path = self.dir.join(format!("p-{}.json", fresh_topic("cfg")));
        std::fs::write(&path, text).unwrap();
        let c = ProxyConfig::from_file(&path).map_err(|e| e.to_string())?;
        Policies::load(&c).map_err(|e| e.to_string())
    }

    /// An entry for `topic` under this key store, with the default fences.
    pub fn entry(&self, topic: &str) -> String {
        format!(
            r#"{{"topic":"{topic}","subject_keyset":"kek.json","subject_key_topic":"{}"}}"#,
            self.key_topic
        )
    }

    /// An entry for `topic` with fences of 300 ms.
    pub fn entry_fenced(&self, topic: &str) -> String {
        format!(
            r#"{{"topic":"{topic}","subject_keyset":"kek.json","subject_key_topic":"{}","subject_key_fence_ms":300}}"#,
            self.key_topic
        )
    }

    /// A proxy of `topic`'s entry with fences of 300 ms.
    pub fn proxy(&self, topic: &str) -> RunningProxy {
        start_proxy(
            &self.broker,
            self.policies(&self.entry_fenced(topic)).unwrap(),
            Hooks::default(),
        )
    }
}
