//! A Kafka protocol proxy that encrypts record values and keys per topic
//! with tombstone-crypt, and keeps tombstones null.
//!
//! Kafka clients in any language connect to the proxy as to a cluster; the
//! proxy connects to the real brokers. On Produce it encrypts the records
//! of the topics its policy names (values whole under a keyset, with the
//! library's default associated data: the topic and the plaintext record
//! key; record keys deterministically under an AES-SIV keyset, optionally;
//! the values of record headers named in the policy); on Fetch it decrypts
//! them. The APIs that carry nothing a policy covers (offsets, groups,
//! transactions' coordination, SASL, ACLs, quotas, configs described) pass
//! through byte for byte; every other API (one it does not know, a
//! broker's own, share groups' `ShareFetch`, which hands out records) is
//! left out of ApiVersions and refused: default deny. Admin requests that
//! would delete or change a key-store topic of subject keys (DeleteTopics,
//! DeleteRecords, CreatePartitions, AlterConfigs, IncrementalAlterConfigs)
//! are answered `TOPIC_AUTHORIZATION_FAILED` unless `key_store_admin` is
//! set.
//! A topic written through the proxy reads with the library's
//! `TypedConsumer` and `tombstone-crypt consume`/`audit` with the same
//! keysets, and the other way round.
//!
//! # The promises
//! - **A tombstone stays a tombstone**: a null value is forwarded null,
//!   byte for byte, and never reaches a cipher; an empty value is a value
//!   and is encrypted.
//! - **No count is trusted**: every count and length in a request or a
//!   fetched batch (arrays, records, headers, keys, values, varints) is
//!   checked against the bytes that remain before anything is sized from
//!   it, and decoding takes its memory from a budget per request
//!   (`max_decoded_bytes_per_request`, default 4 times `max_frame_bytes`)
//!   and for the process (`max_decoded_bytes`, default 8 times): a batch
//!   past either is `CORRUPT_MESSAGE` (counted as `decode_budget_refused`),
//!   never an abort, so one request's decoding takes at most its budget
//!   beside its frame, and all requests together at most the process's.
//!   The budget is given back as soon as a request is encrypted or a
//!   response decrypted, never held while a peer is slow. What the frames
//!   in hand claim past the first 64 KiB of each is taken from a pool for
//!   all connections before their bodies are read (`max_buffered_bytes`,
//!   default 4 times `max_frame_bytes`, one for requests and one for
//!   responses), and a large frame that finds it short waits; a connection
//!   that sends no whole request, or takes no response, for
//!   `connections_max_idle_ms` (default 600,000, a broker's own) is
//!   closed. A batch that claims no records and carries some is refused
//!   on Fetch too. What a Fetch could not decode back (a batch that,
//!   encrypted, would take more than a request's budget, or decompress
//!   past `max_frame_bytes`) is refused on Produce (`MESSAGE_TOO_LARGE`,
//!   nothing written), never taken and then refused to every reader.
//! - **Never plaintext**: a partition of a policy topic that cannot be
//!   encrypted (a batch the proxy cannot decode, a keyset that fails) is
//!   not forwarded; the proxy answers it with `CORRUPT_MESSAGE`
//!   (retriable). A fetched value that does not authenticate makes its
//!   partition `CORRUPT_MESSAGE`, never a null and never ciphertext.
//! - **Batches keep their header**: producer id, epoch, base sequence,
//!   transactional and control flags, timestamps, codec and record count
//!   are the client's (idempotent and transactional producers work: the
//!   tests use them), but where the write rule puts tombstones in front
//!   (below).
//! - **The write rule for record keys**: under a key keyset with more than
//!   one enabled key (a rotation), the tombstones of each key's older forms
//!   go at the front of the client's own batch (one per form, the batch's
//!   producer fields and first timestamp; the record count and last offset
//!   delta grown by as many), so that the broker takes or refuses them with
//!   the client's records at once: a refused batch, an aborted
//!   transaction, a fenced producer delete nothing (a transactional
//!   batch's tombstones are in the client's transaction: they commit or
//!   abort with it; `tests/refused_writes.rs` on Apache Kafka). The Produce response's
//!   base offset is moved on past them (the client's first record). An
//!   idempotent or transactional producer's later batches in that
//!   partition go at the sequence the broker then expects: each proxy
//!   process follows every idempotent producer of such a topic from the
//!   first batch of its epoch, and never guesses (the broker would take a
//!   batch at a guessed sequence that matches an earlier one as a
//!   duplicate, answer success and write nothing). A batch of a producer
//!   it has not followed (after a restart, through another proxy process,
//!   after its line left the bounded table) is answered
//!   `UNKNOWN_PRODUCER_ID`, on which the producer starts a new epoch
//!   (KIP-360: librdkafka's idempotent producer on its own, as the tests
//!   show across a restart; the Java client by the same KIP, untried
//!   across a restart of the proxy; a transactional producer once it
//!   aborts). A line is confirmed once the broker takes one of its
//!   batches; a full table drops unconfirmed lines first, so producers a
//!   client makes up push out only each other.
//!
//! # Headers
//! A policy may name headers (`"headers": ["x-ssn"]`,
//! [`TopicPolicy::with_headers`]). Their values are encrypted under the
//! value keyset, a tombstone's too (its value stays null); a null header
//! value stays null; other headers pass as they are. A header value is the
//! library's ciphertext ([`Keyset::encrypt`](tombstone_crypt::Keyset::encrypt)),
//! with associated data the `TopicAndKey` encoding of the record's context
//! (topic and plaintext record key,
//! [`Context::associated_data`](tombstone_crypt::Context::associated_data)),
//! then `u32be(len(name)) | name`: moved to another name, key or topic, or
//! a value's ciphertext put in a header, it does not authenticate, and its
//! partition is answered `CORRUPT_MESSAGE` on Fetch.
//!
//! # Subject keys (crypto-shredding)
//! An entry with `"subject_keyset"` (the KEK) and `"subject_key_topic"`
//! (a compacted topic on the same cluster, made once with `tombstone-crypt
//! shred create-key-store`) encrypts each value under its subject's key,
//! the subject being the record key's plaintext
//! (`tombstone_crypt::shred`). `tombstone-crypt shred --subject-key-topic`
//! with the same KEK works unchanged while the proxy runs: within the
//! fences (`"subject_key_fence_ms"`, 5 s by default, for the key store's
//! view and again for the DEK cache), every value of a shredded subject
//! reaches a consumer through the proxy as a tombstone (null value),
//! wherever it is on the topic. Within that time after the shred, a value
//! the proxy writes for the subject may go out under the shredded key, and
//! reads as deleted too; after it, a write makes a new key. A value whose
//! key the key store neither holds nor records as shredded (a forged or
//! changed value, the wrong key store), or a shredded subject's value
//! copied under another record key, makes its partition
//! `CORRUPT_MESSAGE`, never a tombstone. A record without a key has no
//! subject: its partition is refused on Produce. Every key-store topic
//! the configuration names is guarded: a client's Produce to it is
//! refused and its Fetch gets no records (`TOPIC_AUTHORIZATION_FAILED`),
//! since a client that reads a subject's key record before a shred and
//! writes it back after could undo the shred once the topic is compacted
//! (`tombstone-crypt shred` reaches the key store at the cluster's brokers);
//! an entry that would match a key-store topic, or that an earlier entry
//! shadows, is a configuration error. Such an entry names no
//! headers (a header under a key that a shred does not reach would
//! outlive the shred). `"subject_key_store"` (a redb file) works too, but
//! the proxy holds the file open, so `shred` cannot run beside it.
//!
//! # One policy, one reader
//! An entry is the library's [`TopicPolicy`] (`tombstone_crypt::policy`),
//! which the command line's `consume` and `audit` read with: a value's
//! format comes from the entry (a keyset, or subject keys), never from its
//! first byte.
//!
//! # KMS keys
//! A value keyset may hold `kms-envelope` keys, and a keyset file may be
//! Tink's encrypted keyset under a KMS key (`value_keyset_kms_uri`,
//! `key_keyset_kms_uri`: the command line's `--keyset-kms-uri`). The KMS
//! clients are the library's, configured from the environment
//! (`hcvault://`: `VAULT_ADDR`, `VAULT_TOKEN`; `aws-kms://`: the `AWS_*`
//! variables). Encrypting and decrypting under a policy with KMS keys runs
//! in `block_in_place` on a multi-thread runtime, so a KMS call holds up
//! only its own connection. A KMS call that fails (the KMS is down when a
//! new data key is needed) refuses the partition with `CORRUPT_MESSAGE`
//! (retriable); nothing of it is written.
//!
//! # TLS
//! With `"tls": {"cert_file": ..., "key_file": ...}` (PEM) every listener
//! (the bootstrap and each broker node's) speaks TLS and presents that
//! certificate; a client that does not complete a handshake within 10 s
//! is closed, before the proxy connects to a broker. With
//! `"upstream_tls": {"ca_file": ..., "server_name": ...}` the proxy
//! connects to the brokers with TLS, trusting only the CAs of `ca_file`
//! and checking each broker's certificate for `server_name` (default: the
//! broker's host, a DNS name or an IP address). rustls with the ring
//! provider; no client certificates, either side.
//!
//! # What it did
//! [`stats::process`] counts records encrypted and decrypted, tombstones
//! passed, the write rule's tombstones, partitions and frames refused.
//! Each request runs in a `tracing` span `request` (API key, version,
//! correlation id), each policy partition in a span `partition` (topic,
//! partition); neither names a key or a value.
//!
//! # Limits of this version
//! - Encryption makes a batch longer (33 bytes a value under AES-GCM, 21
//!   a record key under AES-SIV): a producer whose batches fill the
//!   topic's `max.message.bytes` (librdkafka's default `batch.size` of
//!   1,000,000 bytes against Apache Kafka's default of 1,048,588) gets
//!   `MESSAGE_TOO_LARGE` from the broker for its largest batches. Give
//!   such producers a `batch.size` about a tenth below the topic's limit,
//!   or raise the limit (the Java producer splits a refused batch itself).
//! - Under a key keyset in rotation, the write rule's tombstones of a key's
//!   older forms are on the broker, in front of the client's record in its
//!   batch, and left out of what a client fetches: a reader reads the
//!   records written, the batch's record count says how many, and the
//!   offsets of the tombstones are gaps (as after compaction). A tombstone
//!   is left out only when its form is not the form of its key's last
//!   record in the batch (every write ends on the primary form), so every
//!   delete a client wrote is read (but for one written before a rotation
//!   of its writer's key keyset and followed by a write of its key in the
//!   same batch), and a reader of the topic beside the proxy sees them all.
//! - A record's partition is the client's choice. The library's writers
//!   put an encrypted key in the partition of murmur2 of its plaintext (the
//!   Java client's default partitioner); a client with another partitioner
//!   (librdkafka's default, `consistent_random`, is CRC32) puts it
//!   elsewhere.
//! - Produce v13 and Fetch v13 and later name topics by id: the proxy maps
//!   ids to names from the Metadata responses it hands on (every client
//!   asks Metadata before it names a topic by id). An id it has not seen
//!   (a client that learned it through another proxy process) is answered
//!   `UNKNOWN_TOPIC_ID` on Produce and Fetch while a policy or guard is
//!   set, and the client asks Metadata again.
//! - Share groups (`ShareFetch`, `ShareAcknowledge`, Kafka 4.1 and later)
//!   are refused by default deny, like every API the proxy does not read:
//!   a share group's records would reach its consumers as ciphertext.
//! - A Produce to a policy topic with a control batch or a batch of 0
//!   records is refused (clients write neither; forwarded as they came,
//!   their bytes would reach the broker unencrypted).
//! - A batch is refused, not altered, when its records do not encode back
//!   as they came (two headers of one key in a record, records out of
//!   timestamp order), or when it decompresses to more than
//!   `max_frame_bytes`.
//! - A broker node id `N` needs port + 1 + `N` free on the listen address;
//!   a client that kept a node's address across a restart of the proxy
//!   bootstraps again.
//! - The proxy's own client of a `subject_key_topic` connects to
//!   `bootstrap` with `upstream_tls`'s CA and the `key_store_client`
//!   settings (`security.protocol`, `sasl.*`, `ssl.*`: its own
//!   credentials, since the clients' SASL passes through to their own
//!   connections).
//! - SASL passes through (SaslHandshake v1 and SaslAuthenticate). The
//!   unframed tokens after a SaslHandshake v0 are no Kafka request: default
//!   deny closes their connection (clients since Kafka 1.0 use v1). TLS
//!   client certificates (mutual TLS) are neither asked for nor presented.
//! - Plaintext in freed memory: the proxy zeroizes what it owns before it
//!   is freed, whole blocks (a client's request frames once forwarded or
//!   refused; the batches it decompresses (the check that a batch
//!   encodes back as it came compares as it encodes, and keeps no copy);
//!   on Fetch the decrypted keys, values and headers, the batches encoded
//!   from them, the records an lz4 batch is compressed from, and the
//!   response frame once written to the client; `tests/freed_memory.rs`,
//!   on uncompressed batches). Not what it does not own, freed
//!   unzeroized: the compression codecs' own buffers (flate2, lz4, snap,
//!   zstd: their windows, blocks and frames) when a batch is compressed;
//!   kafka-protocol's buffer of the records of a gzip, snappy or zstd
//!   batch as it encodes one (on Fetch, the decrypted records), and the
//!   blocks it grew out of; tokio's and rustls' I/O
//!   buffers (rustls keeps a copy of what it encrypts to a TLS client);
//!   the kernel's socket buffers. The frame of a broker's Fetch response
//!   the proxy decrypts into a new one (ciphertext, for policy topics) is
//!   not wiped.
//!
//! # Use
//! ```no_run
//! use tombstone_crypt_proxy::{Policies, Proxy, ProxyConfig};
//!
//! # async fn run() -> Result<(), tombstone_crypt_proxy::ProxyError> {
//! let config = ProxyConfig::from_file("proxy.json".as_ref())?;
//! let policies = Policies::load(&config)?;
//! let proxy = Proxy::bind(&config, policies).await?;
//! proxy
//!     .run(async { let _ = tokio::signal::ctrl_c().await; }, std::time::Duration::from_secs(30))
//!     .await
//! # }
//! ```
#![forbid(unsafe_code)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

