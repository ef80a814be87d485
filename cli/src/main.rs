//! `tombstone-crypt`: keysets, ciphertext inspection, and the audit and
//! repair of Kafka topics whose deletes an earlier encryption layer turned
//! into values.
//!
//! Exit codes: 0 done and clean, 1 findings (broken tombstones, split
//! keys, undecryptable values, a value that is not a ciphertext), 2 usage,
//! I/O, KMS or broker error, a keyset under which not one value of the
//! topic decrypts (the wrong keyset), or a producer configuration that
//! could reorder a key's records.
//!
//! It uses the library through its public API only. Its files, bottom up:
//! `keysets` (keyset files and the `keyset` commands), `key_state` (the
//! reading rule, a few bytes per key), `read` (reading a partition),
//! `record` (what a record's key and value are), `report` (what an audit
//! found), `run` (partitions in parallel), `audit`, `write` (producing in
//! order, in journaled chunks), `checkpoint` (resumable writes), `plan`
//! (the write rule, key by key), `apply` (the passes of `repair` and
//! `reencrypt` over each partition), `repair` and `reencrypt`, and `fields`
//! (a JSON record's encrypted fields, for `inspect --fields` and
//! `reencrypt --fields json`), and `consume` (a topic as JSON lines, in
//! this library's format or Confluent's), and `proxy` (the Kafka protocol
//! proxy of `tombstone-crypt-proxy`); this file holds the arguments,
//! `inspect` and the exit codes.
#![forbid(unsafe_code)]
// The lints live in Cargo.toml's [lints]; this one is allowed in tests.
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

mod apply;
mod audit;
mod checkpoint;
mod consume;
mod fields;
mod inspect;
mod key_state;
mod keysets;
mod plan;
mod proxy;
mod read;
mod record;
mod reencrypt;
mod repair;
mod report;
mod run;
mod shred;
mod write;

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};
use tombstone_crypt::{AadPolicy, Error};

/// The heading of the options every command takes.
const GLOBAL: &str = "Global options";

/// Keysets, ciphertexts and Kafka topics encrypted with tombstone-crypt
/// (Tink's formats): find and repair the deletes a broken layer wrote as
/// values.
#[derive(Parser, Debug)]
#[command(name = "tombstone-crypt", version)]
struct Cli {
    /// Print JSON on stdout (for scripts) instead of text.
    #[arg(long, global = true, help_heading = GLOBAL)]
    json: bool,
    /// No progress bar on stderr (`audit`, `repair`, `reencrypt` and
    /// `consume` show one when stderr is a terminal; the other commands
    /// have none, and ignore it).
    #[arg(long, short, global = true, help_heading = GLOBAL)]
    quiet: bool,
    /// Log more to stderr: `-v` info (a span per command and per KMS call),
    /// `-vv` debug (DEKs made and unwrapped), `-vvv` trace. Without it,
    /// warnings only (a KMS retry, a failed KMS call). `RUST_LOG` (a level,
    /// or `target=level,...`) overrides it.
    #[arg(long, short, global = true, action = clap::ArgAction::Count, help_heading = GLOBAL)]
    verbose: u8,
    /// The command.
    #[command(subcommand)]
    command: Command,
}

/// The commands.
#[derive(Subcommand, Debug)]
enum Command {
    /// Make, rotate and list keysets (Tink JSON files).
    #[command(subcommand)]
    Keyset(KeysetCommand),
    /// Show the version, key id, kind and lengths of a ciphertext (never
    /// its plaintext).
    Inspect(InspectArgs),
    /// Read a topic to its end and count tombstones, live keys, broken
    /// tombstones (deletes written as values), split keys (another form of
    /// the key still holds a value), undecryptable and plaintext values.
    /// Under subject keys (`--subject-keyset`), a shredded subject's value
    /// counts as a broken delete (`shredded_values`; `repair` writes its
    /// key's tombstone), unless `--strict`.
    Audit(AuditArgs),
    /// Write every broken tombstone `audit` finds as a real delete, and
    /// every split key's newest state again, through the write rule (a
    /// plan without `--apply`), then audit again.
    Repair(RepairArgs),
    /// Rewrite every live value under the keyset's primary key (and, with
    /// `--key-keyset`, every key under its primary key), through the write
    /// rule, to finish a rotation or encrypt plaintext values; with
    /// `--fields json`, every encrypted field of each JSON record in place,
    /// the rest of the record byte for byte as it was.
    Reencrypt(ReencryptArgs),
    /// Print a topic's records as JSON lines, `{"partition", "offset",
    /// "key", "value"}`, decrypted, a delete as `"value": null`: in this
    /// library's format with `--keyset`, under subject keys with
    /// `--subject-keyset` (a shredded subject's value as `null` with
    /// `"shredded": true`), in Confluent's (CSFLE fields, CSPE payloads of
    /// JSON Schema records) with `--schema-registry`.
    Consume(ConsumeArgs),
    /// Shred data subjects (`tombstone_crypt::shred`): remove each one's
    /// subject key from the key store, with a record of the shred, so that
    /// every copy of its values, on the topic and off it, reads as a
    /// delete. Says per subject whether it had a key (exit 1 when one had
    /// none: a subject spelled otherwise than when it was written, or the
    /// wrong key store). Running it again over the same list is safe (and
    /// shreds what was written for those subjects since). Its subcommands
    /// `check`, `rewrap` and `create-key-store` work on the key store.
    Shred(ShredArgs),
    /// Serve Kafka clients as a cluster and forward to the real brokers,
    /// encrypting record values (and keys) of the topics a policy names on
    /// Produce and decrypting them on Fetch; tombstones stay null, every
    /// other API passes through. Runs until SIGINT or SIGTERM, then
    /// finishes in-flight requests.
    Proxy(proxy::ProxyArgs),
}

