//! **The write rule.** Every write, of a tombstone or a value, goes through
//! [`KeyForms::writes`]: a tombstone for each older enabled form first, then
//! the record under the primary form, in the key's partition, in that
//! order (see [`produce`](crate::write::produce)).
//!
//! The plan of a command ([`Planner`]): what it writes for each key
//! ([`Action`]) from the topic it read to the topic it writes, the values
//! read a second time (as they are, or encrypted again), and the key's
//! records in the rule's order.

use std::collections::HashMap;

use tombstone_crypt::record_key::KeyForms;
use tombstone_crypt::{
    Bytes, Context, DeterministicSerializer, EncryptingSerializer, Serializer as _,
};
use zeroize::Zeroizing;

use crate::key_state::{KeyState, Kind};
use crate::read::{read_topic, Setup};
use crate::record::{open_value, value_context, Value};
use crate::write::Write;
use crate::{fail, Fail, ValueKey};

/// What a command writes for one key, through the write rule.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// A delete: the rule's tombstones.
    Delete,
    /// The value of the key's deciding record: as it is, or re-encrypted
    /// (under the primary key, bound to the target's name and key).
    Value {
        /// Whether to encrypt it again.
        reencrypt: bool,
    },
}

/// One key's write.
pub(crate) struct Planned<'a> {
    /// The key's partition (kept in the target).
    pub(crate) partition: i32,
    /// The key's state by the reading rule.
    pub(crate) state: &'a KeyState,
    /// The key's forms in the target.
    pub(crate) forms: KeyForms,
    /// Forms of the key on the topic that the rule does not reach (under
    /// keys the key keyset no longer enables) and that hold a present
    /// value: tombstoned first, so that nothing of the key outlives
    /// compaction.
    pub(crate) unreached: Vec<Vec<u8>>,
    /// What is written for the key.
    pub(crate) action: Action,
    /// The value to write (from the second read).
    pub(crate) value: Option<Vec<u8>>,
}

impl Planned<'_> {
    /// Tombstones for forms other than the primary.
    pub(crate) fn old_forms(&self) -> u64 {
        (self.unreached.len() + self.forms.write_count() - 1) as u64
    }

    /// Every tombstone of this write (the older forms', and the delete's).
    pub(crate) fn tombstones(&self) -> u64 {
        self.old_forms() + u64::from(self.action == Action::Delete)
    }

    /// The records of this write, in order.
    fn writes(&self, out: &mut Vec<Write>) -> Result<(), Fail> {
        let value = match self.action {
            Action::Delete => None,
            Action::Value { .. } => Some(self.value.as_deref().ok_or_else(|| {
                fail("a value to write was not found on the second read (the topic changed?): run again")
            })?),
        };
        for form in &self.unreached {
            out.push(Write {
                partition: self.partition,
                key: form.clone(),
                value: None,
            });
        }
        for (key, value) in self.forms.writes(value) {
            out.push(Write {
                partition: self.partition,
                key: key.to_vec(),
                value: value.map(<[u8]>::to_vec),
            });
        }
        Ok(())
    }
}

/// Plans the writes of a command from the topic it read (`from`) to the
/// topic it writes (`to`, maybe the same).
pub(crate) struct Planner<'a> {
    /// The topic read.
    from: &'a Setup,
    /// The topic written (maybe the same).
    to: &'a Setup,
    /// Whether they are the same topic.
    same: bool,
    /// The target's key encryption (with `--key-keyset`).
    key_ser: Option<DeterministicSerializer<Bytes>>,
}

impl<'a> Planner<'a> {
    /// A planner from `from` to `to`.
    pub(crate) fn new(from: &'a Setup, to: &'a Setup) -> Self {
        Planner {
            from,
            to,
            same: from.topic == to.topic,
            key_ser: to
                .key_keyset
                .as_ref()
                .map(|k| DeterministicSerializer::new(Bytes, k.clone())),
        }
    }

