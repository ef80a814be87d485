//! What every API's handling shares: a request's head, a response's
//! correlation id, a response decoded and encoded again, and a broker's
//! address rewritten to the proxy's listener for it.

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

/// A request's API key, version and correlation id: the first 8 bytes of
/// every request header version.
pub(crate) fn request_head(frame: &[u8]) -> Option<(i16, i16, i32)> {
    let b = frame.get(..8)?;
    Some((
        i16::from_be_bytes([b[0], b[1]]),
        i16::from_be_bytes([b[2], b[3]]),
        i32::from_be_bytes([b[4], b[5], b[6], b[7]]),
    ))
}

/// A response's correlation id: the first 4 bytes of every response header.
pub(crate) fn response_correlation(frame: &[u8]) -> Option<i32> {
    let b = frame.get(..4)?;
    Some(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

pub(super) fn decode_response<M: Decodable>(
    frame: &Bytes,
    api: ApiKey,
    version: i16,
) -> Result<(ResponseHeader, M), String> {
    let mut buf = frame.clone();
    let header = ResponseHeader::decode(&mut buf, api.response_header_version(version))
        .map_err(|e| format!("decoding a {api:?} v{version} response header: {e:#}"))?;
    let body = M::decode(&mut buf, version)
        .map_err(|e| format!("decoding a {api:?} v{version} response: {e:#}"))?;
    if !buf.is_empty() {
        return Err(format!(
            "a {api:?} v{version} response has {} bytes past its end",
            buf.len()
        ));
    }
    Ok((header, body))
}

pub(super) fn encode_response<M: Encodable>(
    header: &ResponseHeader,
    body: &M,
    api: ApiKey,
    version: i16,
) -> Result<Bytes, String> {
    let header_version = api.response_header_version(version);
    // Sized up front, so it does not grow: a block it grew out of would be
    // freed unwiped (a Fetch response holds decrypted records). Wiped if
    // the encoding fails half-way.
    let size = header
        .compute_size(header_version)
        .and_then(|h| Ok(h + body.compute_size(version)?))
        .unwrap_or(0);
    let mut buf = crate::wipe::Buf::with_capacity(size, true);
    header
        .encode(buf.inner(), header_version)
        .and_then(|()| body.encode(buf.inner(), version))
        .map_err(|e| format!("encoding a {api:?} v{version} response: {e:#}"))?;
    Ok(buf.freeze())
}

/// Maps a broker (node id, its host and port) to the proxy's listener for
/// it; `None` when the proxy cannot serve it.
pub(crate) type NodeMap<'a> = dyn Fn(i32, &str, i32) -> Option<(StrBytes, i32)> + 'a;

pub(super) fn rewrite(
    map: &NodeMap<'_>,
    node: i32,
    host: &mut StrBytes,
    port: &mut i32,
) -> Result<(), String> {
    if node < 0 {
        return Ok(());
    }
    let (h, p) = map(node, host.as_str(), *port)
        .ok_or_else(|| format!("no listener for broker node {node}"))?;
    *host = h;
    *port = p;
    Ok(())
}
