//! [`ReplayModel`]: a recording served back, request by request.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;

use super::format::{FixtureError, RecordedRequest};
use super::load::Recording;
use super::redact::Redactor;
use crate::model::{
    Model, ModelCapabilities, ModelError, ModelErrorKind, ModelRequest, ModelStream,
};

/// Longest excerpt (chars) of a differing value in a [`ReplayError::Diverged`].
const EXCERPT_CHARS: usize = 160;

/// Why a [`ReplayModel`] refused a request: the source of its
/// [`ModelErrorKind::Replay`] error (reach it with `std::error::Error::source` and
/// `downcast_ref`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// The request differs from the recorded request of its exchange.
    #[error(
        "replay of {}: exchange {exchange}: the request differs from the recording at `{field}`: recorded {recorded}, got {actual}",
        fixture.display()
    )]
    Diverged {
        /// The recording.
        fixture: PathBuf,
        /// The exchange (0-based, the `exchange` number in the file).
        exchange: usize,
        /// The first differing field, as a path into the canonical request (e.g.
        /// `messages[3].content[0].tool_result.content`, `tools[0].name`,
        /// `options.tool_choice`).
        field: String,
        /// The recorded value there, as JSON (shortened; `absent` when missing).
        recorded: String,
        /// The value the request has there, as JSON (shortened; `absent` when
        /// missing).
        actual: String,
    },
    /// More requests than the recording holds exchanges.
    #[error(
        "replay of {}: a request for exchange {exchange}, but the recording holds {recorded} exchange(s)",
        fixture.display()
    )]
    Exhausted {
        /// The recording.
        fixture: PathBuf,
        /// The exchange asked for (0-based).
        exchange: usize,
        /// How many exchanges the recording holds.
        recorded: usize,
    },
}

impl ReplayError {
    fn into_model_error(self) -> ModelError {
        ModelError::new(ModelErrorKind::Replay, self.to_string()).with_source(self)
    }
}

/// A [`Model`] that serves a recording back (see the [module docs](super)): each
/// request is compared with the next recorded exchange's request, and the exchange's
/// streamed items are served with the recorded chunk boundaries. Reports the recorded
/// model's name and provider.
///
/// A request that diverges, or one past the last exchange, fails its model call with a
/// [`ModelErrorKind::Replay`] error whose source is a [`ReplayError`]; the exchange is
/// consumed either way. Clones share the position in the recording.
#[derive(Clone)]
pub struct ReplayModel {
    recording: Arc<Recording>,
    redactor: Arc<dyn Redactor>,
    next: Arc<AtomicUsize>,
    compare_options: bool,
    capabilities: ModelCapabilities,
}

impl std::fmt::Debug for ReplayModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplayModel")
            .field("path", &self.recording.path)
            .field("exchanges", &self.recording.exchanges.len())
            .field("served", &self.served())
            .field("redactor", &self.redactor.name())
            .field("compare_options", &self.compare_options)
            .finish()
    }
}

impl ReplayModel {
    /// Loads the recording at `path`; requests will be redacted with `redactor` (the
    /// one the recording was made with) before they are compared.
    ///
    /// # Errors
    ///
    /// The [`FixtureError`] of [`Recording::load`], naming file, line and field.
    pub fn open(path: impl AsRef<Path>, redactor: impl Redactor) -> Result<Self, FixtureError> {
        Ok(Self::new(Recording::load(path)?, redactor))
    }

    /// Serves `recording`; requests are redacted with `redactor` before they are
    /// compared.
    pub fn new(recording: Recording, redactor: impl Redactor) -> Self {
        Self {
            recording: Arc::new(recording),
            redactor: Arc::new(redactor),
            next: Arc::new(AtomicUsize::new(0)),
            compare_options: true,
            capabilities: ModelCapabilities::PERMISSIVE,
        }
    }

    /// Whether the options are part of the comparison (default `true`). Turn it off to
    /// replay a recording under changed sampling settings; messages and tools are always
    /// compared.
    #[must_use]
    pub fn compare_options(mut self, on: bool) -> Self {
        self.compare_options = on;
        self
    }

    /// Sets the capabilities the replay reports (default
    /// [`ModelCapabilities::PERMISSIVE`]). Set those of the recorded model when they
    /// choose how the agent asks (a structured-output call's
    /// [`OutputMode::Auto`](crate::agent::OutputMode::Auto)): otherwise the replayed
    /// requests may differ from the recorded ones.
    #[must_use]
    pub fn with_capabilities(mut self, capabilities: ModelCapabilities) -> Self {
        self.capabilities = capabilities;
        self
    }

    /// The recording served.
    pub fn recording(&self) -> &Recording {
        &self.recording
    }

    /// How many requests were received so far (each consumes an exchange).
    pub fn served(&self) -> usize {
        self.next.load(Ordering::SeqCst)
    }