    /// The forms of a key in the target: under every enabled key of the
    /// key keyset, or (keys that are not encrypted, or do not decrypt) its
    /// one form.
    pub(crate) fn forms(&self, group: &[u8], state: &KeyState) -> Result<KeyForms, Fail> {
        match (&self.key_ser, state.encrypted) {
            (Some(ks), true) => Ok(ks.key_forms(&Context::new(&self.to.name), group)?),
            _ => Ok(KeyForms::plain(group.to_vec())),
        }
    }

    /// Whether the deciding value must be encrypted again to read in the
    /// target: bound to another name, or to the key's bytes on the wire,
    /// which change.
    pub(crate) fn rebinds(&self, state: &KeyState, forms: &KeyForms) -> bool {
        self.to.name != self.from.name
            || (self.from.value_key == ValueKey::Wire && state.wire != forms.primary())
    }

    /// The write of one key: `action` through its forms, after tombstones
    /// for its unreached forms (on the topic itself only).
    pub(crate) fn plan(
        &self,
        partition: i32,
        state: &'a KeyState,
        forms: KeyForms,
        action: Action,
    ) -> Planned<'a> {
        let unreached = if self.same {
            state.unreached(&forms).map(<[u8]>::to_vec).collect()
        } else {
            Vec::new()
        };
        Planned {
            partition,
            state,
            forms,
            unreached,
            action,
            value: None,
        }
    }

    /// Reads the topic again for the values of the planned keys' deciding
    /// records: as they are, or encrypted again (under the primary key,
    /// bound to the target's name and to the key's bytes that
    /// `--value-key` names).
    pub(crate) fn read_values(&self, plan: &mut [Planned<'_>], quiet: bool) -> Result<(), Fail> {
        let mut wanted: HashMap<(i32, i64), usize> = plan
            .iter()
            .enumerate()
            .filter(|(_, p)| p.action != Action::Delete)
            .map(|(i, p)| ((p.partition, p.state.offset), i))
            .collect();
        if wanted.is_empty() {
            return Ok(());
        }
        let ser = EncryptingSerializer::new(Bytes, self.to.keyset.clone()).with_aad(self.to.aad);
        let (from, to) = (self.from, self.to);
        read_topic(from, quiet, "read values", |r| {
            let Some(i) = wanted.remove(&(r.partition, r.offset)) else {
                return Ok(());
            };
            let p = &mut plan[i];
            let (Some(v), Some(wire)) = (r.value, r.key) else {
                return Err(fail(format!(
                    "{}/{} offset {} is no longer the value it was: run again",
                    from.topic, r.partition, r.offset
                )));
            };
            if p.action == (Action::Value { reencrypt: false }) {
                p.value = Some(v.to_vec());
                return Ok(());
            }
            let plaintext = match p.state.kind {
                Kind::Plaintext => Zeroizing::new(v.to_vec()),
                _ => {
                    let bound = match from.value_key {
                        ValueKey::Wire => wire,
                        ValueKey::Plaintext => p.forms.plaintext(),
                    };
                    match open_value(from, r, v, Some(bound))? {
                        Value::Plain(plaintext, _) => plaintext,
                        _ => {
                            return Err(fail(format!(
                                "the value at {}/{} offset {} no longer decrypts: run again",
                                from.topic, r.partition, r.offset
                            )))
                        }
                    }
                }
            };
            let bound = match to.value_key {
                ValueKey::Wire => p.forms.primary(),
                ValueKey::Plaintext => p.forms.plaintext(),
            };
            let ct = ser
                .serialize(&value_context(&to.name, Some(bound)), Some(&plaintext[..]))?
                .ok_or_else(|| fail("a present value encrypted to nothing"))?;
            p.value = Some(ct);
            Ok(())
        })?;
        if !wanted.is_empty() {
            return Err(fail(format!(
                "{} values to write were not found on the second read of {} (compacted meanwhile?): run again",
                wanted.len(),
                from.topic
            )));
        }
        Ok(())
    }

    /// The records of `plan`, key by key, each key's in the rule's order.
    pub(crate) fn writes(&self, plan: &[Planned<'_>]) -> Result<Vec<Write>, Fail> {
        let mut writes = Vec::new();
        for p in plan {
            p.writes(&mut writes)?;
        }
        Ok(writes)
    }
}
