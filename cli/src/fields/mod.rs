//! The encrypted fields of a JSON record (`tombstone_crypt::field`), found
//! in its text without its type: every string value that is canonical
//! base64 (standard alphabet, padded) of `0x01 | key id | ...`, named by its
//! path (a JSON Pointer, as the library names paths: `~0` and `~1` in a
//! name, indexes in an array, `/` for the record itself), with the byte
//! span of its text between the quotes ([`find`]). `inspect --fields` lists
//! them; `reencrypt --fields json` checks that each authenticates at its
//! path ([`check`]) and writes each under the primary key in place of the
//! old one, every other byte of the record as it was ([`rewrite`]): the
//! text is never parsed into a value and written again, which would reorder
//! and reformat it. A string it cannot open (moved from another path or
//! record, under a key the keysets lack, or a plain string that happens to
//! read as a field) is a finding for that string only: it is left as it
//! is, and the record's other fields are written again.

use base64::Engine as _;
use tombstone_crypt::error::ErrorKind;
use tombstone_crypt::{field, AadPolicy, Context, Error, Keyset};
use zeroize::Zeroizing;

mod scan;
#[cfg(test)]
mod tests;

pub(crate) use scan::{find, splice, Found, NotJson};

/// The keys of a topic's fields, and what they are bound to besides their
/// path (as `FieldEncrypting` is built).
#[derive(Clone, Debug)]
pub(crate) struct FieldKeys {
    /// The keyset of randomized fields (`Encrypted<T>`).
    pub(crate) randomized: Keyset,
    /// The keyset of deterministic fields (`Deterministic<T>`), if any.
    pub(crate) deterministic: Option<Keyset>,
    /// What randomized fields are bound to (topic and record key by
    /// default).
    pub(crate) aad: AadPolicy,
    /// What deterministic fields are bound to (the topic by default).
    pub(crate) deterministic_aad: AadPolicy,
}

/// The shortest ciphertext under a key the keysets lack that is taken for
/// a field (AES-GCM's version, key id, nonce and tag, as for a whole
/// value): a shorter string is a plain string that happens to decode so.
const MIN_FIELD: usize = 5 + 12 + 16;

/// What a record's fields are to `reencrypt --fields`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FieldState {
    /// Not looked at (no `--fields`, or not a present value).
    Unchecked,
    /// Every field authenticates at its path, under its keyset's primary
    /// key (or the record has none).
    Current,
    /// Every field authenticates at its path, one at least under an older
    /// key.
    Old,
    /// A string that reads as a field does not authenticate at its path
    /// (moved, another record's, under a key the keysets lack or disable,
    /// or a plain string that happens to read as one): a finding, that
    /// string left as it is; every field that authenticates is under its
    /// keyset's primary key.
    Bad,
    /// As [`Bad`](FieldState::Bad), and a field that authenticates is
    /// under an older key: the fields that authenticate are written again.
    OldAndBad,
    /// The value is not a JSON text.
    NotJson,
}

impl FieldState {
    /// Whether a field that authenticates is under an older key.
    pub(crate) fn old(self) -> bool {
        matches!(self, FieldState::Old | FieldState::OldAndBad)
    }

    /// Whether a string that reads as a field does not authenticate.
    pub(crate) fn bad(self) -> bool {
        matches!(self, FieldState::Bad | FieldState::OldAndBad)
    }
}

/// A record's fields, checked.
pub(crate) struct Checked {
    /// What they are.
    pub(crate) state: FieldState,
    /// The key id of each field that authenticates.
    pub(crate) key_ids: Vec<u32>,
    /// The fields that do not authenticate: path and key id.
    pub(crate) bad: Vec<(String, u32)>,
}

/// A field's plaintext (zeroized on drop), and whether it was under its
/// keyset's primary key.
type Opened = (Zeroizing<Vec<u8>>, bool);

/// The keyset a field is under.
enum Under<'k> {
    /// A key of this keyset: deterministic (`Deterministic<T>`) or not.
    Known(&'k Keyset, bool),
    /// A key neither keyset holds: it cannot authenticate.
    Unknown,
}

