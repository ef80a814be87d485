//! The command line's arguments: every command's options, as clap reads
//! them, and the small types they parse into.

use std::collections::BTreeSet;
use std::path::PathBuf;

use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};
use tombstone_crypt::AadPolicy;

/// The heading of the options every command takes.
pub(crate) const GLOBAL: &str = "Global options";

/// Keysets, ciphertexts and Kafka topics encrypted with tombstone-crypt
/// (Tink's formats): find and repair the deletes a broken layer wrote as
/// values.
#[derive(Parser, Debug)]
#[command(name = "tombstone-crypt", version)]
pub(crate) struct Cli {
    /// Print JSON on stdout (for scripts) instead of text.
    #[arg(long, global = true, help_heading = GLOBAL)]
    pub(crate) json: bool,
    /// No progress bar on stderr (`audit`, `repair`, `reencrypt` and
    /// `consume` show one when stderr is a terminal; the other commands
    /// have none, and ignore it).
    #[arg(long, short, global = true, help_heading = GLOBAL)]
    pub(crate) quiet: bool,
    /// Log more to stderr: `-v` info (a span per command and per KMS call),
    /// `-vv` debug (DEKs made and unwrapped), `-vvv` trace. Without it,
    /// warnings only (a KMS retry, a failed KMS call). `RUST_LOG` (a level,
    /// or `target=level,...`) overrides it.
    #[arg(long, short, global = true, action = clap::ArgAction::Count, help_heading = GLOBAL)]
    pub(crate) verbose: u8,
    /// The command.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The commands.
#[derive(Subcommand, Debug)]
pub(crate) enum Command {
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
    Proxy(ProxyArgs),
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
    #[arg(long, value_name = "LIST", value_parser = parse_partitions)]
    pub(crate) partitions: Option<BTreeSet<i32>>,
}

/// Key templates for `keyset new` and `keyset rotate`: a key's type as
/// `keyset list` and `inspect` name it (`aes-gcm`, `aes-siv`,
/// `kms-envelope`), and `aes128-gcm` for the shorter AES-GCM key. Tink's
/// template names (`AES256_GCM`) and the sized spellings (`aes256-gcm`,
/// `AES-256-GCM`) are accepted too, in any case.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Template {
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
pub(crate) enum KeysetCommand {
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
pub(crate) struct InArgs {
    /// The keyset file (Tink JSON, cleartext or encrypted).
    #[arg(long = "keyset", alias = "in", value_name = "FILE")]
    pub(crate) input: PathBuf,
    /// The KMS key the keyset file is encrypted with (Tink's encrypted
    /// keyset); the changed keyset is written encrypted with it too,
    /// unless `--out-keyset-kms-uri` names another.
    #[arg(long = "keyset-kms-uri", alias = "decrypt-with", value_name = "URI")]
    pub(crate) decrypt_with: Option<String>,
}

/// Where a `keyset` command writes the keyset.
#[derive(Args, Debug)]
pub(crate) struct OutArgs {
    /// Where to write the keyset (readable by its owner only). `new`:
    /// default stdout, and an existing file is refused (its keys would be
    /// lost). The others: default the input file, and an existing file is
    /// replaced atomically.
    #[arg(long = "out-keyset", alias = "out", value_name = "FILE")]
    pub(crate) out: Option<PathBuf>,
    /// Write Tink's encrypted keyset, encrypted with this KMS key.
    #[arg(
        long = "out-keyset-kms-uri",
        alias = "encrypt-with",
        value_name = "URI"
    )]
    pub(crate) encrypt_with: Option<String>,
}

/// The arguments of `keyset enable|disable|destroy|promote`.
#[derive(Args, Debug)]
pub(crate) struct KeyOp {
    /// The keyset file.
    #[command(flatten)]
    pub(crate) file: InArgs,
    /// The key id (as `keyset list` prints it).
    #[arg(long)]
    pub(crate) key_id: u32,
    /// Where the keyset goes.
    #[command(flatten)]
    pub(crate) out: OutArgs,
}

