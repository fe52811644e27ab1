//! Reassembling a model's streamed chunks into the turn's message: text and thinking
//! deltas, tool-call fragments grouped by index (each call gets its runtime id when its
//! first fragment arrives, see `PartialCall`), and usage.

use serde_json::Value;

use crate::message::{ContentBlock, Msg, Thinking, ToolUse};
use crate::model::{ModelChunk, Usage};
use crate::tool::json_type;
use crate::util::new_id;

/// Normalises tool-call arguments in place: an object stays; a string holding a JSON
/// object is decoded; a blank string becomes `{}`. Returns whether the value changed,
/// or why the arguments are not an object.
pub(crate) fn normalize_arguments(input: &mut Value) -> Result<bool, String> {
    match input {
        Value::Object(_) => Ok(false),
        Value::String(raw) if raw.trim().is_empty() => {
            *input = Value::Object(Default::default());
            Ok(true)
        }
        Value::String(raw) => match serde_json::from_str::<Value>(raw) {
            Ok(v @ Value::Object(_)) => {
                *input = v;
                Ok(true)
            }
            Ok(other) => Err(format!(
                "the arguments must be a JSON object, got a string holding {}",
                json_type(&other)
            )),
            Err(e) => Err(format!(
                "the arguments are not valid JSON ({e}): {}",
                crate::util::truncate(raw, 200)
            )),
        },
        other => Err(format!(
            "the arguments must be a JSON object, got {}",
            json_type(other)
        )),
    }
}

/// A tool call being reassembled from fragments.
///
/// Its id is the runtime's, assigned when the call's first fragment arrives: ids that
/// models send are not trusted to be unique (several OpenAI-compatible servers number
/// calls `call_0` in every response), and a conversation, an approval decision and a
/// stored session all rely on an id naming exactly one call. The provider's id is only
/// meaningful inside the response that carried it (to group fragments, which the
/// fragment index already does).
pub(crate) struct PartialCall {
    /// The provider's fragment index.
    pub(crate) index: usize,
    /// The runtime's id for the call.
    pub(crate) id: String,
    /// The tool name, as far as it arrived.
    pub(crate) name: String,
    arguments: String,
}

impl PartialCall {
    pub(crate) fn new(index: usize) -> Self {
        Self {
            index,
            id: new_id("call"),
            name: String::new(),
            arguments: String::new(),
        }
    }

    /// The finished tool use. Arguments are decoded once here; a JSON string holding a
    /// JSON object (double-encoded arguments) becomes that object. Anything that is not
    /// an object is kept as the model sent it (raw text as a JSON string) and is refused
    /// before any hook or tool sees it (the agent's admission step).
    pub(crate) fn finish(self) -> ToolUse {
        let mut input = if self.arguments.trim().is_empty() {
            Value::Object(Default::default())
        } else {
            serde_json::from_str(&self.arguments).unwrap_or(Value::String(self.arguments))
        };
        // Not an object: kept for the record; admission refuses the call.
        let _ = normalize_arguments(&mut input);
        ToolUse {
            id: self.id,
            name: self.name,
            input,
        }
    }
}

/// Applies one chunk to the turn being reassembled: text and thinking are appended to
/// `msg`, tool-call fragments to their call in `calls`, usage replaces what it reports.
pub(crate) fn apply_chunk(
    msg: &mut Msg,
    calls: &mut Vec<PartialCall>,
    usage: &mut Usage,
    chunk: &ModelChunk,
) {
    match chunk {
        ModelChunk::Text(t) => match msg.content.last_mut() {
            Some(ContentBlock::Text(s)) => s.push_str(t),
            _ => msg.content.push(ContentBlock::Text(t.clone())),
        },
        ModelChunk::Thinking(t) => match msg.content.last_mut() {
            Some(ContentBlock::Thinking(th)) => th.text.push_str(t),
            _ => msg.content.push(ContentBlock::Thinking(Thinking {
                text: t.clone(),
                signature: None,
            })),
        },
        ModelChunk::ThinkingSignature(sig) => {
            if let Some(ContentBlock::Thinking(th)) = msg
                .content
                .iter_mut()
                .rev()
                .find(|b| matches!(b, ContentBlock::Thinking(_)))
            {
                th.signature = Some(sig.clone());
            } else {
                msg.content.push(ContentBlock::Thinking(Thinking {
                    text: String::new(),
                    signature: Some(sig.clone()),
                }));
            }
        }
        ModelChunk::ToolCall {
            index,
            name,
            arguments,
            ..
        } => {
            let pos = match calls.iter().position(|c| c.index == *index) {
                Some(p) => p,
                None => {
                    calls.push(PartialCall::new(*index));
                    calls.len() - 1
                }
            };
            let call = &mut calls[pos];
            if let Some(name) = name {
                call.name.push_str(name);
            }
            call.arguments.push_str(arguments);
        }
        ModelChunk::Usage(u) => {
            if u.input_tokens > 0 {
                usage.input_tokens = u.input_tokens;
            }
            if u.output_tokens > 0 {
                usage.output_tokens = u.output_tokens;
            }
            if u.cached_input_tokens > 0 {
                usage.cached_input_tokens = u.cached_input_tokens;
            }
            if u.reasoning_tokens > 0 {
                usage.reasoning_tokens = u.reasoning_tokens;
            }
        }
        ModelChunk::Finish(_) => {}
    }
}
