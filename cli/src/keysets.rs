//! `keyset new|rotate|list|enable|disable|destroy|promote`, and loading
//! keysets for the other commands.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde_json::json;
use tombstone_crypt::kms::{AwsKmsClient, VaultClient};
use tombstone_crypt::{KeyId, KeyStatus, KeyTemplate, Keyset};
use zeroize::Zeroizing;

use crate::args::{InArgs, KeyOp, KeysetCommand, OutArgs, Template};
use crate::outcome::{fail, Fail, Outcome, Output};

/// The KMS clients the command line knows: Vault/OpenBao transit
/// (`hcvault://`, `VAULT_ADDR` and `VAULT_TOKEN`) and AWS KMS
/// (`aws-kms://`, the usual `AWS_*` variables).
pub(crate) fn register_kms_clients() {
    tombstone_crypt::kms::register_kms_client(VaultClient::from_env());
    tombstone_crypt::kms::register_kms_client(AwsKmsClient::from_env());
}

/// Reads a keyset file: Tink's cleartext JSON, or Tink's encrypted keyset
/// with `decrypt_with` (the KMS key it is encrypted with). The library's
/// loader ([`tombstone_crypt::files`], the proxy's too): the file at most
/// 16 MiB, read into a buffer zeroized when dropped; errors name the file,
/// never key bytes.
pub(crate) fn load(path: &Path, decrypt_with: Option<&str>) -> Result<Keyset, Fail> {
    tombstone_crypt::files::load_keyset(path, decrypt_with).map_err(Fail::from)
}

/// Writes `keyset` to `path` (atomically: a new file, readable by its
/// owner only, synced, renamed over the old; or, with `replace` false,
/// linked to `path` only if nothing is there, so a file made meanwhile is
/// never replaced; then the directory is synced, so the rename or link is
/// on disk before this returns) or to stdout.
fn store(
    keyset: &Keyset,
    out: &OutArgs,
    default: Option<&Path>,
    replace: bool,
) -> Result<(), Fail> {
    let text = Zeroizing::new(match &out.encrypt_with {
        Some(uri) => keyset.to_encrypted_tink_json(uri, b"")?,
        None => keyset.to_tink_json(),
    });
    let Some(path) = out.out.as_deref().or(default) else {
        let mut stdout = std::io::stdout().lock();
        return writeln!(stdout, "{}", text.as_str())
            .map_err(|e| fail(format!("writing to stdout: {e}")));
    };
    let tmp = tmp_path(path);
    let written = (|| {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut f = options.open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.write_all(b"\n")?;
        f.sync_all()?;
        if replace {
            std::fs::rename(&tmp, path)
        } else {
            std::fs::hard_link(&tmp, path)?;
            std::fs::remove_file(&tmp)
        }
    })();
    written.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        let why = if e.kind() == std::io::ErrorKind::AlreadyExists {
            " (a new keyset never replaces a file: its keys would be lost)"
        } else {
            ""
        };
        fail(format!("writing the keyset {}: {e}{why}", path.display()))
    })?;
    sync_dir_of(path).map_err(|e| {
        fail(format!(
            "syncing the directory of the keyset {} (the new keyset is in place \
             but may not survive a crash): {e}",
            path.display()
        ))
    })
}

/// Syncs the directory that holds `path`: a rename or a link is a change
/// of the directory, and until the directory is synced a crash may undo
/// it (the old keyset back, after values were written under the new
/// primary).
#[cfg(unix)]
fn sync_dir_of(path: &Path) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    match std::fs::File::open(dir)?.sync_all() {
        // A file system that cannot sync a directory at all says EINVAL
        // (or ENOTSUP): there is nothing more to do there (PostgreSQL's
        // fsync_fname makes the same exception).
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::InvalidInput | std::io::ErrorKind::Unsupported
            ) =>
        {
            Ok(())
        }
        synced => synced,
    }
}

/// Elsewhere a directory cannot be opened as a file to sync it (Windows
/// needs a handle with backup semantics), and NTFS journals the rename
/// itself: nothing to do.
#[cfg(not(unix))]
fn sync_dir_of(_path: &Path) -> std::io::Result<()> {
    Ok(())
}

/// The temporary file beside `path` that a keyset is written to first.
fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".tmp-{}", std::process::id()));
    path.with_file_name(name)
}

/// The key template of `--template` (and `--envelope-kms-uri`, for
/// `kms-envelope` only).
fn template(t: Template, kek_uri: Option<&str>) -> Result<KeyTemplate, Fail> {
    match (t, kek_uri) {
        (Template::Aes256Gcm, None) => Ok(KeyTemplate::aes256_gcm()),
        (Template::Aes128Gcm, None) => Ok(KeyTemplate::aes128_gcm()),
        (Template::Aes256Siv, None) => Ok(KeyTemplate::aes256_siv()),
        (Template::KmsEnvelope, Some(uri)) => Ok(KeyTemplate::kms_envelope(uri)),
        (Template::KmsEnvelope, None) => {
            Err(fail("the kms-envelope template needs --envelope-kms-uri URI"))
        }
        (_, Some(_)) => Err(fail(
            "--envelope-kms-uri is for the kms-envelope template (to encrypt the keyset file, use --out-keyset-kms-uri)",
        )),
    }
}