/// The arguments of `inspect`.
#[derive(Args, Debug)]
pub(crate) struct InspectArgs {
    /// The ciphertext in hex; `-` or nothing reads hex from stdin.
    pub(crate) hex: Option<String>,
    /// A keyset, to name the key's type and split the parts.
    #[arg(long, value_name = "FILE")]
    pub(crate) keyset: Option<PathBuf>,
    /// The KMS key the keyset file is encrypted with.
    #[arg(long = "keyset-kms-uri", alias = "decrypt-with", value_name = "URI")]
    pub(crate) decrypt_with: Option<String>,
    /// The input is a JSON record (its text, not hex): list each of its
    /// encrypted fields (`tombstone_crypt::field`) by path, with its key id
    /// and shape; with `--keyset` and `--topic`, whether it authenticates
    /// at its path. Never a field's plaintext.
    #[arg(long)]
    pub(crate) fields: bool,
    /// With `--fields`: the topic the record was written to (or the name
    /// its fields are bound to).
    #[arg(long, requires = "fields")]
    pub(crate) topic: Option<String>,
    /// With `--fields`: the record key, as text.
    #[arg(long, value_name = "KEY", requires = "fields")]
    pub(crate) record_key: Option<String>,
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
pub(crate) fn parse_marker(s: &str) -> Result<NullMarker, String> {
    match s {
        "empty" => Ok(NullMarker::Empty),
        "json-null" => Ok(NullMarker::JsonNull),
        "none" => Ok(NullMarker::None),
        _ => match s.strip_prefix("hex:") {
            Some(h) => hex_decode(h).map(NullMarker::Bytes),
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
pub(crate) enum ValueKey {
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
pub(crate) struct TopicArgs {
    /// The brokers (`host:port,...`).
    #[arg(long, value_name = "SERVERS")]
    pub(crate) bootstrap: String,
    /// The topic.
    #[arg(long)]
    pub(crate) topic: String,
    /// The values' keyset file (required unless every value is under
    /// subject keys, `--subject-keyset`, or, for `audit`, with
    /// `--schema-registry`).
    #[arg(long, value_name = "FILE")]
    pub(crate) keyset: Option<PathBuf>,
    /// The KMS key the keyset files are encrypted with.
    #[arg(long = "keyset-kms-uri", alias = "decrypt-with", value_name = "URI")]
    pub(crate) decrypt_with: Option<String>,
    /// The plaintext a broken layer wrote for a delete: `empty`,
    /// `json-null` (the four bytes `null`), `hex:HEX`, or `none` (no value
    /// is a delete: a topic that only writers of this library wrote, where
    /// an empty value is a value). `audit`, `reencrypt` and a `repair`
    /// plan count `empty` when it is not given, and say so; `repair
    /// --apply` needs it named, as it writes tombstones for those values.
    #[arg(long, value_parser = parse_marker)]
    pub(crate) null_marker: Option<NullMarker>,
    /// The values' associated data.
    #[arg(long, value_enum, default_value = "topic-and-key")]
    pub(crate) aad: Aad,
    /// The name the associated data binds values (and encrypted keys) to:
    /// the topic by default, as the typed clients write; a store's name
    /// for the changelog of an `EncryptedStore`, whatever the topic is
    /// called.
    #[arg(long, value_name = "NAME")]
    pub(crate) aad_name: Option<String>,
    /// Which form of the record key values are bound to: `plaintext` (the
    /// decrypted key, as every writer binds them: the typed clients, an
    /// `EncryptedStore`; without --key-keyset the key's bytes, the same) or
    /// `wire` (the key's bytes on the topic, for topics written that way
    /// before).
    #[arg(long, value_enum, default_value = "plaintext")]
    pub(crate) value_key: ValueKey,
    /// The record keys' keyset (AES-SIV), when keys are encrypted too.
    #[arg(long, value_name = "FILE")]
    pub(crate) key_keyset: Option<PathBuf>,
    /// How to reach the brokers.
    #[command(flatten)]
    pub(crate) client: ClientArgs,
    /// Give up when no record arrives for this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    pub(crate) timeout: u64,
    /// How many partitions to read at once, each by its own reader
    /// (default: the number of cores).
    #[arg(long, value_name = "N")]
    pub(crate) parallel: Option<usize>,
    /// Only these partitions (`0-15,32`): several processes can split one
    /// topic between them, each with its own checkpoint (with `--apply`, a
    /// list that overlaps a live run's is refused: see `--lock-dir`). The
    /// report counts these partitions only.
    #[arg(long, value_name = "LIST", value_parser = parse_partitions)]
    pub(crate) partitions: Option<BTreeSet<i32>>,
    /// Subject keys, for topics written under them.
    #[command(flatten)]
    pub(crate) subject: SubjectKeyArgs,
    /// With `--subject-keyset`: a value whose subject was shredded is not a
    /// delete but a finding (counted in `shredded_values`, undecryptable;
    /// `repair` leaves it), the library's `SubjectKeys::strict`.
    #[arg(long, requires = "subject_kek")]
    pub(crate) strict: bool,
}

/// Where `--apply` records its progress.
#[derive(Args, Debug)]
pub(crate) struct ProgressArgs {
    /// The checkpoint file of a new `--apply` run: per partition, what is
    /// written and acknowledged (default:
    /// `tombstone-crypt-COMMAND-TOPIC[-pLIST].checkpoint` in the current
    /// directory). It is removed when the run completes; a run that stops
    /// first (killed, a broker down) leaves it, and `--resume FILE` goes on
    /// from it. It never holds a plaintext the topic does not hold, and
    /// ends with its SHA-256: a checkpoint changed or cut is refused.
    #[arg(long, value_name = "FILE", conflicts_with = "resume")]
    pub(crate) checkpoint: Option<PathBuf>,
    /// Go on from an interrupted `--apply` run's checkpoint: the same
    /// command, topics and keysets. The topic ends as one uninterrupted
    /// run would leave it. A topic (or a copy's source) deleted and
    /// created again since is refused, written since or not.
    #[arg(long, value_name = "FILE", requires = "apply")]
    pub(crate) resume: Option<PathBuf>,
    /// The most records of a chunk of writes (journaled, then produced and
    /// acknowledged, then checkpointed); for tests, which kill a run
    /// between chunks.
    #[arg(long, hide = true, default_value_t = CHUNK_RECORDS)]
    pub(crate) chunk_records: usize,
    /// Abort the process, as a kill would, once this many records are
    /// acknowledged, each acknowledged before the next is sent: the tests'
    /// fixed kill point (a key's records cut between its tombstones and
    /// its value).
    #[arg(long, hide = true, value_name = "N")]
    pub(crate) fail_after_records: Option<u64>,
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
    pub(crate) lock_dir: Option<PathBuf>,
    /// The tests' negative control: `--resume` writes the journals before
    /// it reads what others wrote since the run stopped (a delete made
    /// meanwhile can be undone). Never use it.
    #[arg(long, hide = true, requires = "resume")]
    pub(crate) resume_writes_first: bool,
    /// The tests' way to the checks that come after the topic's id: a
    /// topic deleted and created again is told by its records alone, the
    /// broker's topic id not asked. Never use it.
    #[arg(long, hide = true, requires = "apply")]
    pub(crate) without_topic_id: bool,
}

/// The arguments of `audit`.
#[derive(Args, Debug)]
#[command(group(
    ArgGroup::new("values")
        .args(["keyset", "subject_kek", "schema_registry"])
        .required(true)
        .multiple(true)
))]
pub(crate) struct AuditArgs {
    /// The topic and how to read it.
    #[command(flatten)]
    pub(crate) topic: TopicArgs,
    /// Also list every key with its state (live, deleted, broken, split,
    /// undecryptable, plaintext), sorted by partition and key. This prints
    /// the topic's record keys (their plaintext, in hex, with
    /// --key-keyset) to stdout.
    #[arg(long)]
    pub(crate) list_keys: bool,
    /// The topic is in Confluent's format (CSFLE fields, CSPE payloads,
    /// JSON Schema; subject `TOPIC-value`), its schemas and DEKs in the
    /// Schema Registry at this URL: a value that decrypts to JSON `null`
    /// is a broken delete. The local-kms secret from `LOCAL_SECRET`, the
    /// registry's auth as for `consume`. Instead of --keyset.
    #[arg(long, value_name = "URL", conflicts_with = "keyset")]
    pub(crate) schema_registry: Option<String>,
}

/// The arguments of `repair`.
#[derive(Args, Debug)]
#[command(group(
    ArgGroup::new("values")
        .args(["keyset", "subject_kek"])
        .required(true)
        .multiple(true)
))]
pub(crate) struct RepairArgs {
    /// The topic and how to read it.
    #[command(flatten)]
    pub(crate) topic: TopicArgs,
    /// Write (without it: print the plan only).
    #[arg(long)]
    pub(crate) apply: bool,
    /// Where the writes' progress goes.
    #[command(flatten)]
    pub(crate) progress: ProgressArgs,
}

