//! A tagged field's strings and bytes opened or sealed under a rule's DEK.

use std::sync::Arc;

use apache_avro::types::Value as Avro;
use base64::Engine as _;
use zeroize::Zeroizing;

use crate::confluent::rule::Rule;
use crate::confluent::{split_version, Dek, MAGIC};
use crate::error::Error;

/// Decrypts a tagged field in place (a null stays null): a string holds
/// the base64 of the ciphertext, bytes the ciphertext.
pub(in crate::confluent) fn open_field(
    rule: &Rule,
    dek: &mut dyn FnMut(u32) -> Result<Arc<Dek>, Error>,
    field: &mut Avro,
) -> Result<(), Error> {
    let sealed: Zeroizing<Vec<u8>>;
    let bytes = match field {
        Avro::Null => return Ok(()),
        Avro::Union(_, inner) => return open_field(rule, dek, inner),
        Avro::String(s) => {
            sealed = Zeroizing::new(
                base64::engine::general_purpose::STANDARD
                    .decode(s.as_bytes())
                    .map_err(|_| Error::confluent("an encrypted field is not base64"))?,
            );
            &sealed[..]
        }
        Avro::Bytes(b) => &b[..],
        _ => {
            return Err(Error::confluent(
                "an encrypted field is not a string or bytes",
            ))
        }
    };
    let (version, ct) = if rule.rotates() {
        split_version(bytes)?
    } else {
        (1, bytes)
    };
    let plain = dek(version)?.decrypt(ct)?;
    *field = match field {
        Avro::String(_) => Avro::String(
            String::from_utf8(plain.to_vec())
                .map_err(|_| Error::confluent("a decrypted field is not UTF-8"))?,
        ),
        _ => Avro::Bytes(plain.to_vec()),
    };
    Ok(())
}

/// Encrypts a tagged field in place (a null stays null; the plaintext is
/// wiped).
pub(in crate::confluent) fn seal_field(
    rule: &Rule,
    dek: &Dek,
    field: &mut Avro,
) -> Result<(), Error> {
    let plain: &mut [u8] = match field {
        Avro::Null => return Ok(()),
        Avro::Union(_, inner) => return seal_field(rule, dek, inner),
        Avro::String(s) => {
            let mut v = std::mem::take(s).into_bytes();
            let sealed = seal(rule, dek, &v);
            zeroize::Zeroize::zeroize(&mut v);
            *field = Avro::String(base64::engine::general_purpose::STANDARD.encode(sealed?));
            return Ok(());
        }
        Avro::Bytes(b) => b,
        _ => {
            return Err(Error::confluent(
                "a field tagged for encryption is not a string or bytes",
            ))
        }
    };
    let sealed = seal(rule, dek, plain);
    zeroize::Zeroize::zeroize(plain);
    *field = Avro::Bytes(sealed?);
    Ok(())
}

pub(super) fn seal(rule: &Rule, dek: &Dek, plain: &[u8]) -> Result<Vec<u8>, Error> {
    let mut out = Vec::new();
    if rule.rotates() {
        out.push(MAGIC);
        out.extend_from_slice(&dek.version().to_be_bytes());
    }
    out.extend_from_slice(&dek.encrypt(plain)?);
    Ok(out)
}