mod api;
mod batch;
mod bounds;
mod budget;
mod codes;
mod config;
mod dispatch;
mod error;
mod frame;
mod hooks;
mod inflate;
mod records;
mod sequences;
mod server;
pub mod stats;
mod tls;
mod topic_ids;
mod wipe;

pub use config::{
    load_keyset, load_keyset_with, ListenerTls, Policies, ProxyConfig, TopicEntry, TopicPolicy,
    UpstreamTls, DEFAULT_MAX_FRAME_BYTES,
};
pub use error::ProxyError;
#[doc(hidden)]
pub use hooks::Hooks;
pub use server::Proxy;

/// The proxy's decoding, for the fuzz targets (`fuzz/`): not a public API.
#[doc(hidden)]
pub mod __fuzz {
    use bytes::Bytes;

    use crate::config::{Policies, TopicPolicy};
    use crate::hooks::Hooks;

    /// Reads one size-prefixed frame from `input` (at most `max` bytes):
    /// its body, or `None` when the frame is refused or incomplete.
    pub fn read_frame(input: &[u8], max: usize) -> Option<Bytes> {
        let mut reader = input;
        let fut = crate::frame::read_frame(&mut reader, max);
        let mut fut = std::pin::pin!(fut);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match std::future::Future::poll(fut.as_mut(), &mut cx) {
            std::task::Poll::Ready(r) => r.ok(),
            // A slice never makes a read wait.
            std::task::Poll::Pending => None,
        }
    }

