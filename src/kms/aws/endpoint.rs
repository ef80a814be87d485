//! Where an AWS KMS request goes: the parts of a key's ARN
//! (`aws-kms://arn:PARTITION:kms:REGION:ACCOUNT:key/ID`), the default
//! endpoint of its partition and region, and an endpoint URL given
//! instead, with the host and canonical URI it is signed with.

use crate::error::Error;
use crate::kms::printable_uri;

use super::sigv4::canonical_uri;

/// The URI scheme of AWS KMS keys.
pub(crate) const SCHEME: &str = "aws-kms://";

/// The parts of a key's ARN this client uses.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Arn<'a> {
    /// The whole ARN (`arn:...`), the `KeyId` of requests.
    pub(super) arn: &'a str,
    /// `aws`, `aws-cn`, ...
    pub(super) partition: &'a str,
    pub(super) region: &'a str,
}

/// `aws-kms://arn:PARTITION:kms:REGION:ACCOUNT:key/ID` -> its ARN.
pub(super) fn parse_uri(uri: &str) -> Result<Arn<'_>, Error> {
    let bad = || {
        Error::kms_msg(format!(
            "{:?} is not aws-kms://arn:PARTITION:kms:REGION:ACCOUNT:key/ID",
            printable_uri(uri)
        ))
    };
    let arn = uri.strip_prefix(SCHEME).ok_or_else(bad)?;
    let mut parts = arn.splitn(6, ':');
    let (Some("arn"), Some(partition), Some("kms"), Some(region), Some(account), Some(res)) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return Err(bad());
    };
    let word = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if !partition.starts_with("aws")
        || !word(partition)
        || !word(region)
        || !account.bytes().all(|b| b.is_ascii_digit())
        || !(res.starts_with("key/") || res.starts_with("alias/"))
        || !res
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_/".contains(&b))
    {
        return Err(bad());
    }
    Ok(Arn {
        arn,
        partition,
        region,
    })
}

/// The partitions whose KMS endpoints this client knows:
/// `https://kms.REGION.DOMAIN` (botocore's partition table).
const PARTITIONS: [(&str, &str); 8] = [
    ("aws", "amazonaws.com"),
    ("aws-cn", "amazonaws.com.cn"),
    ("aws-us-gov", "amazonaws.com"),
    ("aws-eusc", "amazonaws.eu"),
    ("aws-iso", "c2s.ic.gov"),
    ("aws-iso-b", "sc2s.sgov.gov"),
    ("aws-iso-e", "cloud.adc-e.uk"),
    ("aws-iso-f", "csp.hci.ic.gov"),
];

/// The default endpoint of a key: `https://kms.REGION.DOMAIN`, the domain
/// being its partition's; an unknown partition is an error, not a guess.
pub(super) fn default_endpoint(key_uri: &str, arn: &Arn<'_>) -> Result<String, Error> {
    let domain = PARTITIONS
        .iter()
        .find(|(p, _)| *p == arn.partition)
        .map(|(_, d)| *d)
        .ok_or_else(|| {
            let known: Vec<&str> = PARTITIONS.iter().map(|(p, _)| *p).collect();
            Error::kms_msg(format!(
                "{}: unknown AWS partition {:?} (known: {}); give its KMS endpoint with \
                 AwsKmsClient::with_endpoint or AWS_ENDPOINT_URL_KMS",
                printable_uri(key_uri),
                arn.partition,
                known.join(", ")
            ))
        })?;
    Ok(format!("https://kms.{}.{domain}", arn.region))
}

/// Where requests go, and how that is signed.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Endpoint {
    /// The URL requests are sent to: the endpoint as given, `/` added
    /// when it has no path.
    pub(super) url: String,
    /// The `host` header, sent and signed: the host in lower case, and the
    /// port unless it is the scheme's default.
    pub(super) host: String,
    /// SigV4's canonical URI of the URL's path.
    pub(super) canonical_uri: String,
}

/// Whether `b` may be in the path of an endpoint as it is (RFC 3986's
/// `pchar` and `/`; `%` starts an escape).
fn path_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/%".contains(&b)
}