/// `shred`'s arguments: subjects to shred, or a subcommand for the key
/// store itself.
#[derive(Args, Debug)]
// The usage is written out: the hidden flags that spelled the subcommands
// before would otherwise show in the group of what is required (subjects,
// or one of them), and a missing subject is said by `shred` itself.
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    override_usage = "tombstone-crypt shred [OPTIONS] --subject-keyset <FILE> \
        <--subject-key-store <FILE>|--subject-key-topic <TOPIC>> \
        <--subject <SUBJECT>|--subjects <FILE>>...\n       \
        tombstone-crypt shred <COMMAND>"
)]
pub(crate) struct ShredArgs {
    /// What to do with the key store instead of shredding.
    #[command(subcommand)]
    pub(crate) mode: Option<ShredMode>,
    /// The key store and its KEK.
    #[command(flatten)]
    pub(crate) store: KeyStoreArgs,
    /// A subject to shred (its bytes, as the record key or the value names
    /// it, exactly: no trimming); repeatable.
    #[arg(long, value_name = "SUBJECT")]
    pub(crate) subject: Vec<String>,
    /// A file of subjects to shred, one per line (`-`: standard input, so
    /// that they never stand on the command line), each line exactly the
    /// subject's bytes, ended by LF or CRLF; empty lines are skipped. A
    /// file that starts with a byte-order mark, a line with a space or tab
    /// at either end, or a line that is not UTF-8 is refused before
    /// anything is shredded (give such subjects in hex with `--hex`).
    #[arg(long, value_name = "FILE")]
    pub(crate) subjects: Option<PathBuf>,
    /// `--subject` and the lines of `--subjects` are the subjects' bytes
    /// in hex (for subjects that are not UTF-8, or have spaces at an end).
    #[arg(long)]
    pub(crate) hex: bool,
    /// `shred create-key-store`, as it was spelled before (hidden; for one
    /// release).
    #[arg(long, hide = true, conflicts_with_all = ["subject", "subjects"])]
    pub(crate) create_key_store: bool,
    /// `shred rewrap`, as it was spelled before (hidden; for one release).
    #[arg(long, hide = true, conflicts_with_all = ["subject", "subjects", "create_key_store"])]
    pub(crate) rewrap: bool,
    /// `shred check`, as it was spelled before (hidden; for one release).
    #[arg(long, hide = true, conflicts_with_all = ["subject", "subjects", "rewrap", "create_key_store"])]
    pub(crate) check: bool,
}

/// The key store of subject keys, its KEK, and how to reach a key-store
/// topic.
#[derive(Args, Debug, Clone)]
#[command(mut_arg("subject_kek", |a| a.required(true)))]
pub(crate) struct KeyStoreArgs {
    /// The subject keys' KEK and store (`--subject-keyset` is required).
    #[command(flatten)]
    pub(crate) keys: SubjectKeyArgs,
    /// The KMS key the KEK keyset file is encrypted with.
    #[arg(long = "keyset-kms-uri", alias = "decrypt-with", value_name = "URI")]
    pub(crate) decrypt_with: Option<String>,
    /// The brokers (`host:port,...`), for `--subject-key-topic`.
    #[arg(long, value_name = "SERVERS")]
    pub(crate) bootstrap: Option<String>,
    /// How to reach the brokers.
    #[command(flatten)]
    pub(crate) client: ClientArgs,
}

/// `shred`'s subcommands: the key store itself.
#[derive(Subcommand, Debug)]
pub(crate) enum ShredMode {
    /// Read the whole key store and open every record under the KEK (the
    /// key store's audit): subjects, DEKs, subjects with two DEKs, records
    /// that do not open, records not yet under the KEK's primary key; on a
    /// key-store topic also its records, tombstones, shred markers and
    /// records not of a key store. Exit 1 when a record or a record of a
    /// shred does not open, a subject has two DEKs, the store holds no
    /// naming key or two, or the topic holds foreign records.
    Check(KeyStoreArgs),
    /// Wrap every record of the key store again under the KEK keyset's
    /// primary key (after `keyset rotate` of the KEK; then `keyset destroy`
    /// the old keys, and a copy of the key store made before opens
    /// nothing).
    Rewrap(KeyStoreArgs),
    /// Make a new key store (a redb file, created exclusively and 0600, or
    /// a compacted topic) with its naming key under the KEK. Every other
    /// command needs a key store that exists and refuses a missing one.
    CreateKeyStore(KeyStoreArgs),
}

