//! Record batches of a policy topic: values and keys encrypted on the way
//! to the broker, decrypted on the way back, every other field kept.
//!
//! The records are walked and decoded by `crate::records` (into
//! kafka-protocol's `Record`, after the batch's CRC is checked) and encoded
//! by `crate::records::encode`, against the batch header's own base offset
//! and first timestamp (kafka-protocol's encoder takes them from the
//! records, which differs in a batch the log cleaner compacted), and
//! compressed with kafka-protocol's codecs (lz4 by `lz4`, at lz4's fast
//! level). The original header is kept: base offset, partition leader
//! epoch, attributes (codec, timestamp type, transactional and control
//! flags), last offset delta, first and max timestamps, producer id and
//! epoch, base sequence and record count are copied byte for byte, and
//! only the length and the CRC are new; but for
//! the write rule's tombstones, which grow a Produce batch (its counts and
//! base sequence) and are left out of a Fetch batch (its record count).
//!
//! A batch is transformed only if its records encode back exactly as they
//! came (the decoder keeps one header per key, so a record with two
//! headers of one key would lose one): otherwise it is refused, never
//! altered.
//!
//! Plaintext is wiped before it is freed (`crate::wipe`): on Produce the
//! decompressed records (the check compares as it encodes, and makes no
//! copy of them); on Fetch the records' decrypted keys, values and headers
//! and the batch they are encoded into (under lz4, the records it
//! compresses too). Not the compression codecs' own buffers nor
//! kafka-protocol's buffer of a gzip, snappy or zstd batch's records (see
//! the crate's limits). Ciphertext is not wiped.
//!
//! A batch takes a fast path first: its records are decrypted (Fetch) or
//! encrypted (Produce) straight from their bytes and written with
//! everything else copied as it came, nothing decoded
//! (`crate::records::each_record`); the result is the bytes the general
//! path writes (on Produce, but for the values' fresh nonces). It declines
//! a batch the general path must decode: a record that would not encode
//! back as it came (which the general path refuses); a header the policy
//! encrypts; on Fetch under record keys, a record that reads as null
//! (which may be a write rule's tombstone to leave out); on Produce, a
//! key keyset in rotation (the write rule's tombstones go in front, and
//! idempotent producers are followed) or a test hook. The general path
//! then takes the batch.
//!
//! One file per job: `transform` (the walk, decode, check and encode that
//! Produce and Fetch share, and the fast path's frame), `produce`
//! (encrypt) and `fetch` (decrypt).
#[cfg(test)]
mod fast_tests;
mod fetch;
mod produce;
#[cfg(test)]
mod tests;
mod transform;

pub(crate) use fetch::decrypt;
pub(crate) use produce::encrypt;
