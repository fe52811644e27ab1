//! Reading a `rein-recording/1` file, strictly: every error names the file, the line
//! and the field.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::format::{
    ExchangeEnd, FixtureError, FixtureErrorKind, RECORDING_FORMAT, RecordedChunk, RecordedRequest,
    kind_from_name,
};

/// One recorded model call: the request as recorded (canonical, redacted), the streamed
/// items in order, and how the stream ended.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Exchange {
    /// The request.
    pub request: RecordedRequest,
    /// The streamed items, in order, with their recorded boundaries.
    pub chunks: Vec<RecordedChunk>,
    /// How the stream ended.
    pub end: ExchangeEnd,
}

/// A loaded recording: the header's fields and the exchanges in order.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Recording {
    /// The file it was read from.
    pub path: PathBuf,
    /// The recorded model's name.
    pub model: String,
    /// The recorded model's provider.
    pub provider: String,
    /// The name of the redactor the recording was written with.
    pub redactor: String,
    /// The exchanges, in the order they finished.
    pub exchanges: Vec<Exchange>,
}

/// The header line.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    format: String,
    model: String,
    provider: String,
    redactor: String,
}

impl Recording {
    /// Reads and checks the recording at `path`.
    ///
    /// # Errors
    ///
    /// A [`FixtureError`] naming the file, the line and the field: the file cannot be
    /// read ([`FixtureErrorKind::Io`]); a line is not JSON (`Syntax`); a field is
    /// missing, unknown or wrong, the format is not `rein-recording/1`, an error kind is
    /// unknown (`Field`); the header is not first, an exchange's lines are out of order
    /// or its `end` line is missing, exchange numbers do not count up from 0
    /// (`Structure`).
    pub fn load(path: impl AsRef<Path>) -> Result<Self, FixtureError> {
        let path = path.as_ref();
        let text =
            std::fs::read_to_string(path).map_err(|e| FixtureError::io(path, "read it", &e))?;
        Self::parse(&text, path)
    }