impl FieldKeys {
    /// Which keyset `f` is under; `None` for a string that is no field of
    /// these keysets (a short one under a key they lack).
    fn under(&self, f: &Found) -> Option<Under<'_>> {
        if self.randomized.names_a_key(&f.bytes) {
            return Some(Under::Known(&self.randomized, false));
        }
        if let Some(d) = self
            .deterministic
            .as_ref()
            .filter(|d| d.names_a_key(&f.bytes))
        {
            return Some(Under::Known(d, true));
        }
        (f.bytes.len() >= MIN_FIELD).then_some(Under::Unknown)
    }

    /// The associated data of a field at `path` in `ctx`.
    fn ad(&self, deterministic: bool, ctx: &Context<'_>, path: &str) -> Result<Vec<u8>, Error> {
        let policy = if deterministic {
            self.deterministic_aad
        } else {
            self.aad
        };
        field::associated_data(ctx, policy, path)
    }

    /// The plaintext of `f` in `ctx` (zeroized on drop), `None` if it does
    /// not authenticate there, and whether it is under its keyset's
    /// primary key.
    ///
    /// # Errors
    /// A KMS error (the field cannot be told apart).
    fn open(
        &self,
        under: &Under<'_>,
        f: &Found,
        ctx: &Context<'_>,
    ) -> Result<Option<Opened>, Error> {
        let Under::Known(k, det) = *under else {
            return Ok(None);
        };
        let opened = self.ad(det, ctx, &f.path).and_then(|ad| {
            if det {
                k.decrypt_deterministically(&f.bytes, &ad)
            } else {
                k.decrypt(&f.bytes, &ad)
            }
        });
        match opened {
            Ok(p) => Ok(Some((Zeroizing::new(p), k.primary().0 == f.key_id()))),
            Err(e) if e.kind() == ErrorKind::Environment => Err(e),
            Err(_) => Ok(None),
        }
    }

    /// `pt` encrypted as a field at `path` in `ctx` under the primary key
    /// of `k`, as base64.
    fn seal(
        &self,
        (k, det): (&Keyset, bool),
        pt: &[u8],
        path: &str,
        ctx: &Context<'_>,
    ) -> Result<String, Error> {
        let ad = self.ad(det, ctx, path)?;
        let ct = if det {
            k.encrypt_deterministically(pt, &ad)?
        } else {
            k.encrypt(pt, &ad)?
        };
        Ok(base64::engine::general_purpose::STANDARD.encode(ct))
    }
}

/// The fields of the record `text`, in `ctx`, checked: each must
/// authenticate at its path; one that does not is named in
/// [`Checked::bad`], and the others are still told apart by key.
///
/// # Errors
/// A KMS error.
pub(crate) fn check(keys: &FieldKeys, text: &[u8], ctx: &Context<'_>) -> Result<Checked, Error> {
    let Ok(found) = find(text) else {
        return Ok(Checked {
            state: FieldState::NotJson,
            key_ids: Vec::new(),
            bad: Vec::new(),
        });
    };
    let mut out = Checked {
        state: FieldState::Current,
        key_ids: Vec::new(),
        bad: Vec::new(),
    };
    let mut old = false;
    for f in &found {
        let Some(under) = keys.under(f) else { continue };
        match keys.open(&under, f, ctx)? {
            Some((_, current)) => {
                out.key_ids.push(f.key_id());
                old |= !current;
            }
            None => out.bad.push((f.path.clone(), f.key_id())),
        }
    }
    out.state = match (old, !out.bad.is_empty()) {
        (false, false) => FieldState::Current,
        (true, false) => FieldState::Old,
        (false, true) => FieldState::Bad,
        (true, true) => FieldState::OldAndBad,
    };
    Ok(out)
}

/// Why a record's fields were not written again.
#[derive(Debug)]
pub(crate) enum NotRewritten {
    /// The record is not JSON.
    NotJson(NotJson),
    /// The library failed (a KMS error, a context too long).
    Error(Error),
}

/// The record `text` read in `from`, with every field that is not under
/// its keyset's primary key, or every field when `from` and `to` bind
/// differently (`all`), encrypted again under the primary key for `to` at
/// the same path; every other byte as it was. A string that does not
/// authenticate at its path is left as it is ([`check`] names it).
///
/// # Errors
/// The record is not JSON, a KMS error.
pub(crate) fn rewrite(
    keys: &FieldKeys,
    text: &[u8],
    from: &Context<'_>,
    to: &Context<'_>,
    all: bool,
) -> Result<Zeroizing<Vec<u8>>, NotRewritten> {
    let found = find(text).map_err(NotRewritten::NotJson)?;
    let mut with = Vec::new();
    for f in &found {
        let Some(under) = keys.under(f) else { continue };
        let Some((pt, current)) = keys.open(&under, f, from).map_err(NotRewritten::Error)? else {
            continue;
        };
        let Under::Known(k, det) = under else {
            continue;
        };
        if current && !all {
            continue;
        }
        let b64 = keys
            .seal((k, det), &pt, &f.path, to)
            .map_err(NotRewritten::Error)?;
        with.push((f.span.clone(), b64));
    }
    Ok(splice(text, &with))
}
