//! KMS keys through the proxy: values under a `kms-envelope` keyset that is
//! itself encrypted under a KMS key, loaded from the configuration file as
//! the command line loads keysets, against OpenBao (`scripts/kms.sh`); and
//! a KMS that is down: the partition is refused (retriable), nothing is
//! written; a KMS call that hangs does not hold up other connections. With
//! negative controls: a proxy that skips encryption writes the records the
//! check says must not be there; KMS calls made on the runtime's workers
//! hold up the other connections.

use crate::common;

use common::{
    bootstrap, consume_all, create_topic, fresh_topic, produce, produce_ok, start_proxy, Rec,
};
use tombstone_crypt::kms::{KmsClients, KmsTimeouts, VaultClient};
use tombstone_crypt::{Bytes, Context, DecryptingDeserializer, Deserializer, KeyTemplate, Keyset};
use tombstone_crypt_proxy::{Hooks, Policies, ProxyConfig, TopicPolicy};

/// A variable of `target/kms.env`, or `None` with a printed line: the test
/// is skipped (source the file `bash scripts/kms.sh start` prints).
fn kms_env(name: &str) -> Option<String> {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => Some(v),
        _ => {
            eprintln!("{name} is unset: KMS proxy test skipped (source target/kms.env)");
            None
        }
    }
}

fn sample() -> Vec<Rec> {
    vec![
        (
            Some(b"k1".to_vec()),
            Some(b"under an envelope key".to_vec()),
        ),
        (Some(b"k1".to_vec()), None),
        (Some(b"k2".to_vec()), Some(Vec::new())),
        (None, Some(b"unkeyed".to_vec())),
    ]
}

#[test]
fn an_encrypted_envelope_keyset_from_the_config_round_trips_against_openbao() {
    let (Some(_), Some(_)) = (kms_env("VAULT_ADDR"), kms_env("VAULT_TOKEN")) else {
        return;
    };
    envelope_round_trip("TOMBSTONE_VAULT_KEY_URI", "TOMBSTONE_VAULT_KEY_URI_2");
}

#[test]
fn an_encrypted_envelope_keyset_from_the_config_round_trips_against_aws_kms_in_moto() {
    let Some(_) = kms_env("AWS_ENDPOINT_URL_KMS") else {
        return;
    };
    envelope_round_trip("TOMBSTONE_AWS_KEY_URI", "TOMBSTONE_AWS_KEY_URI_2");
}

