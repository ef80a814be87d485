//! A JSON record's text scanned for strings that hold a field's
//! ciphertext, each named by its JSON Pointer with its byte span; and the
//! text with spans replaced, every other byte as it was.

use std::borrow::Cow;
use std::ops::Range;

use base64::Engine as _;
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
pub(super) const MAX_DEPTH: usize = 128;

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
pub(super) struct Scan<'a> {
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
pub(super) fn ciphertext_of(content: &str) -> Option<Vec<u8>> {
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
