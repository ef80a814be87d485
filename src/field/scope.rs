//! What the fields of the record being handled see: the keys, the record's
//! associated data and the path of the value serde is at, in a thread-local
//! scope that a [`FieldEncrypting`](super::FieldEncrypting) call sets for
//! its duration and restores when it returns (or unwinds).
//!
//! serde hands a field's `Serialize` impl nothing but the format's
//! serializer, so the keys reach it here. A field that finds no scope when
//! it is written fails: it is never written in plaintext.

use std::cell::RefCell;

use zeroize::Zeroizing;

use super::SealedField;
use crate::error::Error;
use crate::keyset::Keyset;
use crate::stats::Event;
use crate::work::BlockingWork;

/// The keys of a scope, and what a field is bound to.
pub(crate) struct FieldKeys {
    /// The keys of [`Encrypted`](super::Encrypted) fields.
    pub(crate) values: Keyset,
    /// The keys of [`Deterministic`](super::Deterministic) fields.
    pub(crate) deterministic: Option<Keyset>,
    /// The record's associated data for randomized fields.
    pub(crate) record_aad: Vec<u8>,
    /// The record's associated data for deterministic fields.
    pub(crate) deterministic_aad: Vec<u8>,
}

/// The state of one scope.
struct Scope {
    /// `None`: a sealed scope (no keys: fields stay sealed).
    keys: Option<FieldKeys>,
    /// The current path, `/`-separated, each segment escaped as in a JSON
    /// Pointer (each pushed segment's [`PathGuard`] holds the length to
    /// truncate it back to).
    path: String,
    /// How many segments of the current path have no name (a map key that
    /// is neither a string nor a number).
    unnamed: usize,
    /// A field's plaintext is being encoded or decoded (a field inside a
    /// field is refused).
    in_field: bool,
    /// The first field error, typed, with its path.
    error: Option<Error>,
    /// A probe: fields are not opened, the KMS calls opening them would
    /// make are collected here.
    probe: Option<Vec<BlockingWork>>,
    /// The field associated data's buffer, reused.
    aad: Vec<u8>,
    /// A field's plaintext and ciphertext, reused.
    scratch: Vec<u8>,
}

thread_local! {
    static SCOPE: RefCell<Option<Scope>> = const { RefCell::new(None) };
    /// Buffers of scopes that ended, for the next one on this thread (a
    /// record's path, associated data and field buffer cost no allocation
    /// once the thread has handled one).
    static SPARE: RefCell<Spare> = const { RefCell::new(Spare { bytes: Vec::new(), path: String::new() }) };
}

/// Buffers kept between scopes.
struct Spare {
    bytes: Vec<Vec<u8>>,
    path: String,
}

/// How many byte buffers a thread keeps.
const SPARE_BUFFERS: usize = 8;

/// A byte buffer from this thread's spares (empty), or a new one.
pub(crate) fn spare_bytes() -> Vec<u8> {
    SPARE
        .with(|s| s.borrow_mut().bytes.pop())
        .unwrap_or_default()
}

/// Keeps `bufs` and `path` for a later scope, in one visit to this
/// thread's spares: each buffer's contents are zeroized first (it may have
/// held a plaintext).
fn keep_spares<const N: usize>(bufs: [Vec<u8>; N], mut path: String) {
    let mut bufs = bufs.map(|mut buf| {
        zeroize::Zeroize::zeroize(&mut buf);
        buf
    });
    path.clear();
    SPARE.with(|s| {
        let mut s = s.borrow_mut();
        for buf in &mut bufs {
            let cap = buf.capacity();
            if cap > 0 && cap <= 4096 && s.bytes.len() < SPARE_BUFFERS {
                s.bytes.push(std::mem::take(buf));
            }
        }
        if s.path.capacity() < path.capacity() {
            s.path = path;
        }
    });
}

/// Restores the scope that was current before [`enter`] when dropped.
pub(crate) struct ScopeGuard {
    previous: Option<Scope>,
}