    /// How many recorded exchanges have not been asked for yet.
    pub fn remaining(&self) -> usize {
        self.recording.exchanges.len().saturating_sub(self.served())
    }

    /// The exchange's items, or the error for a request that does not match it.
    fn serve(&self, request: &ModelRequest) -> Result<ModelStream, ReplayError> {
        let n = self.next.fetch_add(1, Ordering::SeqCst);
        let fixture = self.recording.path.clone();
        let Some(exchange) = self.recording.exchanges.get(n) else {
            return Err(ReplayError::Exhausted {
                fixture,
                exchange: n,
                recorded: self.recording.exchanges.len(),
            });
        };
        let actual = RecordedRequest::from_request(request, &*self.redactor).to_value();
        let recorded = exchange.request.to_value();
        let (mut actual, mut recorded) = (actual, recorded);
        if !self.compare_options {
            for v in [&mut actual, &mut recorded] {
                if let Value::Object(map) = v {
                    map.remove("options");
                }
            }
        }
        if let Some((field, recorded, actual)) = first_difference(&recorded, &actual) {
            return Err(ReplayError::Diverged {
                fixture,
                exchange: n,
                field,
                recorded,
                actual,
            });
        }
        let items: Vec<_> = exchange.chunks.iter().map(|c| c.to_item()).collect();
        Ok(Box::pin(futures::stream::iter(items)))
    }
}

impl Model for ReplayModel {
    fn name(&self) -> &str {
        &self.recording.model
    }

    fn provider(&self) -> &str {
        &self.recording.provider
    }

    fn capabilities(&self) -> ModelCapabilities {
        self.capabilities
    }

    fn stream(&self, request: ModelRequest) -> ModelStream {
        match self.serve(&request) {
            Ok(stream) => stream,
            Err(e) => Box::pin(futures::stream::iter([Err(e.into_model_error())])),
        }
    }
}

/// The first path at which `recorded` and `actual` differ, with both values there
/// (shortened JSON, `absent` when missing). Objects are walked in key order, arrays by
/// index.
pub(super) fn first_difference(
    recorded: &Value,
    actual: &Value,
) -> Option<(String, String, String)> {
    fn walk(path: &mut String, a: Option<&Value>, b: Option<&Value>) -> bool {
        match (a, b) {
            (Some(Value::Object(x)), Some(Value::Object(y))) => {
                let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
                keys.sort();
                keys.dedup();
                for k in keys {
                    let len = path.len();
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(k);
                    if walk(path, x.get(k), y.get(k)) {
                        return true;
                    }
                    path.truncate(len);
                }
                false
            }
            (Some(Value::Array(x)), Some(Value::Array(y))) => {
                for i in 0..x.len().max(y.len()) {
                    let len = path.len();
                    path.push_str(&format!("[{i}]"));
                    if walk(path, x.get(i), y.get(i)) {
                        return true;
                    }
                    path.truncate(len);
                }
                false
            }
            (a, b) => a != b,
        }
    }
    let mut path = String::new();
    if !walk(&mut path, Some(recorded), Some(actual)) {
        return None;
    }
    let at = |v: &Value| -> Option<Value> { pointer(v, &path).cloned() };
    Some((
        path.clone(),
        excerpt(at(recorded).as_ref()),
        excerpt(at(actual).as_ref()),
    ))
}

/// The value at a `a.b[2].c` path (keys without dots or brackets: the canonical
/// request's keys are field names).
fn pointer<'a>(mut v: &'a Value, path: &str) -> Option<&'a Value> {
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let (key, rest) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if !key.is_empty() {
            v = v.get(key)?;
        }
        for index in rest.split('[').filter(|s| !s.is_empty()) {
            let i: usize = index.trim_end_matches(']').parse().ok()?;
            v = v.get(i)?;
        }
    }
    Some(v)
}

fn excerpt(v: Option<&Value>) -> String {
    let Some(v) = v else {
        return "absent".to_owned();
    };
    let text = v.to_string();
    if text.chars().count() <= EXCERPT_CHARS {
        return text;
    }
    let cut: String = text.chars().take(EXCERPT_CHARS).collect();
    format!("{cut}…")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_first_difference_names_the_path_and_both_values() {
        let a = json!({"messages": [{"role": "user", "content": [{"text": "hi"}]}], "tools": []});
        let b = json!({"messages": [{"role": "user", "content": [{"text": "ho"}]}], "tools": []});
        assert_eq!(
            first_difference(&a, &b),
            Some((
                "messages[0].content[0].text".into(),
                "\"hi\"".into(),
                "\"ho\"".into()
            ))
        );
        let c = json!({"messages": [1], "tools": []});
        let d = json!({"messages": [1, 2], "tools": []});
        assert_eq!(
            first_difference(&c, &d),
            Some(("messages[1]".into(), "absent".into(), "2".into()))
        );
        assert_eq!(first_difference(&a, &a), None);
    }
}
