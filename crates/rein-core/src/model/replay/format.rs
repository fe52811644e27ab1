//! The records of a `rein-recording/1` file, the canonical form of a request, and the
//! error a fixture that cannot be read or written is.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::redact::{Redactor, redact_pieces, redact_text, redact_value};
use crate::message::{ContentBlock, Role, Thinking, ToolResult, ToolUse};
use crate::model::{
    FinishReason, GenerateOptions, ModelChunk, ModelError, ModelErrorKind, ModelRequest, Usage,
};
use crate::tool::ToolSchema;

/// The format name and version in a recording's header line.
pub const RECORDING_FORMAT: &str = "rein-recording/1";

/// What `extra_headers` values are replaced by (headers carry credentials).
const HEADER_PLACEHOLDER: &str = "[redacted]";

/// One message of a recorded request: what the model sees of it (no id, no metadata;
/// tool-call ids are aliases, see the [module docs](super)).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordedMsg {
    /// Author role.
    pub role: Role,
    /// Author name, when the message has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The content blocks, redacted.
    pub content: Vec<ContentBlock>,
}

/// A request in canonical, redacted form: what a recording stores and what a replay
/// compares (see the [module docs](super)).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordedRequest {
    /// The messages, in order.
    pub messages: Vec<RecordedMsg>,
    /// The tools offered, in order.
    pub tools: Vec<ToolSchema>,
    /// The effective options (`extra_headers` values replaced by `[redacted]`).
    pub options: GenerateOptions,
}

impl RecordedRequest {
    /// The canonical, redacted form of `request`: message ids and metadata dropped,
    /// tool-call ids replaced by `call#1`, `call#2`, … in order of first appearance,
    /// every text the model sees redacted with `redactor`, `extra_headers` values
    /// replaced, `extra_body` string values redacted.
    pub fn from_request(request: &ModelRequest, redactor: &dyn Redactor) -> Self {
        let mut aliases: HashMap<String, String> = HashMap::new();
        let mut alias = |id: &str| -> String {
            let next = aliases.len() + 1;
            aliases
                .entry(id.to_owned())
                .or_insert_with(|| format!("call#{next}"))
                .clone()
        };
        let messages = request
            .messages
            .iter()
            .map(|m| RecordedMsg {
                role: m.role,
                name: m.name.clone(),
                content: m
                    .content
                    .iter()
                    .map(|b| match b {
                        ContentBlock::Text(t) => {
                            ContentBlock::Text(redact_text(redactor, t).into_owned())
                        }
                        ContentBlock::Thinking(th) => ContentBlock::Thinking(Thinking {
                            text: redact_text(redactor, &th.text).into_owned(),
                            signature: th.signature.clone(),
                        }),
                        ContentBlock::ToolUse(u) => {
                            let mut input = u.input.clone();
                            redact_value(redactor, &mut input);
                            ContentBlock::ToolUse(ToolUse::new(alias(&u.id), u.name.clone(), input))
                        }
                        ContentBlock::ToolResult(r) => ContentBlock::ToolResult(ToolResult {
                            id: alias(&r.id),
                            name: r.name.clone(),
                            content: redact_text(redactor, &r.content).into_owned(),
                            is_error: r.is_error,
                        }),
                    })
                    .collect(),
            })
            .collect();
        let mut options = request.options.clone();
        for value in options.extra_headers.values_mut() {
            HEADER_PLACEHOLDER.clone_into(value);
        }
        for value in options.extra_body.values_mut() {
            redact_value(redactor, value);
        }
        Self {
            messages,
            tools: request.tools.to_vec(),
            options,
        }
    }

    /// The request as a JSON value (the form compared field by field).
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// One streamed item of a recorded exchange.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum RecordedChunk {
    /// [`ModelChunk::Text`].
    Text(String),
    /// [`ModelChunk::Thinking`].
    Thinking(String),
    /// [`ModelChunk::ThinkingSignature`].
    ThinkingSignature(String),
    /// [`ModelChunk::ToolCall`].
    ToolCall {
        /// Position of the call within the turn.
        index: usize,
        /// The provider's call id, on the fragment that carried it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// The tool name, on the fragment that carried it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// A piece of the JSON arguments.
        arguments: String,
    },
    /// [`ModelChunk::Usage`].
    Usage(Usage),
    /// [`ModelChunk::Finish`].
    Finish(FinishReason),
    /// The stream's error item, which ended it.
    Error {
        /// The [`ModelErrorKind`], snake_case (`rate_limit`, `server`, …).
        kind: String,
        /// The error message (redacted).
        message: String,
    },
}

