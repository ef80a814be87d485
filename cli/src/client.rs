//! The brokers' client settings: `-X key=value`, a `--client-config`
//! file (Java properties), `TOMBSTONE_CRYPT_KAFKA_*` variables; and the
//! first call to the brokers, which fails fast with them named.

use std::time::Duration;

use tombstone_crypt::kafka::rdkafka::config::ClientConfig;
use tombstone_crypt::kafka::rdkafka::consumer::{BaseConsumer, Consumer as _};
use tombstone_crypt::kafka::rdkafka::error::KafkaError;

use crate::args::ClientArgs;
use crate::outcome::{fail, Fail};

/// The prefix of the environment variables that hold rdkafka settings:
/// `TOMBSTONE_CRYPT_KAFKA_SASL_PASSWORD` is `sasl.password`.
pub(crate) const ENV_PREFIX: &str = "TOMBSTONE_CRYPT_KAFKA_";

/// The most bytes a `--client-config` file may have.
const MAX_CLIENT_CONFIG: u64 = 1 << 20;

/// The settings of a `--client-config` file: Java properties as Kafka's
/// clients read them, one `key=value` (or `key:value`) a line, `#` and `!`
/// comment lines, blank lines skipped, space around the key and before the
/// value ignored (after it kept, but for a CR). An error names the line,
/// never its text (it may hold a secret).
fn properties(path: &std::path::Path) -> Result<Vec<(String, String)>, Fail> {
    let at = |e: &dyn std::fmt::Display| fail(format!("--client-config {}: {e}", path.display()));
    let file = std::fs::File::open(path).map_err(|e| at(&e))?;
    let mut text = zeroize::Zeroizing::new(String::new());
    std::io::Read::read_to_string(
        &mut std::io::Read::take(file, MAX_CLIENT_CONFIG + 1),
        &mut text,
    )
    .map_err(|e| at(&e))?;
    if text.len() as u64 > MAX_CLIENT_CONFIG {
        return Err(at(&format!("larger than {MAX_CLIENT_CONFIG} bytes")));
    }
    let mut settings = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim_start();
        if line.is_empty() || line.starts_with(['#', '!']) {
            continue;
        }
        if line.ends_with('\\') {
            return Err(at(&format!(
                "line {}: ends with a backslash (continued lines and escapes are not read)",
                n + 1
            )));
        }
        // As Java's Properties: the key ends at the first `=`, `:` or
        // white space; then white space, one `=` or `:`, white space, and
        // the value.
        let is_space = |c: char| matches!(c, ' ' | '\t' | '\x0c');
        let end = line
            .find(|c: char| c == '=' || c == ':' || is_space(c))
            .unwrap_or(line.len());
        let (key, rest) = line.split_at(end);
        let rest = rest.trim_start_matches(is_space);
        let rest = rest.strip_prefix(['=', ':']).unwrap_or(rest);
        let value = rest.trim_start_matches(is_space);
        if key.is_empty() {
            return Err(at(&format!("line {}: no key before the =", n + 1)));
        }
        if value.is_empty() && end == line.len() {
            return Err(at(&format!("line {}: expected key=value", n + 1)));
        }
        settings.push((key.to_owned(), value.to_owned()));
    }
    Ok(settings)
}

/// The settings of the `TOMBSTONE_CRYPT_KAFKA_*` variables, in the order
/// of their names: the name after the prefix in lower case, `_` for `.`.
fn env_settings() -> Result<Vec<(String, String)>, Fail> {
    let mut settings = Vec::new();
    for (name, value) in std::env::vars_os() {
        let Some(name) = name.to_str().and_then(|n| n.strip_prefix(ENV_PREFIX)) else {
            continue;
        };
        if name.is_empty() {
            return Err(fail(format!(
                "{ENV_PREFIX}: no setting named after the prefix"
            )));
        }
        let value = value
            .into_string()
            .map_err(|_| fail(format!("{ENV_PREFIX}{name}: not UTF-8")))?;
        settings.push((name.to_ascii_lowercase().replace('_', "."), value));
    }
    settings.sort();
    Ok(settings)
}

