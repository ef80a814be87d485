//! Front ends' plumbing (feature `files`), written once for the command
//! line and the proxy, as age keeps its `cli_common`: a keyset file read
//! within a bound, its text zeroized, cleartext (Tink's JSON) or
//! encrypted under a KMS key ([`load_keyset`]); and a subject-key store
//! opened (or made) from where it is kept, a redb file or a compacted
//! topic ([`open_key_store`]).
//!
//! ```
//! # fn main() -> Result<(), tombstone_crypt::Error> {
//! use tombstone_crypt::{files, Keyset};
//! let path = std::env::temp_dir().join(format!("files-doc-{}.json", std::process::id()));
//! let keyset = Keyset::generate();
//! std::fs::write(&path, keyset.to_tink_json()).expect("written");
//! let read = files::load_keyset(&path, None)?;
//! assert_eq!(read.primary(), keyset.primary());
//! std::fs::remove_file(&path).expect("removed");
//!
//! // A file that is not a keyset: an error naming it, of the keyset's kind.
//! let err = files::load_keyset(std::path::Path::new("/nonexistent/k.json"), None).unwrap_err();
//! assert!(err.to_string().contains("/nonexistent/k.json"));
//! # Ok(())
//! # }
//! ```

use std::io::Read as _;
use std::path::Path;
use std::sync::Arc;

use zeroize::Zeroizing;

use crate::error::Error;
use crate::keyset::Keyset;
#[cfg(any(feature = "redb", feature = "kafka"))]
use crate::shred::KeyStore;

/// The most bytes a keyset file may have.
pub const MAX_KEYSET_FILE: u64 = 16 << 20;

/// Loads a keyset file: Tink's cleartext JSON, or with `kms_uri` Tink's
/// encrypted keyset under that KMS key (decrypted now, through the KMS
/// clients registered for it; empty associated data, as the command line
/// writes it). The text is read within [`MAX_KEYSET_FILE`] into a buffer
/// sized once and zeroized when dropped.
///
/// # Errors
/// [`Error::File`] naming the file: it cannot be read (its kind
/// [`Environment`](crate::error::ErrorKind::Environment)), is larger than
/// the bound, is not a keyset or the KMS does not decrypt it (the kind of
/// that error). Never with key bytes.
pub fn load_keyset(path: &Path, kms_uri: Option<&str>) -> Result<Keyset, Error> {
    let file_error = |cause: Arc<dyn std::error::Error + Send + Sync>| Error::File {
        detail: format!("the keyset {}", path.display()),
        cause,
    };
    let io = |e: std::io::Error| file_error(Arc::new(e));
    let file = std::fs::File::open(path).map_err(io)?;
    let size = file.metadata().map_or(0, |m| m.len()).min(MAX_KEYSET_FILE) + 1;
    // Sized up front: a String that grows leaves old buffers unzeroized.
    let mut text = Zeroizing::new(String::with_capacity(usize::try_from(size).unwrap_or(0)));
    file.take(MAX_KEYSET_FILE + 1)
        .read_to_string(&mut text)
        .map_err(io)?;
    if text.len() as u64 > MAX_KEYSET_FILE {
        return Err(io(std::io::Error::other(format!(
            "larger than {MAX_KEYSET_FILE} bytes"
        ))));
    }
    match kms_uri {
        Some(uri) => Keyset::from_encrypted_tink_json(&text, uri, b""),
        None => Keyset::from_tink_json(&text),
    }
    .map_err(|e| file_error(Arc::new(e)))
}

/// Where a topic's subject keys are kept.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum KeyStoreAt {
    /// A redb file (feature `redb`).
    #[cfg(feature = "redb")]
    File(std::path::PathBuf),
    /// A compacted key-store topic (feature `kafka`), through a client of
    /// `config` (the brokers, TLS and SASL settings), its view in memory or
    /// in a redb file under `view`.
    #[cfg(feature = "kafka")]
    Topic {
        /// The client's settings.
        config: crate::kafka::rdkafka::config::ClientConfig,
        /// The key-store topic.
        topic: String,
        /// The directory of its view on disk (`None`: in memory).
        view: Option<std::path::PathBuf>,
        /// How old a DEK the view read may be before it is read again
        /// (`None`: the store's default).
        fence: Option<std::time::Duration>,
    },
}