impl RecordedChunk {
    /// The record of one streamed item.
    pub fn from_item(item: &Result<ModelChunk, ModelError>) -> Self {
        match item {
            Ok(ModelChunk::Text(t)) => Self::Text(t.clone()),
            Ok(ModelChunk::Thinking(t)) => Self::Thinking(t.clone()),
            Ok(ModelChunk::ThinkingSignature(s)) => Self::ThinkingSignature(s.clone()),
            Ok(ModelChunk::ToolCall {
                index,
                id,
                name,
                arguments,
            }) => Self::ToolCall {
                index: *index,
                id: id.clone(),
                name: name.clone(),
                arguments: arguments.clone(),
            },
            Ok(ModelChunk::Usage(u)) => Self::Usage(*u),
            Ok(ModelChunk::Finish(f)) => Self::Finish(f.clone()),
            Err(e) => Self::Error {
                kind: kind_name(e.kind()).to_owned(),
                message: e.message().to_owned(),
            },
        }
    }

    /// The streamed item this record replays. An unknown error kind replays as
    /// [`ModelErrorKind::Other`] (a loaded recording has none: loading checks them).
    pub fn to_item(&self) -> Result<ModelChunk, ModelError> {
        Ok(match self {
            Self::Text(t) => ModelChunk::Text(t.clone()),
            Self::Thinking(t) => ModelChunk::Thinking(t.clone()),
            Self::ThinkingSignature(s) => ModelChunk::ThinkingSignature(s.clone()),
            Self::ToolCall {
                index,
                id,
                name,
                arguments,
            } => ModelChunk::ToolCall {
                index: *index,
                id: id.clone(),
                name: name.clone(),
                arguments: arguments.clone(),
            },
            Self::Usage(u) => ModelChunk::Usage(*u),
            Self::Finish(f) => ModelChunk::Finish(f.clone()),
            Self::Error { kind, message } => {
                let kind = kind_from_name(kind).unwrap_or(ModelErrorKind::Other);
                return Err(ModelError::new(kind, message.clone()));
            }
        })
    }
}

/// How a recorded exchange ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ExchangeEnd {
    /// The stream ended after its last chunk.
    Complete,
    /// The stream ended with an error item (the last recorded chunk).
    Error,
    /// The consumer dropped the stream before it ended.
    Dropped,
}

/// The kinds of [`ModelErrorKind`] by their record name.
const KINDS: [(ModelErrorKind, &str); 10] = [
    (ModelErrorKind::Authentication, "authentication"),
    (ModelErrorKind::RateLimit, "rate_limit"),
    (ModelErrorKind::BadRequest, "bad_request"),
    (ModelErrorKind::Server, "server"),
    (ModelErrorKind::Timeout, "timeout"),
    (ModelErrorKind::Deadline, "deadline"),
    (ModelErrorKind::Stream, "stream"),
    (ModelErrorKind::Script, "script"),
    (ModelErrorKind::Replay, "replay"),
    (ModelErrorKind::Other, "other"),
];

pub(super) fn kind_name(kind: ModelErrorKind) -> &'static str {
    KINDS
        .iter()
        .find(|(k, _)| *k == kind)
        .map_or("other", |(_, n)| n)
}

pub(super) fn kind_from_name(name: &str) -> Option<ModelErrorKind> {
    KINDS.iter().find(|(_, n)| *n == name).map(|(k, _)| *k)
}

