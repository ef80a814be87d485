//! Opened DEKs, cached by subject tag within a fence of time, and the
//! counters of what was read and written.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use crate::cipher::AesGcmKey;
use crate::kms::dek::hooks;

use super::format::*;

/// An opened DEK: its id and key.
pub(super) struct Dek {
    pub(super) id: [u8; DEK_ID],
    pub(super) key: AesGcmKey,
}

/// How many shreds, DEKs, cache hits and shredded reads a
/// [`SubjectKeys`](super::SubjectKeys) has seen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SubjectStats {
    /// Subjects shredded here.
    pub shreds: u64,
    /// Values read whose subject's DEK is gone (a delete, or
    /// [`Error::Shredded`](crate::Error::Shredded) when strict).
    pub shredded_reads: u64,
    /// DEKs made here (a subject's first write, or its first after a
    /// shred).
    pub deks_created: u64,
    /// DEKs served from the cache within the fence.
    pub cache_hits: u64,
    /// Key-store reads of a DEK.
    pub store_reads: u64,
}

#[derive(Default)]
pub(super) struct Counters {
    pub(super) shreds: AtomicU64,
    pub(super) shredded_reads: AtomicU64,
    pub(super) deks_created: AtomicU64,
    pub(super) store_reads: AtomicU64,
}

/// A cached DEK: when it was last read from the key store (the fence's
/// clock, ns), and whether it was used since the clock hand last passed.
pub(super) struct Cached {
    pub(super) dek: Arc<Dek>,
    pub(super) read_at: u64,
    pub(super) used: bool,
}

/// The hasher of the maps keyed by subject tags: a tag's first 8 bytes
/// (XORed with what else is written, a slice's length prefix), no mixing.
///
/// A tag that is a key of such a map is an output of the subject naming
/// key's keyed PRF (AES-SIV): its bytes are already uniform and
/// independent of anything an attacker chooses, so a stronger hash buys
/// nothing. A DEK is cached only once its key-store record has opened
/// under the KEK, which authenticates the tag; a tag read from a value
/// that no such record names is only looked up (one probe sequence),
/// never inserted. Never use it for keys that are not such tags (the
/// subjects themselves are hashed with SipHash).
#[derive(Default, Clone, Copy)]
pub(super) struct TagHasher(u64);

impl Hasher for TagHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut first = [0u8; 8];
        let n = bytes.len().min(8);
        first[..n].copy_from_slice(&bytes[..n]);
        self.0 ^= u64::from_ne_bytes(first);
    }
}

/// A map keyed by subject tags (see [`TagHasher`]).
pub(super) type TagMap<V> = HashMap<SubjectTag, V, BuildHasherDefault<TagHasher>>;

/// The DEK cache: bounded, evicting by the CLOCK rule (second chance), so a
/// hot set stays while a stream of new subjects passes through, at a cost
/// that does not grow with the cache.
#[derive(Default)]
pub(super) struct DekCache {
    pub(super) entries: TagMap<Cached>,
    /// The clock's ring: each cached tag once, oldest insertion first.
    pub(super) ring: std::collections::VecDeque<SubjectTag>,
    /// DEKs served from here ([`SubjectStats::cache_hits`]): counted under
    /// the lock a hit takes anyway, not with an atomic of its own.
    pub(super) hits: u64,
    /// Bumped whenever a cached DEK is removed (a shred), evicted or
    /// replaced (read again from the store): a [`WriteHint`] of an older
    /// generation is never followed.
    pub(super) generation: u64,
    /// Bumped whenever a cached DEK is removed (a shred): a DEK read from
    /// the key store is cached only if no removal happened since before
    /// the read (see [`SubjectKeys::keep`]).
    pub(super) removals: u64,
}

impl DekCache {
    pub(super) fn insert(&mut self, tag: SubjectTag, dek: Arc<Dek>, capacity: usize) {
        let entry = Cached {
            dek,
            read_at: hooks::precise(),
            used: false,
        };
        if let Some(e) = self.entries.get_mut(&tag) {
            *e = entry;
            self.generation = self.generation.wrapping_add(1);
            return;
        }
        while self.entries.len() >= capacity {
            let Some(old) = self.ring.pop_front() else {
                break;
            };
            match self.entries.get_mut(&old) {
                Some(e) if e.used => {
                    e.used = false;
                    self.ring.push_back(old);
                }
                Some(_) => {
                    self.entries.remove(&old);
                    self.generation = self.generation.wrapping_add(1);
                }
                None => {}
            }
        }
        self.entries.insert(tag, entry);
        self.ring.push_back(tag);
    }

