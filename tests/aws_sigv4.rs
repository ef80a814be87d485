//! The AWS KMS client's SigV4 signatures against botocore's `SigV4Auth`
//! (the signer of the AWS SDK for Python), for the same request at the same
//! time: the URL a request goes to, the `host` header it is signed and sent
//! with, and the `Authorization` header must all be botocore's.
//!
//! botocore is in the test venv (moto depends on it): its python is
//! `TOMBSTONE_TINK_PYTHON`, else `target/venv/bin/python`
//! (`scripts/tink-venv.sh` makes it). Without it these tests fail.
#![cfg(feature = "aws-kms")]

use crate::common;

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::{json, Value};
use tombstone_crypt::kms::{AwsCredentials, AwsKmsClient, KmsClient as _, KmsTimeouts};

/// The venv's python; panics (the test fails) when there is none.
fn python() -> PathBuf {
    common::tink::venv_python(
        "botocore, from moto, signs the reference requests: \
         run ./scripts/test.sh or scripts/tink-venv.sh, or set TOMBSTONE_TINK_PYTHON",
    )
}

/// Signs each case with botocore: a KMS client made for the case's region
/// and endpoint (so botocore resolves the default endpoint of the region's
/// partition), the URL it would send the request to (`prepare_request_dict`
/// with the JSON protocol's path `/`), and `SigV4Auth(credentials, 'kms',
/// region).add_auth(...)` at the case's time (botocore's clock patched).
const BOTOCORE: &str = r#"
import datetime, json, sys, types
import botocore.auth, botocore.session
from botocore.awsrequest import create_request_object, prepare_request_dict
from botocore.credentials import Credentials

def freeze(now):
    # botocore reads the time with get_current_datetime() (newer) or
    # datetime.datetime.utcnow() (older).
    if hasattr(botocore.auth, "get_current_datetime"):
        botocore.auth.get_current_datetime = lambda remove_tzinfo=True: now
    class Fixed(datetime.datetime):
        @classmethod
        def utcnow(cls):
            return now
    botocore.auth.datetime = types.SimpleNamespace(
        datetime=Fixed, timezone=datetime.timezone, timedelta=datetime.timedelta)

session = botocore.session.get_session()
out = []
for c in json.load(sys.stdin):
    client = session.create_client(
        "kms", region_name=c["region"], endpoint_url=c["endpoint"],
        aws_access_key_id=c["access"], aws_secret_access_key=c["secret"],
        aws_session_token=c["token"])
    req = {
        "url_path": "/", "query_string": "", "method": "POST",
        "headers": {"Content-Type": "application/x-amz-json-1.1",
                    "X-Amz-Target": "TrentService." + c["action"]},
        "body": bytes.fromhex(c["body"]), "context": {},
    }
    prepare_request_dict(req, client.meta.endpoint_url)
    req = create_request_object(req)
    if "amz_date" in c:
        now = datetime.datetime.strptime(c["amz_date"], "%Y%m%dT%H%M%SZ")
    else:
        now = datetime.datetime.fromtimestamp(c["time"], datetime.timezone.utc).replace(tzinfo=None)
    freeze(now)
    signer = botocore.auth.SigV4Auth(Credentials(c["access"], c["secret"], c["token"]), "kms", c["region"])
    signer.add_auth(req)
    headers = {k.lower(): v for k, v in req.headers.items()}
    # The host botocore signs (and its HTTP client sends).
    headers["host"] = signer.headers_to_sign(req)["host"]
    out.append({"url": req.url, "headers": headers})
json.dump(out, sys.stdout)
"#;

/// botocore's URL and headers for each case.
fn botocore(cases: &[Value]) -> Vec<Value> {
    let py = python();
    // No AWS_* variable (kms.env sets AWS_ENDPOINT_URL_KMS) and no config
    // file reach botocore: only what each case says.
    let mut child = Command::new(&py)
        .arg("-c")
        .arg(BOTOCORE)
        .env_clear()
        .env("AWS_CONFIG_FILE", "/nonexistent")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", py.display()));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(Value::from(cases.to_vec()).to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "botocore failed in {} (is botocore installed? scripts/tink-venv.sh installs it):\n{}",
        py.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let answers: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answers.len(), cases.len());
    answers
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// One request signed by the crate.
struct Case {
    key_uri: &'static str,
    region: &'static str,
    endpoint: Option<&'static str>,
    token: Option<&'static str>,
    action: &'static str,
    body: &'static [u8],
    time: u64,
}

const ACCESS: &str = "AKIDEXAMPLE";
const SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";

fn client(endpoint: Option<&str>, token: Option<&str>) -> AwsKmsClient {
    let mut creds = AwsCredentials::new(ACCESS, SECRET);
    if let Some(t) = token {
        creds = creds.with_session_token(t);
    }
    let client = AwsKmsClient::new(creds);
    match endpoint {
        Some(e) => client.with_endpoint(e),
        None => client,
    }
}