    /// A request frame's body through the proxy's Produce path (its
    /// forwarded frame, the write rule's tombstones at the front of its
    /// batches), when it is a Produce the proxy forwards.
    pub fn produce(frame: &Bytes, policies: &Policies, limit: usize) -> Result<(), String> {
        produce_with(frame, policies, limit, &Hooks::default())
    }

    /// [`produce`] with test hooks.
    pub fn produce_with(
        frame: &Bytes,
        policies: &Policies,
        limit: usize,
        hooks: &Hooks,
    ) -> Result<(), String> {
        let (key, version, _) = crate::api::request_head(frame).ok_or("short")?;
        if key != 0 {
            return Ok(());
        }
        let budget = crate::budget::Budget::alone(crate::config::decoded_per_request(limit), limit);
        let sequences = crate::sequences::Sequences::default();
        let ids = crate::topic_ids::TopicIds::new();
        crate::api::produce_request(frame, version, policies, hooks, &budget, &sequences, &ids)
            .map(|_| ())
    }

    /// A Fetch response frame's body (`version`) through the proxy's Fetch
    /// path; the number of partitions it could not decrypt.
    pub fn fetch(
        frame: &Bytes,
        version: i16,
        policies: &Policies,
        limit: usize,
    ) -> Result<usize, String> {
        fetch_with(frame, version, policies, limit, &Hooks::default()).map(|(_, failed)| failed)
    }

