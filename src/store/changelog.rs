use std::collections::HashMap;

use super::{Entry, KeyValueStore};
use crate::error::Error;

/// One changelog record: a key and its new value, `None` being a tombstone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Position in the changelog (Kafka's offset), increasing.
    pub offset: u64,
    /// The record key.
    pub key: Vec<u8>,
    /// The value as stored (ciphertext under an encrypting layer), or `None`
    /// for a tombstone.
    pub value: Option<Vec<u8>>,
}

/// An append-only log of `(key, Option<value>)` records: what a Kafka
/// Streams changelog topic holds.
///
/// A Kafka topic implements it (the `kafka` feature); [`MemoryChangelog`]
/// does in memory, with Kafka's compaction rule.
pub trait Changelog {
    /// Appends a record (`None`: a tombstone). It may only be queued: it is
    /// durable and visible to [`records`](Changelog::records) after
    /// [`flush`](Changelog::flush).
    ///
    /// # Errors
    /// [`Error::Changelog`] if the record could not be appended.
    fn append(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), Error>;

    /// Every record from the beginning to the current end, in offset order.
    ///
    /// # Errors
    /// [`Error::Changelog`] if the log could not be read.
    fn records(&self) -> Result<Vec<Record>, Error>;

    /// Makes every appended record durable and visible to readers.
    ///
    /// # Errors
    /// [`Error::Changelog`] if that failed. Then any record appended since
    /// the last successful flush may or may not be in the log.
    fn flush(&mut self) -> Result<(), Error> {
        Ok(())
    }

    /// Hands every record, from the beginning to the current end and in
    /// offset order, to `apply`, one at a time, and returns how many there
    /// were. The default reads [`records`](Changelog::records) whole; a
    /// changelog on a topic streams, so memory does not grow with the log.
    ///
    /// # Errors
    /// The log could not be read, or `apply` failed (its error is
    /// returned as is).
    fn replay(&self, apply: &mut dyn FnMut(Record) -> Result<(), Error>) -> Result<u64, Error> {
        let mut n = 0;
        for r in self.records()? {
            apply(r)?;
            n += 1;
        }
        Ok(n)
    }
}

/// Kafka's log compaction rule applied to `records`: the newest record per
/// key is kept (at its own offset, in offset order) and tombstones are
/// dropped (as they are once `delete.retention.ms` has passed).
///
/// ```
/// use tombstone_crypt::store::{compact, Record};
///
/// let r = |offset, key: &[u8], value: Option<&[u8]>| Record {
///     offset,
///     key: key.to_vec(),
///     value: value.map(<[u8]>::to_vec),
/// };
/// let log = [r(0, b"a", Some(b"1")), r(1, b"b", Some(b"2")), r(2, b"a", None)];
/// assert_eq!(compact(&log), [r(1, b"b", Some(b"2"))]);
/// ```
pub fn compact(records: &[Record]) -> Vec<Record> {
    let mut newest: HashMap<&[u8], usize> = HashMap::with_capacity(records.len());
    for (i, r) in records.iter().enumerate() {
        newest.insert(&r.key, i);
    }
    records
        .iter()
        .enumerate()
        .filter(|(i, r)| newest.get(&r.key[..]) == Some(i) && r.value.is_some())
        .map(|(_, r)| r.clone())
        .collect()
}

/// Replays `records` in order into `store`: each value is put, each
/// tombstone deletes. Restoring into an empty store rebuilds exactly the
/// state the log describes. Returns how many records were replayed.
///
/// Restore into the bytes store *beneath* any encrypting layer: the log
/// holds the stored bytes (ciphertext), which go back unchanged.
///
/// # Errors
/// The store failed; [`Error::Store`] if `store` is not empty (a restore
/// over old state would keep keys the log deleted) or is a layer that must
/// not be restored into ([`KeyValueStore::accepts_restore`]: an
/// [`EncryptedStore`](crate::store::EncryptedStore) would encrypt the ciphertext
/// again, a [`ChangeLoggingStore`] would log every record twice).
pub fn restore<S: KeyValueStore + ?Sized>(
    store: &mut S,
    records: &[Record],
) -> Result<usize, Error> {
    check_restore_target(store)?;
    for r in records {
        store.put(&r.key, r.value.as_deref())?;
    }
    store.flush()?;
    Ok(records.len())
}