/// The client configuration `--bootstrap` and `client` give: the
/// brokers, then the settings of `--client-config`, of the
/// `TOMBSTONE_CRYPT_KAFKA_*` variables and of each `-X`, in that order (a
/// later one wins), and `socket.connection.setup.timeout.ms` from
/// `--connect-timeout` unless one of them names it.
///
/// # Errors
/// A `--client-config` that cannot be read or has a line that is not a
/// setting, a variable that is not UTF-8, a `-X` without `=`.
pub(crate) fn client_config(bootstrap: &str, client: &ClientArgs) -> Result<ClientConfig, Fail> {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", bootstrap);
    let mut named = std::collections::HashMap::new();
    if let Some(path) = &client.client_config {
        for (k, v) in properties(path)? {
            put(&mut config, &mut named, &k, v)?;
        }
    }
    for (k, v) in env_settings()? {
        put(&mut config, &mut named, &k, v)?;
    }
    for kv in &client.config {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| fail(format!("-X {kv}: expected key=value")))?;
        put(&mut config, &mut named, k, v.trim().to_owned())?;
    }
    if config.get("socket.connection.setup.timeout.ms").is_none() {
        // librdkafka's least is one second.
        let ms = client.connect_timeout.clamp(1, 3600) * 1000;
        config.set("socket.connection.setup.timeout.ms", ms.to_string());
    }
    Ok(config)
}

/// Sets a client setting under the one name this tool reads it by:
/// librdkafka's aliases (`request.required.acks` for `acks`,
/// `max.in.flight` for `max.in.flight.requests.per.connection`, a
/// topic-level setting with the `topic.` prefix) would otherwise reach it
/// beside the name checked, in no set order, and either could win. The
/// brokers come from `--bootstrap` alone. One name given again (in a later
/// source) replaces its value; two names of one setting with different
/// values are refused (`named`: each setting's name as given).
///
/// # Errors
/// `bootstrap.servers` or `metadata.broker.list`; two names of one setting
/// that disagree.
fn put(
    config: &mut ClientConfig,
    named: &mut std::collections::HashMap<String, String>,
    key: &str,
    value: String,
) -> Result<(), Fail> {
    let key = key.trim();
    let lower = key.to_ascii_lowercase();
    let name = match lower.as_str() {
        "bootstrap.servers" | "metadata.broker.list" => {
            return Err(fail(format!(
                "the Kafka client setting {key}: the brokers are --bootstrap's (named once: a second list could send the writes elsewhere)"
            )))
        }
        "request.required.acks" | "topic.acks" | "topic.request.required.acks" => "acks",
        "max.in.flight" => "max.in.flight.requests.per.connection",
        "topic.queuing.strategy" => "queuing.strategy",
        "topic.auto.offset.reset" | "topic.auto.commit.enable" => {
            return Err(fail(format!(
                "the Kafka client setting {key}: set by this tool for its readers"
            )))
        }
        _ => key,
    };
    if let Some(before) = named.get(name) {
        if before != key && config.get(name).is_some_and(|v| v.trim() != value.trim()) {
            return Err(fail(format!(
                "the Kafka client settings {before} and {key}: two names of one setting with different values; give one"
            )));
        }
    }
    named.insert(name.to_owned(), key.to_owned());
    config.set(name, value);
    Ok(())
}

/// A librdkafka configuration error, its value (and each item of a list
/// value) left out: the value may be a secret.
fn config_error(e: KafkaError) -> Fail {
    match e {
        KafkaError::ClientConfig(_, desc, key, value) => {
            let mut desc = desc;
            if !value.is_empty() {
                desc = desc.replace(&value, "(the value)");
                for item in value.split([',', ' ']).filter(|i| i.len() >= 3) {
                    desc = desc.replace(item, "(part of the value)");
                }
            }
            fail(format!("the Kafka client setting {key}: {desc}"))
        }
        e => fail(format!("the Kafka client settings: {e}")),
    }
}

/// Asks the brokers for `topic`'s metadata, giving them
/// `--connect-timeout`: a broker that is down, unreachable or not Kafka
/// fails the command here, within seconds, with the brokers named. The
/// first thing done with the brokers (before a topic's partitions are
/// read, a key-store topic opened), after every check that needs none.
///
/// # Errors
/// No answer in time, or a client that cannot be made of the settings.
pub(crate) fn reach(config: &ClientConfig, topic: &str, connect: Duration) -> Result<(), Fail> {
    let secs = connect.as_secs().max(1);
    let brokers = config
        .get("bootstrap.servers")
        .unwrap_or_default()
        .to_owned();
    // librdkafka's text may hold the value, which may be a secret.
    let probe: BaseConsumer = config.create().map_err(config_error)?;
    probe
        .fetch_metadata(Some(topic), connect)
        .map(drop)
        .map_err(|e| {
            fail(format!(
                "no answer from the brokers at {brokers} within {secs} s (--connect-timeout): {e}"
            ))
        })
}
