//! **The reading rule**, in a few bytes per key. A key's state in its
//! partition is its record with the highest offset among all its forms on
//! the wire (one per key of the key keyset), as a consumer replaying the
//! partition in order sees it. A key is *split* when another of its forms
//! still holds a present value: a store restored from the topic looks
//! under the primary form first and may read that value, and compaction
//! keeps it.
//!
//! The commands keep one [`Entry`] per key and partition (20 bytes, and
//! 8 more for the [`Index`]'s hash of the key), never a key's bytes or a
//! value: memory grows with the keys of a partition, not with its records
//! or their size. Records come in offset order, so the newest record of a
//! form always replaces the one before; a form is named by the position of
//! its key in the key keyset ([`MAX_FORMS`] at most).

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};

use crate::fields::FieldState;
use crate::outcome::{fail, Fail};

/// What a record (or the newest record of a key) is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A tombstone (no value at all).
    Tombstone,
    /// A present value that decrypts to something else than the marker.
    Live,
    /// A present value that decrypts to the null marker: a delete that a
    /// broken layer wrote as a value.
    Broken,
    /// A present value that does not decrypt, or whose record key does not
    /// decrypt under the key keyset (a reader cannot read it).
    Undecryptable,
    /// A present value that is not a ciphertext of the keyset.
    Plaintext,
}

impl Kind {
    /// Its three bits in an [`Entry`].
    fn bits(self) -> u32 {
        match self {
            Kind::Tombstone => 0,
            Kind::Live => 1,
            Kind::Broken => 2,
            Kind::Undecryptable => 3,
            Kind::Plaintext => 4,
        }
    }

    /// The kind of three bits of an [`Entry`].
    fn of_bits(b: u32) -> Kind {
        match b {
            1 => Kind::Live,
            2 => Kind::Broken,
            3 => Kind::Undecryptable,
            4 => Kind::Plaintext,
            _ => Kind::Tombstone,
        }
    }
}

/// The most keys a key keyset may hold for the topic commands (enabled and
/// disabled): each form of a key is one bit of its [`Entry`].
pub(crate) const MAX_FORMS: usize = 16;

/// What the commands write for one key, through the write rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

/// One record of a key, as the reading rule sees it.
#[derive(Clone, Copy)]
pub(crate) struct Seen {
    /// Its offset.
    pub(crate) offset: i64,
    /// Its form: the position of its key in the key keyset (0 for a key
    /// that is not encrypted).
    pub(crate) form: u8,
    /// What it is.
    pub(crate) kind: Kind,
    /// The key id its value names (a ciphertext's).
    pub(crate) key_id: Option<u32>,
    /// Whether its record key decrypts under the key keyset as given (a
    /// reader reads it); always, without a key keyset.
    pub(crate) readable: bool,
    /// Whether its key's group is a plaintext decrypted with the key
    /// keyset.
    pub(crate) encrypted: bool,
    /// What its value's encrypted fields are (`reencrypt --fields`).
    pub(crate) fields: FieldState,
}

// The bits of `Entry::bits`.
const PRESENT: u32 = 0xffff;
const FORM_SHIFT: u32 = 16;
const KIND_SHIFT: u32 = 20;
const READABLE: u32 = 1 << 23;
const HAS_ID: u32 = 1 << 24;
const ENCRYPTED: u32 = 1 << 25;
const ACTION_SHIFT: u32 = 26;
const SPLIT: u32 = 1 << 28;
const FIELDS_SHIFT: u32 = 29;

/// A [`FieldState`]'s three bits in an [`Entry`].
fn field_bits(f: FieldState) -> u32 {
    match f {
        FieldState::Unchecked => 0,
        FieldState::Current => 1,
        FieldState::Old => 2,
        FieldState::Bad => 3,
        FieldState::NotJson => 4,
        FieldState::OldAndBad => 5,
    }
}

/// One key in its partition: the record that decides its state (the
/// newest of its readable forms, the newest of all when none is readable),
/// which of its forms still hold a present value, and, once planned, what
/// a command writes for it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry {
    /// The deciding record's offset, from the index's base.
    off: u32,
    /// The key id the deciding value names.
    key_id: u32,
    /// 32 more bits of the key's hash: two keys whose 64-bit hashes meet
    /// are told apart (a clear error, never one key's state for another's).
    check: u32,
    /// Present forms (16 bits), the deciding form (4), its kind (3),
    /// readable, key id present, encrypted, the action (2), split, its
    /// fields (3).
    bits: u32,
}