/// `consume`'s arguments.
#[derive(Args, Debug)]
#[command(group(
    ArgGroup::new("values")
        .args(["keyset", "subject_kek", "schema_registry"])
        .required(true)
        .multiple(true)
))]
pub(crate) struct ConsumeArgs {
    /// The brokers (`host:port,...`).
    #[arg(long, value_name = "SERVERS")]
    pub(crate) bootstrap: String,
    /// The topic.
    #[arg(long)]
    pub(crate) topic: String,
    /// The values' keyset file (this library's format).
    #[arg(long, value_name = "FILE", conflicts_with = "schema_registry")]
    pub(crate) keyset: Option<PathBuf>,
    /// The KMS key the keyset file is encrypted with.
    #[arg(long = "keyset-kms-uri", alias = "decrypt-with", value_name = "URI")]
    pub(crate) decrypt_with: Option<String>,
    /// The values' associated data (this library's format; values under
    /// subject keys are always bound to the topic, or --aad-name, and the
    /// record key).
    #[arg(long, value_enum, default_value = "topic-and-key")]
    pub(crate) aad: Aad,
    /// The name values are bound to, if not the topic.
    #[arg(long, value_name = "NAME")]
    pub(crate) aad_name: Option<String>,
    /// The record keys' keyset (AES-SIV), when keys are encrypted too (as
    /// the proxy's `key_keyset` writes them): keys print decrypted, and
    /// values are read bound to the decrypted key.
    #[arg(long, value_name = "FILE", conflicts_with = "schema_registry")]
    pub(crate) key_keyset: Option<PathBuf>,
    /// Confluent's format: the Schema Registry (with its DEK registry) the
    /// records' schemas and DEKs are in; the subject is `TOPIC-value`. The
    /// local-kms secret comes from `LOCAL_SECRET` (as Confluent's clients
    /// take it); basic auth from `SCHEMA_REGISTRY_BASIC_AUTH`
    /// (`user:password`) or a token from `SCHEMA_REGISTRY_BEARER_TOKEN`.
    #[arg(long, value_name = "URL")]
    pub(crate) schema_registry: Option<String>,
    /// Subject keys (this library's format): every present value is read
    /// as a value under them (not with `--keyset`: a topic's values are
    /// under one policy); a shredded subject's value prints as `"value":
    /// null` with `"shredded": true` (a delete, exit 0).
    #[command(flatten)]
    pub(crate) subject: SubjectKeyArgs,
    /// With `--subject-keyset`: a value whose subject was shredded is an
    /// error line (exit 1), not a delete (the library's
    /// `SubjectKeys::strict`).
    #[arg(long, requires = "subject_kek")]
    pub(crate) strict: bool,
    /// The plaintext a broken layer wrote for a delete (as for `audit`):
    /// `empty` (the default), `json-null`, `hex:HEX` or `none`; a value
    /// whose plaintext is it prints with `"broken_delete": true`.
    #[arg(long, value_parser = parse_marker)]
    pub(crate) null_marker: Option<NullMarker>,
    /// How to reach the brokers.
    #[command(flatten)]
    pub(crate) client: ClientArgs,
    /// Give up when no record arrives for this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    pub(crate) timeout: u64,
    /// Only these partitions (`0-15,32`).
    #[arg(long, value_name = "LIST", value_parser = read::parse_partitions)]
    pub(crate) partitions: Option<BTreeSet<i32>>,
}

/// Key templates for `keyset new` and `keyset rotate`: a key's type as
/// `keyset list` and `inspect` name it (`aes-gcm`, `aes-siv`,
/// `kms-envelope`), and `aes128-gcm` for the shorter AES-GCM key. Tink's
/// template names (`AES256_GCM`) and the sized spellings (`aes256-gcm`,
/// `AES-256-GCM`) are accepted too, in any case.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Template {
    /// AES-GCM with a 256-bit key (values).
    #[value(name = "aes-gcm", aliases = ["aes256-gcm", "aes-256-gcm", "aes256_gcm"])]
    Aes256Gcm,
    /// AES-GCM with a 128-bit key (values).
    #[value(name = "aes128-gcm", aliases = ["aes-128-gcm", "aes128_gcm"])]
    Aes128Gcm,
    /// AES-SIV with a 512-bit key (two AES-256 keys), deterministic
    /// (record keys).
    #[value(name = "aes-siv", aliases = ["aes256-siv", "aes-256-siv", "aes256_siv"])]
    Aes256Siv,
    /// Envelope encryption under a KMS key (`--envelope-kms-uri`), AES-GCM
    /// data keys with 256-bit keys (values).
    #[value(name = "kms-envelope", aliases = ["kms_envelope"])]
    KmsEnvelope,
}

