//! `proxy`: the Kafka protocol proxy (`tombstone-crypt-proxy`) from a
//! configuration file, until SIGINT or SIGTERM.

use std::time::Duration;

use tombstone_crypt_proxy::{Policies, Proxy, ProxyConfig};

use crate::args::ProxyArgs;
use crate::outcome::{fail, Fail, Outcome};

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
