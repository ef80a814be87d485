//! **The write rule.** Every write, of a tombstone or a value, goes through
//! [`KeyForms::writes`]: a tombstone for each older enabled form first, then
//! the record under the primary form, in the key's partition, in that
//! order (see [`Sink`](crate::write::Sink)).
//!
//! The plan of a command ([`Planner`]): what it writes for each key
//! ([`Action`], kept in the key's [`Entry`]) from the topic it read to the
//! topic it writes, decided from the entry alone, and ([`Planner::writes`])
//! the key's records in the rule's order, made when the second pass reaches
//! the key's deciding record: its value read then, as it is or encrypted
//! again (with `--fields`: its encrypted fields encrypted again in its
//! text, and the value too when it is encrypted as a whole). Nothing of a
//! value is held longer than its chunk.

use tombstone_crypt::record_key::KeyForms;
use tombstone_crypt::{
    Bytes, Context, DeterministicSerializer, EncryptingSerializer, KeyStatus, Serializer as _,
};
use zeroize::Zeroizing;

use crate::args::ValueKey;
use crate::fields::{FieldKeys, FieldState, NotRewritten};
pub(crate) use crate::key_state::Action;
use crate::key_state::{Entry, Kind};
use crate::outcome::{fail, Fail};
use crate::read::{Rec, Setup};
use crate::record::Write;
use crate::record::{open_value, value_context, RecordKey};

/// What a command's plan adds up to.
#[derive(Default, Clone, Copy)]
pub(crate) struct PlanCounts {
    /// Keys whose deciding record is a broken delete.
    pub(crate) broken: u64,
    /// Split keys.
    pub(crate) split: u64,
    /// Split keys `repair` leaves (their newest value does not decrypt).
    pub(crate) unrepaired: u64,
    /// Values to write.
    pub(crate) values: u64,
    /// Deletes to write.
    pub(crate) deletes: u64,
    /// Tombstones for forms other than the primary.
    pub(crate) old_forms: u64,
    /// Planned keys that are split.
    pub(crate) planned_split: u64,
    /// Keys `reencrypt` skips: broken deletes (`repair` first).
    pub(crate) skipped_broken: u64,
    /// Keys `reencrypt` skips: their value does not decrypt.
    pub(crate) skipped_undecryptable: u64,
    /// Keys `reencrypt` skips: plaintext values, without
    /// `--unencrypted pass-through`.
    pub(crate) skipped_plaintext: u64,
    /// Keys whose value has a string that reads as a field and does not
    /// authenticate at its path: `reencrypt --fields` leaves that string
    /// as it is (and writes the value's other fields again).
    pub(crate) skipped_fields: u64,
    /// Keys `reencrypt --fields` skips: their value is not JSON.
    pub(crate) skipped_not_json: u64,
}

impl PlanCounts {
    /// Adds `o` to these.
    pub(crate) fn merge(&mut self, o: &PlanCounts) {
        self.broken += o.broken;
        self.split += o.split;
        self.unrepaired += o.unrepaired;
        self.values += o.values;
        self.deletes += o.deletes;
        self.old_forms += o.old_forms;
        self.planned_split += o.planned_split;
        self.skipped_broken += o.skipped_broken;
        self.skipped_undecryptable += o.skipped_undecryptable;
        self.skipped_plaintext += o.skipped_plaintext;
        self.skipped_fields += o.skipped_fields;
        self.skipped_not_json += o.skipped_not_json;
    }

    /// Every tombstone planned (the older forms', and the deletes').
    pub(crate) fn tombstones(&self) -> u64 {
        self.old_forms + self.deletes
    }

    /// Keys planned.
    pub(crate) fn keys(&self) -> u64 {
        self.values + self.deletes
    }
}

/// Which command plans.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Command {
    /// `repair`: broken deletes and split keys.
    Repair,
    /// `reencrypt`, with `--unencrypted pass-through` or not.
    Reencrypt {
        /// Encrypt plaintext values.
        pass_through: bool,
    },
}