impl Entry {
    /// A key first seen at `r`.
    fn new(r: &Seen, off: u32, check: u32) -> Entry {
        let mut e = Entry {
            off,
            key_id: 0,
            check,
            bits: if r.encrypted { ENCRYPTED } else { 0 },
        };
        e.decide(r, off);
        e.set_present(r);
        e
    }

    /// The next record of the key (offsets only grow).
    fn update(&mut self, r: &Seen, off: u32) {
        if r.readable || !self.readable() {
            self.decide(r, off);
        }
        self.set_present(r);
    }

    fn decide(&mut self, r: &Seen, off: u32) {
        self.off = off;
        self.key_id = r.key_id.unwrap_or(0);
        let keep = PRESENT | ENCRYPTED;
        self.bits = (self.bits & keep)
            | (u32::from(r.form) << FORM_SHIFT)
            | (r.kind.bits() << KIND_SHIFT)
            | if r.readable { READABLE } else { 0 }
            | if r.key_id.is_some() { HAS_ID } else { 0 }
            | (field_bits(r.fields) << FIELDS_SHIFT);
    }

    fn set_present(&mut self, r: &Seen) {
        let bit = 1u32 << r.form;
        if r.kind == Kind::Tombstone {
            self.bits &= !bit;
        } else {
            self.bits |= bit;
        }
    }

    /// Settles whether the key is split; called once every record is in.
    fn settle(&mut self) {
        // A key no reader reads (no readable form) is undecryptable, not
        // split.
        let others = self.present() & !(1 << self.form());
        if self.readable() && others != 0 {
            self.bits |= SPLIT;
        }
    }

    /// Whether the deciding record's key is readable.
    fn readable(&self) -> bool {
        self.bits & READABLE != 0
    }

    /// The forms whose newest record is a present value.
    pub(crate) fn present(&self) -> u32 {
        self.bits & PRESENT
    }

    /// The deciding record's form.
    pub(crate) fn form(&self) -> u8 {
        ((self.bits >> FORM_SHIFT) & 0xf) as u8
    }

    /// Whether the key's group is a plaintext decrypted with the key
    /// keyset (its forms can be computed).
    pub(crate) fn encrypted(&self) -> bool {
        self.bits & ENCRYPTED != 0
    }

    /// What the deciding record is (undecryptable when no form is
    /// readable).
    pub(crate) fn kind(&self) -> Kind {
        match Kind::of_bits((self.bits >> KIND_SHIFT) & 7) {
            Kind::Tombstone => Kind::Tombstone,
            _ if !self.readable() => Kind::Undecryptable,
            kind => kind,
        }
    }

    /// The key id the deciding value names.
    pub(crate) fn key_id(&self) -> Option<u32> {
        (self.bits & HAS_ID != 0).then_some(self.key_id)
    }

    /// What the deciding value's encrypted fields are (`reencrypt
    /// --fields`).
    pub(crate) fn fields(&self) -> FieldState {
        match (self.bits >> FIELDS_SHIFT) & 7 {
            1 => FieldState::Current,
            2 => FieldState::Old,
            3 => FieldState::Bad,
            4 => FieldState::NotJson,
            5 => FieldState::OldAndBad,
            _ => FieldState::Unchecked,
        }
    }

    /// Another form than the deciding one still holds a present value.
    pub(crate) fn split(&self) -> bool {
        self.bits & SPLIT != 0
    }

    /// What a command writes for the key, once planned.
    pub(crate) fn action(&self) -> Option<Action> {
        match (self.bits >> ACTION_SHIFT) & 3 {
            1 => Some(Action::Delete),
            2 => Some(Action::Value { reencrypt: false }),
            3 => Some(Action::Value { reencrypt: true }),
            _ => None,
        }
    }

    /// Plans `action` for the key.
    pub(crate) fn set_action(&mut self, action: Option<Action>) {
        let a = match action {
            None => 0,
            Some(Action::Delete) => 1,
            Some(Action::Value { reencrypt: false }) => 2,
            Some(Action::Value { reencrypt: true }) => 3,
        };
        self.bits = (self.bits & !(3 << ACTION_SHIFT)) | (a << ACTION_SHIFT);
    }