/// Makes a scope with `keys` (or a sealed one) current on this thread.
pub(crate) fn enter(keys: Option<FieldKeys>) -> ScopeGuard {
    enter_with(keys, None)
}

/// Makes a probing scope current: reading collects the KMS calls that
/// opening each field would make, and opens nothing.
pub(crate) fn enter_probe(keys: FieldKeys) -> ScopeGuard {
    enter_with(Some(keys), Some(Vec::new()))
}

fn enter_with(keys: Option<FieldKeys>, probe: Option<Vec<BlockingWork>>) -> ScopeGuard {
    let (path, aad, scratch) = SPARE.with(|s| {
        let mut s = s.borrow_mut();
        let path = std::mem::take(&mut s.path);
        let aad = s.bytes.pop().unwrap_or_default();
        let scratch = s.bytes.pop().unwrap_or_default();
        (path, aad, scratch)
    });
    let scope = Scope {
        keys,
        path,
        unnamed: 0,
        in_field: false,
        error: None,
        probe,
        aad,
        scratch,
    };
    let previous = SCOPE.with(|s| s.borrow_mut().replace(scope));
    ScopeGuard { previous }
}

impl ScopeGuard {
    /// The first field error of this scope, if any (taken).
    pub(crate) fn take_error(&self) -> Option<Error> {
        SCOPE.with(|s| s.borrow_mut().as_mut().and_then(|s| s.error.take()))
    }

    /// What a probing scope collected, as one piece of work.
    pub(crate) fn take_work(&self) -> Option<BlockingWork> {
        let works = SCOPE.with(|s| s.borrow_mut().as_mut().and_then(|s| s.probe.take()))?;
        works
            .into_iter()
            .fold(None, |all, w| BlockingWork::both(all, Some(w)))
    }
}

impl Drop for ScopeGuard {
    fn drop(&mut self) {
        let previous = self.previous.take();
        // A scope being dropped while a borrow is live cannot happen: no
        // borrow is held across a call out of this module.
        let ended = SCOPE.with(|s| std::mem::replace(&mut *s.borrow_mut(), previous));
        let Some(ended) = ended else { return };
        match ended.keys {
            Some(keys) => keep_spares(
                [
                    ended.aad,
                    ended.scratch,
                    keys.record_aad,
                    keys.deterministic_aad,
                ],
                ended.path,
            ),
            None => keep_spares([ended.aad, ended.scratch], ended.path),
        }
    }
}

/// Pops the segment pushed with it when dropped (guards drop in the reverse
/// order of their pushes: each is a local of the call that pushed it).
pub(crate) struct PathGuard {
    /// The path's length before the segment; `None` if nothing was pushed.
    mark: Option<usize>,
    unnamed: bool,
}

impl Drop for PathGuard {
    fn drop(&mut self) {
        let Some(mark) = self.mark else {
            return;
        };
        SCOPE.with(|s| {
            if let Some(s) = s.borrow_mut().as_mut() {
                s.path.truncate(mark);
                if self.unnamed {
                    s.unnamed = s.unnamed.saturating_sub(1);
                }
            }
        });
    }
}

/// A path segment being pushed.
pub(crate) enum Segment<'a> {
    /// A struct field, an enum variant, a map key that is a string.
    Name(&'a str),
    /// A sequence or tuple element, or a map key that is an integer.
    Index(u128),
    /// A signed map key.
    Signed(i128),
    /// A map key that has no name (a struct, a sequence).
    Unnamed,
}

/// Pushes `segment` onto the current path (a no-op with no scope).
pub(crate) fn push(segment: Segment<'_>) -> PathGuard {
    SCOPE.with(|s| {
        let mut s = s.borrow_mut();
        let Some(s) = s.as_mut() else {
            return PathGuard {
                mark: None,
                unnamed: false,
            };
        };
        let mark = s.path.len();
        s.path.push('/');
        let unnamed = matches!(segment, Segment::Unnamed);
        match segment {
            // Most names have nothing to escape: copied whole.
            Segment::Name(name) if !name.bytes().any(|b| b == b'~' || b == b'/') => {
                s.path.push_str(name);
            }
            Segment::Name(name) => {
                for c in name.chars() {
                    match c {
                        '~' => s.path.push_str("~0"),
                        '/' => s.path.push_str("~1"),
                        c => s.path.push(c),
                    }
                }
            }
            Segment::Index(i) => push_decimal(&mut s.path, i),
            Segment::Signed(i) => {
                use std::fmt::Write as _;
                let _ = write!(s.path, "{i}");
            }
            Segment::Unnamed => {
                s.path.push('?');
                s.unnamed += 1;
            }
        }
        PathGuard {
            mark: Some(mark),
            unnamed,
        }
    })
}

