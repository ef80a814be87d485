//! A topic read by the reading rule, for `audit` and the first passes of
//! `repair` and `reencrypt`: each partition to its end (several at once),
//! one small entry per key (never the values), each record classified by
//! the topic's policy ([`classify`], [`scan_partition`]); a keyset under
//! which not one value decrypts is an error (exit 2), not a topic full of
//! findings ([`check_keyset`]).

use std::collections::HashMap;

use indicatif::ProgressBar;
use tombstone_crypt::error::ErrorKind;

use crate::checkpoint::Mark;
use crate::fields::FieldState;
use crate::key_state::{Index, KeyHash, Kind, Seen};
use crate::outcome::{fail, Fail};
use crate::read::{partitions, progress, read_partition, Rec, Setup};
use crate::record::{bound, key_of, value_context, value_failed};
use crate::report::{Audit, Counts};
use crate::run::for_partitions;

/// How a partition read for an index ends.
#[derive(Clone, Copy)]
pub(crate) enum Upto {
    /// At the partition's end.
    End,
    /// Before this offset: a resumed run's end before its first write to
    /// the topic it reads (what follows is its own writes, and others'
    /// writes, which a resume has read already: see `apply::since`).
    Before(i64),
}

/// A partition read by the reading rule: its counts, and the offset after
/// the last record that went into its index.
pub(crate) struct Scanned {
    /// What was counted.
    pub(crate) counts: Counts,
    /// Where a second pass over the same records stops.
    pub(crate) end: i64,
    /// The last record read (the one just before `end`, unless `end` is
    /// where the read started).
    pub(crate) last: Option<Mark>,
}

/// A keyed record to the reading rule: its key's hash, what it is, and
/// the key's group.
pub(crate) type Classified = ((u64, u32), Seen, Vec<u8>);

/// Reads one record into the counts and returns what it is to the reading
/// rule (`None` for a record without a key).
pub(crate) fn classify(
    s: &Setup,
    hash: &KeyHash,
    counts: &mut Counts,
    r: &Rec<'_>,
) -> Result<Option<Classified>, Fail> {
    counts.records += 1;
    let Some(wire) = r.key else {
        counts.unkeyed += 1;
        return Ok(None);
    };
    let key = key_of(s, wire);
    if !key.readable {
        counts.undecryptable_record_keys += 1;
    }
    let bound = bound(s, &key, wire);
    let mut fields = FieldState::Unchecked;
    let (kind, key_id) = match r.value {
        None => {
            counts.tombstones += 1;
            (Kind::Tombstone, None)
        }
        Some(v) if s.confluent.is_some() => confluent_kind(s, counts, r, v)?,
        Some(v) => value_kind(s, counts, r, v, bound, &mut fields)?,
    };
    if let Some(id) = key_id {
        *counts.all_by_key_id.entry(id).or_default() += 1;
    }
    let seen = Seen {
        offset: r.offset,
        form: form_of(s, &key, wire),
        kind,
        key_id,
        readable: key.readable,
        encrypted: key.encrypted,
        fields,
    };
    Ok(Some((hash.of(key.encrypted, &key.group), seen, key.group)))
}

/// What a present value is to the reading rule, as the topic's policy
/// classifies it ([`TopicPolicy::classify_value`](tombstone_crypt::policy::TopicPolicy::classify_value)),
/// and the key id it names.
/// - Under a keyset: live when it decrypts, broken when its plaintext is
///   the null marker, undecryptable when it does not (the key id counted),
///   plaintext when it is no ciphertext; a value of subject keys' format is
///   counted as a value this run cannot read, never taken for a plaintext
///   to encrypt again (reencrypt would wrap it, and a shred would no
///   longer reach the copy).
/// - Under subject keys: live when it decrypts; broken when a shred covers
///   its DEK (it reads as a delete, but compaction keeps it on the topic:
///   `repair` writes its tombstone), undecryptable with `--strict`;
///   undecryptable when it does not authenticate, its record key is
///   unknown, or its DEK is neither in the key store nor covered by a
///   shred (`unknown_subject_keys`: never a delete).
///
/// A key-store or KMS error fails the command.
fn value_kind(
    s: &Setup,
    counts: &mut Counts,
    r: &Rec<'_>,
    v: &[u8],
    bound: Option<&[u8]>,
    fields: &mut FieldState,
) -> Result<(Kind, Option<u32>), Fail> {
    use tombstone_crypt::policy::{Foreign, ValueRead};
    use tombstone_crypt::Error;
    let subjects = s.values.subject_key_set().is_some();
    let read = s
        .values
        .classify_value(&s.name, bound, Some(v))
        .map_err(|e| value_failed(s, r, &e))?;
    Ok(match read {
        ValueRead::Value { plaintext, key_id } => {
            counts.decrypted += 1;
            let id = key_id.map(|k| k.0);
            if subjects {
                (Kind::Live, None)
            } else if s.marker.matches(&plaintext) {
                counts.marker_values += 1;
                (Kind::Broken, id)
            } else {
                *fields = check_fields(s, counts, r, &plaintext, bound)?;
                (Kind::Live, id)
            }
        }
        ValueRead::Shredded => {
            counts.shredded_values += 1;
            (Kind::Broken, None)
        }
        // --strict: a shredded subject's value is a finding, not a delete
        // (repair leaves it).
        ValueRead::Unreadable {
            why: Error::Shredded { .. },
            ..
        } => {
            counts.shredded_values += 1;
            (Kind::Undecryptable, None)
        }
        // Its DEK is neither in the key store nor covered by a shred: the
        // wrong key store, or a changed or forged value. Never a delete.
        ValueRead::Unreadable {
            why: Error::UnknownSubjectKey { .. },
            ..
        } => {
            counts.unknown_subject_keys += 1;
            (Kind::Undecryptable, None)
        }
        ValueRead::Unreadable { key_id, .. } => {
            counts.undecryptable_values += 1;
            let id = key_id.map(|k| k.0);
            if let Some(id) = id {
                counts.undecryptable_ids.insert(id);
            }
            (Kind::Undecryptable, id)
        }
        ValueRead::Foreign(Foreign::SubjectKeys) => {
            counts.subject_values_unread += 1;
            (Kind::Undecryptable, None)
        }
        ValueRead::Foreign(_) => {
            counts.plaintext += 1;
            *fields = check_fields(s, counts, r, v, bound)?;
            (Kind::Plaintext, None)
        }
        // What this version does not know is never a delete.
        _ => {
            counts.undecryptable_values += 1;
            (Kind::Undecryptable, None)
        }
    })
}

