//! Confluent's client-side encryption, read and written here: field-level
//! encryption (CSFLE, the rule `ENCRYPT` on the fields of a JSON Schema
//! tagged, say, `PII`) and payload encryption (CSPE, `ENCRYPT_PAYLOAD`),
//! with Confluent's DEKs under the `local-kms` KEK (feature `confluent`).
//!
//! The format, as Confluent's clients write it (checked byte for byte
//! against records that confluent-kafka 2.16.1 for Python wrote, in
//! `tests/confluent.rs`):
//! - a record is `0x00 | schema id (u32, big-endian) | body`;
//! - a field (a string of the JSON Schema with one of the rule's tags) is
//!   the base64 of `[0x00 | DEK version (u32, big-endian)]` (only when the
//!   rule's `encrypt.dek.expiry.days` is above 0) then the DEK's raw Tink
//!   output ([`Dek::encrypt`]) of the string's UTF-8;
//! - a payload is the body: `[0x00 | version]` as above, then the DEK's raw
//!   output of the encoded JSON text.
//!
//! A tombstone (`None`) is `None` both ways before any rule runs: no
//! schema, DEK or cipher is touched, as everywhere in this crate. A null
//! field stays null; an empty string is encrypted.
//!
//! Avro (feature `confluent-avro`): the same rules on an Avro schema's
//! fields tagged in their `confluent:tags` attribute (`string` fields hold
//! the base64 of the ciphertext, `bytes` fields the ciphertext), the
//! payload rule over the record's Avro binary; the record's value is its
//! JSON form (bytes as an array of numbers).
//!
//! # Confluent's rules as Confluent's client applies them, or refused
//!
//! Every part of a schema and its rule set that decides what is encrypted
//! is either read as confluent-kafka 2.16.1's client reads it, or refuses
//! the schema for reading and writing with an error that names it; nothing
//! is ignored (`tests/confluent_rules.rs` runs each case below against that
//! client's own serializers, both ways, and with a wrong secret).
//!
//! Implemented:
//! - **which fields**: a field's tags are its inline `confluent:tags` and
//!   those of every `metadata.tags` pattern matching its full name
//!   (`$.a.b` in JSON Schema, `namespace.Record.field` in Avro; wildcards
//!   `**`, `*` and `?` as Confluent's `wildcard_match`); an `ENCRYPT` rule
//!   reaches a field carrying one of its tags, or every field when it names
//!   none; within a reached field every string (and Avro `bytes`) is
//!   encrypted: a nullable one's value, each item of an array (or an Avro
//!   map) of them; records and objects inside are reached by their own
//!   properties' tags;
//! - **rules**: `type` matched upper-cased; `kind` `TRANSFORM`, `mode`
//!   `WRITEREAD`; `disabled` rules skipped; parameters from the rule, then
//!   from the schema's `metadata.properties`; on reading, rules undone in
//!   the reverse order (the payload first, then the fields);
//! - **actions** (`onSuccess`, `onFailure`), per direction as Confluent's
//!   client reads them: one action for both, or two comma-separated, the
//!   first on write and the second on read (`"ERROR,NONE"`, the documented
//!   default). `ERROR` is an error. `NONE` on a failed *write* would send
//!   the field in plaintext, so no record is written under such a rule
//!   (reads still are). `NONE` on a failed *read* would hand on the
//!   ciphertext as the field's value: this codec never does, so such a
//!   read fails closed, with an error that names the field, the rule and
//!   the action ([`Rule::read_failed`]); there is no lenient mode that
//!   hands a record on with a field left sealed (a caller that wants the
//!   record anyway has its bytes). `ERROR` on success fails every record
//!   in its direction, as in Confluent's client;
//! - **DEK versions**: version 1 and no prefix when the rule does not
//!   rotate (`encrypt.dek.expiry.days` absent or 0), the newest unexpired
//!   one and the version prefix when it does; a soft-deleted DEK still
//!   reads its records;
//! - **KEKs**: a rule's `encrypt.kms.type` and `encrypt.kms.key.id` taken
//!   together (`local-kms`, `aws-kms`, `hcvault`); a KEK in the registry is
//!   checked against them as Confluent's client does (another type or key
//!   id than the rule names is an error).
//!
//! Refused (the schema, for reading and writing):
//! - a tag where Confluent's client does not read one (on array items, the
//!   schema's root, in definitions) or where it encrypts nothing (on an
//!   object or an Avro record, an untyped property): it would leave the
//!   field in plaintext;
//! - a reached field that is not a string (or Avro `bytes`), or arrays,
//!   maps and unions of them: Confluent's client fails to write it;
//! - in JSON Schema, `allOf`, `anyOf`, `oneOf`, `$ref`, tuple items and
//!   lists of types (other than a type and `null`) where a rule may reach
//!   a field: Confluent's client follows them, this codec does not;
//! - `references` to other subjects' schemas, and migration rules;
//! - a `metadata.tags` pattern holding `[`, `]` or `\` (a regular
//!   expression to Confluent's client);
//! - a rule type other than `ENCRYPT` and `ENCRYPT_PAYLOAD`, a `kind` other
//!   than `TRANSFORM`, a `mode` other than `WRITEREAD` (a rule without
//!   `kind` or `mode`, as Confluent's documentation writes one, is a
//!   `WRITEREAD` transform, as its Schema Registry stores it), an
//!   `onFailure` or `onSuccess` action other than `ERROR` and `NONE` (a
//!   dead-letter queue, an application's own action), or with more than
//!   two comma-separated parts, a parameter it does not know, a KMS type
//!   without its key id or the other way round, two rules of one kind (a
//!   KMS type with no client here, `azure-kms` or `gcp-kms`, is read: its
//!   KEK is an error where it is opened, never a fall back to
//!   `local-kms`);
//! - `items` beside a type other than `array` (Confluent's client takes one
//!   or the other by the value), `confluent:tags` that is not an array of
//!   strings, an Avro type with an empty namespace inside another (named
//!   differently by Confluent's client and by Avro), Avro names Avro does
//!   not allow;
//! - a rule set's `enableAt` other than `ALL` or `CLIENT`, `disabled` or
//!   `tags` of another JSON type than Confluent's model, an `ENCRYPT` rule
//!   among the encoding rules or an `ENCRYPT_PAYLOAD` among the domain
//!   rules (Confluent's client fails on them);
//! - `metadata.tags` patterns and field names that would take more than
//!   10^8 steps to match;
//! - a shared KEK (the registry would unwrap its DEKs), wherever the
//!   registry returns one; with KMS clients given, a KEK in Vault at an
//!   address that is neither `VAULT_ADDR` nor allowed
//!   ([`ConfluentJson::allowing_vault_address`]);
//! - record keys ([`ConfluentSerde::for_keys`]) under a randomized rule.
//!
//! A record that is not of its schema where a rule reaches (an array where
//! the schema has an object) is an error, never written with the field in
//! plaintext; one DEK per version, whatever threads of one codec race to
//! make it; a soft-deleted DEK is read, never written under; an Avro
//! record's arrays and maps hold at most 2^20 items.
//!
//! Credentials go only where they were sent: a KEK in Vault is used only
//! with `VAULT_ADDR` set (or, with KMS clients given, at `VAULT_ADDR` or an
//! address allowed); a registry URL's `user:password@` is taken out of
//! it and sent as basic authentication, never shown. A registry that does
//! not answer is [`Error::Registry`], not the
//! record's fault.
//!
//! What is here: [`ConfluentJson`], with the schemas, rules and DEKs given
//! to it (an in-memory registry: the embedded default for tests and
//! single-process use) or fetched from a [`Registry`] over HTTP; KEKs in
//! `local-kms`, AWS KMS and Vault/OpenBao; and [`ConfluentSerde`], its
//! typed face for the Kafka clients and stores. Not here yet: Protobuf,
//! KEKs in Azure and GCP, shared KEKs, the schema id in a header (see the
//! [guide's chapter](crate::guide::confluent)).

