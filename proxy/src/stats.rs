//! What the proxy did, counted for the whole process: records encrypted
//! and decrypted, tombstones passed, the write rule's tombstones of older
//! key forms, partitions and frames refused. Read a [`Snapshot`] with
//! [`process`]; the keysets' own counters (`tombstone_crypt::stats`)
//! count the cipher work beneath.
//!
//! Counting costs one relaxed add per event. A count is added when its
//! batch (or frame) has been handled whole: the records of a batch that
//! is refused are counted as a refused partition, not as encrypted.

use std::sync::atomic::{AtomicU64, Ordering};

/// The proxy's counters, since the process started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Snapshot {
    /// Record values encrypted on Produce.
    pub values_encrypted: u64,
    /// Record values decrypted on Fetch.
    pub values_decrypted: u64,
    /// Record keys encrypted on Produce (a key keyset).
    pub record_keys_encrypted: u64,
    /// Record keys decrypted on Fetch (a key keyset).
    pub record_keys_decrypted: u64,
    /// Tombstones (null values) of policy topics forwarded null on Produce.
    pub tombstones_produced: u64,
    /// Tombstones of policy topics handed on null on Fetch.
    pub tombstones_fetched: u64,
    /// The write rule's tombstones of older key forms the proxy made, to
    /// write before the client's batch (when the broker does not write
    /// them, the client's partitions count as refused).
    pub older_form_tombstones: u64,
    /// Produce partitions refused (`CORRUPT_MESSAGE`, nothing forwarded).
    pub partitions_refused: u64,
    /// Fetch partitions the proxy could not decrypt (`CORRUPT_MESSAGE`, no
    /// records handed on).
    pub partitions_undecryptable: u64,
    /// Values under the key of a shredded subject handed on as
    /// tombstones on Fetch.
    pub shredded_fetched: u64,
    /// Frames refused: the connection closed on them (a length over the
    /// limit, shorter than a request header, a Produce that does not
    /// decode).
    pub frames_refused: u64,
    /// Record batches refused because decoding them would take more
    /// memory than a request's budget or the process's holds
    /// (`max_decoded_bytes_per_request`, `max_decoded_bytes`).
    pub decode_budget_refused: u64,
    /// Admin requests (DeleteTopics, DeleteRecords, CreatePartitions,
    /// AlterConfigs, IncrementalAlterConfigs) refused for naming a
    /// key-store topic.
    pub admin_refused: u64,
}

/// The events counted.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Event {
    ValuesEncrypted,
    ValuesDecrypted,
    KeysEncrypted,
    KeysDecrypted,
    TombstonesProduced,
    TombstonesFetched,
    OlderFormTombstones,
    PartitionsRefused,
    PartitionsUndecryptable,
    FramesRefused,
    ShreddedFetched,
    DecodeBudgetRefused,
    AdminRefused,
}

const EVENTS: usize = 13;

static COUNTERS: [AtomicU64; EVENTS] = [const { AtomicU64::new(0) }; EVENTS];

/// Adds `n` to `event`'s count.
pub(crate) fn add(event: Event, n: u64) {
    if n != 0 {
        COUNTERS[event as usize].fetch_add(n, Ordering::Relaxed);
    }
}

/// Counts per batch, added to the process's counts only when the batch
/// was handled whole.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub(crate) values: u64,
    pub(crate) keys: u64,
    pub(crate) tombstones: u64,
    pub(crate) shredded: u64,
}

impl Tally {
    /// Adds `other`'s counts to these.
    pub(crate) fn merge(&mut self, other: &Tally) {
        self.values += other.values;
        self.keys += other.keys;
        self.tombstones += other.tombstones;
        self.shredded += other.shredded;
    }

    /// Adds the tally to the process's counts, as encryption (`produce`)
    /// or decryption.
    pub(crate) fn commit(&self, produce: bool) {
        if produce {
            add(Event::ValuesEncrypted, self.values);
            add(Event::KeysEncrypted, self.keys);
            add(Event::TombstonesProduced, self.tombstones);
        } else {
            add(Event::ValuesDecrypted, self.values);
            add(Event::KeysDecrypted, self.keys);
            add(Event::TombstonesFetched, self.tombstones);
            add(Event::ShreddedFetched, self.shredded);
        }
    }
}

/// The process's counts now.
pub fn process() -> Snapshot {
    let c = |e: Event| COUNTERS[e as usize].load(Ordering::Relaxed);
    Snapshot {
        values_encrypted: c(Event::ValuesEncrypted),
        values_decrypted: c(Event::ValuesDecrypted),
        record_keys_encrypted: c(Event::KeysEncrypted),
        record_keys_decrypted: c(Event::KeysDecrypted),
        tombstones_produced: c(Event::TombstonesProduced),
        tombstones_fetched: c(Event::TombstonesFetched),
        older_form_tombstones: c(Event::OlderFormTombstones),
        partitions_refused: c(Event::PartitionsRefused),
        partitions_undecryptable: c(Event::PartitionsUndecryptable),
        frames_refused: c(Event::FramesRefused),
        decode_budget_refused: c(Event::DecodeBudgetRefused),
        admin_refused: c(Event::AdminRefused),
        shredded_fetched: c(Event::ShreddedFetched),
    }
}