/// The URL, the `host` and the `Authorization` of every case are
/// botocore's (and so are the other headers both send).
#[test]
fn signatures_match_botocore() {
    let cases = [
        // An endpoint with a path: signed as `/kms/`, sent to `/kms/`.
        Case {
            key_uri: "aws-kms://arn:aws:kms:us-east-1:123456789012:key/k-1",
            region: "us-east-1",
            endpoint: Some("http://127.0.0.1:4566/kms/"),
            token: None,
            action: "Encrypt",
            body: br#"{"KeyId":"arn:aws:kms:us-east-1:123456789012:key/k-1","Plaintext":"AAEC"}"#,
            time: 1_440_938_160,
        },
        // The same path without its last slash: sent and signed as is.
        Case {
            key_uri: "aws-kms://arn:aws:kms:us-east-1:123456789012:key/k-1",
            region: "us-east-1",
            endpoint: Some("http://127.0.0.1:4566/kms"),
            token: None,
            action: "Decrypt",
            body: br#"{"KeyId":"arn:aws:kms:us-east-1:123456789012:key/k-1","CiphertextBlob":"AAEC"}"#,
            time: 1_700_000_000,
        },
        // The default port of https is not part of the host.
        Case {
            key_uri: "aws-kms://arn:aws:kms:us-east-1:123456789012:key/k-2",
            region: "us-east-1",
            endpoint: Some("https://kms.us-east-1.amazonaws.com:443"),
            token: None,
            action: "Encrypt",
            body: br#"{"KeyId":"arn:aws:kms:us-east-1:123456789012:key/k-2","Plaintext":"AAEC"}"#,
            time: 1_700_000_001,
        },
        // Nor is http's.
        Case {
            key_uri: "aws-kms://arn:aws:kms:eu-west-1:123456789012:key/k-3",
            region: "eu-west-1",
            endpoint: Some("http://127.0.0.1:80"),
            token: None,
            action: "Decrypt",
            body: br#"{"KeyId":"arn:aws:kms:eu-west-1:123456789012:key/k-3","CiphertextBlob":"AAEC"}"#,
            time: 1_700_000_002,
        },
        // Temporary credentials: the session token is sent and signed.
        Case {
            key_uri: "aws-kms://arn:aws:kms:us-west-2:123456789012:alias/a-1",
            region: "us-west-2",
            endpoint: None,
            token: Some("FwoGZXIvYXdzEBYaDH+session/token=="),
            action: "Encrypt",
            body: br#"{"KeyId":"arn:aws:kms:us-west-2:123456789012:alias/a-1","Plaintext":"AAEC","EncryptionContext":{"associatedData":"6164"}}"#,
            time: 1_700_000_003,
        },
        // The ARN's partition decides the domain: China.
        Case {
            key_uri: "aws-kms://arn:aws-cn:kms:cn-north-1:123456789012:key/k-4",
            region: "cn-north-1",
            endpoint: None,
            token: None,
            action: "Encrypt",
            body: br#"{"KeyId":"arn:aws-cn:kms:cn-north-1:123456789012:key/k-4","Plaintext":"AAEC"}"#,
            time: 1_700_000_004,
        },
        // GovCloud.
        Case {
            key_uri: "aws-kms://arn:aws-us-gov:kms:us-gov-west-1:123456789012:key/k-5",
            region: "us-gov-west-1",
            endpoint: None,
            token: Some("tok"),
            action: "Decrypt",
            body: br#"{"KeyId":"arn:aws-us-gov:kms:us-gov-west-1:123456789012:key/k-5","CiphertextBlob":"AAEC"}"#,
            time: 1_700_000_005,
        },
        // A path that SigV4 encodes (again: `%` and `:`), with empty and
        // dot segments it removes, on a host written in capitals.
        Case {
            key_uri: "aws-kms://arn:aws:kms:us-east-1:123456789012:key/k-6",
            region: "us-east-1",
            endpoint: Some("http://LocalHost:4566/a%20b/v1:x//./y/../"),
            token: None,
            action: "Encrypt",
            body: br#"{"KeyId":"arn:aws:kms:us-east-1:123456789012:key/k-6","Plaintext":"AAEC"}"#,
            time: 1_700_000_006,
        },
        // IPv6, the default port: no port in the host, the brackets kept.
        Case {
            key_uri: "aws-kms://arn:aws:kms:us-east-1:123456789012:key/k-7",
            region: "us-east-1",
            endpoint: Some("http://[::1]:80/kms/"),
            token: None,
            action: "Decrypt",
            body: br#"{"KeyId":"arn:aws:kms:us-east-1:123456789012:key/k-7","CiphertextBlob":"AAEC"}"#,
            time: 1_700_000_007,
        },
        // A host in capitals, https's default port, a path.
        Case {
            key_uri: "aws-kms://arn:aws:kms:us-east-1:123456789012:key/k-8",
            region: "us-east-1",
            endpoint: Some("https://KMS.US-EAST-1.amazonaws.com:443/"),
            token: Some("t"),
            action: "Encrypt",
            body: b"",
            time: 1_700_000_008,
        },
    ];
    let inputs: Vec<Value> = cases
        .iter()
        .map(|c| {
            json!({
                "region": c.region, "endpoint": c.endpoint, "access": ACCESS,
                "secret": SECRET, "token": c.token, "action": c.action,
                "body": hex(c.body), "time": c.time,
            })
        })
        .collect();
    let expected = botocore(&inputs);
    let mut wrong = Vec::new();
    for (c, want) in cases.iter().zip(&expected) {
        let (url, headers) = client(c.endpoint, c.token)
            .__signed_request(c.key_uri, c.time, c.action, c.body)
            .unwrap();
        let name = format!(
            "{} at {}",
            c.key_uri,
            c.endpoint.unwrap_or("the default endpoint")
        );
        if url != want["url"] {
            wrong.push(format!("{name}: URL {url:?}, botocore's {}", want["url"]));
        }
        for h in [
            "authorization",
            "host",
            "x-amz-date",
            "x-amz-security-token",
            "x-amz-target",
            "content-type",
        ] {
            let ours = headers
                .iter()
                .find(|(k, _)| k == h)
                .map(|(_, v)| v.as_str());
            if ours != want["headers"][h].as_str() {
                wrong.push(format!(
                    "{name}: {h} {ours:?}, botocore's {}",
                    want["headers"][h]
                ));
            }
        }
        // Nothing is signed that botocore does not sign.
        for (k, _) in &headers {
            if want["headers"].get(k.as_str()).is_none() {
                wrong.push(format!("{name}: {k} is sent, botocore has none"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "differences from botocore:\n{}",
        wrong.join("\n")
    );
}

/// One HTTP request as a loopback server received it.
struct Received {
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Received {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Serves one request on `listener` with a KMS `Encrypt` answer; what it
/// received.
fn serve_one(listener: TcpListener) -> Received {
    let (stream, _) = listener.accept().unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let mut parts = line.split_whitespace();
    assert_eq!(parts.next(), Some("POST"), "{line}");
    let path = parts.next().unwrap().to_owned();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).unwrap();
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':').unwrap();
        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
    }
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .map(|(_, v)| v.parse().unwrap())
        .unwrap_or(0);
    let mut body = vec![0; len];
    reader.read_exact(&mut body).unwrap();
    let answer = br#"{"CiphertextBlob":"AQID","KeyId":"k"}"#;
    let mut stream = stream;
    write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: application/x-amz-json-1.1\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        answer.len()
    )
    .unwrap();
    stream.write_all(answer).unwrap();
    stream.flush().unwrap();
    Received {
        path,
        headers,
        body,
    }
}

/// A real request over loopback: it goes to the endpoint's path, and
/// botocore, signing what the server received (URL, body, headers, time),
/// gets the same `Authorization` and `host`.
#[test]
fn what_is_sent_is_what_is_signed() {
    const URI: &str = "aws-kms://arn:aws:kms:us-east-1:123456789012:key/k-1";
    let paths = ["/kms/", "/kms", "", "/a%20b/v1:x/"];
    let mut received = Vec::new();
    let mut endpoints = Vec::new();
    for path in paths {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || serve_one(listener));
        let endpoint = format!("http://127.0.0.1:{port}{path}");
        let aead = client(Some(&endpoint), Some("session-token"))
            .with_timeouts(KmsTimeouts {
                attempts: 1,
                ..KmsTimeouts::default()
            })
            .get_aead(URI)
            .unwrap();
        aead.encrypt(&[7; 32], b"ad").unwrap();
        received.push(server.join().unwrap());
        endpoints.push(endpoint);
    }
    let inputs: Vec<Value> = received
        .iter()
        .zip(&endpoints)
        .map(|(r, e)| {
            json!({
                "region": "us-east-1", "endpoint": e, "access": ACCESS, "secret": SECRET,
                "token": "session-token", "action": "Encrypt", "body": hex(&r.body),
                "amz_date": r.header("x-amz-date").unwrap(),
            })
        })
        .collect();
    let expected = botocore(&inputs);
    let mut wrong = Vec::new();
    for ((path, r), want) in paths.iter().zip(&received).zip(&expected) {
        let sent_to = if path.is_empty() { "/" } else { path };
        if r.path != sent_to {
            wrong.push(format!(
                "endpoint path {path:?}: request sent to {:?}",
                r.path
            ));
        }
        for h in [
            "authorization",
            "host",
            "x-amz-security-token",
            "x-amz-target",
        ] {
            if r.header(h) != want["headers"][h].as_str() {
                wrong.push(format!(
                    "endpoint path {path:?}: {h} {:?} received, botocore signs {}",
                    r.header(h),
                    want["headers"][h]
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "differences from botocore:\n{}",
        wrong.join("\n")
    );
}