/// `keyset` subcommands.
#[derive(Subcommand, Debug)]
enum KeysetCommand {
    /// A new keyset with one key.
    New {
        /// The key type.
        #[arg(long, value_enum, ignore_case = true, default_value = "aes-gcm")]
        template: Template,
        /// For `kms-envelope`: the KMS key that wraps the data keys
        /// (`aws-kms://arn:...`, `hcvault://host/transit/keys/name`).
        #[arg(long = "envelope-kms-uri", alias = "kek-uri", value_name = "URI")]
        kek_uri: Option<String>,
        /// Where the keyset goes.
        #[command(flatten)]
        out: OutArgs,
    },
    /// Add a key of the primary's type (or `--template`) and make it the
    /// primary.
    Rotate {
        /// The keyset file.
        #[command(flatten)]
        file: InArgs,
        /// The new key's type (default: the primary's).
        #[arg(long, value_enum, ignore_case = true)]
        template: Option<Template>,
        /// For a `kms-envelope` template: the KMS key that wraps the new
        /// key's data keys.
        #[arg(long = "envelope-kms-uri", alias = "kek-uri", value_name = "URI")]
        kek_uri: Option<String>,
        /// Where the keyset goes.
        #[command(flatten)]
        out: OutArgs,
    },
    /// Key ids, statuses, types and the primary (never key material).
    List {
        /// The keyset file (Tink JSON, cleartext or encrypted).
        #[arg(long = "keyset", alias = "in", value_name = "FILE")]
        input: PathBuf,
        /// The KMS key the keyset file is encrypted with (Tink's encrypted
        /// keyset).
        #[arg(long = "keyset-kms-uri", alias = "decrypt-with", value_name = "URI")]
        decrypt_with: Option<String>,
    },
    /// Let a disabled key decrypt again.
    Enable(KeyOp),
    /// Keep a key but stop it decrypting (not the primary).
    Disable(KeyOp),
    /// Remove a key and its material for good (not the primary).
    Destroy(KeyOp),
    /// Make a key the primary (it encrypts from now on).
    Promote(KeyOp),
}

/// The keyset file a `keyset` command reads.
#[derive(Args, Debug)]
struct InArgs {
    /// The keyset file (Tink JSON, cleartext or encrypted).
    #[arg(long = "keyset", alias = "in", value_name = "FILE")]
    input: PathBuf,
    /// The KMS key the keyset file is encrypted with (Tink's encrypted
    /// keyset); the changed keyset is written encrypted with it too,
    /// unless `--out-keyset-kms-uri` names another.
    #[arg(long = "keyset-kms-uri", alias = "decrypt-with", value_name = "URI")]
    decrypt_with: Option<String>,
}

/// Where a `keyset` command writes the keyset.
#[derive(Args, Debug)]
struct OutArgs {
    /// Where to write the keyset (readable by its owner only). `new`:
    /// default stdout, and an existing file is refused (its keys would be
    /// lost). The others: default the input file, and an existing file is
    /// replaced atomically.
    #[arg(long = "out-keyset", alias = "out", value_name = "FILE")]
    out: Option<PathBuf>,
    /// Write Tink's encrypted keyset, encrypted with this KMS key.
    #[arg(
        long = "out-keyset-kms-uri",
        alias = "encrypt-with",
        value_name = "URI"
    )]
    encrypt_with: Option<String>,
}

/// The arguments of `keyset enable|disable|destroy|promote`.
#[derive(Args, Debug)]
struct KeyOp {
    /// The keyset file.
    #[command(flatten)]
    file: InArgs,
    /// The key id (as `keyset list` prints it).
    #[arg(long)]
    key_id: u32,
    /// Where the keyset goes.
    #[command(flatten)]
    out: OutArgs,
}

/// The arguments of `inspect`.
#[derive(Args, Debug)]
struct InspectArgs {
    /// The ciphertext in hex; `-` or nothing reads hex from stdin.
    hex: Option<String>,
    /// A keyset, to name the key's type and split the parts.
    #[arg(long, value_name = "FILE")]
    keyset: Option<PathBuf>,
    /// The KMS key the keyset file is encrypted with.
    #[arg(long = "keyset-kms-uri", alias = "decrypt-with", value_name = "URI")]
    decrypt_with: Option<String>,
    /// The input is a JSON record (its text, not hex): list each of its
    /// encrypted fields (`tombstone_crypt::field`) by path, with its key id
    /// and shape; with `--keyset` and `--topic`, whether it authenticates
    /// at its path. Never a field's plaintext.
    #[arg(long)]
    fields: bool,
    /// With `--fields`: the topic the record was written to (or the name
    /// its fields are bound to).
    #[arg(long, requires = "fields")]
    topic: Option<String>,
    /// With `--fields`: the record key, as text.
    #[arg(long, value_name = "KEY", requires = "fields")]
    record_key: Option<String>,
}

/// How a broken layer wrote a delete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum NullMarker {
    /// The empty plaintext.
    Empty,
    /// The four bytes `null` (a JSON serde's `None`).
    JsonNull,
    /// These bytes.
    Bytes(Vec<u8>),
    /// None: no value is a broken delete.
    None,
}

impl NullMarker {
    /// The marker as `--null-marker` names it.
    pub(crate) fn name(&self) -> String {
        match self {
            NullMarker::Empty => "empty".into(),
            NullMarker::JsonNull => "json-null".into(),
            NullMarker::Bytes(b) => format!(
                "hex:{}",
                b.iter().map(|b| format!("{b:02x}")).collect::<String>()
            ),
            NullMarker::None => "none".into(),
        }
    }

