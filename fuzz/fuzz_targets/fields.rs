//! Hostile bytes read as records with encrypted fields
//! (`tombstone_crypt::field`), in JSON and in bincode, with keys and with
//! none (sealed).
//!
//! The first byte picks the format, whether the reader holds keys, and
//! whether the rest is taken as it is or first made into a valid record
//! (from the bytes' values), written with keys, and mutated at one
//! byte. Nothing may panic; an error never quotes a field's plaintext;
//! whatever is read with keys writes and reads back to the same value;
//! whatever is read sealed writes back (sealed) to a record that reads
//! sealed the same, every sealed field the same bytes. A mutated record
//! that still reads with keys holds, in every field it reads, the field
//! written (a changed ciphertext never becomes another value; the record's
//! cleartext structure is not authenticated, so a mutated field name can
//! make an optional field read as absent).
#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use serde::{Deserialize, Serialize};
use tombstone_crypt::field::{Deterministic, Encrypted, FieldEncrypting};
use tombstone_crypt::{Bincode, Context, Deserializer as _, Json, Serializer as _};
use tombstone_crypt_fuzz::{keyset, siv_keyset};

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Inner {
    secret: Encrypted<String>,
    city: String,
    zip: Option<Encrypted<String>>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
enum Kind {
    Plain,
    Secret { code: Encrypted<String>, level: u8 },
}

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
}

/// The plaintexts a built record holds: none may appear in an error.
const SECRETS: [&str; 3] = ["s3cr3t-ssn", "s3cr3t-street", "s3cr3t-code"];

fn build(data: &[u8]) -> Record {
    let b = |i: usize| data.get(i).copied().unwrap_or(0);
    let n = usize::from(b(0) % 4);
    Record {
        id: u64::from(b(1)),
        ssn: Encrypted::new(SECRETS[0].to_owned()),
        phone: (b(2) % 2 == 0).then(|| Encrypted::new(String::new())),
        inner: Inner {
            secret: Encrypted::new(SECRETS[1].to_owned()),
            city: "c".repeat(usize::from(b(3) % 4)),
            zip: (b(4) % 2 == 0).then(|| Encrypted::new("69001".to_owned())),
        },
        scores: (0..n)
            .map(|i| Encrypted::new(u64::from(b(5 + i))))
            .collect(),
        tags: (0..usize::from(b(9) % 3))
            .map(|i| (format!("t{i}"), Encrypted::new(format!("v{i}"))))
            .collect(),
        email: Deterministic::new("a@b".to_owned()),
        kind: if b(10) % 2 == 0 {
            Kind::Plain
        } else {
            Kind::Secret {
                code: Encrypted::new(SECRETS[2].to_owned()),
                level: b(11),
            }
        },
    }
}

/// The sealed bytes of every encrypted field of a record read sealed.
fn sealed_fields(r: &Record) -> Vec<Option<Vec<u8>>> {
    let s = |e: &Encrypted<String>| e.sealed().map(|s| s.as_bytes().to_vec());
    let mut out = vec![
        s(&r.ssn),
        r.phone.as_ref().and_then(s),
        s(&r.inner.secret),
        r.inner.zip.as_ref().and_then(s),
        r.email.sealed().map(|s| s.as_bytes().to_vec()),
    ];
    out.extend(
        r.scores
            .iter()
            .map(|e| e.sealed().map(|s| s.as_bytes().to_vec())),
    );
    out.extend(r.tags.values().map(s));
    if let Kind::Secret { code, .. } = &r.kind {
        out.push(s(code));
    }
    out
}

fn check_error(e: &tombstone_crypt::Error) {
    let text = format!("{e} {e:?}");
    for secret in SECRETS {
        assert!(!text.contains(secret), "plaintext in an error: {text}");
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let json = selector & 1 == 0;
    let keyed = selector & 2 == 0;
    let built = selector & 4 != 0;
    let ctx = Context::new("people").with_key(b"p-1");
    let kj = FieldEncrypting::new(Json::<Record>::new(), keyset().clone())
        .with_deterministic(siv_keyset().clone());
    let kb = FieldEncrypting::new(Bincode::<Record>::new(), keyset().clone())
        .with_deterministic(siv_keyset().clone());
    let (sj, sb) = (
        FieldEncrypting::sealed(Json::<Record>::new()),
        FieldEncrypting::sealed(Bincode::<Record>::new()),
    );
    let write = |keys: bool, r: &Record| -> Result<Vec<u8>, tombstone_crypt::Error> {
        let out = match (json, keys) {
            (true, true) => kj.serialize(&ctx, Some(r)),
            (false, true) => kb.serialize(&ctx, Some(r)),
            (true, false) => sj.serialize(&ctx, Some(r)),
            (false, false) => sb.serialize(&ctx, Some(r)),
        }?;
        Ok(out.expect("a present record is present bytes"))
    };
    let read = |keys: bool, b: &[u8]| -> Result<Record, tombstone_crypt::Error> {
        let out = match (json, keys) {
            (true, true) => kj.deserialize(&ctx, Some(b)),
            (false, true) => kb.deserialize(&ctx, Some(b)),
            (true, false) => sj.deserialize(&ctx, Some(b)),
            (false, false) => sb.deserialize(&ctx, Some(b)),
        }?;
        Ok(out.expect("present bytes are a present record"))
    };

    let (bytes, original) = if built {
        let r = build(rest);
        let mut b = write(true, &r).expect("a built record writes");
        assert_eq!(read(true, &b).as_ref(), Ok(&r), "a built record reads back");
        if let [at_hi, at_lo, x, ..] = rest {
            let at = usize::from(u16::from_be_bytes([*at_hi, *at_lo])) % b.len();
            b[at] ^= x | 1;
        }
        (b, Some(r))
    } else {
        (rest.to_vec(), None)
    };

    match read(keyed, &bytes) {
        Err(e) => check_error(&e),
        Ok(r) if keyed => {
            if let Some(original) = &original {
                // A mutation outside the fields (a digit of the id, a
                // field's name, so that an optional field reads as absent)
                // may read; a field that reads is the field written.
                assert_eq!(r.ssn, original.ssn, "a mutated field read as another value");
                assert_eq!(r.inner.secret, original.inner.secret);
                assert_eq!(r.email, original.email);
                for (got, want) in [
                    (&r.phone, &original.phone),
                    (&r.inner.zip, &original.inner.zip),
                ] {
                    if got.is_some() {
                        assert_eq!(got, want, "a mutated field read as another value");
                    }
                }
                for (i, v) in r.scores.iter().enumerate() {
                    assert_eq!(Some(v), original.scores.get(i));
                }
                for (k, v) in &r.tags {
                    assert_eq!(Some(v), original.tags.get(k));
                }
                if let (Kind::Secret { code, .. }, Kind::Secret { code: want, .. }) =
                    (&r.kind, &original.kind)
                {
                    assert_eq!(code, want);
                }
            }
            let again = write(true, &r).expect("a record read with keys writes");
            assert_eq!(read(true, &again).as_ref(), Ok(&r), "round trip");
        }
        Ok(r) => {
            assert!(
                r.ssn.is_sealed() && r.ssn.get().is_none(),
                "no keys, yet opened"
            );
            let again = write(false, &r).expect("a sealed record writes sealed");
            let back = read(false, &again).expect("a sealed record reads back");
            assert_eq!(back, r);
            assert_eq!(sealed_fields(&back), sealed_fields(&r));
        }
    }
});
