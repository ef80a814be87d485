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

use std::borrow::Cow;
use std::ops::Range;

use base64::Engine as _;
use tombstone_crypt::error::ErrorKind;
use tombstone_crypt::{field, AadPolicy, Context, Error, Keyset};
use zeroize::Zeroizing;

/// A string value of a record that holds a field's ciphertext.
pub(crate) struct Found {
    /// Its path (`/card`, `/items/0/sku`; `/` for the record itself).
    pub(crate) path: String,
    /// Its text between the quotes, in the record's bytes.
    pub(crate) span: Range<usize>,
    /// The ciphertext its base64 decodes to: `0x01 | key id | ...`.
    pub(crate) bytes: Vec<u8>,
}

impl Found {
    /// The key id its ciphertext names.
    pub(crate) fn key_id(&self) -> u32 {
        tombstone_crypt::format::Header::parse(&self.bytes).map_or(0, |h| h.key_id.0)
    }
}

/// Why a text is not a JSON record: what, and at which byte.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct NotJson {
    /// The byte offset.
    pub(crate) at: usize,
    /// What is wrong there.
    pub(crate) what: &'static str,
}

impl std::fmt::Display for NotJson {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "not JSON at byte {}: {}", self.at, self.what)
    }
}

/// The most arrays and objects inside one another (serde_json's limit,
/// so no record the library wrote is refused).
const MAX_DEPTH: usize = 128;

/// Every field of the JSON text `text`, in the order of the text (every
/// string value, duplicate keys' included).
///
/// # Errors
/// The text is not one JSON value (RFC 8259, UTF-8, whitespace around it),
/// or nests deeper than 128.
pub(crate) fn find(text: &[u8]) -> Result<Vec<Found>, NotJson> {
    let text = std::str::from_utf8(text).map_err(|e| NotJson {
        at: e.valid_up_to(),
        what: "not UTF-8",
    })?;
    let mut s = Scan {
        text,
        bytes: text.as_bytes(),
        at: 0,
        path: String::new(),
        found: Vec::new(),
    };
    s.ws();
    s.value(0)?;
    s.ws();
    if s.at != s.bytes.len() {
        return Err(s.err("more after the record's value"));
    }
    Ok(s.found)
}

/// A walk over a JSON text.
struct Scan<'a> {
    text: &'a str,
    bytes: &'a [u8],
    at: usize,
    /// The path of the value being read.
    path: String,
    found: Vec<Found>,
}

impl<'a> Scan<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn err(&self, what: &'static str) -> NotJson {
        NotJson { at: self.at, what }
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn expect(&mut self, b: u8, what: &'static str) -> Result<(), NotJson> {
        if self.peek() == Some(b) {
            self.at += 1;
            Ok(())
        } else {
            Err(self.err(what))
        }
    }