/// [`restore`] straight from a changelog, streamed through
/// [`Changelog::replay`]: memory does not grow with the log. Returns how
/// many records were replayed.
///
/// # Errors
/// As [`restore`]; the changelog could not be read.
pub fn restore_from<S: KeyValueStore + ?Sized, C: Changelog + ?Sized>(
    store: &mut S,
    changelog: &C,
) -> Result<u64, Error> {
    #[cfg(feature = "tracing")]
    let span = tracing::info_span!(
        "changelog_restore",
        records = tracing::field::Empty,
        outcome = tracing::field::Empty,
    )
    .entered();
    let restored = (|| {
        check_restore_target(store)?;
        let n = changelog.replay(&mut |r| store.put(&r.key, r.value.as_deref()))?;
        store.flush()?;
        Ok(n)
    })();
    #[cfg(feature = "tracing")]
    match &restored {
        Ok(n) => {
            span.record("records", n);
            span.record("outcome", "ok");
        }
        Err(e) => {
            span.record("outcome", "error");
            tracing::warn!(error = %e, "the restore from the changelog failed");
        }
    }
    restored
}

fn check_restore_target<S: KeyValueStore + ?Sized>(store: &S) -> Result<(), Error> {
    if !store.accepts_restore() {
        return Err(Error::Store {
            detail: "restore writes the logged bytes into the bytes store beneath the encrypting and change-logging layers, not through them".into(),
            cause: None,
        });
    }
    if !store.is_empty()? {
        return Err(Error::Store {
            detail:
                "restore needs an empty store: clear it first (ChangeLoggingStore::recover does)"
                    .into(),
            cause: None,
        });
    }
    Ok(())
}

/// An in-memory changelog.
#[derive(Clone, Debug, Default)]
pub struct MemoryChangelog {
    records: Vec<Record>,
    next: u64,
}

impl MemoryChangelog {
    /// An empty changelog.
    pub fn new() -> Self {
        Self::default()
    }

    /// Compacts the log in place with Kafka's rule (see [`compact`]).
    pub fn compact(&mut self) {
        self.records = compact(&self.records);
    }

    /// The records, in offset order.
    pub fn as_slice(&self) -> &[Record] {
        &self.records
    }
}

impl Changelog for MemoryChangelog {
    fn append(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), Error> {
        let offset = self.next;
        self.next += 1;
        self.records.push(Record {
            offset,
            key: key.to_vec(),
            value: value.map(<[u8]>::to_vec),
        });
        Ok(())
    }

    fn records(&self) -> Result<Vec<Record>, Error> {
        Ok(self.records.clone())
    }
}

/// A bytes store that appends every put and delete to a changelog, after
/// applying it to the store underneath (Kafka Streams'
/// `ChangeLoggingKeyValueBytesStore`). A `None` is logged as a tombstone.
///
/// # The changelog contract under faults
/// The changelog is the truth the store is restored from. If an append or a
/// flush fails (of the changelog or of the store beneath), the store and
/// the log may disagree: the store then **refuses to serve** (every call
/// returns [`Error::NeedsRestore`]) until [`recover`](Self::recover)
/// rebuilds it from the log. So what the live store serves always equals
/// what a restore from the changelog gives once the pending records are
/// flushed. Every operation whose `flush` returned `Ok` is in the log and
/// survives a crash; operations after the last good flush may or may not
/// be, each in order; no delete is lost once flushed, and no deleted key
/// comes back.
///
/// After a crash (or any unclean start), build the store over its old local
/// state and call [`recover`](Self::recover): it clears the local store and
/// replays the changelog into it, streaming. This is Kafka Streams'
/// answer for an unclean start without a checkpoint (wipe and restore); a
/// checkpoint that skips the replay of what a durable local store already
/// holds is not implemented.
#[derive(Debug)]
pub struct ChangeLoggingStore<S, C> {
    inner: S,
    log: C,
    needs_restore: bool,
}

