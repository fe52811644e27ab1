//! Reassembling a model's streamed chunks into the turn's message, and handing them to
//! chunk hooks and a streaming caller on the way.
//!
//! Tool-call fragments are grouped by their index; each call gets its runtime id when
//! its first fragment arrives (see [`PartialCall`]), so what a streaming caller is told
//! (`ToolCallStart`) and what memory records carry the same id.

use serde_json::Value;

use super::run::Sink;
use super::stream::AgentEvent;
use crate::hook::HookEvent;
use crate::message::{ContentBlock, Msg, Thinking, ToolUse};
use crate::model::{ModelChunk, Usage};
use crate::util::new_id;

/// Moves the chunk and the accumulated message into the chunk event.
pub(super) fn swap_chunk(ev: &mut HookEvent, chunk: ModelChunk, msg: &mut Msg) {
    match ev {
        HookEvent::ReasoningChunk(e) => {
            e.chunk = chunk;
            std::mem::swap(&mut e.accumulated, msg);
        }
        HookEvent::SummaryChunk(e) => {
            e.chunk = chunk;
            std::mem::swap(&mut e.accumulated, msg);
        }
        _ => {}
    }
}

/// Takes the accumulated message back out of the chunk event.
pub(super) fn swap_back(ev: &mut HookEvent, msg: &mut Msg) {
    match ev {
        HookEvent::ReasoningChunk(e) => std::mem::swap(&mut e.accumulated, msg),
        HookEvent::SummaryChunk(e) => std::mem::swap(&mut e.accumulated, msg),
        _ => {}
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
pub(super) struct PartialCall {
    index: usize,
    id: String,
    name: String,
    arguments: String,
}

impl PartialCall {
    pub(super) fn new(index: usize) -> Self {
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
    /// before any hook or tool sees it (see [`super::acting`]).
    pub(super) fn finish(self) -> ToolUse {
        let mut input = if self.arguments.trim().is_empty() {
            Value::Object(Default::default())
        } else {
            serde_json::from_str(&self.arguments).unwrap_or(Value::String(self.arguments))
        };
        // Not an object: kept for the record; admission refuses the call.
        let _ = super::acting::normalize_arguments(&mut input);
        ToolUse {
            id: self.id,
            name: self.name,
            input,
        }
    }
}

pub(super) fn apply_chunk(
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
        }
        ModelChunk::Finish(_) => {}
    }
}

/// Forwards a chunk to a streaming caller. Called before the chunk is applied, so
/// `calls` tells whether a tool-call index is new; `next_id` is the id the call will get.
pub(super) fn forward_chunk(
    sink: &Sink,
    chunk: &ModelChunk,
    calls: &[PartialCall],
) -> Option<usize> {
    let event = match chunk {
        ModelChunk::Text(t) => AgentEvent::TextDelta(t.clone()),
        ModelChunk::Thinking(t) => AgentEvent::ThinkingDelta(t.clone()),
        ModelChunk::ToolCall {
            index,
            name: Some(_),
            ..
        } if !calls.iter().any(|c| c.index == *index) => return Some(*index),
        _ => return None,
    };
    let _ = sink.send(event);
    None
}

/// Announces a tool call whose first fragment (with its name) was just applied.
pub(super) fn announce_call(sink: &Sink, calls: &[PartialCall], index: usize) {
    if let Some(c) = calls.iter().find(|c| c.index == index) {
        let _ = sink.send(AgentEvent::ToolCallStart {
            id: c.id.clone(),
            name: c.name.clone(),
        });
    }
}