    fn value(&mut self, depth: usize) -> Result<(), NotJson> {
        match self.peek() {
            Some(b'{') => self.object(depth + 1),
            Some(b'[') => self.array(depth + 1),
            Some(b'"') => {
                let (span, content) = self.string()?;
                self.field(span, &content);
                Ok(())
            }
            Some(b't') => self.literal("true"),
            Some(b'f') => self.literal("false"),
            Some(b'n') => self.literal("null"),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.err("not a JSON value")),
            None => Err(self.err("the text ends before a value")),
        }
    }

    fn object(&mut self, depth: usize) -> Result<(), NotJson> {
        if depth > MAX_DEPTH {
            return Err(self.err("nested deeper than 128"));
        }
        self.at += 1;
        self.ws();
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Ok(());
        }
        loop {
            if self.peek() != Some(b'"') {
                return Err(self.err("an object's key is not a string"));
            }
            let (_, key) = self.string()?;
            self.ws();
            self.expect(b':', "no `:` after an object's key")?;
            self.ws();
            let mark = self.path.len();
            self.path.push('/');
            for c in key.chars() {
                match c {
                    '~' => self.path.push_str("~0"),
                    '/' => self.path.push_str("~1"),
                    c => self.path.push(c),
                }
            }
            self.value(depth)?;
            self.path.truncate(mark);
            self.ws();
            match self.peek() {
                Some(b',') => {
                    self.at += 1;
                    self.ws();
                }
                Some(b'}') => {
                    self.at += 1;
                    return Ok(());
                }
                _ => return Err(self.err("no `,` or `}` after an object's member")),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<(), NotJson> {
        if depth > MAX_DEPTH {
            return Err(self.err("nested deeper than 128"));
        }
        self.at += 1;
        self.ws();
        if self.peek() == Some(b']') {
            self.at += 1;
            return Ok(());
        }
        let mut index = 0u64;
        loop {
            let mark = self.path.len();
            self.path.push('/');
            self.path.push_str(&index.to_string());
            self.value(depth)?;
            self.path.truncate(mark);
            index += 1;
            self.ws();
            match self.peek() {
                Some(b',') => {
                    self.at += 1;
                    self.ws();
                }
                Some(b']') => {
                    self.at += 1;
                    return Ok(());
                }
                _ => return Err(self.err("no `,` or `]` after an array's element")),
            }
        }
    }

    fn literal(&mut self, word: &'static str) -> Result<(), NotJson> {
        if self.bytes[self.at..].starts_with(word.as_bytes()) {
            self.at += word.len();
            Ok(())
        } else {
            Err(self.err("not a JSON value"))
        }
    }

    fn digits(&mut self) -> usize {
        let from = self.at;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.at += 1;
        }
        self.at - from
    }

    fn number(&mut self) -> Result<(), NotJson> {
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        match self.peek() {
            Some(b'0') => self.at += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(self.err("a number without digits")),
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            if self.digits() == 0 {
                return Err(self.err("no digit after a number's `.`"));
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.at += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.at += 1;
            }
            if self.digits() == 0 {
                return Err(self.err("no digit in a number's exponent"));
            }
        }
        Ok(())
    }

    /// Four hex digits at `at`.
    fn hex4(&self, at: usize) -> Result<u32, NotJson> {
        let bad = || NotJson {
            at,
            what: "a `\\u` escape without four hex digits",
        };
        let digits = self.text.get(at..at + 4).ok_or_else(bad)?;
        if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        u32::from_str_radix(digits, 16).map_err(|_| bad())
    }

    /// The string at `at` (its opening quote): the span of its text
    /// between the quotes, and what it says (escapes read).
    fn string(&mut self) -> Result<(Range<usize>, Cow<'a, str>), NotJson> {
        let start = self.at + 1;
        let mut i = start;
        // Escapes make it owned; the text between them is copied as is
        // (each piece ends at an ASCII byte: a character boundary).
        let mut owned: Option<String> = None;
        let mut run = start;
        let piece = |s: &Self, from: usize, to: usize| {
            s.text.get(from..to).ok_or(NotJson {
                at: from,
                what: "not UTF-8",
            })
        };
        loop {
            let Some(&b) = self.bytes.get(i) else {
                self.at = i;
                return Err(self.err("a string without its closing quote"));
            };
            match b {
                b'"' => break,
                b'\\' => {
                    let mut o = owned.take().unwrap_or_default();
                    o.push_str(piece(self, run, i)?);
                    let c = match self.bytes.get(i + 1) {
                        Some(b'"') => '"',
                        Some(b'\\') => '\\',
                        Some(b'/') => '/',
                        Some(b'b') => '\u{8}',
                        Some(b'f') => '\u{c}',
                        Some(b'n') => '\n',
                        Some(b'r') => '\r',
                        Some(b't') => '\t',
                        Some(b'u') => {
                            let hi = self.hex4(i + 2)?;
                            let code = if (0xd800..0xdc00).contains(&hi) {
                                if self.bytes.get(i + 6..i + 8) != Some(b"\\u") {
                                    return Err(NotJson {
                                        at: i,
                                        what: "a lone surrogate in a `\\u` escape",
                                    });
                                }
                                let lo = self.hex4(i + 8)?;
                                if !(0xdc00..0xe000).contains(&lo) {
                                    return Err(NotJson {
                                        at: i,
                                        what: "a lone surrogate in a `\\u` escape",
                                    });
                                }
                                i += 6;
                                0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00)
                            } else {
                                hi
                            };
                            i += 4;
                            char::from_u32(code).ok_or(NotJson {
                                at: i,
                                what: "a lone surrogate in a `\\u` escape",
                            })?
                        }
                        _ => {
                            return Err(NotJson {
                                at: i,
                                what: "an escape JSON does not have",
                            })
                        }
                    };
                    o.push(c);
                    owned = Some(o);
                    i += 2;
                    run = i;
                }
                0..=0x1f => {
                    return Err(NotJson {
                        at: i,
                        what: "a control character in a string",
                    })
                }
                _ => i += 1,
            }
        }
        let content = match owned {
            Some(mut o) => {
                o.push_str(piece(self, run, i)?);
                Cow::Owned(o)
            }
            None => Cow::Borrowed(piece(self, start, i)?),
        };
        self.at = i + 1;
        Ok((start..i, content))
    }

    /// Keeps the string value `content` (at `span`) if it holds a field.
    fn field(&mut self, span: Range<usize>, content: &str) {
        if let Some(bytes) = ciphertext_of(content) {
            self.found.push(Found {
                path: if self.path.is_empty() {
                    "/".to_owned()
                } else {
                    self.path.clone()
                },
                span,
                bytes,
            });
        }
    }
}

