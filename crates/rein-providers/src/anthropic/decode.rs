//! Decoding the Messages API's event stream into chunks (see [`AnthropicModel`](super::AnthropicModel)'s
//! "The stream").

use std::collections::VecDeque;

use serde_json::Value;

use crate::sse::Event;
use crate::transport::{Decoder, Flow, malformed, parse_json, str_field, stream_error, u64_field};
use crate::typed;
use rein_core::model::{FinishReason, ModelChunk, ModelError, ModelRequest, Usage};

/// All input tokens of a `usage` object: uncached, cache writes and cache reads,
/// summed with saturation (the counts come off the wire).
fn input_tokens(usage: &Value) -> u64 {
    u64_field(usage, "input_tokens")
        .saturating_add(u64_field(usage, "cache_creation_input_tokens"))
        .saturating_add(u64_field(usage, "cache_read_input_tokens"))
}

/// Decodes Messages API stream events.
#[derive(Clone, Debug, Default)]
pub(crate) struct AnthropicDecoder {
    /// Input tokens from `message_start`.
    input_tokens: u64,
    /// Of those, the ones read from the prompt cache.
    cached_tokens: u64,
    /// The name of the tool that carries the request's response format: its calls
    /// come out as text.
    output_tool: Option<String>,
    /// The block index of the output tool's call in this turn.
    output_block: Option<usize>,
    /// Whether the turn called a tool other than the output tool.
    other_tools: bool,
}

impl AnthropicDecoder {
    /// A decoder for `request`'s stream (knows the response format's tool).
    pub(super) fn for_request(request: &ModelRequest) -> Self {
        Self {
            output_tool: request
                .options
                .response_format
                .as_ref()
                .map(|f| f.name.clone()),
            ..Self::default()
        }
    }
}

impl Decoder for AnthropicDecoder {
    fn decode(
        &mut self,
        event: &Event,
        out: &mut VecDeque<ModelChunk>,
    ) -> Result<Flow, ModelError> {
        if event.event == "ping" || event.data.trim().is_empty() {
            return Ok(Flow::More);
        }
        let data = event.data.as_str();
        if event.event == "content_block_delta"
            && let Some(chunk) = typed::anthropic_delta(data, &event.event, self.output_block)
        {
            out.extend(chunk);
            return Ok(Flow::More);
        }
        let v = parse_json(data)?;
        let kind = str_field(&v, "type").unwrap_or(event.event.as_str());
        let index = || {
            v.get("index")
                .and_then(Value::as_u64)
                .and_then(|i| usize::try_from(i).ok())
                .ok_or_else(|| malformed("no block index", data))
        };
        match kind {
            "message_start" => {
                let u = v
                    .get("message")
                    .and_then(|m| m.get("usage"))
                    .unwrap_or(&Value::Null);
                self.input_tokens = input_tokens(u);
                self.cached_tokens = u64_field(u, "cache_read_input_tokens");
                out.push_back(ModelChunk::Usage(Usage {
                    cached_input_tokens: self.cached_tokens,
                    ..Usage::new(self.input_tokens, u64_field(u, "output_tokens"))
                }));
            }
            "content_block_start" => {
                let index = index()?;
                let block = v.get("content_block").unwrap_or(&Value::Null);
                match str_field(block, "type") {
                    Some("text") => {
                        if let Some(t) = str_field(block, "text") {
                            out.push_back(ModelChunk::Text(t.to_owned()));
                        }
                    }
                    Some("thinking") => {
                        if let Some(t) = str_field(block, "thinking") {
                            out.push_back(ModelChunk::Thinking(t.to_owned()));
                        }
                        if let Some(s) = str_field(block, "signature") {
                            out.push_back(ModelChunk::ThinkingSignature(s.to_owned()));
                        }
                    }
                    Some("tool_use") => {
                        // Streamed input arrives as `input_json_delta`; a non-empty
                        // `input` here is the whole input.
                        let arguments = match block.get("input") {
                            Some(Value::Object(o)) if !o.is_empty() => {
                                Value::Object(o.clone()).to_string()
                            }
                            _ => String::new(),
                        };
                        if self.output_tool.is_some()
                            && str_field(block, "name") == self.output_tool.as_deref()
                        {
                            // The structured answer: its input is the turn's text.
                            self.output_block = Some(index);
                            if !arguments.is_empty() {
                                out.push_back(ModelChunk::Text(arguments));
                            }
                            return Ok(Flow::More);
                        }
                        self.other_tools = true;
                        out.push_back(ModelChunk::ToolCall {
                            index,
                            id: str_field(block, "id").map(str::to_owned),
                            name: str_field(block, "name").map(str::to_owned),
                            arguments,
                        });
                    }
                    _ => {}
                }
            }
            "content_block_delta" => {
                let index = index()?;
                let delta = v.get("delta").unwrap_or(&Value::Null);
                let text = |k: &str| str_field(delta, k).map(str::to_owned);
                let chunk = match str_field(delta, "type") {
                    Some("text_delta") => text("text").map(ModelChunk::Text),
                    Some("thinking_delta") => text("thinking").map(ModelChunk::Thinking),
                    Some("signature_delta") => text("signature").map(ModelChunk::ThinkingSignature),
                    Some("input_json_delta") if self.output_block == Some(index) => {
                        text("partial_json").map(ModelChunk::Text)
                    }
                    Some("input_json_delta") => {
                        text("partial_json").map(|arguments| ModelChunk::ToolCall {
                            index,
                            id: None,
                            name: None,
                            arguments,
                        })
                    }
                    _ => None,
                };
                out.extend(chunk);
            }
            "message_delta" => {
                let delta = v.get("delta").unwrap_or(&Value::Null);
                if let Some(reason) = str_field(delta, "stop_reason") {
                    out.push_back(ModelChunk::Finish(match reason {
                        "end_turn" | "stop_sequence" => FinishReason::Stop,
                        // Only the output tool was called: the answer is complete.
                        "tool_use" if self.output_block.is_some() && !self.other_tools => {
                            FinishReason::Stop
                        }
                        "tool_use" => FinishReason::ToolCalls,
                        "max_tokens" => FinishReason::Length,
                        "refusal" => FinishReason::ContentFilter,
                        other => FinishReason::Other(other.to_owned()),
                    }));
                }
                if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
                    let input = input_tokens(u);
                    if input > 0 {
                        self.input_tokens = input;
                        self.cached_tokens = u64_field(u, "cache_read_input_tokens");
                    }
                    out.push_back(ModelChunk::Usage(Usage {
                        cached_input_tokens: self.cached_tokens,
                        ..Usage::new(self.input_tokens, u64_field(u, "output_tokens"))
                    }));
                }
            }
            "message_stop" => return Ok(Flow::Done),
            "error" => return Err(stream_error(v.get("error").unwrap_or(&Value::Null))),
            // ping, content_block_stop and event types added later.
            _ => {}
        }
        Ok(Flow::More)
    }
}
