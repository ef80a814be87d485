//! The proxy's `tracing` spans: one per request (API key, version,
//! correlation id) and one per partition of a policy topic (topic and
//! partition), and never a record key's or value's bytes in them or in
//! their events. One test in this binary: the subscriber is the process's.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use common::{bootstrap, consume_all, create_topic, fresh_topic, produce_ok, start_proxy, Keys};
use tombstone_crypt_proxy::Hooks;
use tracing_subscriber::fmt::format::FmtSpan;

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn spans_name_the_request_topic_and_partition_and_never_a_key_or_value() {
    let Some(broker) = bootstrap() else {
        return;
    };
    let out = Captured::default();
    let writer = out.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_span_events(FmtSpan::NEW)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let topic = fresh_topic("spans");
    let keys = Keys::new(true);
    create_topic(&broker, &topic, 1);
    let proxy = start_proxy(&broker, keys.policies(&topic), Hooks::default());
    let key = b"secret-key-4f1c".to_vec();
    let value = b"secret-value-9a7e".to_vec();
    produce_ok(
        &proxy.addr,
        &topic,
        0,
        &[
            (Some(key.clone()), Some(value.clone())),
            (Some(key.clone()), None),
        ],
        "none",
    );
    assert_eq!(consume_all(&proxy.addr, &topic, 1).unwrap().len(), 2);
    drop(proxy);

    let text = String::from_utf8_lossy(&out.0.lock().unwrap()).into_owned();
    // A Produce (API key 0) and a Fetch (1), each with the partition.
    for wanted in [
        "request{api_key=0".to_owned(),
        "request{api_key=1".to_owned(),
        format!("partition{{topic=\"{topic}\" partition=0}}"),
    ] {
        let alt = wanted.replace('"', "");
        assert!(
            text.contains(&wanted) || text.contains(&alt),
            "no {wanted} in the spans:\n{text}"
        );
    }
    for secret in ["secret-key-4f1c", "secret-value-9a7e"] {
        assert!(!text.contains(secret), "{secret} in the trace:\n{text}");
    }
    let hex: String = value.iter().map(|b| format!("{b:02x}")).collect();
    assert!(!text.contains(&hex[..16]));
    let decimal = format!("{:?}", &value[..6]);
    assert!(!text.contains(decimal.trim_matches(|c| c == '[' || c == ']')));
}
