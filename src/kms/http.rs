//! The one HTTP client of the built-in KMS clients: synchronous (`ureq`,
//! rustls on ring), so the serde layer can call it from any thread,
//! inside a tokio runtime included, with no runtime of its own. No proxy
//! from the environment is used: KMS traffic goes where the key URI or the
//! configured address says.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use crate::error::Error;
use crate::kms::{Failed, KmsTimeouts};

/// The most response bytes read from a KMS (its answers are a few hundred).
const MAX_RESPONSE: u64 = 1 << 20;

/// An HTTP agent with the timeouts of `t`. Asserted unwind-safe (ureq's
/// agent holds trait objects that are not marked so): a panic inside it
/// could at worst leave a pooled connection unusable, never a state of
/// this crate half-updated, and keysets stay `UnwindSafe` as before.
pub(crate) fn agent(t: &KmsTimeouts) -> AssertUnwindSafe<ureq::Agent> {
    AssertUnwindSafe(
        ureq::Agent::config_builder()
            .timeout_global(Some(t.request))
            .http_status_as_error(false)
            .proxy(None)
            .max_redirects(0)
            .build()
            .into(),
    )
}

/// POSTs `body` to `url` with `headers` and reads the JSON answer of an
/// HTTP 200 as `A`. Transport failures, HTTP 429 and 5xx are retryable;
/// another status or an answer of the wrong shape is not. The answer's text
/// (which may hold a data key) is zeroized once read.
pub(crate) fn post_json<A: serde::de::DeserializeOwned>(
    agent: &ureq::Agent,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    what: &str,
) -> Result<A, Failed> {
    let (status, text) = post(agent, url, headers, body, what)?;
    let text = zeroize::Zeroizing::new(text);
    if status != 200 {
        return Err(Failed {
            retry: retryable(status),
            error: Error::kms_msg(format!("{what}: HTTP {status}: {}", excerpt(&text))),
        });
    }
    serde_json::from_str::<A>(&text).map_err(|e| Failed {
        retry: false,
        error: Error::kms(format!("{what}: unexpected answer"), e),
    })
}

/// POSTs `body` to `url` with `headers`: the status and the body text.
fn post(
    agent: &ureq::Agent,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    what: &str,
) -> Result<(u16, String), Failed> {
    let mut req = agent.post(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let fail = |e: ureq::Error| Failed {
        retry: true,
        error: Error::Kms {
            detail: format!("{what}: HTTP request to {url} failed"),
            cause: Some(Arc::new(e)),
        },
    };
    let mut resp = req.send(body).map_err(fail)?;
    let status = resp.status().as_u16();
    let text = resp
        .body_mut()
        .with_config()
        .limit(MAX_RESPONSE)
        .read_to_string()
        .map_err(fail)?;
    Ok((status, text))
}

/// Whether an HTTP status is worth retrying.
fn retryable(status: u16) -> bool {
    status == 429 || status >= 500
}

/// A short, printable excerpt of a KMS error body (it never holds key
/// material: those are only in successful answers).
fn excerpt(body: &str) -> String {
    crate::primitive::printable_long(body, 300)
}

/// Deserializes an optional string into a zeroized buffer (a KMS answer's
/// plaintext is a key).
pub(crate) fn zeroizing_opt<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<zeroize::Zeroizing<String>>, D::Error> {
    <Option<String> as serde::Deserialize>::deserialize(d).map(|o| o.map(zeroize::Zeroizing::new))
}