/// Plans the writes of a command from the topic it read (`from`) to the
/// topic it writes (`to`, maybe the same).
pub(crate) struct Planner<'a> {
    /// The topic read.
    from: &'a Setup,
    /// The topic written (maybe the same).
    to: &'a Setup,
    /// Whether they are the same topic.
    pub(crate) same: bool,
    /// The command.
    command: Command,
    /// The target's key encryption (with `--key-keyset`).
    key_ser: Option<DeterministicSerializer<Bytes>>,
    /// Every form of a key, disabled keys' too (to tombstone those).
    all_forms: Option<DeterministicSerializer<Bytes>>,
    /// The values' encryption in the target (`None` when its values are
    /// not under a keyset: then nothing is encrypted again).
    value_ser: Option<EncryptingSerializer<Bytes>>,
    /// The form of the key keyset's primary key.
    primary_form: u8,
    /// The forms under disabled keys, a bit each.
    disabled: u32,
    /// Forms a write of an encrypted key makes (the enabled keys').
    enabled_forms: u64,
    /// The values keyset's primary key id.
    primary: u32,
}

impl<'a> Planner<'a> {
    /// A planner for `command` from `from` to `to`.
    pub(crate) fn new(from: &'a Setup, to: &'a Setup, command: Command) -> Self {
        let (mut primary_form, mut disabled, mut enabled_forms) = (0u8, 0u32, 0u64);
        if let Some(k) = to.key_keyset() {
            let primary = k.primary().0;
            for (i, (id, status)) in k.keys().enumerate() {
                if id.0 == primary {
                    primary_form = u8::try_from(i).unwrap_or(0);
                }
                if status == KeyStatus::Disabled {
                    disabled |= 1 << i;
                } else {
                    enabled_forms += 1;
                }
            }
        }
        Planner {
            from,
            to,
            same: from.topic == to.topic,
            command,
            key_ser: to
                .key_keyset()
                .map(|k| DeterministicSerializer::new(Bytes, k.clone())),
            // The key keyset with its disabled keys enabled: the forms of
            // a key under keys it no longer reads.
            all_forms: to
                .key_keyset()
                .and_then(tombstone_crypt::Keyset::widened)
                .map(|k| DeterministicSerializer::new(Bytes, k)),
            value_ser: to
                .keyset()
                .map(|k| EncryptingSerializer::new(Bytes, k.clone()).with_aad(to.aad)),
            primary_form,
            disabled,
            enabled_forms: enabled_forms.max(1),
            primary: to.keyset().map_or(0, |k| k.primary().0),
        }
    }

    /// Whether the key's deciding record is not under the target's primary
    /// form: another key of the key keyset, or another topic's name.
    fn moved(&self, e: &Entry) -> bool {
        e.encrypted() && (e.form() != self.primary_form || self.to.name != self.from.name)
    }

    /// Whether the deciding value must be encrypted again to read in the
    /// target: bound to another name, or to the key's bytes on the wire,
    /// which change.
    fn rebinds(&self, e: &Entry) -> bool {
        self.to.name != self.from.name || (self.from.value_key == ValueKey::Wire && self.moved(e))
    }

    /// Forms of the key on the topic that the rule does not reach (under
    /// keys the key keyset no longer enables) and that hold a present
    /// value: tombstoned first (on the topic itself), so that nothing of
    /// the key outlives compaction.
    fn unreached(&self, e: &Entry) -> u32 {
        if self.same && e.encrypted() {
            e.present() & self.disabled
        } else {
            0
        }
    }