#[cfg(feature = "confluent-avro")]
mod avro;
mod dek;
mod json;
mod kek;
mod registry;
mod rule;
mod tags;

pub use dek::{Dek, DekAlgorithm, LocalKms};
pub use json::{ConfluentJson, ConfluentSerde};
pub use registry::Registry;
pub use rule::{Rule, RuleKind};

use crate::error::Error;

/// The magic byte of Confluent's frame and of a DEK version prefix.
const MAGIC: u8 = 0;

/// Splits a Confluent frame: the schema id and the body.
///
/// # Errors
/// [`Error::Confluent`] if the bytes are shorter than a frame or do not
/// start with the magic byte `0x00`.
pub fn parse_frame(bytes: &[u8]) -> Result<(u32, &[u8]), Error> {
    match bytes {
        [MAGIC, a, b, c, d, body @ ..] => Ok((u32::from_be_bytes([*a, *b, *c, *d]), body)),
        [_, ..] if bytes.len() >= 5 => Err(Error::confluent(
            "not a Confluent frame: the first byte is not 0x00",
        )),
        _ => Err(Error::confluent(
            "not a Confluent frame: shorter than 5 bytes",
        )),
    }
}

/// Appends `0x00 | schema id` to `out`.
pub fn write_frame(schema_id: u32, out: &mut Vec<u8>) {
    out.push(MAGIC);
    out.extend_from_slice(&schema_id.to_be_bytes());
}

/// Splits a versioned ciphertext: `0x00 | version | rest`.
fn split_version(bytes: &[u8]) -> Result<(u32, &[u8]), Error> {
    match bytes {
        [MAGIC, a, b, c, d, rest @ ..] => Ok((u32::from_be_bytes([*a, *b, *c, *d]), rest)),
        _ => Err(Error::confluent(
            "an encrypted value has no DEK version (the rule rotates DEKs: 0x00 | version first)",
        )),
    }
}