/// The short name of a key's type, from its Tink type URL.
pub(crate) fn type_name(url: &str) -> &'static str {
    tombstone_crypt::format::KeyType::from_type_url(url)
        .map_or("unknown", tombstone_crypt::format::KeyType::name)
}

/// A key status as Tink's JSON spells it.
pub(crate) fn status_name(s: KeyStatus) -> &'static str {
    match s {
        KeyStatus::Enabled => "ENABLED",
        KeyStatus::Disabled => "DISABLED",
        _ => "UNKNOWN",
    }
}

/// The keyset without key material: ids, statuses, types, the primary.
fn listing(keyset: &Keyset) -> (String, serde_json::Value) {
    let primary = keyset.primary();
    let mut text = format!(
        "{:>10}  {:<8}  {:<12}  primary\n",
        "key id", "status", "type"
    );
    let mut keys = Vec::new();
    for (id, status) in keyset.keys() {
        let url = keyset.key_type_url(id).unwrap_or("");
        let is_primary = id == primary;
        text.push_str(&format!(
            "{:>10}  {:<8}  {:<12}  {}\n",
            id.0,
            status_name(status),
            type_name(url),
            if is_primary { "*" } else { "" }
        ));
        keys.push(json!({"key_id": id.0, "status": status_name(status),
            "type": type_name(url), "type_url": url, "primary": is_primary}));
    }
    (text, json!({"primary_key_id": primary.0, "keys": keys}))
}

/// `tombstone-crypt keyset ...`.
pub(crate) fn run(cmd: KeysetCommand, out: &Output) -> Result<Outcome, Fail> {
    match cmd {
        KeysetCommand::New {
            template: t,
            kek_uri,
            out: o,
        } => {
            if let Some(path) = &o.out {
                if path.exists() {
                    return Err(fail(format!(
                        "{} exists: a new keyset never replaces one (its keys would be lost)",
                        path.display()
                    )));
                }
            }
            let keyset = Keyset::generate_with(template(t, kek_uri.as_deref())?)?;
            store(&keyset, &o, None, false)?;
            if o.out.is_some() {
                let (text, json) = listing(&keyset);
                out.print(&text, &json)?;
            }
        }
        KeysetCommand::Rotate {
            file,
            template: t,
            kek_uri,
            out: o,
        } => {
            let mut keyset = load(&file.input, file.decrypt_with.as_deref())?;
            match t {
                Some(t) => {
                    keyset.rotate_with(template(t, kek_uri.as_deref())?)?;
                }
                None if kek_uri.is_some() => {
                    return Err(fail("--envelope-kms-uri needs --template kms-envelope"))
                }
                None => {
                    keyset.rotate();
                }
            }
            save_and_list(&keyset, &file, o, out)?;
        }
        KeysetCommand::List {
            input,
            decrypt_with,
        } => {
            let keyset = load(&input, decrypt_with.as_deref())?;
            let (text, json) = listing(&keyset);
            out.print(&text, &json)?;
        }
        KeysetCommand::Enable(op) => key_op(op, out, Keyset::enable)?,
        KeysetCommand::Disable(op) => key_op(op, out, Keyset::disable)?,
        KeysetCommand::Destroy(op) => key_op(op, out, Keyset::remove)?,
        KeysetCommand::Promote(op) => key_op(op, out, Keyset::set_primary)?,
    }
    Ok(Outcome::Clean)
}

/// Loads `--keyset`, applies `f` to `--key-id`, writes the keyset back and
/// lists it.
fn key_op(
    op: KeyOp,
    out: &Output,
    f: fn(&mut Keyset, KeyId) -> Result<(), tombstone_crypt::Error>,
) -> Result<(), Fail> {
    let mut keyset = load(&op.file.input, op.file.decrypt_with.as_deref())?;
    f(&mut keyset, KeyId(op.key_id))?;
    save_and_list(&keyset, &op.file, op.out, out)
}

/// Writes the changed keyset (back to `--keyset` unless `--out-keyset`; encrypted
/// again with the key it was read with unless `--out-keyset-kms-uri`) and lists
/// it.
fn save_and_list(keyset: &Keyset, file: &InArgs, o: OutArgs, out: &Output) -> Result<(), Fail> {
    let o = OutArgs {
        encrypt_with: o.encrypt_with.or_else(|| file.decrypt_with.clone()),
        out: o.out,
    };
    store(keyset, &o, Some(&file.input), true)?;
    let (text, json) = listing(keyset);
    out.print(&text, &json)
}
