//! Confluent's data keys (DEKs) and the `local-kms` key-encryption key.
//!
//! A DEK is a Tink key proto (`AesGcmKey` or `AesSivKey`), wrapped by a KEK
//! and kept in the DEK registry as `encryptedKeyMaterial` (base64). A field
//! or payload is the DEK's *raw* Tink output (no 5-byte prefix): AES-GCM
//! `IV(12) | ciphertext | tag(16)`, AES-SIV `SIV(16) | ciphertext` with the
//! associated data one empty component; both with empty associated data.

use core::fmt;

use zeroize::Zeroizing;

use crate::cipher::{AesGcmKey, AesSivKey, Backend, NONCE_LEN, SIV_LEN, TAG_LEN};
use crate::error::Error;
use crate::primitive::{Primitive, AES_GCM_TYPE_URL, AES_SIV_TYPE_URL};

/// A DEK's algorithm, as Confluent names it (`encrypt.dek.algorithm`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DekAlgorithm {
    /// `AES128_GCM`.
    Aes128Gcm,
    /// `AES256_GCM` (Confluent's default).
    Aes256Gcm,
    /// `AES256_SIV`: deterministic.
    Aes256Siv,
}

impl DekAlgorithm {
    /// Confluent's name.
    pub fn name(self) -> &'static str {
        match self {
            DekAlgorithm::Aes128Gcm => "AES128_GCM",
            DekAlgorithm::Aes256Gcm => "AES256_GCM",
            DekAlgorithm::Aes256Siv => "AES256_SIV",
        }
    }

    /// From Confluent's name.
    ///
    /// # Errors
    /// [`Error::Confluent`] for another name.
    pub fn from_name(name: &str) -> Result<Self, Error> {
        match name {
            "AES128_GCM" => Ok(DekAlgorithm::Aes128Gcm),
            "AES256_GCM" => Ok(DekAlgorithm::Aes256Gcm),
            "AES256_SIV" => Ok(DekAlgorithm::Aes256Siv),
            other => Err(Error::confluent(format!(
                "unknown DEK algorithm {:?} (AES128_GCM, AES256_GCM, AES256_SIV)",
                crate::error::printable(other)
            ))),
        }
    }

    fn key_len(self) -> usize {
        match self {
            DekAlgorithm::Aes128Gcm => 16,
            DekAlgorithm::Aes256Gcm => 32,
            DekAlgorithm::Aes256Siv => 64,
        }
    }
}

/// One DEK: its algorithm, its version and its key. `Debug` shows no key.
#[derive(Clone)]
pub struct Dek {
    algorithm: DekAlgorithm,
    version: u32,
    primitive: Primitive,
}

impl fmt::Debug for Dek {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Dek {{ {}, version {} }}",
            self.algorithm.name(),
            self.version
        )
    }
}

impl Dek {
    /// A new random DEK.
    pub fn generate(algorithm: DekAlgorithm, version: u32) -> Self {
        let mut key = Zeroizing::new(vec![0u8; algorithm.key_len()]);
        crate::random::fill_from_os(&mut key);
        Dek::from_key(algorithm, version, &key).expect("a key of the algorithm's length")
    }

    fn from_key(algorithm: DekAlgorithm, version: u32, key: &[u8]) -> Result<Self, Error> {
        let primitive = match algorithm {
            DekAlgorithm::Aes256Siv => Primitive::AesSiv(AesSivKey::new(key)?),
            _ if key.len() == algorithm.key_len() => {
                Primitive::AesGcm(AesGcmKey::new(key, Backend::default())?)
            }
            _ => {
                return Err(Error::confluent(
                    "a DEK's key is not of its algorithm's length",
                ))
            }
        };
        Ok(Dek {
            algorithm,
            version,
            primitive,
        })
    }

    /// A DEK from its key material: the serialized Tink key proto
    /// (`AesGcmKey` or `AesSivKey`), as the KEK unwraps it.
    ///
    /// # Errors
    /// [`Error::Confluent`] if the proto is not a key of `algorithm`.
    pub fn from_key_material(
        algorithm: DekAlgorithm,
        version: u32,
        proto: &[u8],
    ) -> Result<Self, Error> {
        let url = match algorithm {
            DekAlgorithm::Aes256Siv => AES_SIV_TYPE_URL,
            _ => AES_GCM_TYPE_URL,
        };
        let primitive =
            Primitive::from_key_data(url, proto, Some("SYMMETRIC"), Backend::default(), None)
                .map_err(|(_, why)| Error::confluent(format!("a DEK's key material: {why}")))?;
        let len = match &primitive {
            Primitive::AesGcm(k) => k.bytes().len(),
            Primitive::AesSiv(k) => k.bytes().len(),
            Primitive::KmsEnvelope(_) => 0,
        };
        if len != algorithm.key_len() {
            return Err(Error::confluent(format!(
                "a DEK's key material is {len} bytes, not {}'s {}",
                algorithm.name(),
                algorithm.key_len()
            )));
        }
        Ok(Dek {
            algorithm,
            version,
            primitive,
        })
    }

    /// The key material: the serialized Tink key proto (a secret).
    pub fn key_material(&self) -> Zeroizing<Vec<u8>> {
        self.primitive.key_data().1
    }

    /// The algorithm.
    pub fn algorithm(&self) -> DekAlgorithm {
        self.algorithm
    }

