//! Strict parsing of workspace files (`tools.json`, `subagents/*.md`): the error type
//! naming file, line and key ([`SpecError`]) and the checked deserialization both
//! parsers share.
//!
//! Unlike the lenient reference loader, nothing is silently ignored: an unknown key, a
//! value of the wrong type or range, malformed JSON/YAML or an unreadable file is a
//! [`SpecError`] naming the file, the 1-based file line when known, and the key when known.
//!
//! Line numbers come from the parsers themselves: both `serde_json` and `serde_yaml_ng`
//! attach the position of the node being deserialized to errors raised while visiting it,
//! so every check runs *inside* the visitor of the offending key or value, and the
//! structured details (kind, key, message) travel beside the error in a private `Ctx`.
//!
//! Public paths: `rein::subagent::spec::{SpecError, SpecErrorKind}`.

mod checked;

pub(crate) use checked::*;

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// What went wrong in a [`SpecError`].
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SpecErrorKind {
    /// The file or directory exists but could not be read (permissions, not a regular
    /// file, invalid UTF-8, ...).
    Io,
    /// `tools.json` is not syntactically valid JSON.
    MalformedJson,
    /// The front matter is not syntactically valid YAML.
    MalformedYaml,
    /// A Markdown declaration does not start with a `---` line, or its front matter is
    /// never closed by a second `---` line.
    MissingFrontMatter,
    /// A key that the format does not define (or a key that is not a string).
    UnknownKey,
    /// A required key is absent.
    MissingKey,
    /// A key has a value of the wrong type or out of range, is repeated, or the document
    /// as a whole has the wrong shape.
    InvalidValue,
    /// The file name does not yield a valid subagent id.
    InvalidId,
    /// A `${VAR}` in a `tools.json` string names an environment variable that is not set
    /// (or not valid Unicode); the message names the variable.
    MissingEnvVar,
    /// A path that must exist does not: a workspace directory given to
    /// [`AgentBuilder::workspace`](crate::AgentBuilder::workspace), or the target of a
    /// `tools.json` that is a symbolic link (a dangling link, e.g. a Kubernetes ConfigMap
    /// whose target is missing).
    Missing,
}

/// A strict-validation failure in a workspace file.
///
/// Its `Display` always names the file, then the 1-based file line when known, then the key
/// when known, e.g. ``subagents/reviewer.md:4: key `tools`: expected a list of tool names or
/// a comma-separated string, found integer `3` ``.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}{}: {}{}", .file.display(), LinePart(*.line), KeyPart(.key.as_deref()), .message)]
pub struct SpecError {
    pub(crate) kind: SpecErrorKind,
    pub(crate) file: PathBuf,
    pub(crate) line: Option<usize>,
    pub(crate) key: Option<String>,
    pub(crate) message: String,
}

impl SpecError {
    pub(crate) fn new(
        kind: SpecErrorKind,
        file: &Path,
        line: Option<usize>,
        key: Option<&str>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            kind,
            file: file.to_path_buf(),
            line,
            key: key.map(str::to_owned),
            message: message.into(),
        }
    }

    pub(crate) fn io(file: &Path, err: &io::Error) -> Self {
        Self::new(
            SpecErrorKind::Io,
            file,
            None,
            None,
            format!("cannot read: {err}"),
        )
    }

    /// A [`SpecErrorKind::Missing`] error about `file`.
    pub(crate) fn missing(file: &Path, message: impl Into<String>) -> Self {
        Self::new(SpecErrorKind::Missing, file, None, None, message)
    }

    /// The category of the failure.
    pub fn kind(&self) -> SpecErrorKind {
        self.kind
    }

    /// The file (or directory) the error is about, exactly as the caller named it.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// The 1-based line in the file (not in the YAML fragment), when known.
    pub fn line(&self) -> Option<usize> {
        self.line
    }

    /// The offending (or missing) key, when the error is about one key.
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// The bare description, without the file/line/key prefix.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// `:<line>` when the line is known.
struct LinePart(Option<usize>);

impl fmt::Display for LinePart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(line) => write!(f, ":{line}"),
            None => Ok(()),
        }
    }
}

/// ``key `<key>`: `` when the key is known.
struct KeyPart<'a>(Option<&'a str>);

impl fmt::Display for KeyPart<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(key) => write!(f, "key `{key}`: "),
            None => Ok(()),
        }
    }
}