/// Which part of a [`KeyStoreAt`] an error of [`open_key_store`] is
/// about: a front end names it in its own words (a flag, a setting).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyStorePart {
    /// The redb file.
    File,
    /// The key-store topic.
    Topic,
    /// The view's directory.
    View,
}

/// Opens the key store at `at`, which must exist (a mistyped path or topic
/// is an error, never an empty store); with `create`, makes it, and it
/// must not exist: a redb file that does not exist, or a topic that holds
/// no record (one that holds records is another topic, or another key
/// store). Whether it holds a naming key is for
/// [`SubjectKeys::open`](crate::shred::SubjectKeys::open) to say.
///
/// # Errors
/// The store's error, with the part of `at` it is about.
#[cfg(any(feature = "redb", feature = "kafka"))]
pub fn open_key_store(
    at: &KeyStoreAt,
    create: bool,
) -> Result<Arc<dyn KeyStore>, (KeyStorePart, Error)> {
    match at {
        #[cfg(feature = "redb")]
        KeyStoreAt::File(path) => {
            let store = if create {
                crate::shred::RedbKeyStore::create(path)
            } else {
                crate::shred::RedbKeyStore::open(path)
            };
            Ok(Arc::new(store.map_err(|e| (KeyStorePart::File, e))?))
        }
        #[cfg(feature = "kafka")]
        KeyStoreAt::Topic {
            config,
            topic,
            view,
            fence,
        } => {
            use crate::kafka::{KafkaChangelog, KafkaKeyStore};
            let on_topic = |e| (KeyStorePart::Topic, e);
            let log = if create {
                if let Ok(existing) = KafkaChangelog::existing(config.clone(), topic) {
                    let held = crate::store::Changelog::records(&existing).map_err(on_topic)?;
                    if !held.is_empty() {
                        return Err(on_topic(Error::Store {
                            detail: format!(
                                "the topic exists and holds {} records: not a new key store (name a new topic)",
                                held.len()
                            ),
                            cause: None,
                        }));
                    }
                }
                KafkaChangelog::with_config(config.clone(), topic)
            } else {
                KafkaChangelog::existing(config.clone(), topic)
            }
            .map_err(on_topic)?;
            let mut store = KafkaKeyStore::new(log);
            if let Some(fence) = fence {
                store = store.with_fence(*fence);
            }
            if let Some(dir) = view {
                store = store
                    .with_view_dir(dir)
                    .map_err(|e| (KeyStorePart::View, e))?;
            }
            Ok(Arc::new(store))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn a_keyset_file_loads_and_what_is_not_one_is_an_error_of_its_kind() {
        let dir = std::env::temp_dir().join(format!("tc-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let keyset = Keyset::generate();
        let good = dir.join("good.json");
        std::fs::write(&good, keyset.to_tink_json()).unwrap();
        assert_eq!(
            load_keyset(&good, None).unwrap().primary(),
            keyset.primary()
        );
        // Not JSON: the keyset's error, a usage error, the file named.
        let bad = dir.join("bad.json");
        std::fs::write(&bad, "not a keyset").unwrap();
        let e = load_keyset(&bad, None).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Usage);
        assert!(e.to_string().contains("bad.json"), "{e}");
        // Missing: the environment's.
        let e = load_keyset(&dir.join("missing.json"), None).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Environment);
        // Past the bound: refused, read no further than it.
        let big = dir.join("big.json");
        let f = std::fs::File::create(&big).unwrap();
        f.set_len(MAX_KEYSET_FILE + 10).unwrap();
        let e = load_keyset(&big, None).unwrap_err();
        assert!(std::error::Error::source(&e)
            .unwrap()
            .to_string()
            .contains("larger than"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(feature = "redb")]
    #[test]
    fn a_key_store_file_is_opened_only_if_it_exists_and_made_only_if_it_does_not() {
        let dir = std::env::temp_dir().join(format!("tc-files-store-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let at = KeyStoreAt::File(dir.join("keys.redb"));
        let part = |r: Result<Arc<dyn KeyStore>, (KeyStorePart, Error)>| r.err().map(|(p, _)| p);
        // A mistyped path is an error, never an empty store.
        assert_eq!(part(open_key_store(&at, false)), Some(KeyStorePart::File));
        assert!(open_key_store(&at, true).is_ok());
        // Made once: a second make is refused, an open finds it.
        assert_eq!(part(open_key_store(&at, true)), Some(KeyStorePart::File));
        assert!(open_key_store(&at, false).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
