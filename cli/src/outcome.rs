//! How a command ends: a failure (exit 2) or an outcome (0 clean, 1
//! findings), and where its results go.

use std::io::Write as _;

use tombstone_crypt::Error;

/// A failure that ends the command with exit code 2.
#[derive(Debug)]
pub(crate) struct Fail(pub(crate) String);

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        Fail(chain(&e))
    }
}

/// An error and its causes, on one line.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        cause = c.source();
    }
    s
}

/// A [`Fail`] with `msg`.
pub(crate) fn fail(msg: impl Into<String>) -> Fail {
    Fail(msg.into())
}

/// How a command ended when it did not fail.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Done, nothing found: exit 0.
    Clean,
    /// Findings: exit 1.
    Findings,
}

impl Outcome {
    /// `Findings` if there are any, else `Clean`.
    pub(crate) fn of(findings: bool) -> Outcome {
        if findings {
            Outcome::Findings
        } else {
            Outcome::Clean
        }
    }
}

/// Where results go.
pub(crate) struct Output {
    /// `--json`: JSON instead of text.
    pub(crate) json: bool,
    /// `--quiet`: no progress bar.
    pub(crate) quiet: bool,
}

impl Output {
    /// Prints `text` or, with `--json`, `json` (one document) on stdout.
    pub(crate) fn print(&self, text: &str, json: &serde_json::Value) -> Result<(), Fail> {
        let mut stdout = std::io::stdout().lock();
        let written = if self.json {
            writeln!(stdout, "{json}")
        } else {
            write!(stdout, "{text}")
        };
        written
            .and_then(|()| stdout.flush())
            .map_err(|e| fail(format!("writing to stdout: {e}")))
    }
}