/// Appends `i` in decimal.
fn push_decimal(out: &mut String, mut i: u128) {
    let mut digits = [0u8; 40];
    let mut at = digits.len();
    loop {
        at -= 1;
        // A digit: `i % 10` is below 10.
        digits[at] = b'0' + (i % 10) as u8;
        i /= 10;
        if i == 0 {
            break;
        }
    }
    for &d in &digits[at..] {
        out.push(char::from(d));
    }
}

/// Counts a null the field layer passed through untouched.
pub(crate) fn null_passed() {
    SCOPE.with(|s| {
        if let Some(keys) = s.borrow().as_ref().and_then(|s| s.keys.as_ref()) {
            keys.values.counters().bump(Event::FieldNullPassed);
        }
    });
}

/// Which kind of field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// [`Encrypted`](super::Encrypted): randomized, the values keyset.
    Randomized,
    /// [`Deterministic`](super::Deterministic): AES-SIV.
    Deterministic,
}

/// A field's associated data: the record's, then `0x46` (`F`), the path's
/// length (u32, big-endian) and the path.
pub(crate) fn field_aad(record_aad: &[u8], path: &str) -> Result<Vec<u8>, Error> {
    let mut aad = Vec::new();
    field_aad_into(&mut aad, record_aad, path)?;
    Ok(aad)
}

/// Leaves the field state when dropped, giving the scope its field buffer
/// back.
struct InField {
    scratch: Vec<u8>,
}

impl Drop for InField {
    fn drop(&mut self) {
        let scratch = std::mem::take(&mut self.scratch);
        SCOPE.with(|s| {
            if let Some(s) = s.borrow_mut().as_mut() {
                s.in_field = false;
                if scratch.capacity() > 0 {
                    s.scratch = scratch;
                }
            }
        });
    }
}

/// Keeps `e`, with the current path, as the scope's first error, and
/// returns it.
fn fail(e: Error) -> Error {
    SCOPE.with(|s| match s.borrow_mut().as_mut() {
        Some(scope) => fail_in(scope, e),
        None => e,
    })
}

fn field_error(detail: &str) -> Error {
    Error::codec("field", detail.to_owned())
}

/// The keyset of `kind` in `scope` and the record's associated data for
/// it, checked for a field to be written (`writing`) or read: `Ok(None)`
/// when a read is to keep the field sealed.
fn keys_for(
    scope: &mut Scope,
    kind: Kind,
    writing: bool,
) -> Result<Option<(&Keyset, &[u8])>, Error> {
    let Some(keys) = scope.keys.as_ref() else {
        return if writing {
            Err(field_error(
                "an open field cannot be written by a sealed FieldEncrypting (it holds no keys; only sealed fields pass)",
            ))
        } else {
            Ok(None)
        };
    };
    if scope.in_field {
        return Err(field_error(
            "an encrypted field inside an encrypted field's value",
        ));
    }
    if scope.unnamed > 0 {
        return Err(field_error(
            "an encrypted field under a map key that is neither a string nor a number: its path has no name to bind",
        ));
    }
    match kind {
        Kind::Randomized => Ok(Some((&keys.values, &keys.record_aad))),
        Kind::Deterministic => match &keys.deterministic {
            Some(k) => Ok(Some((k, &keys.deterministic_aad))),
            None => Err(field_error(
                "a deterministic field with no deterministic keyset in scope (FieldEncrypting::with_deterministic)",
            )),
        },
    }
}