    /// Whether the plaintext `value` is this marker.
    pub(crate) fn matches(&self, value: &[u8]) -> bool {
        match self {
            NullMarker::Empty => value.is_empty(),
            NullMarker::JsonNull => value == b"null",
            NullMarker::Bytes(b) => value == &b[..],
            NullMarker::None => false,
        }
    }
}

/// Parses `--null-marker`.
fn parse_marker(s: &str) -> Result<NullMarker, String> {
    match s {
        "empty" => Ok(NullMarker::Empty),
        "json-null" => Ok(NullMarker::JsonNull),
        "none" => Ok(NullMarker::None),
        _ => match s.strip_prefix("hex:") {
            Some(h) => inspect::hex_decode(h).map(NullMarker::Bytes),
            None => Err("expected empty, json-null, hex:HEX or none".into()),
        },
    }
}

/// The associated-data policies.
#[derive(ValueEnum, Clone, Copy, Debug)]
pub(crate) enum Aad {
    /// The topic and the record key (the default of the serde wrappers).
    TopicAndKey,
    /// The topic only.
    Topic,
    /// None.
    None,
}

impl From<Aad> for AadPolicy {
    fn from(a: Aad) -> Self {
        match a {
            Aad::TopicAndKey => AadPolicy::TopicAndKey,
            Aad::Topic => AadPolicy::Topic,
            Aad::None => AadPolicy::None,
        }
    }
}

/// Which form of the record key a value is bound to.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum ValueKey {
    /// The key's plaintext (decrypted with --key-keyset; without it, the
    /// key's bytes, the same).
    Plaintext,
    /// The key's bytes on the topic (topics written that way before).
    Wire,
}

/// Subject keys (crypto-shredding, `tombstone_crypt::shred`): their KEK and
/// their store.
#[derive(Args, Debug, Clone)]
#[command(group(ArgGroup::new("subject_store").args(["subject_key_store", "subject_key_topic"])))]
pub(crate) struct SubjectKeyArgs {
    /// The keyset that wraps the subject keys (their KEK, a keyset file).
    /// With a topic (`audit`, `repair`, `consume`): its values are under
    /// subject keys, each present value read as one (not with --keyset);
    /// a shredded subject's value reads as a delete.
    #[arg(
        long = "subject-keyset",
        alias = "subject-kek",
        value_name = "FILE",
        requires = "subject_store"
    )]
    pub(crate) subject_kek: Option<PathBuf>,
    /// The subject keys' store: a redb file.
    #[arg(
        long,
        value_name = "FILE",
        requires = "subject_kek",
        conflicts_with = "subject_key_topic"
    )]
    pub(crate) subject_key_store: Option<PathBuf>,
    /// The subject keys' store: a compacted topic on the brokers of
    /// `--bootstrap`.
    #[arg(long, value_name = "TOPIC", requires = "subject_kek")]
    pub(crate) subject_key_topic: Option<String>,
    /// Keep the view of `--subject-key-topic` in a redb file in DIR (made
    /// if missing, 0700) rather than in memory: memory that does not grow
    /// with the number of subjects, and a run that reads the topic on
    /// from where the last run's view stopped (a view of another topic,
    /// or of this one made again, is rebuilt from the topic's start).
    #[arg(long, value_name = "DIR", requires = "subject_key_topic")]
    pub(crate) subject_key_view: Option<PathBuf>,
}

/// How every command that talks to the brokers reaches them, beyond
/// `--bootstrap`.
#[derive(Args, Debug, Clone)]
pub(crate) struct ClientArgs {
    /// An rdkafka setting, `key=value` (as kcat's `-X`); repeatable; over
    /// `--client-config` and the environment. Not for secrets: the
    /// command line is in the process list and the shell's history.
    #[arg(short = 'X', value_name = "KEY=VALUE")]
    pub(crate) config: Vec<String>,
    /// A file of rdkafka settings, one `key=value` a line (Java
    /// properties as Kafka's clients take them: `#` or `!` starts a
    /// comment line, blank lines skipped, space around the key and before
    /// the value ignored; no escapes, no continued lines), for secrets
    /// (`sasl.password`). Then `TOMBSTONE_CRYPT_KAFKA_<SETTING>` variables
    /// (`TOMBSTONE_CRYPT_KAFKA_SASL_PASSWORD` is `sasl.password`), then
    /// `-X`: a later one wins.
    #[arg(long, value_name = "FILE")]
    pub(crate) client_config: Option<PathBuf>,
    /// How long the brokers have to answer a first metadata request, in
    /// seconds, before the command gives up (exit 2); also the default of
    /// `socket.connection.setup.timeout.ms`. `--timeout` is how long a
    /// read may then go without a record.
    #[arg(long, value_name = "SECONDS", default_value_t = 5)]
    pub(crate) connect_timeout: u64,
}

