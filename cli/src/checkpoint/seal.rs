//! A checkpoint file's seal: the document, then the SHA-256 of it on a
//! line of its own; a file changed or cut anywhere does not unseal.

use serde_json::Value;

/// The line that ends a checkpoint file, before the hex SHA-256 of all
/// that comes before it.
pub(super) const CHECKPOINT_SEAL: &str = "\nsha256:";

/// A checkpoint file's bytes: the document, then its SHA-256 on a line of
/// its own.
pub(super) fn seal(doc: &Value) -> Vec<u8> {
    let text = doc.to_string();
    let digest = sha2::Digest::finalize(sha2::Digest::chain_update(
        sha2::Sha256::default(),
        text.as_bytes(),
    ));
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("{text}{CHECKPOINT_SEAL}{hex}\n").into_bytes()
}

/// The document of a checkpoint file, if its checksum verifies: one
/// changed byte anywhere (the checksum's own included), or a cut, and it
/// does not.
pub(super) fn unseal(bytes: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(bytes).ok()?;
    let (doc, line) = text.rsplit_once(CHECKPOINT_SEAL)?;
    let hex = line.strip_suffix('\n')?;
    let digest = sha2::Digest::finalize(sha2::Digest::chain_update(
        sha2::Sha256::default(),
        doc.as_bytes(),
    ));
    let want: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    (hex == want).then_some(doc)
}