impl<S: KeyValueStore, C: Changelog> ChangeLoggingStore<S, C> {
    /// Logs every change made to `inner` into `log`. `inner` is trusted to
    /// match `log` (an empty store over an empty log, say); after a restart
    /// call [`recover`](Self::recover) instead of trusting it.
    pub fn new(inner: S, log: C) -> Self {
        ChangeLoggingStore {
            inner,
            log,
            needs_restore: false,
        }
    }

    /// Whether the store refuses to serve until [`recover`](Self::recover).
    pub fn needs_restore(&self) -> bool {
        self.needs_restore
    }

    /// Rebuilds the store beneath from the changelog: flushes the changelog
    /// (so that what was queued is settled: in the log or failed for
    /// good), removes every key the store holds, replays the log into it
    /// (streamed) and flushes it; then the store serves again. Returns how
    /// many records were replayed.
    ///
    /// # Errors
    /// The store or the changelog failed (a broker still down, say); the
    /// store keeps refusing to serve, and `recover` can be called again.
    pub fn recover(&mut self) -> Result<u64, Error> {
        #[cfg(feature = "tracing")]
        let _span = tracing::info_span!("changelog_recovery").entered();
        let recovered = self.recover_unlogged();
        #[cfg(feature = "tracing")]
        if let Err(e) = &recovered {
            tracing::warn!(error = %e, "the recovery from the changelog failed");
        }
        recovered
    }

    fn recover_unlogged(&mut self) -> Result<u64, Error> {
        self.needs_restore = true;
        self.log.flush()?;
        let keys: Vec<Vec<u8>> = self.inner.all()?.into_iter().map(|(k, _)| k).collect();
        for k in keys {
            self.inner.delete(&k)?;
        }
        let n = restore_from(&mut self.inner, &self.log)?;
        self.needs_restore = false;
        Ok(n)
    }

    fn serving(&self) -> Result<(), Error> {
        if self.needs_restore {
            Err(Error::NeedsRestore)
        } else {
            Ok(())
        }
    }

    /// Runs a step that may leave the store and the log apart: on failure
    /// the store refuses to serve until recovered.
    fn guarded<R>(&mut self, step: impl FnOnce(&mut Self) -> Result<R, Error>) -> Result<R, Error> {
        self.serving()?;
        let r = step(self);
        if r.is_err() {
            self.needs_restore = true;
        }
        r
    }

    /// The changelog.
    pub fn changelog(&self) -> &C {
        &self.log
    }

    /// The changelog, mutably (for compaction).
    pub fn changelog_mut(&mut self) -> &mut C {
        &mut self.log
    }

    /// The store underneath.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Unwraps into the store and the changelog.
    pub fn into_parts(self) -> (S, C) {
        (self.inner, self.log)
    }
}

impl<S: KeyValueStore, C: Changelog> KeyValueStore for ChangeLoggingStore<S, C> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        self.serving()?;
        self.inner.get(key)
    }

    fn put(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), Error> {
        self.guarded(|s| {
            s.inner.put(key, value)?;
            s.log.append(key, value)
        })
    }

    fn delete(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        self.guarded(|s| {
            let old = s.inner.delete(key)?;
            s.log.append(key, None)?;
            Ok(old)
        })
    }

    fn all(&self) -> Result<Vec<Entry>, Error> {
        self.serving()?;
        self.inner.all()
    }

    fn range(&self, from: &[u8], to: &[u8]) -> Result<Vec<Entry>, Error> {
        self.serving()?;
        self.inner.range(from, to)
    }

    fn flush(&mut self) -> Result<(), Error> {
        self.guarded(|s| {
            // The log first: once it is durable, the store can always be
            // rebuilt from it.
            s.log.flush()?;
            s.inner.flush()
        })
    }

    fn is_empty(&self) -> Result<bool, Error> {
        self.serving()?;
        self.inner.is_empty()
    }

    /// `false`: restore into the store beneath; through this one every
    /// record would be logged again.
    fn accepts_restore(&self) -> bool {
        false
    }
}