/// The formats whose encrypted fields `reencrypt --fields` rewrites.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FieldsFormat {
    /// JSON records: a field is a string, base64 of its ciphertext.
    Json,
}

/// What to do with a value that is not a ciphertext.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UnencryptedArg {
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
pub(crate) struct ReencryptArgs {
    /// The topic and how to read it.
    #[command(flatten)]
    pub(crate) topic: TopicArgs,
    /// Write to this topic instead (with as many partitions: each record
    /// keeps its partition). Values are bound to it, unless --aad-name
    /// names what they are bound to.
    #[arg(long, value_name = "TOPIC")]
    pub(crate) to_topic: Option<String>,
    /// Values that are not ciphertexts of the keyset.
    #[arg(long, value_enum, default_value = "reject")]
    pub(crate) unencrypted: UnencryptedArg,
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
    pub(crate) fields: Option<FieldsFormat>,
    /// With --fields: the keyset of the randomized fields
    /// (`Encrypted<T>`), if not --keyset.
    #[arg(long, value_name = "FILE", requires = "fields")]
    pub(crate) field_keyset: Option<PathBuf>,
    /// With --fields: the keyset of the deterministic fields
    /// (`Deterministic<T>`, AES-SIV), if the records have any.
    #[arg(long, value_name = "FILE", requires = "fields")]
    pub(crate) deterministic_field_keyset: Option<PathBuf>,
    /// With --fields: what the randomized fields are bound to besides
    /// their path (`FieldEncrypting::with_aad`).
    #[arg(long, value_enum, default_value = "topic-and-key", requires = "fields")]
    pub(crate) field_aad: Aad,
    /// With --fields: what the deterministic fields are bound to besides
    /// their path (`FieldEncrypting::with_deterministic_aad`).
    #[arg(long, value_enum, default_value = "topic", requires = "fields")]
    pub(crate) deterministic_field_aad: Aad,
    /// Write (without it: print the plan only).
    #[arg(long)]
    pub(crate) apply: bool,
    /// Where the writes' progress goes.
    #[command(flatten)]
    pub(crate) progress: ProgressArgs,
}

