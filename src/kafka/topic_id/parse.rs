//! The answers this lookup reads, parsed by hand within their bytes
//! (kafka-protocol's decoders reserve an array's claimed count before
//! reading it: a few bytes claiming 2^32-1 elements aborted the process).

use super::Reader;

/// A topic of a Metadata answer.
pub(super) struct Topic {
    pub(super) error: i16,
    pub(super) name: Option<String>,
    pub(super) id: [u8; 16],
}

/// SaslHandshake v1: the error code and the mechanisms the broker
/// takes.
pub(super) fn sasl_handshake(answer: &[u8]) -> Result<(i16, Vec<String>), String> {
    let mut r = Reader::new(answer);
    let error = r.i16()?;
    let n = r.i32()?;
    let n = usize::try_from(n).unwrap_or(0);
    if n > r.rest.len() / 2 {
        return Err(format!("{n} mechanisms claimed in {} bytes", r.rest.len()));
    }
    let mut mechanisms = Vec::with_capacity(n);
    for _ in 0..n {
        let len = usize::try_from(r.i16()?).map_err(|_| "a null mechanism")?;
        let m = r.take(len)?;
        mechanisms.push(String::from_utf8_lossy(m).into_owned());
    }
    Ok((error, mechanisms))
}

/// SaslAuthenticate v2: the error code, its message and the server's
/// bytes.
pub(super) fn sasl_authenticate(answer: &[u8]) -> Result<(i16, String, Vec<u8>), String> {
    let mut r = Reader::new(answer);
    let error = r.i16()?;
    let message = r.compact_string()?.unwrap_or_default();
    let bytes = r.compact_bytes()?.unwrap_or_default().to_vec();
    Ok((error, message, bytes))
}

/// Metadata v12: its topics (error, name, id); brokers and partitions
/// walked past.
pub(super) fn metadata_v12(answer: &[u8]) -> Result<Vec<Topic>, String> {
    let mut r = Reader::new(answer);
    r.i32()?; // throttle time
              // Brokers: node id, host, port, rack, tags (at least 11 bytes).
    for _ in 0..r.compact_count(11)? {
        r.i32()?;
        r.compact_bytes()?;
        r.i32()?;
        r.compact_bytes()?;
        r.tags()?;
    }
    r.compact_bytes()?; // cluster id
    r.i32()?; // controller id
              // Topics: error, name, id, internal, partitions, operations, tags
              // (at least 26 bytes).
    let n = r.compact_count(26)?;
    let mut topics = Vec::with_capacity(n);
    for _ in 0..n {
        let error = r.i16()?;
        let name = r.compact_string()?;
        let id: [u8; 16] = r.take(16)?.try_into().map_err(|_| "a short id")?;
        r.take(1)?; // internal
                    // Partitions: error, index, leader, epoch, three arrays, tags
                    // (at least 18 bytes).
        for _ in 0..r.compact_count(18)? {
            r.i16()?;
            r.i32()?;
            r.i32()?;
            r.i32()?;
            for _ in 0..3 {
                let nodes = r.compact_count(4)?;
                r.take(nodes * 4)?;
            }
            r.tags()?;
        }
        r.i32()?; // authorized operations
        r.tags()?;
        topics.push(Topic { error, name, id });
    }
    r.tags()?;
    Ok(topics)
}