/// Parses an endpoint URL (see [`AwsKmsClient::with_endpoint`](super::AwsKmsClient::with_endpoint)).
pub(super) fn parse_endpoint(endpoint: &str) -> Result<Endpoint, Error> {
    let bad = |why: &str| Error::kms_msg(format!("bad AWS KMS endpoint {endpoint:?}: {why}"));
    let (scheme, rest) = endpoint
        .split_once("://")
        .ok_or_else(|| bad("not http://HOST or https://HOST"))?;
    let default_port = if scheme.eq_ignore_ascii_case("https") {
        443
    } else if scheme.eq_ignore_ascii_case("http") {
        80
    } else {
        return Err(bad("the scheme is neither http nor https"));
    };
    if rest.contains(['?', '#']) {
        return Err(bad("a query or a fragment is not supported"));
    }
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    if authority.contains('@') {
        return Err(bad("user information is not supported"));
    }
    // `[v6]:port` or `name:port`; the port is optional.
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => {
            let (addr, after) = v6.split_once(']').ok_or_else(|| bad("no ] after [IPv6"))?;
            if addr.is_empty()
                || !addr
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() || b":.".contains(&b))
            {
                return Err(bad("not an IPv6 address in [...]"));
            }
            let port = match after {
                "" => None,
                p => Some(p.strip_prefix(':').ok_or_else(|| bad("junk after ]"))?),
            };
            (&authority[..addr.len() + 2], port)
        }
        None => match authority.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        },
    };
    let host_ok = |h: &str| {
        h.starts_with('[')
            || (!h.is_empty()
                && h.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b)))
    };
    if !host_ok(host) {
        return Err(bad(
            "no host, or a host with characters a host name cannot have",
        ));
    }
    let port = match port {
        None => None,
        Some(p) => Some(
            p.parse::<u16>()
                .ok()
                .filter(|_| p.bytes().all(|b| b.is_ascii_digit()))
                .ok_or_else(|| bad("the port is not a number from 0 to 65535"))?,
        ),
    };
    if !path.bytes().all(path_byte) {
        return Err(bad(
            "the path has characters that must be percent-encoded (%XX)",
        ));
    }
    let path_bytes = path.as_bytes();
    for (i, b) in path_bytes.iter().enumerate() {
        if *b == b'%'
            && !(path_bytes.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && path_bytes.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
        {
            return Err(bad("a % in the path is not followed by two hex digits"));
        }
    }
    let host = match port {
        Some(p) if p != default_port => format!("{}:{p}", host.to_ascii_lowercase()),
        _ => host.to_ascii_lowercase(),
    };
    let (url, path) = if path.is_empty() {
        (format!("{endpoint}/"), "/")
    } else {
        (endpoint.to_owned(), path)
    };
    Ok(Endpoint {
        url,
        host,
        canonical_uri: canonical_uri(path),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        for (endpoint, url, host, canonical) in [
            (
                "http://127.0.0.1:4566",
                "http://127.0.0.1:4566/",
                "127.0.0.1:4566",
                "/",
            ),
            (
                "http://127.0.0.1:80/",
                "http://127.0.0.1:80/",
                "127.0.0.1",
                "/",
            ),
            ("https://h:443/kms/", "https://h:443/kms/", "h", "/kms/"),
            ("https://h:80/kms", "https://h:80/kms", "h:80", "/kms"),
            (
                "HTTP://Kms.Example:8080/a/../b//c/./",
                "HTTP://Kms.Example:8080/a/../b//c/./",
                "kms.example:8080",
                "/b/c/",
            ),
            (
                "http://[::1]:80/x:y",
                "http://[::1]:80/x:y",
                "[::1]",
                "/x%3Ay",
            ),
            ("http://[::1]:8080", "http://[::1]:8080/", "[::1]:8080", "/"),
            (
                "http://h/%41%2f+=@",
                "http://h/%41%2f+=@",
                "h",
                "/%2541%252f%2B%3D%40",
            ),
            ("http://h/..", "http://h/..", "h", "/"),
        ] {
            let e = parse_endpoint(endpoint).unwrap();
            assert_eq!(
                (e.url.as_str(), e.host.as_str(), e.canonical_uri.as_str()),
                (url, host, canonical),
                "{endpoint}"
            );
        }
        for bad in [
            "kms.example",
            "ftp://h",
            "http://",
            "http:///kms",
            "http://h:x",
            "http://h:70000",
            "http://h:+1",
            "http://u:p@h",
            "http://h/?q=1",
            "http://h#f",
            "http://h/a b",
            "http://h/%zz",
            "http://h/%4",
            "http://[::1",
            "http://[::1]x",
            "http://[]",
            "http://h\\x",
        ] {
            assert!(parse_endpoint(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn uris() {
        assert_eq!(
            parse_uri("aws-kms://arn:aws:kms:us-east-1:123456789012:key/ab-12")
                .unwrap()
                .region,
            "us-east-1"
        );
        assert!(parse_uri("aws-kms://arn:aws:kms:us-east-1:123456789012:alias/x").is_ok());
        for bad in [
            "aws-kms://",
            "aws-kms://arn:aws:s3:us-east-1:1:key/x",
            "aws-kms://arn:aws:kms::1:key/x",
            "aws-kms://arn:aws:kms:r:1:user/x",
            "aws-kms://arn:aws:kms:r/x:1:key/x",
        ] {
            assert!(parse_uri(bad).is_err(), "{bad}");
        }
    }
}
