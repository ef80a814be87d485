//! **The reading rule.** A key's state in its partition is its record with
//! the highest offset among all its forms on the wire (one per enabled key
//! of the key keyset), as a consumer replaying the partition in order sees
//! it. A key is *split* when another of its forms still holds a present
//! value: a store restored from the topic looks under the primary form
//! first and may read that value, and compaction keeps it.
//!
//! [`KeyState`] keeps each form's newest record and settles which one
//! decides the key's state ([`Kind`]).

use std::collections::BTreeMap;

use tombstone_crypt::record_key::KeyForms;

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

/// The newest record of one form of a key on the wire.
#[derive(Clone, Copy)]
pub(crate) struct Form {
    /// Its offset.
    pub(crate) offset: i64,
    /// What it is.
    pub(crate) kind: Kind,
    /// The key id the value names (a ciphertext's).
    pub(crate) key_id: Option<u32>,
    /// Whether the record key decrypts under the key keyset as given (a
    /// reader reads it); always, without a key keyset.
    pub(crate) readable: bool,
}

/// One key: each of its forms on the wire (one, or one per key of a
/// rotated key keyset) with its newest record, and the record that decides
/// the key's state by the reading rule: the newest of all its readable
/// forms (of all its forms when none is readable).
pub(crate) struct KeyState {
    /// Whether the key's group is its plaintext, decrypted with the key
    /// keyset (its forms can be computed).
    pub(crate) encrypted: bool,
    /// Each form on the wire, with its newest record.
    pub(crate) forms: BTreeMap<Vec<u8>, Form>,
    /// The deciding record: its form, offset, kind and value key id.
    pub(crate) wire: Vec<u8>,
    /// The deciding record's offset.
    pub(crate) offset: i64,
    /// What the deciding record is (undecryptable when no form is
    /// readable).
    pub(crate) kind: Kind,
    /// The key id the deciding value names.
    pub(crate) key_id: Option<u32>,
    /// Another form than the deciding one still holds a present value.
    pub(crate) split: bool,
}

impl KeyState {
    /// Picks the deciding record (the newest readable form, else the newest
    /// form) and whether the key is split; called once every record is in.
    pub(crate) fn settle(&mut self) {
        let readable = self
            .forms
            .iter()
            .filter(|(_, f)| f.readable)
            .max_by_key(|(_, f)| f.offset);
        let decides = readable.or_else(|| self.forms.iter().max_by_key(|(_, f)| f.offset));
        let Some((wire, f)) = decides else {
            return;
        };
        self.wire.clone_from(wire);
        self.offset = f.offset;
        self.key_id = f.key_id;
        self.kind = match f.kind {
            Kind::Tombstone => Kind::Tombstone,
            _ if !f.readable => Kind::Undecryptable,
            kind => kind,
        };
        // A key no reader reads (no readable form) is undecryptable, not
        // split.
        self.split = f.readable
            && self
                .forms
                .iter()
                .any(|(w, g)| w != wire && g.kind != Kind::Tombstone);
    }

    /// The state `audit --list-keys` prints.
    pub(crate) fn state_name(&self) -> &'static str {
        if self.split {
            return "split";
        }
        match self.kind {
            Kind::Tombstone => "deleted",
            Kind::Live => "live",
            Kind::Broken => "broken",
            Kind::Undecryptable => "undecryptable",
            Kind::Plaintext => "plaintext",
        }
    }

    /// The forms seen on the wire that `forms` (the key's forms under the
    /// enabled keys) does not reach and whose newest record is a present
    /// value: under keys the key keyset no longer enables.
    pub(crate) fn unreached<'a>(
        &'a self,
        forms: &'a KeyForms,
    ) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.forms
            .iter()
            .filter(|(_, f)| f.kind != Kind::Tombstone)
            .map(|(w, _)| &w[..])
            .filter(move |w| !forms.all().any(|f| f == *w))
    }
}

/// A key: its partition, and its plaintext (or, without a key keyset or
/// when the key does not decrypt, its bytes on the wire).
pub(crate) type GroupKey = (i32, Vec<u8>);