/// What the topic commands share.
#[derive(Args, Debug)]
struct TopicArgs {
    /// The brokers (`host:port,...`).
    #[arg(long, value_name = "SERVERS")]
    bootstrap: String,
    /// The topic.
    #[arg(long)]
    topic: String,
    /// The values' keyset file (required unless every value is under
    /// subject keys, `--subject-keyset`, or, for `audit`, with
    /// `--schema-registry`).
    #[arg(long, value_name = "FILE")]
    keyset: Option<PathBuf>,
    /// The KMS key the keyset files are encrypted with.
    #[arg(long = "keyset-kms-uri", alias = "decrypt-with", value_name = "URI")]
    decrypt_with: Option<String>,
    /// The plaintext a broken layer wrote for a delete: `empty`,
    /// `json-null` (the four bytes `null`), `hex:HEX`, or `none` (no value
    /// is a delete: a topic that only writers of this library wrote, where
    /// an empty value is a value). `audit`, `reencrypt` and a `repair`
    /// plan count `empty` when it is not given, and say so; `repair
    /// --apply` needs it named, as it writes tombstones for those values.
    #[arg(long, value_parser = parse_marker)]
    null_marker: Option<NullMarker>,
    /// The values' associated data.
    #[arg(long, value_enum, default_value = "topic-and-key")]
    aad: Aad,
    /// The name the associated data binds values (and encrypted keys) to:
    /// the topic by default, as the typed clients write; a store's name
    /// for the changelog of an `EncryptedStore`, whatever the topic is
    /// called.
    #[arg(long, value_name = "NAME")]
    aad_name: Option<String>,
    /// Which form of the record key values are bound to: `plaintext` (the
    /// decrypted key, as every writer binds them: the typed clients, an
    /// `EncryptedStore`; without --key-keyset the key's bytes, the same) or
    /// `wire` (the key's bytes on the topic, for topics written that way
    /// before).
    #[arg(long, value_enum, default_value = "plaintext")]
    value_key: ValueKey,
    /// The record keys' keyset (AES-SIV), when keys are encrypted too.
    #[arg(long, value_name = "FILE")]
    key_keyset: Option<PathBuf>,
    /// How to reach the brokers.
    #[command(flatten)]
    client: ClientArgs,
    /// Give up when no record arrives for this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    timeout: u64,
    /// How many partitions to read at once, each by its own reader
    /// (default: the number of cores).
    #[arg(long, value_name = "N")]
    parallel: Option<usize>,
    /// Only these partitions (`0-15,32`): several processes can split one
    /// topic between them, each with its own checkpoint (with `--apply`, a
    /// list that overlaps a live run's is refused: see `--lock-dir`). The
    /// report counts these partitions only.
    #[arg(long, value_name = "LIST", value_parser = read::parse_partitions)]
    partitions: Option<BTreeSet<i32>>,
    /// Subject keys, for topics written under them.
    #[command(flatten)]
    subject: SubjectKeyArgs,
    /// With `--subject-keyset`: a value whose subject was shredded is not a
    /// delete but a finding (counted in `shredded_values`, undecryptable;
    /// `repair` leaves it), the library's `SubjectKeys::strict`.
    #[arg(long, requires = "subject_kek")]
    strict: bool,
}

/// Where `--apply` records its progress.
#[derive(Args, Debug)]
struct ProgressArgs {
    /// The checkpoint file of a new `--apply` run: per partition, what is
    /// written and acknowledged (default:
    /// `tombstone-crypt-COMMAND-TOPIC[-pLIST].checkpoint` in the current
    /// directory). It is removed when the run completes; a run that stops
    /// first (killed, a broker down) leaves it, and `--resume FILE` goes on
    /// from it. It never holds a plaintext the topic does not hold, and
    /// ends with its SHA-256: a checkpoint changed or cut is refused.
    #[arg(long, value_name = "FILE", conflicts_with = "resume")]
    checkpoint: Option<PathBuf>,
    /// Go on from an interrupted `--apply` run's checkpoint: the same
    /// command, topics and keysets. The topic ends as one uninterrupted
    /// run would leave it. A topic (or a copy's source) deleted and
    /// created again since is refused, written since or not.
    #[arg(long, value_name = "FILE", requires = "apply")]
    resume: Option<PathBuf>,
    /// The most records of a chunk of writes (journaled, then produced and
    /// acknowledged, then checkpointed); for tests, which kill a run
    /// between chunks.
    #[arg(long, hide = true, default_value_t = write::CHUNK_RECORDS)]
    chunk_records: usize,
    /// Abort the process, as a kill would, once this many records are
    /// acknowledged, each acknowledged before the next is sent: the tests'
    /// fixed kill point (a key's records cut between its tombstones and
    /// its value).
    #[arg(long, hide = true, value_name = "N")]
    fail_after_records: Option<u64>,
    /// Where the partition locks go: one file per partition written (a
    /// name from the topic and its cluster's id), locked for the run's
    /// life, so two runs never write one partition at once, whatever their
    /// checkpoint files (overlapping `--partitions` are refused, naming
    /// the partition), and a stopped run's partitions stay its own while
    /// its checkpoint is there. Every run that may write the topic must use
    /// the same directory, on one machine (default:
    /// `$TOMBSTONE_CRYPT_LOCK_DIR`, else both the user's,
    /// `$XDG_RUNTIME_DIR/tombstone-crypt/locks` or
    /// `$HOME/.cache/tombstone-crypt/locks`, and the machine's,
    /// `/tmp/tombstone-crypt-locks`, shared by every user).
    #[arg(long, value_name = "DIR", requires = "apply")]
    lock_dir: Option<PathBuf>,
    /// The tests' negative control: `--resume` writes the journals before
    /// it reads what others wrote since the run stopped (a delete made
    /// meanwhile can be undone). Never use it.
    #[arg(long, hide = true, requires = "resume")]
    resume_writes_first: bool,
    /// The tests' way to the checks that come after the topic's id: a
    /// topic deleted and created again is told by its records alone, the
    /// broker's topic id not asked. Never use it.
    #[arg(long, hide = true, requires = "apply")]
    without_topic_id: bool,
}