    /// The version (1 and up).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Tink's raw output for `plaintext` (empty associated data).
    ///
    /// # Errors
    /// [`Error::Encryption`] if the cipher refuses it.
    pub fn encrypt(&self, plaintext: &[u8]) -> Result<Vec<u8>, Error> {
        match &self.primitive {
            Primitive::AesGcm(key) => {
                let mut out = Vec::with_capacity(NONCE_LEN + plaintext.len() + TAG_LEN);
                let mut nonce = [0u8; NONCE_LEN];
                crate::random::nonce(&mut nonce);
                out.extend_from_slice(&nonce);
                out.extend_from_slice(plaintext);
                let tag = key.seal_in_place(&nonce, &[], &mut out[NONCE_LEN..])?;
                out.extend_from_slice(&tag);
                Ok(out)
            }
            Primitive::AesSiv(key) => {
                let mut out = vec![0u8; SIV_LEN];
                out.extend_from_slice(plaintext);
                let siv = key.seal_in_place(&[], &mut out[SIV_LEN..])?;
                out[..SIV_LEN].copy_from_slice(&siv);
                Ok(out)
            }
            Primitive::KmsEnvelope(_) => Err(Error::Encryption),
        }
    }

    /// The plaintext of Tink's raw output `ciphertext`.
    ///
    /// # Errors
    /// [`Error::Truncated`] if too short, [`Error::Decryption`] if it does
    /// not authenticate; no plaintext is returned then.
    pub fn decrypt(&self, ciphertext: &[u8]) -> Result<Zeroizing<Vec<u8>>, Error> {
        match &self.primitive {
            Primitive::AesGcm(key) => {
                if ciphertext.len() < NONCE_LEN + TAG_LEN {
                    return Err(Error::Truncated {
                        len: ciphertext.len(),
                        min: NONCE_LEN + TAG_LEN,
                    });
                }
                let (nonce, rest) = ciphertext.split_at(NONCE_LEN);
                let (body, tag) = rest.split_at(rest.len() - TAG_LEN);
                let nonce: [u8; NONCE_LEN] = nonce.try_into().map_err(|_| Error::Decryption)?;
                let tag: [u8; TAG_LEN] = tag.try_into().map_err(|_| Error::Decryption)?;
                let mut out = Zeroizing::new(body.to_vec());
                key.open_in_place(&nonce, &[], &mut out, &tag)
                    .map_err(|_| Error::Decryption)?;
                Ok(out)
            }
            Primitive::AesSiv(key) => {
                if ciphertext.len() < SIV_LEN {
                    return Err(Error::Truncated {
                        len: ciphertext.len(),
                        min: SIV_LEN,
                    });
                }
                let (siv, body) = ciphertext.split_at(SIV_LEN);
                let siv: [u8; SIV_LEN] = siv.try_into().map_err(|_| Error::Decryption)?;
                let mut out = Zeroizing::new(body.to_vec());
                key.open_in_place(&[], &mut out, &siv)?;
                Ok(out)
            }
            Primitive::KmsEnvelope(_) => Err(Error::Decryption),
        }
    }
}

/// Confluent's `local-kms` KEK: AES-128-GCM (raw, empty associated data)
/// under the first 16 bytes of HKDF-SHA256 of the secret (no salt, empty
/// info), the secret being what Confluent's clients take as `secret` (or
/// `LOCAL_SECRET`). `Debug` shows no key.
#[derive(Clone)]
pub struct LocalKms {
    kek: AesGcmKey,
}

impl fmt::Debug for LocalKms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LocalKms(..)")
    }
}

impl LocalKms {
    /// The KEK of `secret`.
    pub fn new(secret: &str) -> Self {
        let mut key = Zeroizing::new([0u8; 16]);
        hkdf::Hkdf::<sha2::Sha256>::new(None, secret.as_bytes())
            .expand(&[], &mut key[..])
            .expect("16 bytes is a valid HKDF-SHA256 length");
        LocalKms {
            kek: AesGcmKey::new(&key[..], Backend::default()).expect("a 16-byte key"),
        }
    }

    /// Wraps a DEK: its key material under the KEK (Confluent's
    /// `encryptedKeyMaterial`, before base64).
    ///
    /// # Errors
    /// [`Error::Encryption`] if the cipher refuses it.
    pub fn wrap(&self, dek: &Dek) -> Result<Vec<u8>, Error> {
        let material = dek.key_material();
        let mut out = Vec::with_capacity(NONCE_LEN + material.len() + TAG_LEN);
        let mut nonce = [0u8; NONCE_LEN];
        crate::random::nonce(&mut nonce);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&material);
        match self.kek.seal_in_place(&nonce, &[], &mut out[NONCE_LEN..]) {
            Ok(tag) => {
                out.extend_from_slice(&tag);
                Ok(out)
            }
            Err(e) => {
                zeroize::Zeroize::zeroize(&mut out);
                Err(e)
            }
        }
    }

    /// Unwraps a DEK from its `encryptedKeyMaterial` (after base64).
    ///
    /// # Errors
    /// [`Error::Confluent`] if it does not unwrap under this KEK or is not
    /// a key of `algorithm`.
    pub fn unwrap(
        &self,
        algorithm: DekAlgorithm,
        version: u32,
        wrapped: &[u8],
    ) -> Result<Dek, Error> {
        if wrapped.len() < NONCE_LEN + TAG_LEN {
            return Err(Error::confluent("a wrapped DEK is too short"));
        }
        let (nonce, rest) = wrapped.split_at(NONCE_LEN);
        let (body, tag) = rest.split_at(rest.len() - TAG_LEN);
        let nonce: [u8; NONCE_LEN] = nonce.try_into().map_err(|_| Error::Decryption)?;
        let tag: [u8; TAG_LEN] = tag.try_into().map_err(|_| Error::Decryption)?;
        let mut material = Zeroizing::new(body.to_vec());
        self.kek
            .open_in_place(&nonce, &[], &mut material, &tag)
            .map_err(|_| {
                Error::confluent("a DEK does not unwrap under the local-kms KEK (another secret?)")
            })?;
        Dek::from_key_material(algorithm, version, &material)
    }
}