/// Values under a kms-envelope keyset of the KMS key `kek_var` names, the
/// keyset file encrypted under the key `keyset_kek_var` names.
fn envelope_round_trip(kek_var: &str, keyset_kek_var: &str) {
    let Some(broker) = bootstrap() else {
        return;
    };
    let (Some(kek), Some(keyset_kek)) = (kms_env(kek_var), kms_env(keyset_kek_var)) else {
        return;
    };
    let topic = fresh_topic("kms-envelope");
    // A kms-envelope keyset, written as the command line writes it with
    // `keyset new --template kms-envelope --out-keyset-kms-uri`.
    let keyset = Keyset::generate_with(KeyTemplate::kms_envelope(kek.as_str())).unwrap();
    let dir = std::env::temp_dir().join(fresh_topic("kms-config"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("values.enc.json"),
        keyset.to_encrypted_tink_json(&keyset_kek, b"").unwrap(),
    )
    .unwrap();
    let config = serde_json_text(&topic, &keyset_kek);
    std::fs::write(dir.join("proxy.json"), config).unwrap();
    let config = ProxyConfig::from_file(&dir.join("proxy.json")).unwrap();
    let policies = Policies::load(&config).unwrap();
    assert!(policies.may_block());
    // The encrypted keyset under the wrong KMS key does not load.
    let wrong = ProxyConfig {
        topics: vec![tombstone_crypt_proxy::TopicEntry {
            value_keyset_kms_uri: Some(kek.clone()),
            ..config.topics[0].clone()
        }],
        ..config.clone()
    };
    assert!(Policies::load(&wrong).is_err());

    let proxy = start_proxy(&broker, policies, Hooks::default());
    create_topic(&broker, &topic, 1);
    let sent = sample();
    produce_ok(&proxy.addr, &topic, 0, &sent, "none");
    let through = consume_all(&proxy.addr, &topic, 1).unwrap();
    let got: Vec<Rec> = through
        .iter()
        .map(|c| (c.key.clone(), c.value.clone()))
        .collect();
    assert_eq!(got, sent, "read through the proxy");
    // Beside the proxy: envelope ciphertexts (an EDEK in each), null
    // tombstones; the library opens them with the same keyset.
    let direct = consume_all(&broker, &topic, 1).unwrap();
    let values = DecryptingDeserializer::new(Bytes, keyset);
    for ((k, v), d) in sent.iter().zip(&direct) {
        match (v, &d.value) {
            (None, None) => {}
            (Some(v), Some(c)) => {
                assert!(c.len() > v.len() + 33 + 4, "an envelope ciphertext");
                assert!(v.len() < 4 || !c.windows(v.len()).any(|w| w == &v[..]));
                let ctx = match k {
                    Some(k) => Context::new(&topic).with_key(k),
                    None => Context::new(&topic),
                };
                assert_eq!(values.deserialize(&ctx, Some(c)).unwrap().as_ref(), Some(v));
            }
            other => panic!("nullness changed: {other:?}"),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn serde_json_text(topic: &str, keyset_kek: &str) -> String {
    format!(
        r#"{{"listen":"127.0.0.1:0","bootstrap":"unused:1","topics":[
            {{"topic":"{topic}","value_keyset":"values.enc.json",
              "value_keyset_kms_uri":"{keyset_kek}"}}]}}"#
    )
}

/// Produces to a topic whose value keyset's KMS listens nowhere; returns
/// the deliveries and what the topic holds beside the proxy.
fn produce_with_kms_down(hooks: Hooks) -> Option<(Vec<Result<i64, String>>, usize)> {
    let broker = bootstrap()?;
    let topic = fresh_topic("kms-down");
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let clients = KmsClients::new().with(
        VaultClient::new("no-token")
            .with_address(format!("http://127.0.0.1:{closed}"))
            .with_timeouts(KmsTimeouts {
                request: std::time::Duration::from_secs(1),
                ..KmsTimeouts::default()
            }),
    );
    let uri = format!("hcvault://127.0.0.1:{closed}/transit/keys/down");
    let keyset =
        Keyset::generate_with(KeyTemplate::kms_envelope(uri).with_kms_clients(clients)).unwrap();
    let policies = Policies::new().with_topic(&topic, TopicPolicy::keyset(keyset));
    let proxy = start_proxy(&broker, policies, hooks);
    create_topic(&broker, &topic, 1);
    let deliveries = produce(&proxy.addr, &topic, 0, &sample(), "none");
    let held = consume_all(&broker, &topic, 1).unwrap().len();
    Some((deliveries, held))
}

#[test]
fn a_kms_that_is_down_fails_the_partition_and_writes_nothing() {
    let Some((deliveries, held)) = produce_with_kms_down(Hooks::default()) else {
        return;
    };
    // Every record, the tombstone too (it shares the refused partition's
    // batch), comes back as an error to the client.
    for (i, d) in deliveries.iter().enumerate() {
        assert!(d.is_err(), "record {i} was delivered: {d:?}");
    }
    assert_eq!(held, 0, "the topic holds records");
}

#[test]
fn negative_control_a_proxy_that_skips_encryption_writes_with_the_kms_down() {
    let mut hooks = Hooks::default();
    hooks.skip_encryption = true;
    let Some((deliveries, held)) = produce_with_kms_down(hooks) else {
        return;
    };
    assert!(deliveries.iter().all(Result::is_ok), "{deliveries:?}");
    assert_eq!(held, sample().len());
}

/// An ApiVersions v0 request on a new connection to `addr`: how long the
/// answer took, or why there was none within 10 s.
fn api_versions_time(addr: &str) -> Result<std::time::Duration, String> {
    use std::io::{Read, Write};
    let start = std::time::Instant::now();
    let mut s = std::net::TcpStream::connect(addr).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let body = [0u8, 18, 0, 0, 0, 0, 0, 7, 0, 4, b't', b'e', b's', b't'];
    s.write_all(&(body.len() as u32).to_be_bytes()).unwrap();
    s.write_all(&body).unwrap();
    let mut head = [0u8; 10];
    s.read_exact(&mut head)
        .map_err(|e| format!("no answer: {e}"))?;
    Ok(start.elapsed())
}

/// Two clients produce to a topic whose KMS accepts connections and never
/// answers (each call hangs 4 s), keeping both of the proxy's runtime
/// workers in a KMS call; meanwhile a third connection asks for
/// ApiVersions. The slowest of its answers.
fn answer_time_while_the_kms_hangs(hooks: Hooks) -> Option<std::time::Duration> {
    let broker = bootstrap()?;
    let topic = fresh_topic("kms-hangs");
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let clients = KmsClients::new().with(
        VaultClient::new("no-token")
            .with_address(format!("http://127.0.0.1:{port}"))
            .with_timeouts(KmsTimeouts {
                request: std::time::Duration::from_secs(4),
                attempts: 1,
                ..KmsTimeouts::default()
            }),
    );
    let uri = format!("hcvault://127.0.0.1:{port}/transit/keys/silent");
    let keyset =
        Keyset::generate_with(KeyTemplate::kms_envelope(uri).with_kms_clients(clients)).unwrap();
    let policies = Policies::new().with_topic(&topic, TopicPolicy::keyset(keyset));
    let proxy = start_proxy(&broker, policies, hooks);
    create_topic(&broker, &topic, 2);
    let producers: Vec<_> = (0..2)
        .map(|p| {
            let addr = proxy.addr.clone();
            let topic = topic.clone();
            std::thread::spawn(move || {
                let rec = vec![(Some(b"k".to_vec()), Some(b"v".to_vec()))];
                produce(&addr, &topic, p, &rec, "none")
            })
        })
        .collect();
    // The producers bootstrap, then their Produce requests hang in the KMS.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let mut slowest = std::time::Duration::ZERO;
    for _ in 0..3 {
        let t = api_versions_time(&proxy.addr).unwrap_or(std::time::Duration::from_secs(99));
        slowest = slowest.max(t);
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    for p in producers {
        let _ = p.join();
    }
    drop(silent);
    Some(slowest)
}

#[test]
fn a_hanging_kms_call_does_not_hold_up_other_connections() {
    let Some(slowest) = answer_time_while_the_kms_hangs(Hooks::default()) else {
        return;
    };
    assert!(
        slowest < std::time::Duration::from_millis(1000),
        "ApiVersions took {slowest:?} while KMS calls hung"
    );
}

#[test]
fn negative_control_kms_calls_on_the_workers_hold_up_other_connections() {
    let mut hooks = Hooks::default();
    hooks.kms_on_the_worker = true;
    let Some(slowest) = answer_time_while_the_kms_hangs(hooks) else {
        return;
    };
    assert!(
        slowest >= std::time::Duration::from_millis(1000),
        "ApiVersions took only {slowest:?}: the control does not block the workers"
    );
}