impl ProgressArgs {
    /// The checkpoint of a new run of `command` on the topic of `s`.
    fn path(&self, command: &str, s: &read::Setup) -> PathBuf {
        self.checkpoint.clone().unwrap_or_else(|| {
            let parts = s.only.as_ref().map_or(String::new(), |o| {
                let list: Vec<i32> = o.iter().copied().collect();
                format!("-p{}", report::ranges(&list))
            });
            PathBuf::from(format!(
                "tombstone-crypt-{command}-{}{parts}.checkpoint",
                s.topic
            ))
        })
    }
}

/// The arguments of `audit`.
#[derive(Args, Debug)]
#[command(group(
    ArgGroup::new("values")
        .args(["keyset", "subject_kek", "schema_registry"])
        .required(true)
        .multiple(true)
))]
struct AuditArgs {
    /// The topic and how to read it.
    #[command(flatten)]
    topic: TopicArgs,
    /// Also list every key with its state (live, deleted, broken, split,
    /// undecryptable, plaintext), sorted by partition and key. This prints
    /// the topic's record keys (their plaintext, in hex, with
    /// --key-keyset) to stdout.
    #[arg(long)]
    list_keys: bool,
    /// The topic is in Confluent's format (CSFLE fields, CSPE payloads,
    /// JSON Schema; subject `TOPIC-value`), its schemas and DEKs in the
    /// Schema Registry at this URL: a value that decrypts to JSON `null`
    /// is a broken delete. The local-kms secret from `LOCAL_SECRET`, the
    /// registry's auth as for `consume`. Instead of --keyset.
    #[arg(long, value_name = "URL", conflicts_with = "keyset")]
    schema_registry: Option<String>,
}

/// The arguments of `repair`.
#[derive(Args, Debug)]
#[command(group(
    ArgGroup::new("values")
        .args(["keyset", "subject_kek"])
        .required(true)
        .multiple(true)
))]
struct RepairArgs {
    /// The topic and how to read it.
    #[command(flatten)]
    topic: TopicArgs,
    /// Write (without it: print the plan only).
    #[arg(long)]
    apply: bool,
    /// Where the writes' progress goes.
    #[command(flatten)]
    progress: ProgressArgs,
}

/// The formats whose encrypted fields `reencrypt --fields` rewrites.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum FieldsFormat {
    /// JSON records: a field is a string, base64 of its ciphertext.
    Json,
}

/// What to do with a value that is not a ciphertext.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum UnencryptedArg {
    /// Leave it, and count it.
    Reject,
    /// Treat it as plaintext and encrypt it.
    PassThrough,
}

/// The arguments of `reencrypt`.
#[derive(Args, Debug)]
#[command(group(
    ArgGroup::new("values")
        .args(["keyset", "subject_kek"])
        .required(true)
        .multiple(true)
))]
struct ReencryptArgs {
    /// The topic and how to read it.
    #[command(flatten)]
    topic: TopicArgs,
    /// Write to this topic instead (with as many partitions: each record
    /// keeps its partition). Values are bound to it, unless --aad-name
    /// names what they are bound to.
    #[arg(long, value_name = "TOPIC")]
    to_topic: Option<String>,
    /// Values that are not ciphertexts of the keyset.
    #[arg(long, value_enum, default_value = "reject")]
    unencrypted: UnencryptedArg,
    /// Rewrite the encrypted fields (`tombstone_crypt::field`) of each
    /// live record instead: `json`. A field is a string that is canonical
    /// base64 of `0x01 | key id | ...`; each must authenticate at its path
    /// (a JSON Pointer), and each under an older key is encrypted again
    /// under the primary key at the same path, in place of its old text:
    /// every other byte of the record stays as it was. A value that is not
    /// encrypted stays so; one encrypted as a whole (under --keyset) is
    /// decrypted, its fields rewritten, and encrypted again. A string that
    /// reads as a field and does not authenticate at its path is left as
    /// it is, counted and named by partition, offset and path (exit 1);
    /// the record's other fields are still rewritten. A record that is not
    /// JSON is left as it is and counted (exit 1). A string too short for
    /// an AES-GCM ciphertext, under a key id no field keyset holds, is
    /// taken for plain text.
    #[arg(long, value_enum, value_name = "FORMAT")]
    fields: Option<FieldsFormat>,
    /// With --fields: the keyset of the randomized fields
    /// (`Encrypted<T>`), if not --keyset.
    #[arg(long, value_name = "FILE", requires = "fields")]
    field_keyset: Option<PathBuf>,
    /// With --fields: the keyset of the deterministic fields
    /// (`Deterministic<T>`, AES-SIV), if the records have any.
    #[arg(long, value_name = "FILE", requires = "fields")]
    deterministic_field_keyset: Option<PathBuf>,
    /// With --fields: what the randomized fields are bound to besides
    /// their path (`FieldEncrypting::with_aad`).
    #[arg(long, value_enum, default_value = "topic-and-key", requires = "fields")]
    field_aad: Aad,
    /// With --fields: what the deterministic fields are bound to besides
    /// their path (`FieldEncrypting::with_deterministic_aad`).
    #[arg(long, value_enum, default_value = "topic", requires = "fields")]
    deterministic_field_aad: Aad,
    /// Write (without it: print the plan only).
    #[arg(long)]
    apply: bool,
    /// Where the writes' progress goes.
    #[command(flatten)]
    progress: ProgressArgs,
}

