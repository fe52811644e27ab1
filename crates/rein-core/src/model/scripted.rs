//! The offline, deterministic model.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;

use super::{
    FinishReason, Model, ModelCapabilities, ModelChunk, ModelError, ModelErrorKind, ModelRequest,
    ModelStream, Usage,
};

/// Longest piece (in chars) a scripted text or argument string is streamed in.
const MAX_PIECE_CHARS: usize = 16;

/// One scripted model answer. Build with [`ScriptedTurn::text`],
/// [`ScriptedTurn::tool_call`], [`ScriptedTurn::tool_calls`] or [`ScriptedTurn::error`],
/// then refine with the `with_*` methods.
#[derive(Clone, Debug)]
#[must_use]
pub struct ScriptedTurn {
    text: Option<String>,
    thinking: Option<String>,
    calls: Vec<(String, String)>,
    usage: Option<Usage>,
    error: Option<ModelError>,
    error_mid_stream: bool,
    delay: Option<Duration>,
}

impl ScriptedTurn {
    fn empty() -> Self {
        Self {
            text: None,
            thinking: None,
            calls: Vec::new(),
            usage: None,
            error: None,
            error_mid_stream: false,
            delay: None,
        }
    }

    /// A turn that answers with text only.
    pub fn text(s: impl Into<String>) -> Self {
        Self {
            text: Some(s.into()),
            ..Self::empty()
        }
    }

    /// A turn that calls one tool with the given JSON arguments.
    pub fn tool_call(name: impl Into<String>, args: Value) -> Self {
        Self::tool_calls(vec![(name.into(), args)])
    }

    /// A turn that calls several tools, in order.
    pub fn tool_calls<N: Into<String>>(calls: Vec<(N, Value)>) -> Self {
        Self {
            calls: calls
                .into_iter()
                .map(|(n, v)| (n.into(), v.to_string()))
                .collect(),
            ..Self::empty()
        }
    }

    /// A turn that calls one tool with arguments given as raw text, which need not be
    /// valid JSON (to script a model that emits malformed arguments).
    pub fn raw_tool_call(name: impl Into<String>, raw_args: impl Into<String>) -> Self {
        Self {
            calls: vec![(name.into(), raw_args.into())],
            ..Self::empty()
        }
    }

    /// A turn whose model call fails before the first chunk.
    pub fn error(error: ModelError) -> Self {
        Self {
            error: Some(error),
            ..Self::empty()
        }
    }

    /// Adds text alongside the turn's tool calls (or replaces the text).
    pub fn with_text(mut self, s: impl Into<String>) -> Self {
        self.text = Some(s.into());
        self
    }

    /// Adds thinking content, streamed before the text.
    pub fn with_thinking(mut self, s: impl Into<String>) -> Self {
        self.thinking = Some(s.into());
        self
    }

    /// Reports this usage at the end of the turn (the output tokens capped at the
    /// request's `max_tokens`, as a provider that honours the cap reports them).
    pub fn with_usage(mut self, input_tokens: u64, output_tokens: u64) -> Self {
        self.usage = Some(Usage::new(input_tokens, output_tokens));
        self
    }

    /// Reports `usage` at the end of the turn, cached-input and reasoning counts
    /// included (the output tokens capped as for [`ScriptedTurn::with_usage`]).
    pub fn with_usage_of(mut self, usage: Usage) -> Self {
        self.usage = Some(usage);
        self
    }

    /// Streams half of the turn's chunks, then fails with `error`.
    pub fn with_error_mid_stream(mut self, error: ModelError) -> Self {
        self.error = Some(error);
        self.error_mid_stream = true;
        self
    }

    /// Waits `delay` (on the tokio clock) before the first chunk.
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// The turn's chunks; the reported output tokens are at most `max_tokens`, as a
    /// provider that honours the cap would report them.
    fn chunks(
        &self,
        turn_no: usize,
        max_tokens: Option<u32>,
    ) -> Vec<Result<ModelChunk, ModelError>> {
        let mut out = Vec::new();
        if let Some(err) = &self.error
            && !self.error_mid_stream
        {
            return vec![Err(err.clone())];
        }
        if let Some(t) = &self.thinking {
            out.extend(pieces(t).map(|p| Ok(ModelChunk::Thinking(p))));
        }
        if let Some(t) = &self.text {
            out.extend(pieces(t).map(|p| Ok(ModelChunk::Text(p))));
        }
        for (index, (name, args)) in self.calls.iter().enumerate() {
            let id = format!("call_{turn_no}_{index}");
            let mut first = true;
            let mut frags: Vec<String> = pieces(args).collect();
            if frags.is_empty() {
                frags.push(String::new());
            }
            for arguments in frags {
                out.push(Ok(ModelChunk::ToolCall {
                    index,
                    id: first.then(|| id.clone()),
                    name: first.then(|| name.clone()),
                    arguments,
                }));
                first = false;
            }
        }
        if let Some(err) = &self.error {
            let keep = out.len() / 2;
            out.truncate(keep.max(1));
            out.push(Err(err.clone()));
            return out;
        }
        if let Some(mut u) = self.usage {
            if let Some(cap) = max_tokens {
                u.output_tokens = u.output_tokens.min(u64::from(cap));
            }
            out.push(Ok(ModelChunk::Usage(u)));
        }
        out.push(Ok(ModelChunk::Finish(if self.calls.is_empty() {
            FinishReason::Stop
        } else {
            FinishReason::ToolCalls
        })));
        out
    }
}