    /// Parses recording `text`; `path` names it in errors. See [`Recording::load`].
    ///
    /// # Errors
    ///
    /// As [`Recording::load`], except for `Io`.
    pub fn parse(text: &str, path: impl AsRef<Path>) -> Result<Self, FixtureError> {
        let path = path.as_ref();
        let err =
            |kind, line, field: &str, msg: String| FixtureError::new(kind, path, line, field, msg);
        let mut header: Option<Header> = None;
        let mut exchanges: Vec<Exchange> = Vec::new();
        // The exchange being read: its number, the line of its request, its request
        // and chunks so far.
        let mut open: Option<(usize, usize, RecordedRequest, Vec<RecordedChunk>)> = None;
        let mut last_line = 0;
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            if raw.trim().is_empty() {
                continue;
            }
            last_line = line;
            let value: Value = serde_json::from_str(raw).map_err(|e| {
                err(
                    FixtureErrorKind::Syntax,
                    line,
                    "",
                    format!("not a JSON object: {e}"),
                )
            })?;
            let Value::Object(mut obj) = value else {
                return Err(err(
                    FixtureErrorKind::Syntax,
                    line,
                    "",
                    "not a JSON object".into(),
                ));
            };
            if header.is_none() {
                let h: Header = typed(Value::Object(obj), path, line, "")?;
                if h.format != RECORDING_FORMAT {
                    return Err(err(
                        FixtureErrorKind::Field,
                        line,
                        "format",
                        format!(
                            "`{}` is not a format this version reads (it reads `{RECORDING_FORMAT}`)",
                            h.format
                        ),
                    ));
                }
                header = Some(h);
                continue;
            }
            let exchange: usize = match obj.remove("exchange") {
                Some(v) => typed(v, path, line, "exchange")?,
                None if obj.contains_key("format") => {
                    return Err(err(
                        FixtureErrorKind::Structure,
                        line,
                        "format",
                        "a second header: a recording has one, on its first line".into(),
                    ));
                }
                None => {
                    return Err(err(
                        FixtureErrorKind::Field,
                        line,
                        "exchange",
                        "missing: every line after the header names its exchange".into(),
                    ));
                }
            };
            let (key, body) = single_entry(obj, path, line)?;
            match key.as_str() {
                "request" => {
                    if let Some((n, at, _, _)) = &open {
                        return Err(err(
                            FixtureErrorKind::Structure,
                            line,
                            "request",
                            format!(
                                "exchange {n} (line {at}) has no `end` line before this request"
                            ),
                        ));
                    }
                    if exchange != exchanges.len() {
                        return Err(err(
                            FixtureErrorKind::Structure,
                            line,
                            "exchange",
                            format!(
                                "exchange {exchange} where exchange {} was expected (they count up from 0)",
                                exchanges.len()
                            ),
                        ));
                    }
                    let request: RecordedRequest = typed(body, path, line, "request")?;
                    open = Some((exchange, line, request, Vec::new()));
                }
                "chunk" | "end" => {
                    let Some((n, _, _, chunks)) = open.as_mut() else {
                        return Err(err(
                            FixtureErrorKind::Structure,
                            line,
                            &key,
                            format!("exchange {exchange} has no `request` line before it"),
                        ));
                    };
                    if exchange != *n {
                        return Err(err(
                            FixtureErrorKind::Structure,
                            line,
                            "exchange",
                            format!("exchange {exchange} inside exchange {n}"),
                        ));
                    }
                    if key == "chunk" {
                        let chunk: RecordedChunk = typed(body, path, line, "chunk")?;
                        if let RecordedChunk::Error { kind, .. } = &chunk
                            && kind_from_name(kind).is_none()
                        {
                            return Err(err(
                                FixtureErrorKind::Field,
                                line,
                                "chunk.error.kind",
                                format!("`{kind}` is not a model error kind"),
                            ));
                        }
                        chunks.push(chunk);
                        continue;
                    }
                    let end: ExchangeEnd = typed(body, path, line, "end")?;
                    let ends_in_error = matches!(chunks.last(), Some(RecordedChunk::Error { .. }));
                    if (end == ExchangeEnd::Error) != ends_in_error {
                        return Err(err(
                            FixtureErrorKind::Structure,
                            line,
                            "end",
                            "`error` if and only if the exchange's last chunk is an error".into(),
                        ));
                    }
                    if let Some((_, _, request, chunks)) = open.take() {
                        exchanges.push(Exchange {
                            request,
                            chunks,
                            end,
                        });
                    }
                }
                other => {
                    return Err(err(
                        FixtureErrorKind::Field,
                        line,
                        other,
                        "unknown field: expected `request`, `chunk` or `end`".into(),
                    ));
                }
            }
        }
        let Some(header) = header else {
            return Err(err(
                FixtureErrorKind::Structure,
                0,
                "format",
                "empty: a recording starts with its header line".into(),
            ));
        };
        if let Some((n, at, _, _)) = open {
            return Err(err(
                FixtureErrorKind::Structure,
                last_line,
                "end",
                format!("exchange {n} (line {at}) has no `end` line"),
            ));
        }
        Ok(Self {
            path: path.to_path_buf(),
            model: header.model,
            provider: header.provider,
            redactor: header.redactor,
            exchanges,
        })
    }
}

/// The one entry of `obj` besides `exchange`.
fn single_entry(
    obj: Map<String, Value>,
    path: &Path,
    line: usize,
) -> Result<(String, Value), FixtureError> {
    let mut entries = obj.into_iter();
    match (entries.next(), entries.next()) {
        (Some(entry), None) => Ok(entry),
        (None, _) => Err(FixtureError::new(
            FixtureErrorKind::Field,
            path,
            line,
            "",
            "expected one of `request`, `chunk`, `end` besides `exchange`",
        )),
        (Some((a, _)), Some((b, _))) => Err(FixtureError::new(
            FixtureErrorKind::Field,
            path,
            line,
            b.clone(),
            format!("unexpected next to `{a}`: a line holds one of `request`, `chunk`, `end`"),
        )),
    }
}

/// Deserializes `value`, naming the failing field under `prefix`.
pub(crate) fn typed<T: DeserializeOwned>(
    value: Value,
    path: &Path,
    line: usize,
    prefix: &str,
) -> Result<T, FixtureError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let inner = e.path().to_string();
        let field = match (prefix.is_empty(), inner.as_str()) {
            (true, ".") => String::new(),
            (true, _) => inner,
            (false, ".") => prefix.to_owned(),
            (false, _) => format!("{prefix}.{inner}"),
        };
        FixtureError::new(
            FixtureErrorKind::Field,
            path,
            line,
            field,
            e.into_inner().to_string(),
        )
    })
}
