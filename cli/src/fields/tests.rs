//! Fields found, checked and written again in a record's text.
use std::ops::Range;

use super::scan::ciphertext_of;
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
