//! Hostile bytes read as records with encrypted fields
//! (`tombstone_crypt::field`), in JSON and in bincode, with keys and with
//! none (sealed).
//!
//! The first byte picks the format (bit 0: JSON or bincode), the reader
//! (bit 1: with keys or sealed), the input (bit 2: the rest as it is, or a
//! valid record built from the rest's values, written with keys and then
//! set at one byte) and the context (bits 3 and 4).
//!
//! Nothing may panic; an error is a `Field` or `Codec` error, a sealed
//! reader's never a cipher's, and never shows a field's plaintext. A record
//! read with keys holds every field open, writes and reads back to the same
//! value, writes its deterministic field as the same ciphertext, and reads
//! sealed too. A record read sealed holds every field sealed (and no plain
//! `with` field, which cannot be kept sealed), each field the bytes the
//! input holds (in JSON: its base64 text, canonical); written back sealed it
//! reads back the same, every field the same text or bytes as the input.
//!
//! A built record: its bytes never hold a plaintext; it reads back with
//! keys; read sealed and written back it is the same bytes. Set at one
//! byte: a byte inside an encrypted field's text or bytes makes the record
//! fail to read with keys; elsewhere it may read (a digit of the id, a
//! cleartext string), and then every encrypted field it holds is the field
//! written (an optional one may read as absent: the record's cleartext
//! structure is not authenticated, so a field's renamed key drops it).
#![no_main]