/// The ciphertext a field's text holds: canonical base64 of more than
/// the version byte and a key id, the version byte first.
fn ciphertext_of(content: &str) -> Option<Vec<u8>> {
    let c = content.as_bytes();
    // base64 of 0x01 begins `A`, then one of `Q`-`Z`, `a`-`f`; six bytes
    // or more are eight characters or more.
    if c.len() < 8 || !c.len().is_multiple_of(4) || c[0] != b'A' {
        return None;
    }
    if !matches!(c[1], b'Q'..=b'Z' | b'a'..=b'f') {
        return None;
    }
    let bytes = base64::engine::general_purpose::STANDARD.decode(c).ok()?;
    tombstone_crypt::format::Header::parse(&bytes)?;
    (bytes.len() > tombstone_crypt::format::HEADER_LEN).then_some(bytes)
}

/// `text` with each span replaced: the spans in the order of the text,
/// none inside another.
pub(crate) fn splice(text: &[u8], with: &[(Range<usize>, String)]) -> Zeroizing<Vec<u8>> {
    let grown: usize = with.iter().map(|(_, s)| s.len()).sum();
    let mut out = Zeroizing::new(Vec::with_capacity(text.len() + grown));
    let mut at = 0;
    for (span, s) in with {
        out.extend_from_slice(&text[at..span.start]);
        out.extend_from_slice(s.as_bytes());
        at = span.end;
    }
    out.extend_from_slice(&text[at..]);
    out
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(b: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(b)
    }

    fn ct(id: u32, len: usize) -> Vec<u8> {
        let mut v = vec![1];
        v.extend_from_slice(&id.to_be_bytes());
        v.resize(len, 0xab);
        v
    }

    fn paths(text: &str) -> Vec<String> {
        find(text.as_bytes())
            .unwrap()
            .into_iter()
            .map(|f| f.path)
            .collect()
    }

    #[test]
    fn paths_spans_and_escapes() {
        let a = b64(&ct(7, 40));
        let text = format!(
            "{{ \"a~b/c\" : \"{a}\", \"list\":[1, \"x\", \"{a}\" ,{{\"\":\"{a}\"}}],\n\t\"n\":null,\"e\":\"\\u00e9{a}\"}}"
        );
        let found = find(text.as_bytes()).unwrap();
        let p: Vec<&str> = found.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(p, ["/a~0b~1c", "/list/2", "/list/3/"]);
        for f in &found {
            assert_eq!(&text[f.span.clone()], a);
            assert_eq!(f.bytes, ct(7, 40));
            assert_eq!(f.key_id(), 7);
        }
        // The record itself, and an escaped `/` inside the base64.
        assert_eq!(paths(&format!("\"{a}\"")), ["/"]);
        let slashed = b64(&[1, 0, 0, 0, 9, 0xff, 0xff, 0xff]);
        assert!(slashed.contains('/'));
        let escaped = slashed.replace('/', "\\/");
        let t = format!("{{\"k\": \"{escaped}\"}}");
        let f = &find(t.as_bytes()).unwrap()[0];
        assert_eq!(&t[f.span.clone()], escaped);
        assert_eq!(f.key_id(), 9);
        // Duplicate keys: both.
        assert_eq!(
            paths(&format!("{{\"k\":\"{a}\",\"k\":\"{a}\"}}")),
            ["/k", "/k"]
        );
        // Not fields: short, not canonical, not 0x01, a key.
        for s in ["AQAAAA==", "AQAAAAB=", &b64(&[2; 40]), &a[..a.len() - 1]] {
            assert!(paths(&format!("[\"{s}\"]")).is_empty(), "{s}");
        }
        assert!(paths(&format!("{{\"{a}\":1}}")).is_empty());
    }

    /// The paths and ciphertexts of a value's fields, walked in the
    /// value (the reference for [`find`], which walks the text).
    fn walk(v: &serde_json::Value, path: &mut String, out: &mut Vec<(String, Vec<u8>)>) {
        match v {
            serde_json::Value::String(s) => {
                if let Some(b) = ciphertext_of(s) {
                    let p = if path.is_empty() { "/" } else { path };
                    out.push((p.to_owned(), b));
                }
            }
            serde_json::Value::Array(items) => {
                for (i, x) in items.iter().enumerate() {
                    let mark = path.len();
                    path.push_str(&format!("/{i}"));
                    walk(x, path, out);
                    path.truncate(mark);
                }
            }
            serde_json::Value::Object(map) => {
                for (k, x) in map {
                    let mark = path.len();
                    path.push('/');
                    path.push_str(&k.replace('~', "~0").replace('/', "~1"));
                    walk(x, path, out);
                    path.truncate(mark);
                }
            }
            _ => {}
        }
    }

    fn json_value() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        use serde_json::Value;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            (-1e9f64..1e9).prop_map(Value::from),
            "[a-zA-Z0-9 ~/\"\\\\\u{e9}\u{1F600}\n]{0,12}".prop_map(Value::String),
            proptest::collection::vec(any::<u8>(), 6..60).prop_map(|mut b| {
                b[0] = 1;
                Value::String(b64(&b))
            }),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                proptest::collection::btree_map("[a-z~/\"]{0,4}", inner, 0..8)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        /// The text walk finds what a walk of the parsed value finds, in
        /// the same order, each span the field's text; a splice of every
        /// span with its own text gives the text back.
        #[test]
        fn the_text_walk_agrees_with_serde_json(v in json_value(), pretty: bool) {
            let text = if pretty {
                serde_json::to_string_pretty(&v).unwrap()
            } else {
                serde_json::to_string(&v).unwrap()
            };
            let found = find(text.as_bytes()).unwrap();
            let mut want = Vec::new();
            walk(&v, &mut String::new(), &mut want);
            let got: Vec<(String, Vec<u8>)> =
                found.iter().map(|f| (f.path.clone(), f.bytes.clone())).collect();
            proptest::prop_assert_eq!(&got, &want);
            for f in &found {
                proptest::prop_assert_eq!(&text[f.span.clone()], b64(&f.bytes));
            }
            let same: Vec<(Range<usize>, String)> = found
                .iter()
                .map(|f| (f.span.clone(), text[f.span.clone()].to_owned()))
                .collect();
            proptest::prop_assert_eq!(&splice(text.as_bytes(), &same)[..], text.as_bytes());
        }
    }

    #[test]
    fn only_json_is_read() {
        for bad in [
            "",
            " ",
            "{",
            "{\"a\"}",
            "{\"a\":1,}",
            "[1,]",
            "[01]",
            "[1.]",
            "[1e]",
            "[-]",
            "[\"\\x\"]",
            "[\"\\ud800\"]",
            "[\"\\udc00\"]",
            "[\"a\nb\"]",
            "{} {}",
            "tru",
            "nul",
            "[1 2]",
            "{1:2}",
            "\"abc",
        ] {
            assert!(find(bad.as_bytes()).is_err(), "{bad:?}");
            assert!(
                serde_json::from_str::<serde_json::Value>(bad).is_err(),
                "serde_json reads {bad:?}"
            );
        }
        assert!(find(&[b'"', 0xff, b'"']).is_err());
        for good in [
            "0",
            "-0.5e+3",
            "[]",
            "{}",
            " [ [ ] , { } ] ",
            "\"\\ud83d\\ude00 \\\" \\\\ \\/\"",
            "true",
            "[null,false]",
        ] {
            assert!(find(good.as_bytes()).is_ok(), "{good:?}");
        }
        let deep = format!("{}{}", "[".repeat(128), "]".repeat(128));
        assert!(find(deep.as_bytes()).is_ok());
        let deeper = format!("{}{}", "[".repeat(129), "]".repeat(129));
        assert!(find(deeper.as_bytes()).is_err());
        // Hostile depth: an error, not a stack overflow.
        assert!(find("[".repeat(1 << 20).as_bytes()).is_err());
    }

    #[test]
    fn a_rewrite_changes_the_old_fields_strings_only() {
        let old = Keyset::generate();
        let mut keys = FieldKeys {
            randomized: old.clone(),
            deterministic: None,
            aad: AadPolicy::TopicAndKey,
            deterministic_aad: AadPolicy::Topic,
        };
        let ctx = Context::new("t").with_key(b"k");
        let enc = |k: &Keyset, pt: &[u8], path: &str| {
            b64(&k
                .encrypt(
                    pt,
                    &field::associated_data(&ctx, AadPolicy::TopicAndKey, path).unwrap(),
                )
                .unwrap())
        };
        let a = enc(&old, b"secret-a", "/a");
        let short = b64(&ct(5, 8));
        let text = format!("{{\n  \"a\" : \"{a}\",\n  \"s\": \"{short}\", \"b\": null }}");
        keys.randomized.rotate();
        let new_primary = keys.randomized.primary().0;
        let b = enc(&keys.randomized, b"secret-b", "/b");
        let text = text.replace("null", &format!("\"{b}\""));
        let c = check(&keys, text.as_bytes(), &ctx).unwrap();
        assert_eq!(c.state, FieldState::Old);
        assert_eq!(c.key_ids, [old.primary().0, new_primary]);
        let out = rewrite(&keys, text.as_bytes(), &ctx, &ctx, false).unwrap();
        let out = String::from_utf8(out.to_vec()).unwrap();
        let found = find(out.as_bytes()).unwrap();
        let ids: Vec<(&str, u32)> = found.iter().map(|f| (&f.path[..], f.key_id())).collect();
        assert_eq!(ids, [("/a", new_primary), ("/s", 5), ("/b", new_primary)]);
        // Only /a's string changed; the short string and /b (already
        // current) are the same bytes.
        assert_eq!(
            out.replace(&out[found[0].span.clone()], ""),
            text.replace(&a, "")
        );
        assert_eq!(&out[found[1].span.clone()], short);
        assert_eq!(&out[found[2].span.clone()], b);
        assert_eq!(
            check(&keys, out.as_bytes(), &ctx).unwrap().state,
            FieldState::Current
        );
        // Moved: /a's ciphertext at /b does not authenticate. It is a
        // finding for /b alone: /a, under the old key, is still rewritten,
        // and /b's string is left as it is.
        let moved = text.replace(&b, &a);
        let c = check(&keys, moved.as_bytes(), &ctx).unwrap();
        assert_eq!(c.state, FieldState::OldAndBad);
        assert_eq!(c.bad, [("/b".to_owned(), old.primary().0)]);
        assert_eq!(c.key_ids, [old.primary().0]);
        let out_moved = rewrite(&keys, moved.as_bytes(), &ctx, &ctx, false).unwrap();
        let out_moved = String::from_utf8(out_moved.to_vec()).unwrap();
        let found = find(out_moved.as_bytes()).unwrap();
        let ids: Vec<(&str, u32)> = found.iter().map(|f| (&f.path[..], f.key_id())).collect();
        assert_eq!(
            ids,
            [("/a", new_primary), ("/s", 5), ("/b", old.primary().0)]
        );
        assert_eq!(&out_moved[found[2].span.clone()], a, "/b as it was");
        let c = check(&keys, out_moved.as_bytes(), &ctx).unwrap();
        assert_eq!(c.state, FieldState::Bad);
        assert_eq!(c.bad, [("/b".to_owned(), old.primary().0)]);
        // Another record: nothing authenticates.
        let other = Context::new("t").with_key(b"k2");
        assert_eq!(
            check(&keys, text.as_bytes(), &other).unwrap().state,
            FieldState::Bad
        );
        // A long string under a key the keyset lacks is a field that does
        // not authenticate; a short one is a plain string.
        let unknown = format!("{{\"x\":\"{}\",\"y\":\"{short}\"}}", b64(&ct(99, 60)));
        let c = check(&keys, unknown.as_bytes(), &ctx).unwrap();
        assert_eq!(c.bad, [("/x".to_owned(), 99)]);
        assert_eq!(
            check(&keys, b"{\"x\": 1", &ctx).unwrap().state,
            FieldState::NotJson
        );
        // Bound to another topic: every field again, current ones too.
        let to = Context::new("t2").with_key(b"k");
        let moved = rewrite(&keys, out.as_bytes(), &ctx, &to, true).unwrap();
        assert_eq!(
            check(&keys, &moved, &to).unwrap().state,
            FieldState::Current
        );
        let bad = check(&keys, &moved, &ctx).unwrap().bad;
        let bad: Vec<&str> = bad.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(bad, ["/a", "/b"], "bound to the new topic only");
    }

    #[test]
    fn deterministic_fields_are_rewritten_deterministically() {
        let mut siv = Keyset::generate_with(tombstone_crypt::KeyTemplate::aes256_siv()).unwrap();
        let keys = |siv: &Keyset| FieldKeys {
            randomized: Keyset::generate(),
            deterministic: Some(siv.clone()),
            aad: AadPolicy::TopicAndKey,
            deterministic_aad: AadPolicy::Topic,
        };
        let ctx = Context::new("t").with_key(b"k");
        let ad = field::associated_data(&ctx, AadPolicy::Topic, "/email").unwrap();
        let old = b64(&siv.encrypt_deterministically(b"a@b", &ad).unwrap());
        siv.rotate();
        let text = format!("{{\"email\":\"{old}\"}}");
        let out = rewrite(&keys(&siv), text.as_bytes(), &ctx, &ctx, false).unwrap();
        let want = b64(&siv.encrypt_deterministically(b"a@b", &ad).unwrap());
        assert_eq!(
            String::from_utf8(out.to_vec()).unwrap(),
            format!("{{\"email\":\"{want}\"}}")
        );
    }

    /// A plain string that happens to be canonical base64 of `0x01 | ...`,
    /// long enough for a ciphertext, under a key id no keyset holds (a
    /// token, say): a finding for that string alone, left as it is; the
    /// record's fields under an older key are still written again.
    #[test]
    fn a_plain_string_that_reads_as_a_field_is_a_finding_for_itself_only() {
        let mut keys = FieldKeys {
            randomized: Keyset::generate(),
            deterministic: None,
            aad: AadPolicy::TopicAndKey,
            deterministic_aad: AadPolicy::Topic,
        };
        let ctx = Context::new("t").with_key(b"k");
        let old = keys.randomized.primary().0;
        let enc = |k: &Keyset, pt: &[u8], path: &str| {
            b64(&k
                .encrypt(
                    pt,
                    &field::associated_data(&ctx, AadPolicy::TopicAndKey, path).unwrap(),
                )
                .unwrap())
        };
        let card = enc(&keys.randomized, b"4111", "/card");
        let token = b64(&ct(0x0bad_f00d, 48));
        assert!(token.starts_with("AQ"), "{token}");
        let text = format!("{{\"token\":\"{token}\",\"card\":\"{card}\",\"n\":1}}");
        keys.randomized.rotate();
        let new = keys.randomized.primary().0;
        let c = check(&keys, text.as_bytes(), &ctx).unwrap();
        assert_eq!(c.state, FieldState::OldAndBad);
        assert!(c.state.old() && c.state.bad());
        assert_eq!(c.bad, [("/token".to_owned(), 0x0bad_f00d)]);
        assert_eq!(c.key_ids, [old]);
        let out = rewrite(&keys, text.as_bytes(), &ctx, &ctx, false).unwrap();
        let out = String::from_utf8(out.to_vec()).unwrap();
        let found = find(out.as_bytes()).unwrap();
        assert_eq!(&out[found[0].span.clone()], token, "the token as it was");
        assert_eq!((found[1].path.as_str(), found[1].key_id()), ("/card", new));
        assert_eq!(
            out.replace(&out[found[1].span.clone()], ""),
            text.replace(&card, ""),
            "only the card's string changed"
        );
        let ad = field::associated_data(&ctx, AadPolicy::TopicAndKey, "/card").unwrap();
        assert_eq!(
            keys.randomized.decrypt(&found[1].bytes, &ad).unwrap(),
            b"4111"
        );
        // Written again: the token is still the finding, and nothing is old.
        let c = check(&keys, out.as_bytes(), &ctx).unwrap();
        assert_eq!(c.state, FieldState::Bad);
        assert!(!c.state.old());
        assert_eq!(
            &rewrite(&keys, out.as_bytes(), &ctx, &ctx, false).unwrap()[..],
            out.as_bytes(),
            "a second rewrite changes nothing"
        );
    }
}