    /// The state `audit --list-keys` prints.
    pub(crate) fn state_name(&self) -> &'static str {
        if self.split() {
            return "split";
        }
        match self.kind() {
            Kind::Tombstone => "deleted",
            Kind::Live => "live",
            Kind::Broken => "broken",
            Kind::Undecryptable => "undecryptable",
            Kind::Plaintext => "plaintext",
        }
    }
}

/// A hasher for keys that are hashes already.
#[derive(Default)]
pub(crate) struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// How keys are hashed for an [`Index`]: SipHash under two random keys of
/// this process (96 bits in all), so no topic can be written to make two
/// keys meet.
#[derive(Clone, Default)]
pub(crate) struct KeyHash {
    a: std::collections::hash_map::RandomState,
    b: std::collections::hash_map::RandomState,
}

impl KeyHash {
    /// The hash of a key's group (its plaintext, or its bytes on the wire
    /// when it is not encrypted: both kinds are told apart).
    pub(crate) fn of(&self, encrypted: bool, group: &[u8]) -> (u64, u32) {
        let h = |s: &std::collections::hash_map::RandomState| {
            let mut h = s.build_hasher();
            h.write_u8(u8::from(encrypted));
            h.write(group);
            h.finish()
        };
        (h(&self.a), h(&self.b) as u32)
    }
}

/// Every key of one partition, by the reading rule. A reader keeps one
/// and [`reset`](Index::reset)s it for each partition: its table keeps
/// its room, so the allocator is not asked for a new one (and left with
/// the old one's pieces) each time.
#[derive(Default)]
pub(crate) struct Index {
    /// The partition.
    pub(crate) partition: i32,
    /// The offset entries count from (the first record read).
    base: Option<i64>,
    /// Each key's entry, by its 64-bit hash.
    map: HashMap<u64, Entry, BuildHasherDefault<Prehashed>>,
}

impl Index {
    /// An empty index of `partition`.
    #[cfg(test)]
    pub(crate) fn new(partition: i32) -> Index {
        Index {
            partition,
            base: None,
            map: HashMap::default(),
        }
    }

    /// Empties the index for `partition`, keeping its room.
    pub(crate) fn reset(&mut self, partition: i32) {
        self.partition = partition;
        self.base = None;
        self.map.clear();
    }

    /// The offset of `r` from the base.
    fn off(&mut self, offset: i64) -> Result<u32, Fail> {
        let base = *self.base.get_or_insert(offset);
        u32::try_from(offset - base).map_err(|_| {
            fail(format!(
                "partition {} spans more than 2^32 offsets from its first record: the commands index at most that many per partition",
                self.partition
            ))
        })
    }

    /// The offset of an entry.
    pub(crate) fn offset_of(&self, e: &Entry) -> i64 {
        self.base.unwrap_or(0) + i64::from(e.off)
    }

    /// Adds a record of the key hashed `hash`.
    pub(crate) fn add(&mut self, (hash, check): (u64, u32), r: &Seen) -> Result<(), Fail> {
        let off = self.off(r.offset)?;
        match self.map.get_mut(&hash) {
            None => {
                self.map.insert(hash, Entry::new(r, off, check));
            }
            Some(e) if e.check == check => e.update(r, off),
            Some(_) => return Err(self.collision()),
        }
        Ok(())
    }

    fn collision(&self) -> Fail {
        fail(format!(
            "two keys of partition {} have the same 64-bit hash (about once in 2^64 pairs): run again (the hash keys are new each run)",
            self.partition
        ))
    }

    /// Settles every key; called once every record is in.
    pub(crate) fn settle(&mut self) {
        for e in self.map.values_mut() {
            e.settle();
        }
    }

    /// The entry of the key hashed `hash`.
    pub(crate) fn get(&self, (hash, check): (u64, u32)) -> Result<Option<&Entry>, Fail> {
        match self.map.get(&hash) {
            Some(e) if e.check != check => Err(self.collision()),
            e => Ok(e),
        }
    }