    /// Decides what the command writes for a settled key, sets it in the
    /// entry and counts it.
    pub(crate) fn decide(&self, e: &mut Entry, c: &mut PlanCounts) {
        let kind = e.kind();
        let action = match self.command {
            Command::Repair => {
                c.broken += u64::from(kind == Kind::Broken);
                c.split += u64::from(e.split());
                if kind != Kind::Broken && !e.split() {
                    None
                } else {
                    // The key's state by the reading rule, written again
                    // through the write rule.
                    match kind {
                        Kind::Tombstone | Kind::Broken => Some(Action::Delete),
                        Kind::Plaintext => Some(Action::Value { reencrypt: false }),
                        Kind::Live => Some(Action::Value {
                            reencrypt: self.rebinds(e),
                        }),
                        Kind::Undecryptable if !self.rebinds(e) => {
                            Some(Action::Value { reencrypt: false })
                        }
                        Kind::Undecryptable => {
                            c.unrepaired += 1;
                            None
                        }
                    }
                }
            }
            // With --fields: a value's fields are rewritten, and the value
            // with them when it is encrypted as a whole; a value that is
            // not encrypted stays so. A string that does not authenticate
            // is a finding for itself only: it is left as it is, and the
            // value's other fields are rewritten.
            Command::Reencrypt { .. }
                if self.from.fields.is_some() && matches!(kind, Kind::Live | Kind::Plaintext) =>
            {
                match e.fields() {
                    FieldState::NotJson => {
                        c.skipped_not_json += 1;
                        None
                    }
                    fields => {
                        c.skipped_fields += u64::from(fields.bad());
                        let rekey = fields.old()
                            || (kind == Kind::Live && e.key_id() != Some(self.primary));
                        let rebind = self.rebinds(e);
                        if self.same && !(rekey || rebind || self.moved(e) || e.split()) {
                            None
                        } else {
                            Some(Action::Value {
                                reencrypt: rekey || rebind,
                            })
                        }
                    }
                }
            }
            Command::Reencrypt { pass_through } => match kind {
                // A deleted key is never published again: its tombstones
                // are copied to another topic, and written again here only
                // when another form still holds a value.
                Kind::Tombstone if !self.same || e.split() => Some(Action::Delete),
                Kind::Tombstone => None,
                Kind::Broken => {
                    c.skipped_broken += 1;
                    None
                }
                Kind::Undecryptable => {
                    c.skipped_undecryptable += 1;
                    None
                }
                Kind::Plaintext if pass_through => Some(Action::Value { reencrypt: true }),
                Kind::Plaintext => {
                    c.skipped_plaintext += 1;
                    None
                }
                Kind::Live => {
                    let rekey = e.key_id() != Some(self.primary);
                    let rebind = self.rebinds(e);
                    if self.same && !(rekey || rebind || self.moved(e) || e.split()) {
                        None
                    } else {
                        Some(Action::Value {
                            reencrypt: rekey || rebind,
                        })
                    }
                }
            },
        };
        e.set_action(action);
        let Some(action) = action else { return };
        let forms = if e.encrypted() { self.enabled_forms } else { 1 };
        c.old_forms += u64::from(self.unreached(e).count_ones()) + forms - 1;
        c.planned_split += u64::from(e.split());
        match action {
            Action::Delete => c.deletes += 1,
            Action::Value { .. } => c.values += 1,
        }
    }

    /// The forms of a key in the target: under every enabled key of the
    /// key keyset, or (keys that are not encrypted, or do not decrypt) its
    /// one form.
    fn forms(&self, group: &[u8], encrypted: bool) -> Result<KeyForms, Fail> {
        match (&self.key_ser, encrypted) {
            (Some(ks), true) => Ok(ks.key_forms(&Context::new(&self.to.name), group)?),
            _ => Ok(KeyForms::plain(group.to_vec())),
        }
    }

    /// The records of one planned key, in the rule's order, made at its
    /// deciding record `r` (read again; its key is `key`): the tombstones
    /// of its unreached forms, then the rule's records for its action.
    pub(crate) fn writes(
        &self,
        e: &Entry,
        r: &Rec<'_>,
        key: &RecordKey,
    ) -> Result<Vec<Write>, Fail> {
        let from = self.from;
        let Some(action) = e.action() else {
            return Ok(Vec::new());
        };
        let changed = || {
            fail(format!(
                "{}/{} offset {} is no longer the record it was: run again",
                from.topic, r.partition, r.offset
            ))
        };
        let wire = r.key.ok_or_else(changed)?;
        if key.encrypted != e.encrypted() {
            return Err(changed());
        }
        let forms = self.forms(&key.group, key.encrypted)?;
        let mut out = Vec::with_capacity(forms.write_count() + 1);
        let unreached = self.unreached(e);
        if unreached != 0 {
            let all = self
                .all_forms
                .as_ref()
                .ok_or_else(|| fail("a form under a disabled key, and no disabled key"))?
                .key_forms(&Context::new(&from.name), &key.group)?;
            let mut found = 0;
            for form in all.all() {
                let id = tombstone_crypt::format::Header::parse(form).map(|h| h.key_id.0);
                let i = id.and_then(|id| from.form_index(id));
                if i.is_some_and(|i| unreached & (1 << i) != 0) {
                    found += 1;
                    out.push(Write {
                        partition: r.partition,
                        key: form.to_vec(),
                        value: None,
                    });
                }
            }
            if found != unreached.count_ones() {
                return Err(fail(format!(
                    "the key at {}/{} offset {}: its forms under disabled keys could not be made again",
                    from.topic, r.partition, r.offset
                )));
            }
        }
        let value = match action {
            Action::Delete => None,
            Action::Value { reencrypt } => {
                let v = r.value.ok_or_else(changed)?;
                match &self.from.fields {
                    Some(keys) if reencrypt => {
                        Some(self.fields_again(keys, e, r, v, wire, &forms)?)
                    }
                    _ if reencrypt => Some(self.encrypt_again(e, r, v, wire, &forms)?),
                    _ => Some(v.to_vec()),
                }
            }
        };
        for (k, v) in forms.writes(value.as_deref()) {
            out.push(Write {
                partition: r.partition,
                key: k.to_vec(),
                value: v.map(<[u8]>::to_vec),
            });
        }
        Ok(out)
    }

