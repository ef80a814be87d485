//! `proxy`: the Kafka protocol proxy (`tombstone-crypt-proxy`) from a
//! configuration file, until SIGINT or SIGTERM.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use tombstone_crypt_proxy::{Policies, Proxy, ProxyConfig};

use crate::{fail, Fail, Outcome};

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

/// Runs the proxy until SIGINT or SIGTERM, then finishes in-flight
/// requests.
pub(crate) fn proxy(args: &ProxyArgs) -> Result<Outcome, Fail> {
    let config = ProxyConfig::from_file(&args.config).map_err(|e| fail(e.to_string()))?;
    let policies = Policies::load(&config).map_err(|e| fail(e.to_string()))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| fail(format!("starting the runtime: {e}")))?;
    runtime.block_on(async {
        let proxy = Proxy::bind(&config, policies)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let addr = proxy.local_addr().map_err(|e| fail(e.to_string()))?;
        tracing::info!(
            "listening on {addr} for the cluster at {} (topic policy entries: {})",
            config.bootstrap,
            config.topics.len()
        );
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(|e| fail(format!("listening for SIGTERM: {e}")))?;
        let stop = async move {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => tracing::warn!("SIGINT: shutting down"),
                _ = term.recv() => tracing::warn!("SIGTERM: shutting down"),
            }
        };
        proxy
            .run(stop, Duration::from_secs(args.drain_seconds))
            .await
            .map_err(|e| fail(e.to_string()))
    })?;
    Ok(Outcome::Clean)
}
