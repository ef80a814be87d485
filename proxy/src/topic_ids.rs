//! Topic ids to names, as the broker's Metadata responses say them.
//!
//! From Produce v13 and Fetch v13 a request names its topics by id only,
//! and the proxy reads its policies by name. Every Metadata response that
//! passes through the proxy (v10 and on carry each topic's id beside its
//! name) teaches it the ids of the topics it names; a client learns a
//! topic's id from a Metadata response too, so the proxy has seen the id
//! before the client names a topic by it. An id the proxy does not know
//! (a client that learned it through another proxy process, an id from
//! before a restart of this one) is answered `UNKNOWN_TOPIC_ID` on
//! Produce and Fetch while any policy or key-store guard is set, never
//! forwarded as if no policy covered it: the client refreshes its
//! metadata, through the proxy, and retries.
//!
//! Only the broker's responses teach it, never a client's request. A
//! topic deleted and made again under its name has a new id; the old id
//! keeps its name, which no broker answers for again. The table holds at
//! most [`MAX_IDS`] ids; past that it starts over (the next Metadata
//! response teaches the live ones again).

use std::collections::HashMap;
use std::sync::Mutex;

use kafka_protocol::messages::TopicName;

/// The most ids the table holds before it starts over.
pub(crate) const MAX_IDS: usize = 100_000;

/// Topic ids to names, shared by every connection of a proxy process.
#[derive(Debug, Default)]
pub(crate) struct TopicIds {
    names: Mutex<HashMap<[u8; 16], TopicName>>,
}

impl TopicIds {
    /// An empty table.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Records that `id` names `name`, as a broker's Metadata response
    /// said. The nil id (a topic the broker has no id for, an error) is
    /// not recorded.
    pub(crate) fn learn(&self, id: [u8; 16], name: &TopicName) {
        if id == [0; 16] || name.is_empty() {
            return;
        }
        let mut names = self.names.lock().unwrap_or_else(|p| p.into_inner());
        if names.get(&id) == Some(name) {
            return;
        }
        if names.len() >= MAX_IDS {
            names.clear();
        }
        names.insert(id, name.clone());
    }

    /// The name of the topic `id` names, when a Metadata response said so.
    pub(crate) fn name(&self, id: &[u8; 16]) -> Option<TopicName> {
        let names = self.names.lock().unwrap_or_else(|p| p.into_inner());
        names.get(id).cloned()
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::protocol::StrBytes;

    use super::*;

    fn name(s: &str) -> TopicName {
        TopicName(StrBytes::from_string(s.to_owned()))
    }

    #[test]
    fn ids_are_learned_and_the_nil_id_is_not() {
        let ids = TopicIds::new();
        ids.learn([1; 16], &name("pay"));
        ids.learn([0; 16], &name("other"));
        assert_eq!(ids.name(&[1; 16]), Some(name("pay")));
        assert_eq!(ids.name(&[0; 16]), None);
        assert_eq!(ids.name(&[2; 16]), None);
    }

    #[test]
    fn a_full_table_starts_over() {
        let ids = TopicIds::new();
        for i in 0..MAX_IDS as u32 {
            let mut id = [9; 16];
            id[..4].copy_from_slice(&i.to_be_bytes());
            ids.learn(id, &name("t"));
        }
        ids.learn([7; 16], &name("new"));
        assert_eq!(ids.name(&[7; 16]), Some(name("new")));
        let mut first = [9; 16];
        first[..4].copy_from_slice(&0u32.to_be_bytes());
        assert_eq!(ids.name(&first), None);
    }
}
