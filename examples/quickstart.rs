//! The quick start: a round trip, a tombstone passing through, rotation.

use tombstone_crypt::{
    Context, DecryptingDeserializer, Deserializer, EncryptingSerializer, Error, Keyset, Serializer,
    Utf8,
};

fn main() -> Result<(), Error> {
    let mut keyset = Keyset::generate();
    println!("keyset: {keyset:?}");
    let ser = EncryptingSerializer::new(Utf8, keyset.clone());
    let de = DecryptingDeserializer::new(Utf8, keyset.clone());
    let ctx = Context::new("orders").with_key(b"order-1");

    let ct = ser
        .serialize(&ctx, Some("hello, kafka"))?
        .ok_or(Error::InnerReturnedNone)?;
    println!(
        "round trip: {} bytes of ciphertext, key id {}",
        ct.len(),
        keyset.primary()
    );
    println!("  decrypts to {:?}", de.deserialize(&ctx, Some(&ct))?);

    let empty = ser.serialize(&ctx, Some(""))?;
    println!(
        "empty value: {} bytes of ciphertext, decrypts to {:?}",
        empty.as_ref().map_or(0, Vec::len),
        de.deserialize(&ctx, empty.as_deref())?
    );

    let tombstone = ser.serialize(&ctx, None)?;
    println!(
        "tombstone: serialize(None) = {tombstone:?}, deserialize(None) = {:?}",
        de.deserialize(&ctx, None)?
    );

    let other = Context::new("orders").with_key(b"order-2");
    println!(
        "copied to another key: {}",
        match de.deserialize(&other, Some(&ct)) {
            Ok(_) => "decrypted (unexpected)".to_owned(),
            Err(e) => format!("rejected: {e}"),
        }
    );

    let old = keyset.primary();
    let new = keyset.rotate();
    let ser = EncryptingSerializer::new(Utf8, keyset.clone());
    let de = DecryptingDeserializer::new(Utf8, keyset.clone());
    let ct2 = ser.serialize(&ctx, Some("after rotation"))?;
    println!("rotation: primary {old} -> {new}");
    println!(
        "  old value still decrypts: {:?}",
        de.deserialize(&ctx, Some(&ct))?
    );
    println!(
        "  new value decrypts: {:?}",
        de.deserialize(&ctx, ct2.as_deref())?
    );
    Ok(())
}