/// A failure that ends the command with exit code 2.
#[derive(Debug)]
pub(crate) struct Fail(pub(crate) String);

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        Fail(chain(&e))
    }
}

/// An error and its causes, on one line.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        cause = c.source();
    }
    s
}

/// A [`Fail`] with `msg`.
pub(crate) fn fail(msg: impl Into<String>) -> Fail {
    Fail(msg.into())
}

/// How a command ended when it did not fail.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Done, nothing found: exit 0.
    Clean,
    /// Findings: exit 1.
    Findings,
}

impl Outcome {
    /// `Findings` if there are any, else `Clean`.
    pub(crate) fn of(findings: bool) -> Outcome {
        if findings {
            Outcome::Findings
        } else {
            Outcome::Clean
        }
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version are not errors.
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    if let Err(msg) = init_logging(cli.verbose) {
        let _ = writeln!(std::io::stderr(), "tombstone-crypt: error: {msg}");
        return ExitCode::from(2);
    }
    keysets::register_kms_clients();
    let _span = tracing::info_span!("command", name = cli.command.name()).entered();
    let out = Output {
        json: cli.json,
        quiet: cli.quiet,
    };
    let result = match cli.command {
        Command::Keyset(k) => keysets::run(k, &out),
        Command::Inspect(a) => inspect::inspect(a, &out),
        Command::Audit(a) => audit::audit(&a, &out),
        Command::Repair(a) => repair::repair(&a, &out),
        Command::Reencrypt(a) => reencrypt::reencrypt(&a, &out),
        Command::Consume(a) => consume::consume(&a, &out),
        Command::Shred(a) => shred::shred(&a, &out),
        Command::Proxy(a) => proxy::proxy(&a),
    };
    match result {
        Ok(Outcome::Clean) => ExitCode::SUCCESS,
        Ok(Outcome::Findings) => ExitCode::from(1),
        Err(Fail(msg)) => {
            let _ = writeln!(std::io::stderr(), "tombstone-crypt: error: {msg}");
            ExitCode::from(2)
        }
    }
}

/// Logs to stderr (never stdout, which `--json` keeps for its document):
/// `RUST_LOG` when set, else the level `-v` gives (warnings without it).
fn init_logging(verbose: u8) -> Result<(), String> {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.trim().is_empty() => spec
            .parse::<Targets>()
            .map_err(|e| format!("RUST_LOG={spec:?}: {e}"))?,
        _ => Targets::new().with_default(match verbose {
            0 => LevelFilter::WARN,
            1 => LevelFilter::INFO,
            2 => LevelFilter::DEBUG,
            _ => LevelFilter::TRACE,
        }),
    };
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(false)
                .with_target(false)
                // A line when a span closes: each command and KMS call with
                // its outcome and time, at `-v`.
                .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE),
        )
        .with(filter)
        .try_init()
        .map_err(|e| e.to_string())
}

impl Command {
    /// The command's name, for its span.
    fn name(&self) -> &'static str {
        match self {
            Command::Keyset(_) => "keyset",
            Command::Inspect(_) => "inspect",
            Command::Audit(_) => "audit",
            Command::Repair(_) => "repair",
            Command::Reencrypt(_) => "reencrypt",
            Command::Consume(_) => "consume",
            Command::Shred(_) => "shred",
            Command::Proxy(_) => "proxy",
        }
    }
}

/// Where results go.
pub(crate) struct Output {
    /// `--json`: JSON instead of text.
    pub(crate) json: bool,
    /// `--quiet`: no progress bar.
    pub(crate) quiet: bool,
}

impl Output {
    /// Prints `text` or, with `--json`, `json` (one document) on stdout.
    pub(crate) fn print(&self, text: &str, json: &serde_json::Value) -> Result<(), Fail> {
        let mut stdout = std::io::stdout().lock();
        let written = if self.json {
            writeln!(stdout, "{json}")
        } else {
            write!(stdout, "{text}")
        };
        written
            .and_then(|()| stdout.flush())
            .map_err(|e| fail(format!("writing to stdout: {e}")))
    }
}