/// Redacts the streamed items of one exchange: each text and thinking stream as a whole,
/// cut again at its chunk boundaries; each tool call's arguments likewise (or, when that
/// would break their JSON, value by value, whole in the first fragment); error messages.
pub(super) fn redact_chunks(redactor: &dyn Redactor, chunks: &mut [RecordedChunk]) {
    fn stream_of(
        chunks: &mut [RecordedChunk],
        pick: impl Fn(&mut RecordedChunk) -> Option<&mut String>,
    ) -> Vec<&mut String> {
        chunks.iter_mut().filter_map(pick).collect()
    }
    let redo = |mut slots: Vec<&mut String>| {
        let pieces: Vec<String> = slots.iter().map(|s| (**s).clone()).collect();
        let redacted = redact_pieces(redactor, &pieces);
        for (slot, new) in slots.iter_mut().zip(redacted) {
            **slot = new;
        }
    };
    redo(stream_of(chunks, |c| match c {
        RecordedChunk::Text(t) => Some(t),
        _ => None,
    }));
    redo(stream_of(chunks, |c| match c {
        RecordedChunk::Thinking(t) => Some(t),
        _ => None,
    }));
    let mut indices: Vec<usize> = chunks
        .iter()
        .filter_map(|c| match c {
            RecordedChunk::ToolCall { index, .. } => Some(*index),
            _ => None,
        })
        .collect();
    indices.sort_unstable();
    indices.dedup();
    for call in indices {
        let mut slots = stream_of(chunks, |c| match c {
            RecordedChunk::ToolCall {
                index, arguments, ..
            } if *index == call => Some(arguments),
            _ => None,
        });
        let pieces: Vec<String> = slots.iter().map(|s| (**s).clone()).collect();
        let whole = pieces.concat();
        let mut redacted = redact_pieces(redactor, &pieces);
        let parsed = serde_json::from_str::<Value>(&whole).ok();
        if let Some(mut value) = parsed
            && serde_json::from_str::<Value>(&redacted.concat()).is_err()
        {
            redact_value(redactor, &mut value);
            redacted = vec![String::new(); pieces.len()];
            if let Some(first) = redacted.first_mut() {
                *first = value.to_string();
            }
        }
        for (slot, new) in slots.iter_mut().zip(redacted) {
            **slot = new;
        }
    }
    for c in chunks.iter_mut() {
        if let RecordedChunk::Error { message, .. } = c {
            *message = redact_text(redactor, message).into_owned();
        }
    }
}

/// What went wrong with a fixture file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FixtureErrorKind {
    /// The file could not be read, created or written.
    Io,
    /// A line (or the file) is not valid JSON.
    Syntax,
    /// A field is missing, unknown or has the wrong type or value.
    Field,
    /// The records are out of order: no header first, an exchange without its request
    /// or its end, exchange numbers that do not count up from 0.
    Structure,
}

/// A fixture (a recording or a decision trail) that could not be read or written:
/// names the file, the line (1-based; 0 for the file as a whole) and the field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FixtureError {
    kind: FixtureErrorKind,
    path: PathBuf,
    line: usize,
    field: String,
    message: String,
}

impl FixtureError {
    /// An error at `path`, line `line` (0: the file as a whole), field `field` (empty:
    /// the line as a whole).
    pub fn new(
        kind: FixtureErrorKind,
        path: impl AsRef<Path>,
        line: usize,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            kind,
            path: path.as_ref().to_path_buf(),
            line,
            field: field.into(),
            message: message.into(),
        }
    }

    pub(super) fn io(path: &Path, what: &str, e: &std::io::Error) -> Self {
        Self::new(
            FixtureErrorKind::Io,
            path,
            0,
            "",
            format!("cannot {what}: {e}"),
        )
    }

    /// What went wrong.
    pub fn kind(&self) -> FixtureErrorKind {
        self.kind
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The line, 1-based; 0 when the error is about the file as a whole.
    pub fn line(&self) -> usize {
        self.line
    }

    /// The field, as a path into the line's JSON object (e.g. `request.messages[2].role`,
    /// `chunk.tool_call.index`); empty when the error is about the line as a whole.
    pub fn field(&self) -> &str {
        &self.field
    }

    /// What is wrong.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for FixtureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        if self.line > 0 {
            write!(f, ":{}", self.line)?;
        }
        if !self.field.is_empty() {
            write!(f, ": field `{}`", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for FixtureError {}
