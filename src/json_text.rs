//! JSON text helpers below every layer that reads JSON holding key
//! material (the keyset's Tink JSON, KMS answers).

/// Undoes, in place, the JSON escapes inside strings that stand for a
/// printable ASCII character other than `"` and `\` (`\/`, `\u002B`,
/// ...), which base64 strings may come with; the JSON means the same.
/// `serde_json` then borrows such a string from the buffer instead of
/// unescaping it into its scratch buffer (freed unzeroized). Other
/// escapes, and everything outside strings, are left as they are.
pub(crate) fn unescape_printable(buf: &mut Vec<u8>) {
    let hex4 = |s: &[u8]| -> Option<u32> {
        if !s.iter().all(u8::is_ascii_hexdigit) {
            return None;
        }
        u32::from_str_radix(std::str::from_utf8(s).ok()?, 16).ok()
    };
    let printable = |c: &u32| (0x20..0x7f).contains(c) && *c != 0x22 && *c != 0x5c;
    let n = buf.len();
    let (mut r, mut w) = (0, 0);
    let mut in_string = false;
    while r < n {
        let b = buf[r];
        if in_string && b == b'\\' && r + 1 < n {
            let e = buf[r + 1];
            let unescaped = match e {
                b'/' => Some((b'/', 2)),
                b'u' => buf
                    .get(r + 2..r + 6)
                    .and_then(hex4)
                    .filter(printable)
                    .and_then(|c| u8::try_from(c).ok())
                    .map(|c| (c, 6)),
                _ => None,
            };
            match unescaped {
                Some((c, len)) => {
                    buf[w] = c;
                    w += 1;
                    r += len;
                }
                None => {
                    // Another escape, copied as it is (both bytes, so that
                    // `\\` and `\"` are not read again).
                    buf[w] = b;
                    buf[w + 1] = e;
                    w += 2;
                    r += 2;
                }
            }
            continue;
        }
        if b == b'"' {
            in_string = !in_string;
        }
        buf[w] = b;
        w += 1;
        r += 1;
    }
    buf.truncate(w);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// Escapes of printable characters other than `"` and `\` are undone
    /// in strings only; the JSON means the same.
    #[test]
    fn printable_escapes_are_undone() {
        for (input, want) in [
            (r#"{"P":"ab\/cd\u002Bef\u003d="}"#, r#"{"P":"ab/cd+ef=="}"#),
            (r#"{"P":"\\/"}"#, r#"{"P":"\\/"}"#),
            (
                r#"{"P":"\"\u0022\u005C\u005c\u000a\u001F\u007f\u00e9"}"#,
                r#"{"P":"\"\u0022\u005C\u005c\u000a\u001F\u007f\u00e9"}"#,
            ),
            (r#"{"P":"\n\t\r\b\f\\\""}"#, r#"{"P":"\n\t\r\b\f\\\""}"#),
            (r#"{"P":"\u00"}"#, r#"{"P":"\u00"}"#),
            (r#"{"P":"\u00zz"}"#, r#"{"P":"\u00zz"}"#),
            (r#"{"P":"\u0041\u007E\u0020"}"#, r#"{"P":"A~ "}"#),
            (r#"{"a\/b":1} \/ \u0041"#, r#"{"a/b":1} \/ \u0041"#),
            ("\"\\", "\"\\"),
            ("", ""),
        ] {
            let mut buf = input.as_bytes().to_vec();
            unescape_printable(&mut buf);
            assert_eq!(std::str::from_utf8(&buf).unwrap(), want, "{input}");
            if let Ok(v) = serde_json::from_str::<Value>(input) {
                assert_eq!(serde_json::from_slice::<Value>(&buf).unwrap(), v, "{input}");
            }
        }
        // Every character escaped as \uXXXX, or as \/ for /, comes back to
        // the same strings.
        let all: String = (0u32..0x250).filter_map(char::from_u32).collect();
        let mut escaped = String::from("[\"");
        for c in all.chars() {
            if c == '/' {
                escaped.push_str("\\/");
            } else if u32::from(c) < 0x10000 {
                escaped.push_str(&format!("\\u{:04X}", u32::from(c)));
            }
        }
        escaped.push_str("\"]");
        let before: Value = serde_json::from_str(&escaped).unwrap();
        let mut buf = escaped.into_bytes();
        unescape_printable(&mut buf);
        assert_eq!(serde_json::from_slice::<Value>(&buf).unwrap(), before);
        assert_eq!(before[0].as_str().unwrap(), all);
    }
}
