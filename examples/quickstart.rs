//! The Quick start: a round trip, a tombstone, a binding, a rotation.

use tombstone_crypt::{
    Bincode, Context, DecryptingDeserializer, Deserializer, EncryptingSerializer, Error, Keyset,
    Serializer,
};

#[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
struct Order {
    id: u64,
    item: String,
}

fn main() -> Result<(), Error> {
    let mut keyset = Keyset::generate();
    let ser = EncryptingSerializer::new(Bincode::<Order>::new(), keyset.clone());
    let de = DecryptingDeserializer::new(Bincode::<Order>::new(), keyset.clone());
    let ctx = Context::new("orders").with_key(b"order-1");

    // A value goes in encrypted and comes back.
    let order = Order {
        id: 1,
        item: "book".into(),
    };
    let ct = ser.serialize(&ctx, Some(&order))?;
    assert_eq!(de.deserialize(&ctx, ct.as_deref())?, Some(order));

    // A tombstone passes through untouched: a delete stays a delete.
    assert_eq!(ser.serialize(&ctx, None)?, None);
    assert_eq!(de.deserialize(&ctx, None)?, None);

    // A value copied to another record key does not decrypt.
    let other = Context::new("orders").with_key(b"order-2");
    assert!(de.deserialize(&other, ct.as_deref()).is_err());

    // Rotation: new values use the new key, old ones still decrypt.
    keyset.rotate();
    let de = DecryptingDeserializer::new(Bincode::<Order>::new(), keyset.clone());
    assert!(de.deserialize(&ctx, ct.as_deref())?.is_some());

    // Keysets travel as Tink's cleartext JSON (a secret: store it like one).
    let json = keyset.to_tink_json();
    assert_eq!(Keyset::from_tink_json(&json)?.primary(), keyset.primary());
    println!("round trip, tombstone, binding and rotation: all as promised");
    Ok(())
}