impl Command {
    /// The command's name, for its span.
    pub(crate) fn name(&self) -> &'static str {
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

/// `proxy`'s arguments.
#[derive(Args, Debug)]
pub(crate) struct ProxyArgs {
    /// The configuration file (JSON): `listen` (the bootstrap address
    /// clients connect to; broker node N is served at its port + 1 + N),
    /// `bootstrap` (the real cluster), optional `advertised_host` and
    /// `max_frame_bytes` (default 100 MiB), and `topics`, a list of
    /// `{"topic": NAME}` or `{"prefix": PREFIX}` entries with either
    /// `value_keyset` (values under a keyset) or `subject_keyset` (a KEK:
    /// values under subject keys, the subject the record key, with
    /// `subject_key_topic`, a key-store topic on the cluster that `shred
    /// --subject-key-topic` shreds through while the proxy runs, or
    /// `subject_key_store`, a redb file; optional `subject_key_view`, a
    /// directory), optional `key_keyset` (Tink JSON keyset files, relative
    /// to the configuration file), optional `value_keyset_kms_uri` /
    /// `subject_keyset_kms_uri` / `key_keyset_kms_uri` (the file is an
    /// encrypted keyset under that KMS key, as --keyset-kms-uri) and
    /// `headers` (names of headers whose values are encrypted; not with
    /// `subject_keyset`). Topics no entry names pass through untouched. Optional `tls` (`cert_file`,
    /// `key_file`: the listeners speak TLS) and `upstream_tls` (`ca_file`,
    /// optional `server_name`: TLS to the brokers) and `key_store_client`
    /// (librdkafka's `security.protocol`, `sasl.*`, `ssl.*` for the
    /// proxy's own client of key-store topics).
    #[arg(long, value_name = "FILE")]
    pub(crate) config: PathBuf,
    /// After SIGINT or SIGTERM, how long to wait for in-flight requests to
    /// be answered before closing, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    pub(crate) drain_seconds: u64,
}

/// The most records of a chunk by default: in flight at once, and
/// journaled. Larger chunks are hardly faster and cost memory: with
/// 10,000 records (or 8 MiB), `reencrypt --apply` of 10^6 records with 2
/// readers peaked at 177 MiB, with 3,000 at 107 MiB, 6% slower.
pub(crate) const CHUNK_RECORDS: usize = 4_000;

/// Parses `--partitions`: numbers and ranges, `0-15,32`.
pub(crate) fn parse_partitions(text: &str) -> Result<BTreeSet<i32>, String> {
    let mut set = BTreeSet::new();
    for part in text.split(',').map(str::trim) {
        let num = |t: &str| {
            t.trim()
                .parse::<i32>()
                .ok()
                .filter(|n| *n >= 0)
                .ok_or_else(|| format!("{t:?} is not a partition number"))
        };
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => (num(part)?, num(part)?),
        };
        if a > b {
            return Err(format!("{part}: the range runs backwards"));
        }
        // Checked before the range is expanded: never a set of 2^31.
        let n = usize::try_from(i64::from(b) - i64::from(a) + 1).unwrap_or(usize::MAX);
        if set.len().saturating_add(n) > 1 << 20 {
            return Err("more than 2^20 partitions".into());
        }
        set.extend(a..=b);
    }
    Ok(set)
}

/// Decodes hex digits (whitespace between them ignored).
pub(crate) fn hex_decode(s: &str) -> Result<Vec<u8>, String> {
    let s: String = s.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    if !s.len().is_multiple_of(2) {
        return Err(format!("odd number of hex digits ({})", s.len()));
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        b'A'..=b'F' => Ok(c - b'A' + 10),
        _ => Err("not a hex digit".to_owned()),
    };
    s.as_bytes()
        .chunks(2)
        .map(|p| Ok(digit(p[0])? << 4 | digit(p[1])?))
        .collect()
}