    /// [`fetch`] with test hooks: the response frame handed to the client
    /// (`None` when the broker's passes as it came; wipe it with [`wipe`]
    /// once done, as the proxy does once it wrote it), and the number of
    /// partitions it could not decrypt.
    pub fn fetch_with(
        frame: &Bytes,
        version: i16,
        policies: &Policies,
        limit: usize,
        hooks: &Hooks,
    ) -> Result<(Option<Bytes>, usize), String> {
        let map = |_: i32, h: &str, p: i32| {
            Some((
                kafka_protocol::protocol::StrBytes::from_string(h.to_owned()),
                p,
            ))
        };
        let budget = crate::budget::Budget::alone(crate::config::decoded_per_request(limit), limit);
        let (out, failed) = crate::api::fetch_response(
            frame,
            version,
            policies,
            hooks,
            &map,
            &budget,
            &crate::topic_ids::TopicIds::new(),
        )?;
        Ok((out, failed.len()))
    }

    /// What the proxy does with a frame once it is done with it (a
    /// client's request, a response written to the client): wiped if this
    /// is the last handle to its buffer (and the hooks do not say
    /// `skip_wipe`). Whether it was.
    pub fn wipe(frame: Bytes, hooks: &Hooks) -> bool {
        crate::wipe::bytes(frame, hooks.wipes())
    }