/// Starts a field of `kind`: checks the scope, marks it as inside a field,
/// and returns the room a ciphertext puts before its plaintext (0 for a
/// deterministic field); `None` for a read that keeps the field sealed.
fn enter_field(kind: Kind, writing: bool) -> Result<Option<(usize, InField)>, Error> {
    SCOPE.with(|s| {
        let mut s = s.borrow_mut();
        let Some(scope) = s.as_mut() else {
            return if writing {
                Err(field_error(
                    "an encrypted field was serialized with no keys in scope: serialize the record through FieldEncrypting (a field is never written in plaintext)",
                ))
            } else {
                Ok(None)
            };
        };
        let head = match keys_for(scope, kind, writing) {
            Ok(None) => return Ok(None),
            Ok(Some((keyset, _))) => match kind {
                Kind::Randomized => keyset.header_len(),
                Kind::Deterministic => 0,
            },
            Err(e) => return Err(fail_in(scope, e)),
        };
        scope.in_field = true;
        let scratch = if writing {
            std::mem::take(&mut scope.scratch)
        } else {
            Vec::new()
        };
        Ok(Some((head, InField { scratch })))
    })
}

/// Runs `f` with the keyset of `kind` and the field's associated data (the
/// record's, then the current path, built in the scope's own buffer).
fn with_field_keys<R>(
    kind: Kind,
    f: impl FnOnce(&Keyset, &[u8]) -> Result<R, Error>,
) -> Result<R, Error> {
    SCOPE.with(|s| {
        let mut s = s.borrow_mut();
        let Some(scope) = s.as_mut() else {
            return Err(field_error("the field's scope is gone"));
        };
        let mut aad = std::mem::take(&mut scope.aad);
        let result = (|| {
            let Some((keyset, record_aad)) = keys_for_in_field(scope, kind) else {
                return Err(field_error("the field's keys are gone"));
            };
            field_aad_into(&mut aad, record_aad, current_path(scope))?;
            f(keyset, &aad)
        })();
        scope.aad = aad;
        result.map_err(|e| fail_in(scope, e))
    })
}

/// [`keys_for`] once inside the field (the checks are done).
fn keys_for_in_field(scope: &Scope, kind: Kind) -> Option<(&Keyset, &[u8])> {
    let keys = scope.keys.as_ref()?;
    match kind {
        Kind::Randomized => Some((&keys.values, &keys.record_aad)),
        Kind::Deterministic => keys
            .deterministic
            .as_ref()
            .map(|k| (k, &keys.deterministic_aad[..])),
    }
}

/// [`fail`] with the scope already borrowed.
fn fail_in(scope: &mut Scope, e: Error) -> Error {
    let e = match e {
        e @ Error::Field { .. } => e,
        e => Error::Field {
            path: if scope.path.is_empty() {
                "/".to_owned()
            } else {
                scope.path.clone()
            },
            cause: Box::new(e),
        },
    };
    if scope.error.is_none() {
        scope.error = Some(e.clone());
    }
    e
}

/// The room to leave after a short plaintext for the tag, before the
/// buffer has to grow.
const FIELD_ROOM: usize = 64 + 16;

/// Encrypts a field's plaintext, which `encode` writes, under the scope's
/// keys for `kind`, bound to the record and the current path, and hands
/// the ciphertext to `write` (in the scope's reused buffer).
///
/// # Errors
/// No scope, a sealed scope, or what `encode` or the cipher reports; the
/// error is kept as the scope's with the field's path.
pub(crate) fn seal<R>(
    kind: Kind,
    encode: impl FnOnce(&mut Vec<u8>) -> Result<(), Error>,
    write: impl FnOnce(&[u8]) -> R,
) -> Result<R, Error> {
    let Some((head, mut field)) = enter_field(kind, true)? else {
        unreachable!("enter_field(writing) gives keys or an error")
    };
    let buf = &mut field.scratch;
    buf.clear();
    buf.reserve(head + FIELD_ROOM);
    buf.resize(head, 0);
    if let Err(e) = encode(buf) {
        zeroize::Zeroize::zeroize(buf);
        return Err(fail(e));
    }
    with_field_keys(kind, |keyset, aad| {
        match kind {
            Kind::Randomized => keyset.encrypt_in_place(buf, head, aad)?,
            Kind::Deterministic => {
                let ct = keyset.encrypt_deterministically(buf, aad);
                zeroize::Zeroize::zeroize(&mut buf[..]);
                *buf = ct?;
            }
        }
        keyset.counters().bump(Event::FieldEncrypted);
        Ok(())
    })?;
    Ok(write(buf))
}