/// What a present value of Confluent's format is to the reading rule, and
/// the schema id it names (where this library's format has a key id):
/// live when it decodes to a record, broken when it decodes to JSON `null`
/// (a delete written as a value: compaction keeps it), undecryptable when
/// it does not decode (a DEK or schema missing, a wrong secret, a value
/// that does not authenticate), plaintext when it is not in Confluent's
/// frame. A KMS error fails the command.
fn confluent_kind(
    s: &Setup,
    counts: &mut Counts,
    r: &Rec<'_>,
    v: &[u8],
) -> Result<(Kind, Option<u32>), Fail> {
    let Some(codec) = &s.confluent else {
        return Ok((Kind::Plaintext, None));
    };
    let Ok((schema_id, _)) = tombstone_crypt::confluent::parse_frame(v) else {
        counts.plaintext += 1;
        return Ok((Kind::Plaintext, None));
    };
    let subject = format!("{}-value", s.topic);
    match codec.decode_for(Some(&subject), Some(v)) {
        Ok(Some(serde_json::Value::Null) | None) => {
            counts.decrypted += 1;
            counts.marker_values += 1;
            Ok((Kind::Broken, Some(schema_id)))
        }
        Ok(Some(_)) => {
            counts.decrypted += 1;
            Ok((Kind::Live, Some(schema_id)))
        }
        Err(e) if e.kind() == ErrorKind::Environment => Err(value_failed(s, r, &e)),
        Err(_) => {
            counts.undecryptable_values += 1;
            counts.undecryptable_ids.insert(schema_id);
            Ok((Kind::Undecryptable, Some(schema_id)))
        }
    }
}

/// With `--fields`, what the encrypted fields of the value `text` (its
/// plaintext, or the value itself when it is not encrypted) of `r` are,
/// bound as its value is (`bound`: the record key's bytes, `None` when its
/// plaintext is unknown: then unchecked), counted. A KMS error fails the
/// command: the fields cannot be told apart.
fn check_fields(
    s: &Setup,
    counts: &mut Counts,
    r: &Rec<'_>,
    text: &[u8],
    bound: Option<&[u8]>,
) -> Result<FieldState, Fail> {
    let (Some(keys), Some(b)) = (&s.fields, bound) else {
        return Ok(FieldState::Unchecked);
    };
    let checked =
        crate::fields::check(keys, text, &value_context(&s.name, Some(b))).map_err(|e| {
            fail(format!(
                "the fields of the value at {}/{} offset {}: {}",
                s.topic,
                r.partition,
                r.offset,
                crate::outcome::chain(&e)
            ))
        })?;
    counts.fields.add(&checked, r.partition, r.offset);
    Ok(checked.state)
}

/// The form of a record key: the position of the key it names in the key
/// keyset (0 for a key that is not encrypted).
pub(crate) fn form_of(s: &Setup, key: &crate::record::RecordKey, wire: &[u8]) -> u8 {
    if !key.encrypted {
        return 0;
    }
    let id = tombstone_crypt::format::Header::parse(wire).map_or(0, |h| h.key_id.0);
    s.form_index(id)
        .and_then(|i| u8::try_from(i).ok())
        .unwrap_or(0)
}

/// What every pass of a command shares.
#[derive(Clone, Copy)]
pub(crate) struct Pass<'a> {
    /// How keys are hashed (the same for every pass of a run).
    pub(crate) hash: &'a KeyHash,
    /// The command's progress bar.
    pub(crate) bar: &'a ProgressBar,
    /// Whether to keep each key's group (`--list-keys`).
    pub(crate) list: bool,
}