    /// A partition's record batches encrypted as on Produce (not
    /// idempotent, or the first batch of its producer): the records, and
    /// how many tombstones of older key forms the write rule put at their
    /// front.
    pub fn encrypt(
        topic: &str,
        policy: &TopicPolicy,
        raw: &Bytes,
        limit: usize,
    ) -> Result<(Bytes, i32), String> {
        encrypt_with(topic, policy, raw, limit, &Hooks::default())
    }

    /// [`encrypt`] with test hooks.
    pub fn encrypt_with(
        topic: &str,
        policy: &TopicPolicy,
        raw: &Bytes,
        limit: usize,
        hooks: &Hooks,
    ) -> Result<(Bytes, i32), String> {
        let budget = crate::budget::Budget::alone(crate::config::decoded_per_request(limit), limit);
        let sequences = crate::sequences::Sequences::default();
        let mut sequence = |batch, added, grows| sequences.forward(topic, 0, batch, added, grows);
        crate::batch::encrypt(topic, policy, hooks, raw, &budget, &mut sequence)
            .map(|e| (e.records, e.added))
            .map_err(|r| r.reason)
    }

    /// A partition's record batches decrypted as on Fetch.
    pub fn decrypt(
        topic: &str,
        policy: &TopicPolicy,
        raw: &Bytes,
        limit: usize,
    ) -> Result<Bytes, String> {
        decrypt_with(topic, policy, raw, limit, &Hooks::default())
    }

    /// [`decrypt`] with test hooks. The batches hold the plaintext: wipe
    /// them with [`wipe`] once done.
    pub fn decrypt_with(
        topic: &str,
        policy: &TopicPolicy,
        raw: &Bytes,
        limit: usize,
        hooks: &Hooks,
    ) -> Result<Bytes, String> {
        let budget = crate::budget::Budget::alone(crate::config::decoded_per_request(limit), limit);
        crate::batch::decrypt(topic, policy, hooks, raw, &budget)
    }
}