/// Decrypts a field's ciphertext under the scope's keys for `kind`, bound
/// to the record and the current path (in place: the ciphertext's buffer
/// becomes the plaintext's), then hands the plaintext to `decode` (still
/// inside the field, so a field in it is refused); `Err(sealed)` back with
/// no keys (the field stays sealed), or in a probing scope.
///
/// # Errors
/// What the cipher or `decode` reports (an authentication failure is an
/// error, never a null); kept as the scope's error with the field's path.
pub(crate) fn open<T>(
    kind: Kind,
    sealed: SealedField,
    decode: impl FnOnce(&[u8]) -> Result<T, Error>,
) -> Result<Result<T, SealedField>, Error> {
    // One visit to the scope checks it, marks the field and decrypts.
    let opened = SCOPE.with(|s| {
        let mut s = s.borrow_mut();
        let Some(scope) = s.as_mut() else {
            return Ok(Err(sealed));
        };
        if kind == Kind::Randomized {
            if let (Some(works), Some(keys)) = (scope.probe.as_mut(), scope.keys.as_ref()) {
                if let Some(w) =
                    crate::envelope::blocking_work_to_open(&keys.values, sealed.as_bytes())
                {
                    works.push(w);
                }
                return Ok(Err(sealed));
            }
        }
        match keys_for(scope, kind, false) {
            Ok(None) => return Ok(Err(sealed)),
            Ok(Some(_)) => {}
            Err(e) => return Err(fail_in(scope, e)),
        }
        let mut aad = std::mem::take(&mut scope.aad);
        let result = (|| {
            let (keyset, record_aad) = keys_for_in_field(scope, kind)
                .ok_or_else(|| field_error("the field's keys are gone"))?;
            field_aad_into(&mut aad, record_aad, current_path(scope))?;
            let mut buf = Zeroizing::new(sealed.into_bytes());
            match kind {
                Kind::Randomized => keyset.decrypt_in_place(&mut buf, &aad)?,
                Kind::Deterministic => {
                    let plain = keyset.decrypt_deterministically(&buf, &aad)?;
                    *buf = plain;
                }
            }
            keyset.counters().bump(Event::FieldDecrypted);
            Ok(buf)
        })();
        scope.aad = aad;
        match result {
            Ok(buf) => {
                scope.in_field = true;
                Ok(Ok(buf))
            }
            Err(e) => Err(fail_in(scope, e)),
        }
    })?;
    let plain = match opened {
        Ok(plain) => plain,
        Err(sealed) => return Ok(Err(sealed)),
    };
    let _in_field = InField {
        scratch: Vec::new(),
    };
    decode(&plain).map(Ok).map_err(fail)
}

/// The current path (`/` for the record itself).
fn current_path(scope: &Scope) -> &str {
    if scope.path.is_empty() {
        "/"
    } else {
        scope.path.as_str()
    }
}

/// Writes a field's associated data into `aad`: the record's, `0x46`, the
/// path's length (u32, big-endian) and the path.
fn field_aad_into(aad: &mut Vec<u8>, record_aad: &[u8], path: &str) -> Result<(), Error> {
    let len = u32::try_from(path.len()).map_err(|_| Error::ContextTooLong)?;
    aad.clear();
    aad.reserve(record_aad.len() + 5 + path.len());
    aad.extend_from_slice(record_aad);
    aad.push(b'F');
    aad.extend_from_slice(&len.to_be_bytes());
    aad.extend_from_slice(path.as_bytes());
    Ok(())
}
