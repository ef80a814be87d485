//! The counters in Prometheus text format, served over HTTP while the
//! process encrypts, decrypts and rotates.
//!
//! ```sh
//! cargo run --example metrics --features metrics,test-hooks -- --port 9464
//! curl -s http://127.0.0.1:9464/metrics | grep tombstone_crypt
//! ```
//!
//! Each scrape calls `tombstone_crypt::stats::publish()` (the process's
//! counters to the `metrics` facade) and renders the facade's recorder,
//! `metrics-exporter-prometheus`, as text. The envelope keys here use the
//! in-process KMS of the feature `test-hooks` (a stand-in for AWS KMS or
//! Vault: the counters are the same).
//!
//! Options: `--port P` (0: any free port; the address is printed),
//! `--values N` (default 1000), `--tombstones M` (default 100),
//! `--tampered K` (default 10). It prints `listening on http://ADDR/metrics`,
//! does the work, prints `done`, and serves until its standard input
//! closes.

use std::io::{BufRead as _, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tombstone_crypt::__fuzz::FakeKms;
use tombstone_crypt::kms::{DekPolicy, KmsClients};
use tombstone_crypt::{
    Bytes, Context, DecryptingDeserializer, Deserializer as _, DeterministicSerializer,
    EncryptingSerializer, Error, KeyTemplate, Keyset, Serializer as _, Utf8,
};

fn arg(args: &[String], name: &str, default: u64) -> u64 {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}: not a number: {v}"))
        })
}

fn serve(listener: TcpListener, handle: PrometheusHandle) {
    for stream in listener.incoming().flatten() {
        let _ = answer(stream, &handle);
    }
}

/// One request: `GET /metrics` gets the counters, anything else a 404.
fn answer(mut stream: TcpStream, handle: &PrometheusHandle) -> std::io::Result<()> {
    // The request head, up to its blank line (at most 8 KiB).
    let mut request = Vec::new();
    let mut chunk = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 8192 {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        request.extend_from_slice(&chunk[..n]);
    }
    let request = String::from_utf8_lossy(&request);
    let (status, body) = if request.starts_with("GET /metrics ") {
        tombstone_crypt::stats::publish();
        ("200 OK", handle.render())
    } else {
        ("404 Not Found", String::from("try /metrics\n"))
    };
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    let port = arg(&args, "--port", 9464);
    let values = arg(&args, "--values", 1000);
    let tombstones = arg(&args, "--tombstones", 100);
    let tampered = arg(&args, "--tampered", 10);

    let handle = PrometheusBuilder::new()
        .install_recorder()
        .expect("no other metrics recorder is installed");
    let listener = TcpListener::bind(("127.0.0.1", u16::try_from(port).expect("a port")))
        .expect("the port is free");
    println!(
        "listening on http://{}/metrics",
        listener.local_addr().expect("bound")
    );
    std::thread::spawn(move || serve(listener, handle));

    // Values under a plain AES-GCM keyset, rotated halfway; tombstones both
    // ways; some tampered values.
    let mut keyset = Keyset::generate();
    let ctx = Context::new("orders");
    let mut cts = Vec::new();
    for i in 0..values {
        if i == values / 2 {
            keyset.rotate();
        }
        let ser = EncryptingSerializer::new(Bytes, keyset.clone());
        cts.push(ser.serialize(&ctx, Some(&i.to_be_bytes()[..]))?);
    }
    let ser = EncryptingSerializer::new(Bytes, keyset.clone());
    let de = DecryptingDeserializer::new(Bytes, keyset.clone());
    for ct in &cts {
        de.deserialize(&ctx, ct.as_deref())?;
    }
    for _ in 0..tombstones {
        ser.serialize(&ctx, None)?;
        de.deserialize(&ctx, None)?;
    }
    for ct in cts
        .iter()
        .flatten()
        .take(usize::try_from(tampered).unwrap_or(usize::MAX))
    {
        let mut bad = ct.clone();
        bad[20] ^= 1;
        assert!(de.deserialize(&ctx, Some(&bad)).is_err());
    }

    // Values under an envelope key (a new DEK every 100 values), read by a
    // reader with its own DEK cache.
    let kms = FakeKms::new();
    let clients = KmsClients::new().with(kms);
    let writer = Keyset::generate_with(
        KeyTemplate::kms_envelope("fake-kms://metrics-example")
            .with_kms_clients(clients.clone())
            .with_dek_policy(DekPolicy::default().with_max_values(100)),
    )?;
    let reader = Keyset::from_tink_json_with(&writer.to_tink_json(), &clients)?;
    for i in 0..values {
        let ct = writer.encrypt(&i.to_be_bytes(), b"")?;
        reader.decrypt(&ct, b"")?;
    }

    // Record keys under a rotated AES-SIV keyset: each write puts a
    // tombstone for the key's older form first.
    let mut key_keys = Keyset::generate_with(KeyTemplate::aes256_siv())?;
    key_keys.rotate();
    let keys = DeterministicSerializer::new(Utf8, key_keys);
    for name in [
        "alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy",
    ] {
        let forms = keys.key_forms(&ctx, name)?;
        let _writes: Vec<_> = forms.writes(None).collect();
    }

    println!("done");
    std::io::stdout().flush().ok();
    // Serve until standard input closes.
    for _ in std::io::stdin().lock().lines() {}
    Ok(())
}