/// Splits `s` into at least two pieces (when it has two or more chars) of at most
/// [`MAX_PIECE_CHARS`] chars, on char boundaries.
fn pieces(s: &str) -> impl Iterator<Item = String> + '_ {
    let n = s.chars().count();
    let size = n.div_ceil(2).clamp(1, MAX_PIECE_CHARS);
    let chars: Vec<char> = s.chars().collect();
    let count = n.div_ceil(size);
    (0..count).map(move |i| chars[i * size..((i + 1) * size).min(n)].iter().collect())
}

#[derive(Debug)]
struct Script {
    turns: VecDeque<ScriptedTurn>,
    total: usize,
    served: usize,
    requests: Vec<ModelRequest>,
}

/// An offline, deterministic [`Model`] that plays a script of [`ScriptedTurn`]s, one
/// per model call, and records every request it receives.
///
/// Texts are streamed in at least two chunks and tool-call arguments in fragments, so
/// chunk hooks and reassembly are exercised as with a real provider. Call ids are
/// `call_{turn}_{index}` (turn counted from 1). When the script runs out, the model call
/// fails with a [`ModelErrorKind::Script`] error naming the turn that was asked for.
///
/// Clones are cheap and share the script and the recorded requests.
#[derive(Clone, Debug)]
pub struct ScriptedModel {
    name: Arc<str>,
    capabilities: ModelCapabilities,
    script: Arc<Mutex<Script>>,
}

impl ScriptedModel {
    /// A model that plays `turns` in order.
    pub fn new(turns: impl IntoIterator<Item = ScriptedTurn>) -> Self {
        let turns: VecDeque<ScriptedTurn> = turns.into_iter().collect();
        Self {
            name: Arc::from("scripted"),
            capabilities: ModelCapabilities::PERMISSIVE,
            script: Arc::new(Mutex::new(Script {
                total: turns.len(),
                turns,
                served: 0,
                requests: Vec::new(),
            })),
        }
    }

    /// Sets the model name reported in events and spans (default `"scripted"`).
    #[must_use]
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Arc::from(name.into());
        self
    }

    /// Sets the capabilities the model reports (default
    /// [`ModelCapabilities::PERMISSIVE`]), e.g. to test how a structured-output call
    /// asks a server that takes a response format together with tools.
    #[must_use]
    pub fn with_capabilities(mut self, capabilities: ModelCapabilities) -> Self {
        self.capabilities = capabilities;
        self
    }

    /// Appends more turns to the script.
    pub fn push(&self, turn: ScriptedTurn) {
        let mut s = self.script.lock().unwrap_or_else(PoisonError::into_inner);
        s.total += 1;
        s.turns.push_back(turn);
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<ModelRequest> {
        self.script
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .requests
            .clone()
    }

    /// How many scripted turns have not been played yet.
    pub fn remaining(&self) -> usize {
        self.script
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .turns
            .len()
    }
}

impl Model for ScriptedModel {
    fn name(&self) -> &str {
        &self.name
    }

    fn provider(&self) -> &str {
        "scripted"
    }

    fn capabilities(&self) -> ModelCapabilities {
        self.capabilities
    }

    fn stream(&self, request: ModelRequest) -> ModelStream {
        let max_tokens = request.options.max_tokens;
        let (turn, turn_no, total) = {
            let mut s = self.script.lock().unwrap_or_else(PoisonError::into_inner);
            s.requests.push(request);
            s.served += 1;
            (s.turns.pop_front(), s.served, s.total)
        };
        let Some(turn) = turn else {
            let err = ModelError::new(
                ModelErrorKind::Script,
                format!(
                    "ScriptedModel has no turn {turn_no}: the script has {total} turn(s) and all were played"
                ),
            );
            return Box::pin(futures::stream::iter([Err(err)]));
        };
        let chunks = futures::stream::iter(turn.chunks(turn_no, max_tokens));
        match turn.delay {
            None => Box::pin(chunks),
            Some(d) => Box::pin(
                futures::stream::once(tokio::time::sleep(d))
                    .filter_map(|()| std::future::ready(None))
                    .chain(chunks),
            ),
        }
    }
}