/// Reads `partition` of `topic` by the reading rule: every record into
/// the counts and each key's entry into `index` (emptied first), settled.
/// With `list`, each key's group and state go to the counts too
/// (`--list-keys`).
pub(crate) fn scan_partition(
    s: &Setup,
    topic: &str,
    partition: i32,
    index: &mut Index,
    upto: Upto,
    pass: &Pass<'_>,
) -> Result<Scanned, Fail> {
    let Pass { hash, bar, list } = *pass;
    let mut counts = Counts::default();
    counts.fields.on = s.fields.is_some();
    index.reset(partition);
    let mut groups: HashMap<u64, Vec<u8>> = HashMap::new();
    let stop = match upto {
        Upto::End => None,
        Upto::Before(end) => Some(end),
    };
    let mut mark = None;
    let last = read_partition(s, topic, partition, 0, stop, bar, |r| {
        mark = Some(Mark::of(r.offset, r.timestamp, r.key, r.value));
        if let Some((h, seen, group)) = classify(s, hash, &mut counts, r)? {
            index.add(h, &seen)?;
            if list {
                groups.entry(h.0).or_insert(group);
            }
        }
        Ok(())
    })?;
    index.settle();
    counts.add_keys(index);
    if list {
        for (h, group) in groups {
            if let Some(e) = index.get_by_hash(h) {
                counts.listed.push((partition, group, e.state_name()));
            }
        }
    }
    Ok(Scanned {
        counts,
        end: stop.unwrap_or(last),
        last: mark,
    })
}

/// Fails when not one value of the topic decrypts and some do not: the
/// wrong keyset (or `--aad`), not a topic full of findings.
pub(crate) fn check_keyset(s: &Setup, c: &Counts) -> Result<(), Fail> {
    if let Some(keys) = s.fields.as_ref().filter(|_| c.fields.none_authenticates()) {
        let named: Vec<u32> = c.fields.not_authenticating_ids.iter().copied().collect();
        let have = |k: &tombstone_crypt::Keyset| k.keys().map(|(id, _)| id.0).collect::<Vec<_>>();
        return Err(fail(format!(
            "no field of {} authenticates under these keysets: the fields name key ids {named:?}, the field keyset holds {:?}{}; is it the keyset the fields were written with, with the --field-aad (and --aad-name, --value-key) they were written with?",
            s.topic,
            have(&keys.randomized),
            keys.deterministic
                .as_ref()
                .map_or(String::new(), |d| format!(", the deterministic one {:?}", have(d)))
        )));
    }
    if c.decrypted > 0 || c.undecryptable_values == 0 {
        return Ok(());
    }
    let named: Vec<u32> = c.undecryptable_ids.iter().copied().collect();
    if s.confluent.is_some() {
        return Err(fail(format!(
            "no value of {} decodes with this registry and KEK: {} values of schema ids {named:?} do not (run consume to see why); is LOCAL_SECRET the secret they were written with, or the KMS settings those of their KEKs?",
            s.topic, c.undecryptable_values
        )));
    }
    let Some(keyset) = s.keyset() else {
        return Err(fail(format!(
            "no value of {} decrypts under these subject keys: {} values do not; are they the topic's KEK (--subject-keyset) and key store, and was it written with this --aad-name?",
            s.topic, c.undecryptable_values
        )));
    };
    let have: Vec<u32> = keyset.keys().map(|(id, _)| id.0).collect();
    let keys = if c.undecryptable_record_keys > 0 {
        format!(
            " ({} record keys do not decrypt under --key-keyset either)",
            c.undecryptable_record_keys
        )
    } else {
        String::new()
    };
    Err(fail(format!(
        "no value of {} decrypts under this keyset: {} ciphertexts name key ids {named:?}, the keyset holds {have:?}{keys}; is it the topic's keyset, with the --aad (and --aad-name, --value-key) it was written with?",
        s.topic, c.undecryptable_values
    )))
}

/// Reads every partition of `s` (or those `--partitions` names), a few
/// at once, and adds up what they hold.
pub(crate) fn scan(s: &Setup, quiet: bool, list: bool) -> Result<Audit, Fail> {
    let (parts, count) = partitions(s)?;
    let total: u64 = parts
        .iter()
        .map(|&(_, low, high)| u64::try_from(high - low).unwrap_or(0))
        .sum();
    let bar = progress(total, quiet, "audit");
    let hash = KeyHash::default();
    let pass = Pass {
        hash: &hash,
        bar: &bar,
        list,
    };
    let scanned = for_partitions(s, &parts, &bar, |index: &mut Index, p| {
        scan_partition(s, &s.topic, p, index, Upto::End, &pass).map(|x| x.counts)
    })?;
    bar.finish_and_clear();
    let mut audit = Audit {
        partitions: count,
        read: s.only.as_ref().map(|_| parts.iter().map(|p| p.0).collect()),
        counts: Counts::default(),
    };
    for c in scanned {
        audit.counts.merge(c);
    }
    audit.counts.across_partitions();
    check_keyset(s, &audit.counts)?;
    Ok(audit)
}
