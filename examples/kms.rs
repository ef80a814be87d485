//! Envelope encryption with a key in Vault or OpenBao (cargo feature `vault`).
//!
//! Against the loopback OpenBao of the test scripts:
//!
//! ```sh
//! source "$(scripts/kms.sh start | tail -n 1)"   # VAULT_ADDR, VAULT_TOKEN, key URIs
//! cargo run --example kms --features vault
//! scripts/kms.sh stop
//! ```
//!
//! The key URI is the first argument, else `TOMBSTONE_VAULT_KEY_URI`.
//! The output shows the keyset (no secret in it), the wrapped DEK every
//! value carries, a reader that loads the keyset elsewhere, and a tombstone.

use tombstone_crypt::{
    Bytes, Context, DecryptingDeserializer, Deserializer, EncryptingSerializer, Error, KeyTemplate,
    Keyset, Serializer,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let uri = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("TOMBSTONE_VAULT_KEY_URI").ok())
        .ok_or("pass an hcvault:// key URI, or source the env file of scripts/kms.sh start")?;

    // The built-in Vault client reads VAULT_ADDR and VAULT_TOKEN. No KMS
    // call yet: the first DEK is made with the first value.
    let keyset = Keyset::generate_with(KeyTemplate::kms_envelope(&uri))?;
    let json = keyset.to_tink_json();
    println!("keyset (no secret: the KEK stays in Vault): {json}");

    let ser = EncryptingSerializer::new(Bytes, keyset);
    let ctx = Context::new("orders").with_key(b"order-1");
    let mut cts = Vec::new();
    for item in ["book", "pen", "lamp"] {
        let ct = ser
            .serialize(&ctx, Some(item.as_bytes()))?
            .ok_or("a present value is a present ciphertext")?;
        let n = u32::from_be_bytes([ct[5], ct[6], ct[7], ct[8]]) as usize;
        println!(
            "{item}: {} bytes, wrapped DEK {:?}",
            ct.len(),
            String::from_utf8_lossy(&ct[9..9 + n])
        );
        cts.push(ct);
    }
    println!("a delete stays a delete: {:?}", ser.serialize(&ctx, None)?);

    // A reader elsewhere: loads the keyset, asks Vault once for the DEK.
    let reader = DecryptingDeserializer::new(Bytes, Keyset::from_tink_json(&json)?);
    for ct in &cts {
        let pt = reader.deserialize(&ctx, Some(ct))?.ok_or("present")?;
        println!("decrypted: {}", String::from_utf8_lossy(&pt));
    }
    // Bound to its record key.
    let moved = reader.deserialize(&Context::new("orders").with_key(b"order-2"), Some(&cts[0]));
    assert_eq!(moved, Err(Error::Decryption));
    println!("moved to another key: {}", Error::Decryption);
    Ok(())
}
