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