    /// The value `v` of `r` encrypted again: under the primary key, bound
    /// to the target's name and to the key's bytes that `--value-key`
    /// names.
    fn encrypt_again(
        &self,
        e: &Entry,
        r: &Rec<'_>,
        v: &[u8],
        wire: &[u8],
        forms: &KeyForms,
    ) -> Result<Vec<u8>, Fail> {
        let (from, to) = (self.from, self.to);
        let plaintext = match e.kind() {
            Kind::Plaintext => Zeroizing::new(v.to_vec()),
            _ => {
                let bound = match from.value_key {
                    ValueKey::Wire => wire,
                    ValueKey::Plaintext => forms.plaintext(),
                };
                match open_value(from, r, v, Some(bound))? {
                    Some(plaintext) => plaintext,
                    None => {
                        return Err(fail(format!(
                            "the value at {}/{} offset {} no longer decrypts: run again",
                            from.topic, r.partition, r.offset
                        )))
                    }
                }
            }
        };
        let bound = match to.value_key {
            ValueKey::Wire => forms.primary(),
            ValueKey::Plaintext => forms.plaintext(),
        };
        // Under subject keys (no keyset) a value is never encrypted again:
        // its subject's key is the key store's, and a keyset's ciphertext
        // there would read as nothing.
        let value_ser = self.value_ser.as_ref().ok_or_else(|| {
            fail(format!(
                "the value at {}/{} offset {} would be encrypted again, and the topic's values are not under a keyset: nothing is written",
                from.topic, r.partition, r.offset
            ))
        })?;
        value_ser
            .serialize(&value_context(&to.name, Some(bound)), Some(&plaintext[..]))?
            .ok_or_else(|| fail("a present value encrypted to nothing"))
    }

    /// The value `v` of `r` with its encrypted fields (`--fields`) under
    /// the primary keys, bound to the target's name and key: each field
    /// not under its keyset's primary key (every field, when the target
    /// binds them otherwise) encrypted again at its path, in place of its
    /// old text, every other byte of the record as it was; a value
    /// encrypted as a whole is decrypted first and encrypted again.
    fn fields_again(
        &self,
        keys: &FieldKeys,
        e: &Entry,
        r: &Rec<'_>,
        v: &[u8],
        wire: &[u8],
        forms: &KeyForms,
    ) -> Result<Vec<u8>, Fail> {
        let (from, to) = (self.from, self.to);
        let changed = |why: String| {
            fail(format!(
                "the value at {}/{} offset {} {why}: run again",
                from.topic, r.partition, r.offset
            ))
        };
        let from_bound = match from.value_key {
            ValueKey::Wire => wire,
            ValueKey::Plaintext => forms.plaintext(),
        };
        let to_bound = match to.value_key {
            ValueKey::Wire => forms.primary(),
            ValueKey::Plaintext => forms.plaintext(),
        };
        let (text, whole) = match e.kind() {
            Kind::Plaintext => (Zeroizing::new(v.to_vec()), false),
            _ => match open_value(from, r, v, Some(from_bound))? {
                Some(plaintext) => (plaintext, true),
                None => return Err(changed("no longer decrypts".into())),
            },
        };
        let from_ctx = value_context(&from.name, Some(from_bound));
        let to_ctx = value_context(&to.name, Some(to_bound));
        let all = from.name != to.name || from_bound != to_bound;
        let text =
            crate::fields::rewrite(keys, &text, &from_ctx, &to_ctx, all).map_err(
                |why| match why {
                    NotRewritten::NotJson(j) => changed(format!("is no longer JSON ({j})")),
                    NotRewritten::Error(err) => fail(format!(
                        "the fields of the value at {}/{} offset {}: {}",
                        from.topic,
                        r.partition,
                        r.offset,
                        crate::outcome::chain(&err)
                    )),
                },
            )?;
        if !whole {
            return Ok(text.to_vec());
        }
        let value_ser = self.value_ser.as_ref().ok_or_else(|| {
            changed(
                "would be encrypted again, and the topic's values are not under a keyset".into(),
            )
        })?;
        value_ser
            .serialize(&to_ctx, Some(&text[..]))?
            .ok_or_else(|| fail("a present value encrypted to nothing"))
    }
}