use std::collections::BTreeMap;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use serde::{Deserialize, Serialize};
use tombstone_crypt::field::{Deterministic, Encrypted, FieldEncrypting};
use tombstone_crypt::{Bincode, Context, Deserializer as _, Error, Json, Serializer as _};
use tombstone_crypt_fuzz::{context, keyset, siv_keyset};

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Record {
    id: u64,
    ssn: Encrypted<String>,
    phone: Option<Encrypted<String>>,
    inner: Inner,
    scores: Vec<Encrypted<u64>>,
    tags: BTreeMap<String, Encrypted<String>>,
    email: Deterministic<String>,
    kind: Kind,
    login: Option<Login>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Inner {
    secret: Encrypted<String>,
    city: String,
    zip: Option<Encrypted<String>>,
    /// Not a string: its plaintext is JSON text.
    pin: Encrypted<Vec<u8>>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
enum Kind {
    Plain,
    Secret { code: Encrypted<String>, level: u8 },
    Token(Encrypted<String>),
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Login {
    user: String,
    #[serde(with = "tombstone_crypt::field::encrypted")]
    hash: Vec<u8>,
}

/// [`Record`]'s shape with every encrypted field as what the format holds:
/// its text (`String`, JSON) or its bytes (`Vec<u8>`, bincode, which writes
/// bytes and a `Vec<u8>` alike). Read by the plain codec, no field layer.
#[derive(Deserialize, Debug, PartialEq)]
struct Shadow<F> {
    id: u64,
    ssn: F,
    phone: Option<F>,
    inner: ShadowInner<F>,
    scores: Vec<F>,
    tags: BTreeMap<String, F>,
    email: F,
    kind: ShadowKind<F>,
    login: Option<ShadowLogin<F>>,
}

#[derive(Deserialize, Debug, PartialEq)]
struct ShadowInner<F> {
    secret: F,
    city: String,
    zip: Option<F>,
    pin: F,
}

#[derive(Deserialize, Debug, PartialEq)]
enum ShadowKind<F> {
    Plain,
    Secret { code: F, level: u8 },
    Token(F),
}

#[derive(Deserialize, Debug, PartialEq)]
struct ShadowLogin<F> {
    user: String,
    hash: F,
}

impl<F> Shadow<F> {
    /// Every encrypted field, in the order of [`sealed_fields`], then the
    /// login's hash.
    fn fields(&self) -> Vec<&F> {
        let mut out = vec![&self.ssn];
        out.extend(&self.phone);
        out.push(&self.inner.secret);
        out.extend(&self.inner.zip);
        out.push(&self.inner.pin);
        out.extend(&self.scores);
        out.extend(self.tags.values());
        out.push(&self.email);
        match &self.kind {
            ShadowKind::Plain => {}
            ShadowKind::Secret { code, .. } | ShadowKind::Token(code) => out.push(code),
        }
        if let Some(login) = &self.login {
            out.push(&login.hash);
        }
        out
    }
}

/// A record as the plain codec of its format sees it.
#[derive(Debug, PartialEq)]
enum Seen {
    Json(Shadow<String>),
    Bincode(Shadow<Vec<u8>>),
}

impl Seen {
    /// Every encrypted field as the input holds it (text or bytes).
    fn fields(&self) -> Vec<&[u8]> {
        match self {
            Seen::Json(s) => s.fields().into_iter().map(|f| f.as_bytes()).collect(),
            Seen::Bincode(s) => s.fields().into_iter().map(|f| &f[..]).collect(),
        }
    }

    fn email(&self) -> &[u8] {
        match self {
            Seen::Json(s) => s.email.as_bytes(),
            Seen::Bincode(s) => &s.email,
        }
    }
}

/// Every encrypted field's sealed bytes (`None`: open), in one order; the
/// login's plain field is not among them.
fn sealed_fields(r: &Record) -> Vec<Option<&[u8]>> {
    fn s<T>(e: &Encrypted<T>) -> Option<&[u8]> {
        e.sealed().map(|s| s.as_bytes())
    }
    let mut out = vec![s(&r.ssn)];
    out.extend(r.phone.iter().map(s));
    out.push(s(&r.inner.secret));
    out.extend(r.inner.zip.iter().map(s));
    out.push(s(&r.inner.pin));
    out.extend(r.scores.iter().map(s));
    out.extend(r.tags.values().map(s));
    out.push(r.email.sealed().map(|s| s.as_bytes()));
    match &r.kind {
        Kind::Plain => {}
        Kind::Secret { code, .. } | Kind::Token(code) => out.push(s(code)),
    }
    out
}

#[derive(Clone, Copy, Debug)]
enum Format {
    Json,
    Bincode,
}

impl Format {
    /// How the format holds a field's ciphertext.
    fn wire(self, ct: &[u8]) -> Vec<u8> {
        match self {
            Format::Json => base64(ct).into_bytes(),
            Format::Bincode => ct.to_vec(),
        }
    }
}

struct Codecs {
    json: FieldEncrypting<Json<Record>>,
    bincode: FieldEncrypting<Bincode<Record>>,
    sealed_json: FieldEncrypting<Json<Record>>,
    sealed_bincode: FieldEncrypting<Bincode<Record>>,
}

/// The codecs, over the fixed keysets of the fuzz crate.
fn codecs() -> &'static Codecs {
    static CODECS: OnceLock<Codecs> = OnceLock::new();
    CODECS.get_or_init(|| Codecs {
        json: FieldEncrypting::new(Json::new(), keyset().clone())
            .with_deterministic(siv_keyset().clone()),
        bincode: FieldEncrypting::new(Bincode::new(), keyset().clone())
            .with_deterministic(siv_keyset().clone()),
        sealed_json: FieldEncrypting::sealed(Json::new()),
        sealed_bincode: FieldEncrypting::sealed(Bincode::new()),
    })
}

fn write(format: Format, keyed: bool, ctx: &Context<'_>, r: &Record) -> Result<Vec<u8>, Error> {
    let c = codecs();
    let out = match (format, keyed) {
        (Format::Json, true) => c.json.serialize(ctx, Some(r)),
        (Format::Bincode, true) => c.bincode.serialize(ctx, Some(r)),
        (Format::Json, false) => c.sealed_json.serialize(ctx, Some(r)),
        (Format::Bincode, false) => c.sealed_bincode.serialize(ctx, Some(r)),
    }?;
    Ok(out.expect("a present record is present bytes"))
}

fn read_opt(
    format: Format,
    keyed: bool,
    ctx: &Context<'_>,
    b: Option<&[u8]>,
) -> Result<Option<Record>, Error> {
    let c = codecs();
    match (format, keyed) {
        (Format::Json, true) => c.json.deserialize(ctx, b),
        (Format::Bincode, true) => c.bincode.deserialize(ctx, b),
        (Format::Json, false) => c.sealed_json.deserialize(ctx, b),
        (Format::Bincode, false) => c.sealed_bincode.deserialize(ctx, b),
    }
}

fn read(format: Format, keyed: bool, ctx: &Context<'_>, b: &[u8]) -> Result<Record, Error> {
    Ok(read_opt(format, keyed, ctx, Some(b))?.expect("present bytes are a present record"))
}

/// The record as the plain codec reads it.
fn shadow(format: Format, ctx: &Context<'_>, b: &[u8]) -> Result<Seen, Error> {
    let out = match format {
        Format::Json => Json::<Shadow<String>>::new()
            .deserialize(ctx, Some(b))?
            .map(Seen::Json),
        Format::Bincode => Bincode::<Shadow<Vec<u8>>>::new()
            .deserialize(ctx, Some(b))?
            .map(Seen::Bincode),
    };
    Ok(out.expect("present bytes are a present record"))
}

/// Standard base64, padded: what a JSON record holds for a field.
fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let at = |i: usize| u32::from(c.get(i).copied().unwrap_or(0));
        let n = (at(0) << 16) | (at(1) << 8) | at(2);
        for i in 0..4 {
            if i <= c.len() {
                out.push(char::from(ABC[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Every string plaintext of a built record starts with it; `!` is not
/// base64 and no cleartext string of a built record holds it.
const MARKER: &str = "s3cr3t!";

/// The characters of a built record's cleartext strings (`~` and `/` are
/// escaped in a field's path, `"` and `\` in JSON).
const CLEAR: [char; 10] = ['a', 'z', '0', '~', '/', ' ', 'é', '"', '\\', '😀'];

/// The input's values, as a built record takes them (0 when used up).
struct Values<'a>(&'a [u8]);

impl Values<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    fn take(&mut self, max: usize) -> &[u8] {
        let n = (usize::from(self.byte()) % (max + 1)).min(self.0.len());
        let (taken, rest) = self.0.split_at(n);
        self.0 = rest;
        taken
    }

    fn number(&mut self) -> u64 {
        let shift = self.byte() % 64;
        u64::from(self.byte()) << shift
    }

    fn secret(&mut self) -> String {
        format!("{MARKER}{}", String::from_utf8_lossy(self.take(24)))
    }

    fn clear(&mut self) -> String {
        self.take(8)
            .iter()
            .map(|b| CLEAR[usize::from(*b) % CLEAR.len()])
            .collect()
    }
}

fn build(data: &[u8]) -> Record {
    let mut v = Values(data);
    let flags = v.byte();
    let id = v.number();
    let ssn = Encrypted::new(v.secret());
    let phone = (flags & 1 != 0).then(|| Encrypted::new(v.secret()));
    let inner = Inner {
        secret: Encrypted::new(v.secret()),
        city: v.clear(),
        zip: (flags & 2 != 0).then(|| Encrypted::new(v.secret())),
        pin: Encrypted::new(v.take(6).to_vec()),
    };
    let scores = (0..v.byte() % 4)
        .map(|_| Encrypted::new(v.number()))
        .collect();
    let tags = (0..v.byte() % 3)
        .map(|_| (v.clear(), Encrypted::new(v.secret())))
        .collect();
    let email = Deterministic::new(v.secret());
    let kind = match (flags >> 2) & 3 {
        0 => Kind::Plain,
        1 => Kind::Secret {
            code: Encrypted::new(v.secret()),
            level: v.byte(),
        },
        _ => Kind::Token(Encrypted::new(v.secret())),
    };
    let login = (flags & 16 != 0).then(|| Login {
        user: v.clear(),
        hash: [MARKER.as_bytes(), v.take(16)].concat(),
    });
    Record {
        id,
        ssn,
        phone,
        inner,
        scores,
        tags,
        email,
        kind,
        login,
    }
}

/// What a built record's reading must give.
struct Expect<'a> {
    original: &'a Record,
    /// A byte was set to another value.
    mutated: bool,
    /// That byte is inside an encrypted field's text or bytes.
    in_field: bool,
}

fn check_error(e: &Error, keyed: bool, input: &[u8], built: bool) {
    let text = format!("{e} {e:?}");
    // A built record's plaintexts all hold the marker; raw input may hold
    // it itself (a map key in a field's path), literally or escaped.
    if built || !(find(input, b"s3cr3t").is_some() || input.contains(&b'\\')) {
        assert!(!text.contains(MARKER), "a plaintext in an error: {text}");
    }
    match e {
        Error::Codec { .. } => {}
        Error::Field { cause, .. } => {
            let cipher = matches!(
                **cause,
                Error::Decryption | Error::UnknownKeyId(_) | Error::KeyDisabled(_)
            );
            assert!(keyed || !cipher, "a sealed reader opened a field: {e:?}");
            assert!(
                cipher
                    || matches!(
                        **cause,
                        Error::Truncated { .. } | Error::UnsupportedVersion | Error::Codec { .. }
                    ),
                "unexpected cause of a field error: {e:?}"
            );
        }
        e => panic!("unexpected error reading a record: {e:?}"),
    }
}

/// Every encrypted field of `r`, read from a mutated record, is the field
/// `o` was written with (an optional one may be absent).
fn same_fields(r: &Record, o: &Record) {
    let other = "a mutated record read a field as another value";
    assert_eq!(r.ssn, o.ssn, "{other}");
    assert_eq!(r.inner.secret, o.inner.secret, "{other}");
    assert_eq!(r.inner.pin, o.inner.pin, "{other}");
    assert_eq!(r.email, o.email, "{other}");
    for (got, want) in [(&r.phone, &o.phone), (&r.inner.zip, &o.inner.zip)] {
        if got.is_some() {
            assert_eq!(got, want, "{other}");
        }
    }
    for (i, v) in r.scores.iter().enumerate() {
        assert_eq!(Some(v), o.scores.get(i), "{other}");
    }
    for (k, v) in &r.tags {
        assert_eq!(Some(v), o.tags.get(k), "{other}");
    }
    match (&r.kind, &o.kind) {
        (Kind::Plain, _) => {}
        (Kind::Secret { code, .. }, Kind::Secret { code: want, .. }) => {
            assert_eq!(code, want, "{other}")
        }
        (Kind::Token(got), Kind::Token(want)) => assert_eq!(got, want, "{other}"),
        (got, want) => panic!("{other}: {got:?} read from {want:?}"),
    }
    if let Some(login) = &r.login {
        let want = o.login.as_ref().map(|l| &l.hash);
        assert_eq!(Some(&login.hash), want, "{other}");
    }
}

fn read_leg(
    format: Format,
    keyed: bool,
    ctx: &Context<'_>,
    input: &[u8],
    expect: Option<Expect<'_>>,
) {
    match read(format, keyed, ctx, input) {
        Err(e) => check_error(&e, keyed, input, expect.is_some()),
        Ok(r) if keyed => {
            if let Some(x) = &expect {
                assert!(
                    !x.in_field,
                    "a record set at a byte of an encrypted field read with keys"
                );
                if x.mutated {
                    same_fields(&r, x.original);
                } else {
                    assert_eq!(&r, x.original, "a written record reads back");
                }
            }
            assert!(
                sealed_fields(&r).iter().all(Option::is_none),
                "a field read with keys stayed sealed"
            );
            let seen = shadow(format, ctx, input).expect("a record read with keys is its shape");
            let again = write(format, true, ctx, &r).expect("a record read with keys writes");
            assert_eq!(
                read(format, true, ctx, &again).as_ref(),
                Ok(&r),
                "round trip"
            );
            let seen_again = shadow(format, ctx, &again).expect("a written record is its shape");
            assert_eq!(
                seen_again.email(),
                seen.email(),
                "a deterministic field written again is another ciphertext"
            );
            if r.login.is_none() {
                if let Err(e) = read(format, false, ctx, input) {
                    panic!("a record read with keys does not read sealed: {e:?}");
                }
            }
        }
        Ok(r) => {
            assert!(r.login.is_none(), "a plain `with` field was read sealed");
            let sealed = sealed_fields(&r);
            assert!(
                sealed.iter().all(Option::is_some),
                "a field read with no keys is open"
            );
            let seen = shadow(format, ctx, input).expect("a record read sealed is its shape");
            let held: Vec<Vec<u8>> = sealed.iter().flatten().map(|ct| format.wire(ct)).collect();
            assert_eq!(
                held,
                seen.fields(),
                "a sealed field is not the input's (canonical) field"
            );
            let again = write(format, false, ctx, &r).expect("a record read sealed writes sealed");
            let back = read(format, false, ctx, &again).expect("a record written sealed reads");
            assert_eq!(back, r, "sealed round trip");
            let seen_again = shadow(format, ctx, &again).expect("a written record is its shape");
            assert_eq!(seen_again, seen, "sealed fields written back changed");
        }
    }
}

fn built_leg(format: Format, keyed: bool, ctx: &Context<'_>, rest: &[u8]) {
    let (set, values) = match rest {
        [hi, lo, to, values @ ..] => (Some((u16::from_be_bytes([*hi, *lo]), *to)), values),
        _ => (None, rest),
    };
    let original = build(values);
    let written = write(format, true, ctx, &original).expect("a built record writes");
    assert!(
        find(&written, MARKER.as_bytes()).is_none(),
        "a plaintext in a written record"
    );
    let seen = shadow(format, ctx, &written).expect("a written record is its shape");
    if !keyed && original.login.is_none() {
        let r = read(format, false, ctx, &written).expect("a written record reads sealed");
        let again = write(format, false, ctx, &r).expect("a record read sealed writes sealed");
        assert_eq!(again, written, "a record passed through sealed changed");
    }
    // Where each encrypted field's text (JSON, inside its quotes) or bytes
    // are in the written record.
    let spans: Vec<(usize, usize)> = seen
        .fields()
        .iter()
        .map(|f| {
            let (needle, skip) = match format {
                Format::Json => ([b"\"", *f, b"\""].concat(), 1),
                Format::Bincode => (f.to_vec(), 0),
            };
            let at = find(&written, &needle).expect("a field is in its record") + skip;
            (at, at + f.len())
        })
        .collect();
    let mut bytes = written;
    let (mutated, in_field) = match set {
        Some((at, to)) => {
            let at = usize::from(at) % bytes.len();
            let mutated = bytes[at] != to;
            bytes[at] = to;
            let in_field = mutated && spans.iter().any(|&(s, e)| s <= at && at < e);
            (mutated, in_field)
        }
        None => (false, false),
    };
    let expect = Expect {
        original: &original,
        mutated,
        in_field,
    };
    read_leg(format, keyed, ctx, &bytes, Some(expect));
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let format = if selector & 1 == 0 {
        Format::Json
    } else {
        Format::Bincode
    };
    let keyed = selector & 2 == 0;
    let ctx = context(selector >> 3);
    assert_eq!(
        read_opt(format, keyed, &ctx, None),
        Ok(None),
        "a tombstone stays one"
    );
    if selector & 4 != 0 {
        built_leg(format, keyed, &ctx, rest);
    } else {
        read_leg(format, keyed, &ctx, rest, None);
    }
});
