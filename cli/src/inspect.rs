//! `tombstone-crypt inspect`: the shape of a ciphertext (its header and
//! the lengths of its parts, never its bytes beyond the version and key
//! id), or the encrypted fields of a JSON record, as the library's
//! `format` module reads them.

use tombstone_crypt::Keyset;

use crate::args::{hex_decode, InspectArgs};
use crate::fields;
use crate::keysets;
use crate::outcome::{fail, Fail, Outcome, Output};

/// The most hex text `inspect` reads from stdin (a ciphertext of 64 MiB).
const MAX_INSPECT_HEX: u64 = 128 << 20;

/// `tombstone-crypt inspect`: exit 1 when the bytes are not a ciphertext.
pub(crate) fn inspect(a: InspectArgs, out: &Output) -> Result<Outcome, Fail> {
    let text = match a.hex.as_deref() {
        Some(h) if h != "-" => h.to_owned(),
        _ => {
            let mut s = String::new();
            std::io::Read::read_to_string(
                &mut std::io::Read::take(std::io::stdin(), MAX_INSPECT_HEX),
                &mut s,
            )
            .map_err(|e| fail(format!("reading stdin: {e}")))?;
            s
        }
    };
    let keyset = match &a.keyset {
        Some(path) => Some(keysets::load(path, a.decrypt_with.as_deref())?),
        None => None,
    };
    if a.fields {
        return inspect_fields(&text, keyset.as_ref(), &a, out);
    }
    let bytes = hex_decode(&text).map_err(|e| fail(format!("the ciphertext is not hex: {e}")))?;
    let report = describe(&bytes, keyset.as_ref());
    let mut text = String::new();
    for (k, v) in report.as_object().into_iter().flatten() {
        let v = match v {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        text.push_str(&format!("{k:<11} {v}\n"));
    }
    out.print(&text, &report)?;
    Ok(Outcome::of(
        report["ciphertext"] != serde_json::Value::Bool(true),
    ))
}

/// `inspect --fields`: the encrypted fields of the JSON record `text`.
fn inspect_fields(
    text: &str,
    keyset: Option<&Keyset>,
    a: &InspectArgs,
    out: &Output,
) -> Result<Outcome, Fail> {
    use tombstone_crypt::{field, AadPolicy, Context};
    let found = fields::find(text.as_bytes())
        .map_err(|e| fail(format!("the record is {e}")))?
        .into_iter()
        .map(|f| (f.path, f.bytes));
    let found: Vec<(String, Vec<u8>)> = found.collect();
    let mut fields = Vec::new();
    let mut text = String::new();
    let mut bad = 0;
    for (path, ct) in &found {
        let mut d = describe(ct, keyset);
        if let (Some(keyset), Some(topic)) = (keyset, &a.topic) {
            let mut ctx = Context::new(topic);
            if let Some(k) = &a.record_key {
                ctx = ctx.with_key(k.as_bytes());
            }
            // Randomized fields bind topic and key, deterministic ones the
            // topic (the defaults of FieldEncrypting); the plaintext is
            // dropped unread.
            let ok = if keyset.is_deterministic() {
                field::associated_data(&ctx, AadPolicy::Topic, path)
                    .is_ok_and(|ad| keyset.decrypt_deterministically(ct, &ad).is_ok())
            } else {
                field::associated_data(&ctx, AadPolicy::TopicAndKey, path)
                    .is_ok_and(|ad| keyset.decrypt(ct, &ad).is_ok())
            };
            bad += usize::from(!ok);
            d["authenticates"] = serde_json::Value::Bool(ok);
        }
        text.push_str(&format!(
            "{path}\tkey id {}\t{} bytes{}\n",
            d["key_id"],
            ct.len(),
            match d.get("authenticates") {
                Some(serde_json::Value::Bool(true)) => "\tauthenticates here",
                Some(_) => "\tDOES NOT AUTHENTICATE HERE",
                None => "",
            }
        ));
        d["path"] = serde_json::Value::String(path.clone());
        fields.push(d);
    }
    if found.is_empty() {
        text.push_str("no encrypted field\n");
    }
    out.print(&text, &serde_json::json!({ "fields": fields }))?;
    Ok(Outcome::of(bad > 0))
}

/// The shape of `bytes` as a ciphertext: never any of its bytes beyond the
/// version and key id.
fn describe(bytes: &[u8], keyset: Option<&Keyset>) -> serde_json::Value {
    use serde_json::json;
    use tombstone_crypt::format::{Header, KeyType, Layout, HEADER_LEN};
    let len = bytes.len();
    if len < HEADER_LEN {
        return json!({"length": len, "ciphertext": false,
            "why": "shorter than a version byte and a key id"});
    }
    let Some(Header { key_id }) = Header::parse(bytes) else {
        return json!({"length": len, "ciphertext": false,
            "why": "the first byte is not the format's version (a plaintext value?)"});
    };
    let (version, id) = (bytes[0], key_id.0);
    let Some(keyset) = keyset else {
        return json!({"length": len, "ciphertext": true, "version": version, "key_id": id,
            "kind": "unknown (give --keyset to name it)", "body": len - HEADER_LEN});
    };
    let Some(url) = keyset.key_type_url(key_id) else {
        return json!({"length": len, "ciphertext": false, "version": version, "key_id": id,
            "why": "the keyset has no key with this id"});
    };
    let status = keyset
        .keys()
        .find(|(k, _)| *k == key_id)
        .map(|(_, s)| keysets::status_name(s));
    let key_type = KeyType::from_type_url(url);
    let kind = key_type.map_or("unknown", KeyType::name);
    match key_type.and_then(|t| Layout::of(bytes, t)) {
        Some(Layout::AesGcm {
            nonce,
            encrypted_value,
            tag,
        }) => json!({"length": len,
            "ciphertext": true, "version": version, "key_id": id, "key_status": status,
            "kind": kind, "nonce": nonce, "encrypted_value": encrypted_value, "tag": tag}),
        Some(Layout::AesSiv {
            siv,
            encrypted_value,
        }) => json!({"length": len,
            "ciphertext": true, "version": version, "key_id": id, "key_status": status,
            "kind": kind, "siv": siv, "encrypted_value": encrypted_value}),
        Some(Layout::KmsEnvelope {
            encrypted_data_key,
            nonce,
            encrypted_value,
            tag,
        }) => {
            json!({"length": len, "ciphertext": true, "version": version, "key_id": id,
                "key_status": status, "kind": kind, "encrypted_data_key": encrypted_data_key,
                "nonce": nonce, "encrypted_value": encrypted_value, "tag": tag})
        }
        _ if key_type == Some(KeyType::KmsEnvelope) => json!({"length": len,
            "ciphertext": false, "version": version, "key_id": id, "kind": kind,
            "why": "too short for its encrypted data key"}),
        _ => json!({"length": len, "ciphertext": false, "version": version, "key_id": id,
            "kind": kind, "why": "too short for its key type"}),
    }
}