    /// Forgets `tag` (a shred: rare, so the ring's scan is fine).
    pub(super) fn remove(&mut self, tag: &SubjectTag) {
        self.generation = self.generation.wrapping_add(1);
        self.removals = self.removals.wrapping_add(1);
        if self.entries.remove(tag).is_some() {
            self.ring.retain(|t| t != tag);
        }
    }

    /// The cached DEK of `tag` if it was read from the key store at most
    /// `fence` ns ago, marked used and counted as a hit.
    #[inline]
    pub(super) fn fresh(&mut self, tag: &SubjectTag, fence: u64) -> Option<Arc<Dek>> {
        self.fresh_with_hint(tag, fence).map(|(dek, _)| dek)
    }

    /// [`fresh`](DekCache::fresh), with a [`WriteHint`] to it.
    #[inline]
    pub(super) fn fresh_with_hint(
        &mut self,
        tag: &SubjectTag,
        fence: u64,
    ) -> Option<(Arc<Dek>, WriteHint)> {
        let entry = self.entries.get_mut(tag)?;
        if within_fence(entry.read_at, fence) {
            entry.used = true;
            self.hits += 1;
            let hint = WriteHint {
                dek: Arc::downgrade(&entry.dek),
                read_at: entry.read_at,
                generation: self.generation,
            };
            Some((Arc::clone(&entry.dek), hint))
        } else {
            None
        }
    }

    /// The DEK a subject's [`WriteHint`] points to, if the cache has
    /// dropped or replaced no DEK since the hint was taken, the DEK is
    /// within the fence and still alive; counted as a hit. The hint is
    /// cleared when it is stale.
    #[inline]
    pub(super) fn hinted(&mut self, hint: &mut Option<WriteHint>, fence: u64) -> Option<Arc<Dek>> {
        let h = hint.as_ref()?;
        let dek = (h.generation == self.generation && within_fence(h.read_at, fence))
            .then(|| h.dek.upgrade())
            .flatten();
        match dek {
            Some(dek) => {
                self.hits += 1;
                Some(dek)
            }
            None => {
                *hint = None;
                None
            }
        }
    }
}

/// Whether a DEK read from the store at `read_at` is within `fence` ns of
/// it: the kernel's coarse clock (a few ns a read) when far from the
/// fence, the precise one near it, so the bound is exact.
#[inline]
pub(super) fn within_fence(read_at: u64, fence: u64) -> bool {
    let coarse_age = hooks::coarse().saturating_sub(read_at);
    coarse_age.saturating_add(hooks::COARSE_MARGIN) < fence
        || hooks::precise().saturating_sub(read_at) <= fence
}

/// Where a subject's last value found its DEK in the DEK cache, kept
/// beside the subject's tag so that a write finds its DEK with one lookup
/// (by subject) instead of two (subject, then tag). It holds no key: a
/// weak reference, dead once the cache drops the DEK and no value is
/// being written with it; and the cache's generation changes whenever it
/// drops or replaces any DEK (a shred, an eviction, a newer read), so a
/// hint taken before is never followed, even while its DEK is alive.
pub(super) struct WriteHint {
    pub(super) dek: std::sync::Weak<Dek>,
    pub(super) read_at: u64,
    pub(super) generation: u64,
}

/// A subject's entry in the tag cache.
pub(super) struct Named {
    pub(super) tag: SubjectTag,
    pub(super) hint: Option<WriteHint>,
}

/// A subject as a key of the tag cache, in a heap block of its own: its
/// bytes are zeroized where they are when it leaves the cache (a shred,
/// the cache cleared, the keys dropped). Never in the cache's table
/// itself: the table moves its entries when it grows and frees the old
/// table as it is, and a removal moves the entry out of it, so bytes kept
/// in it would outlive their subject in freed or spare memory.
#[derive(PartialEq, Eq, Hash)]
pub(super) struct Subject(pub(super) Box<[u8]>);

impl Borrow<[u8]> for Subject {
    fn borrow(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for Subject {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut *self.0);
    }
}

/// What a [`SubjectKeys`] keeps in memory, under one lock (a value takes
/// it once): the subjects' tags computed here and the DEK cache.
#[derive(Default)]
pub(super) struct Caches {
    /// Subjects' tags computed here (the subjects are this process's own
    /// data: a tag never changes). Keyed by the subject: SipHash.
    pub(super) tags: HashMap<Subject, Named>,
    pub(super) deks: DekCache,
}

/// What a value's DEK is, to read it.
pub(super) enum ToRead {
    Dek(Arc<Dek>),
    /// A shred covers it.
    Shredded,
}