    /// The entry whose 64-bit hash is `hash` (`--list-keys`, which kept
    /// the key's group by it).
    pub(crate) fn get_by_hash(&self, hash: u64) -> Option<&Entry> {
        self.map.get(&hash)
    }

    /// Every entry with its key's hash, mutable (to plan).
    pub(crate) fn entries_mut(&mut self) -> impl Iterator<Item = ((u64, u32), &mut Entry)> {
        self.map.iter_mut().map(|(h, e)| ((*h, e.check), e))
    }

    /// Every entry.
    pub(crate) fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.map.values()
    }

    /// Every entry with its key's hash.
    pub(crate) fn hashed(&self) -> impl Iterator<Item = ((u64, u32), &Entry)> {
        self.map.iter().map(|(h, e)| ((*h, e.check), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(offset: i64, form: u8, kind: Kind, readable: bool) -> Seen {
        Seen {
            offset,
            form,
            kind,
            key_id: (kind != Kind::Tombstone).then_some(7),
            readable,
            encrypted: true,
            fields: FieldState::Unchecked,
        }
    }

    #[test]
    fn the_newest_readable_form_decides_and_other_present_forms_split() {
        let k = KeyHash::default();
        let h = k.of(true, b"alice");
        let mut ix = Index::new(0);
        ix.add(h, &seen(10, 0, Kind::Live, true)).unwrap();
        ix.add(h, &seen(11, 1, Kind::Tombstone, true)).unwrap();
        // A disabled form, newer: it does not decide while a readable one
        // exists.
        ix.add(h, &seen(12, 2, Kind::Live, false)).unwrap();
        ix.settle();
        let e = *ix.get(h).unwrap().unwrap();
        assert_eq!(ix.offset_of(&e), 11);
        assert_eq!(e.kind(), Kind::Tombstone);
        assert_eq!(e.form(), 1);
        assert!(e.split(), "forms 0 and 2 still hold values");
        assert_eq!(e.present(), 0b101);
        // Only unreadable forms: the newest decides, undecryptable, never
        // split.
        let h2 = k.of(true, b"bob");
        ix.add(h2, &seen(20, 2, Kind::Live, false)).unwrap();
        ix.add(h2, &seen(21, 3, Kind::Live, false)).unwrap();
        ix.settle();
        let e = *ix.get(h2).unwrap().unwrap();
        assert_eq!(
            (ix.offset_of(&e), e.kind(), e.split()),
            (21, Kind::Undecryptable, false)
        );
        assert_eq!(e.state_name(), "undecryptable");
    }

    #[test]
    fn actions_and_kinds_round_trip_through_the_bits() {
        let mut e = Entry::new(&seen(5, 15, Kind::Plaintext, true), 0, 0);
        assert_eq!(
            (e.form(), e.kind(), e.key_id()),
            (15, Kind::Plaintext, Some(7))
        );
        for a in [
            None,
            Some(Action::Delete),
            Some(Action::Value { reencrypt: false }),
            Some(Action::Value { reencrypt: true }),
        ] {
            e.set_action(a);
            assert_eq!(e.action(), a);
            assert_eq!(e.kind(), Kind::Plaintext);
        }
        for f in [
            FieldState::Unchecked,
            FieldState::Current,
            FieldState::Old,
            FieldState::Bad,
            FieldState::OldAndBad,
            FieldState::NotJson,
        ] {
            let mut e = Entry::new(
                &Seen {
                    fields: f,
                    ..seen(5, 15, Kind::Live, true)
                },
                0,
                0,
            );
            e.set_action(Some(Action::Value { reencrypt: true }));
            e.settle();
            assert_eq!((e.fields(), e.kind(), e.form()), (f, Kind::Live, 15));
            assert_eq!(e.action(), Some(Action::Value { reencrypt: true }));
        }
        assert!(std::mem::size_of::<(u64, Entry)>() <= 24);
    }

    #[test]
    fn a_collision_of_64_bits_is_an_error_not_a_merge() {
        let mut ix = Index::new(3);
        ix.add((1, 1), &seen(0, 0, Kind::Live, true)).unwrap();
        let e = ix.add((1, 2), &seen(1, 0, Kind::Live, true)).err().unwrap();
        assert!(e.0.contains("same 64-bit hash"), "{}", e.0);
        assert!(ix.get((1, 2)).is_err());
    }
}
