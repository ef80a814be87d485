//! A walk over the frames the proxy decodes, before kafka-protocol does:
//! every array's count must fit in the bytes that are left, every string
//! and byte field must be there. kafka-protocol reserves an array's count
//! of elements before reading one (`Vec::with_capacity` of a count off the
//! wire), and a count of billions in a few bytes aborts the process on the
//! failed allocation: a client's Produce must not do that, nor a broker's
//! Fetch response.

/// Why a frame was refused.
pub(crate) type Refusal = String;

struct Walk<'a> {
    rest: &'a [u8],
    flexible: bool,
}

impl<'a> Walk<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Refusal> {
        if self.rest.len() < n {
            return Err(format!("{n} bytes claimed, {} left", self.rest.len()));
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn int(&mut self, n: usize) -> Result<i64, Refusal> {
        let b = self.take(n)?;
        Ok(b.iter().fold(0i64, |a, x| (a << 8) | i64::from(*x)) << (64 - 8 * n) >> (64 - 8 * n))
    }

    fn uvarint(&mut self) -> Result<u64, Refusal> {
        let mut v = 0u64;
        for shift in (0..35).step_by(7) {
            let b = self.take(1)?[0];
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("a varint longer than 5 bytes".into())
    }

    /// A length (string: 2 bytes; bytes and arrays: 4) or its compact
    /// form; `None` for null.
    fn length(&mut self, wide: bool) -> Result<Option<usize>, Refusal> {
        let n = if self.flexible {
            self.uvarint()? as i64 - 1
        } else if wide {
            self.int(4)?
        } else {
            self.int(2)?
        };
        match n {
            -1 => Ok(None),
            n if n < 0 => Err(format!("a negative length {n}")),
            n => Ok(Some(n as usize)),
        }
    }

    /// A string or byte field, skipped.
    fn skip_sized(&mut self, wide: bool) -> Result<(), Refusal> {
        if let Some(n) = self.length(wide)? {
            self.take(n)?;
        }
        Ok(())
    }

    /// An array's count, checked against what is left (each element takes
    /// a byte at least).
    fn count(&mut self) -> Result<usize, Refusal> {
        let n = self.length(true)?.unwrap_or(0);
        if n > self.rest.len() {
            return Err(format!(
                "an array of {n} elements in {} bytes",
                self.rest.len()
            ));
        }
        Ok(n)
    }

    fn tags(&mut self) -> Result<(), Refusal> {
        self.tags_known(|_| None)
    }

    /// Tagged fields, those `known` names (tag to its struct's fixed size)
    /// read as kafka-protocol reads them: the struct itself, whatever the
    /// size field says; the others skipped by their size.
    fn tags_known(&mut self, known: impl Fn(u64) -> Option<usize>) -> Result<(), Refusal> {
        if self.flexible {
            let n = self.uvarint()?;
            if n as usize > self.rest.len() {
                return Err(format!("{n} tagged fields in {} bytes", self.rest.len()));
            }
            for _ in 0..n {
                let tag = self.uvarint()?;
                let size = self.uvarint()? as usize;
                match known(tag) {
                    Some(fixed) => {
                        self.take(fixed)?;
                        self.tags()?;
                    }
                    None => {
                        self.take(size)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// A walk over a request frame, past its header (v1, or v2 at `flexible`
/// versions: the client id is never compact, the tags follow it).
fn past_request_header(frame: &[u8], flexible: bool) -> Result<Walk<'_>, Refusal> {
    let mut w = Walk {
        rest: frame,
        flexible: false,
    };
    w.take(8)?; // API key, version, correlation id
    w.skip_sized(false)?; // client id (never compact)
    w.flexible = flexible;
    w.tags()?;
    Ok(w)
}

/// A Produce request frame (header v1, or v2 from Produce v9), v3 and on
/// (topics by id from v13).
pub(crate) fn produce_request(frame: &[u8], version: i16) -> Result<(), Refusal> {
    let mut w = past_request_header(frame, version >= 9)?;
    if version >= 3 {
        w.skip_sized(false)?; // transactional id
    }
    w.take(6)?; // acks, timeout
    for _ in 0..w.count()? {
        if version >= 13 {
            w.take(16)?; // topic id
        } else {
            w.skip_sized(false)?; // topic name
        }
        for _ in 0..w.count()? {
            w.take(4)?;
            w.skip_sized(true)?; // records
            w.tags()?;
        }
        w.tags()?;
    }
    w.tags()?;
    Ok(())
}

/// A Fetch response frame (header v0, or v1 from Fetch v12), v4 and on
/// (topics by id from v13).
pub(crate) fn fetch_response(frame: &[u8], version: i16) -> Result<(), Refusal> {
    let mut w = Walk {
        rest: frame,
        flexible: version >= 12,
    };
    w.take(4)?; // correlation id
    w.tags()?;
    if version >= 1 {
        w.take(4)?;
    }
    if version >= 7 {
        w.take(6)?;
    }
    for _ in 0..w.count()? {
        if version >= 13 {
            w.take(16)?; // topic id
        } else {
            w.skip_sized(false)?; // topic name
        }
        for _ in 0..w.count()? {
            w.take(4 + 2 + 8)?;
            if version >= 4 {
                w.take(8)?;
            }
            if version >= 5 {
                w.take(8)?;
            }
            if version >= 4 {
                for _ in 0..w.count()? {
                    w.take(16)?;
                    w.tags()?;
                }
            }
            if version >= 11 {
                w.take(4)?;
            }
            w.skip_sized(true)?; // records
                                 // Diverging epoch (epoch, end offset), current leader (id,
                                 // epoch), snapshot id (end offset, epoch).
            w.tags_known(|tag| match tag {
                0 | 2 => Some(12),
                1 => Some(8),
                _ => None,
            })?;
        }
        w.tags()?;
    }
    w.tags()?;
    Ok(())
}

/// A topic (or config resource) an admin request names, as walked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Named {
    /// Its name; `None` when the request names it by topic id only.
    pub(crate) name: Option<String>,
    /// Its topic id (DeleteTopics v6 and on), else zeros.
    pub(crate) topic_id: [u8; 16],
    /// A config resource's type (`2`: a topic); `2` for the others.
    pub(crate) resource_type: i8,
    /// The partitions it names (DeleteRecords).
    pub(crate) partitions: Vec<i32>,
}

impl Walk<'_> {
    fn string(&mut self) -> Result<Option<String>, Refusal> {
        match self.length(false)? {
            None => Ok(None),
            Some(n) => {
                let b = self.take(n)?;
                Ok(Some(String::from_utf8_lossy(b).into_owned()))
            }
        }
    }
}

/// The topics an admin request names that can change or remove a topic's
/// records or its settings: DeleteTopics, DeleteRecords, CreatePartitions,
/// AlterConfigs and IncrementalAlterConfigs (header v1, or v2 at their
/// flexible versions). Every count is checked against the bytes left.
pub(crate) fn admin_topics(api: i16, frame: &[u8], version: i16) -> Result<Vec<Named>, Refusal> {
    // The first flexible version of each.
    let flexible = match api {
        20 => version >= 4,
        21 | 33 => version >= 2,
        37 => version >= 2,
        44 => version >= 1,
        other => return Err(format!("API key {other} is not an admin API walked here")),
    };
    let mut w = past_request_header(frame, flexible)?;
    let topic = |name: Option<String>| Named {
        name,
        topic_id: [0; 16],
        resource_type: 2,
        partitions: Vec::new(),
    };
    let mut named = Vec::new();
    match api {
        // DeleteTopics: names (v0-5), or topics of a name and an id.
        20 => {
            for _ in 0..w.count()? {
                if version >= 6 {
                    let mut t = topic(w.string()?);
                    t.topic_id.copy_from_slice(w.take(16)?);
                    w.tags()?;
                    named.push(t);
                } else {
                    named.push(topic(w.string()?));
                }
            }
            w.take(4)?;
        }
        // DeleteRecords: topics of partitions and offsets.
        21 => {
            for _ in 0..w.count()? {
                let mut t = topic(w.string()?);
                for _ in 0..w.count()? {
                    let p = w.int(4)?;
                    w.take(8)?;
                    w.tags()?;
                    t.partitions.push(p as i32);
                }
                w.tags()?;
                named.push(t);
            }
            w.take(4)?;
        }
        // CreatePartitions: topics, counts and assignments.
        37 => {
            for _ in 0..w.count()? {
                let t = topic(w.string()?);
                w.take(4)?;
                for _ in 0..w.count()? {
                    let n = w.count()?;
                    w.take(4 * n)?;
                    w.tags()?;
                }
                w.tags()?;
                named.push(t);
            }
            w.take(5)?;
        }
        // AlterConfigs and IncrementalAlterConfigs: resources of configs.
        _ => {
            for _ in 0..w.count()? {
                let resource_type = w.int(1)? as i8;
                let mut t = topic(w.string()?);
                t.resource_type = resource_type;
                for _ in 0..w.count()? {
                    w.skip_sized(false)?;
                    if api == 44 {
                        w.take(1)?;
                    }
                    w.skip_sized(false)?;
                    w.tags()?;
                }
                w.tags()?;
                named.push(t);
            }
            w.take(1)?;
        }
    }
    w.tags()?;
    Ok(named)
}
