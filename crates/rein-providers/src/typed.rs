//! Typed, borrowing views of the stream events the decoders see most (an OpenAI
//! `chat.completion.chunk`, an Anthropic `content_block_delta`): the fast path of
//! decoding.
//!
//! A decoder reads an event through its view first and falls back to the
//! `serde_json::Value` path when the view does not fit. The views are strict where the
//! `Value` path is lenient (a field of an unexpected type, a duplicate key, an array
//! where an object belongs, a number that is not a `u64`): any such event fails the
//! view and takes the `Value` path, so whenever the view succeeds it reads exactly what
//! the `Value` path reads. Unknown fields are skipped without being stored, and
//! strings without escapes are borrowed from the event: an event costs no allocation
//! beyond what the decoder hands on.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::value::MapAccessDeserializer;
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
#[cfg(feature = "openai")]
use serde_json::Value;

#[cfg(feature = "anthropic")]
use rein_core::model::ModelChunk;

/// A `T` read from a JSON object only (serde's derived structs also accept an array
/// of their fields in order, which the `Value` path reads as having no fields).
#[derive(Debug)]
pub(crate) struct Obj<T>(pub(crate) T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Obj<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Object<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Object<T> {
            type Value = Obj<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Obj<T>, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(Obj)
            }
        }
        deserializer.deserialize_map(Object(PhantomData))
    }
}

/// A string field, when present and non-empty (as `str_field` reads it).
pub(crate) fn nonempty<'s>(field: &'s Option<Cow<'_, str>>) -> Option<&'s str> {
    field.as_deref().filter(|s| !s.is_empty())
}

/// `data` read through the view `T`, when it fits.
pub(crate) fn view<'a, T: Deserialize<'a>>(data: &'a str) -> Option<T> {
    #[cfg(all(test, feature = "openai", feature = "anthropic"))]
    if tests::VALUE_PATH_ONLY.with(std::cell::Cell::get) {
        return None;
    }
    // Only an object can fit; anything else goes straight to the `Value` path.
    if !data.starts_with('{') {
        return None;
    }
    let fits = serde_json::from_str::<Obj<T>>(data).ok().map(|o| o.0);
    #[cfg(all(test, feature = "openai", feature = "anthropic"))]
    tests::VIEWS_FIT.with(|c| c.set(c.get() + usize::from(fits.is_some())));
    fits
}

/// An OpenAI `chat.completion.chunk`.
#[cfg(feature = "openai")]
#[derive(Debug, serde::Deserialize)]
pub(crate) struct OpenAiChunk<'a> {
    /// A non-null error object.
    #[serde(default)]
    pub(crate) error: Option<Value>,
    #[serde(borrow, default)]
    pub(crate) choices: Option<Vec<Obj<OpenAiChoice<'a>>>>,
    #[serde(default)]
    pub(crate) usage: Option<Obj<OpenAiUsage>>,
}

/// One choice of a chunk.
#[cfg(feature = "openai")]
#[derive(Debug, serde::Deserialize)]
pub(crate) struct OpenAiChoice<'a> {
    #[serde(default)]
    pub(crate) index: Option<u64>,
    #[serde(borrow, default)]
    pub(crate) delta: Option<Obj<OpenAiDelta<'a>>>,
    #[serde(borrow, default)]
    pub(crate) finish_reason: Option<Cow<'a, str>>,
}

/// A choice's delta.
#[cfg(feature = "openai")]
#[derive(Debug, serde::Deserialize)]
pub(crate) struct OpenAiDelta<'a> {
    #[serde(borrow, default)]
    pub(crate) reasoning_content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(crate) reasoning: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(crate) content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(crate) refusal: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(crate) tool_calls: Option<Vec<Obj<OpenAiCall<'a>>>>,
}

/// A tool-call fragment.
#[cfg(feature = "openai")]
#[derive(Debug, serde::Deserialize)]
pub(crate) struct OpenAiCall<'a> {
    #[serde(default)]
    pub(crate) index: Option<u64>,
    #[serde(borrow, default)]
    pub(crate) id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(crate) function: Option<Obj<OpenAiFunction<'a>>>,
}

/// A tool-call fragment's function.
#[cfg(feature = "openai")]
#[derive(Debug, serde::Deserialize)]
pub(crate) struct OpenAiFunction<'a> {
    #[serde(borrow, default)]
    pub(crate) name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(crate) arguments: Option<Cow<'a, str>>,
}

/// A chunk's usage.
#[cfg(feature = "openai")]
#[derive(Debug, serde::Deserialize)]
pub(crate) struct OpenAiUsage {
    #[serde(default)]
    pub(crate) prompt_tokens: Option<u64>,
    #[serde(default)]
    pub(crate) completion_tokens: Option<u64>,
    #[serde(default)]
    pub(crate) prompt_tokens_details: Option<Obj<OpenAiPromptDetails>>,
    #[serde(default)]
    pub(crate) completion_tokens_details: Option<Obj<OpenAiCompletionDetails>>,
}

/// A usage's `prompt_tokens_details`.
#[cfg(feature = "openai")]
#[derive(Debug, serde::Deserialize)]
pub(crate) struct OpenAiPromptDetails {
    #[serde(default)]
    pub(crate) cached_tokens: Option<u64>,
}

/// A usage's `completion_tokens_details`.
#[cfg(feature = "openai")]
#[derive(Debug, serde::Deserialize)]
pub(crate) struct OpenAiCompletionDetails {
    #[serde(default)]
    pub(crate) reasoning_tokens: Option<u64>,
}

/// An Anthropic event, as far as a `content_block_delta` is read.
#[cfg(feature = "anthropic")]
#[derive(Debug, serde::Deserialize)]
pub(crate) struct AnthropicDelta<'a> {
    #[serde(rename = "type", borrow, default)]
    pub(crate) kind: Option<Cow<'a, str>>,
    #[serde(default)]
    pub(crate) index: Option<u64>,
    #[serde(borrow, default)]
    pub(crate) delta: Option<Obj<AnthropicDeltaBody<'a>>>,
}

/// The `delta` of a `content_block_delta`.
#[cfg(feature = "anthropic")]
#[cfg(feature = "anthropic")]
#[derive(Debug, serde::Deserialize)]
pub(crate) struct AnthropicDeltaBody<'a> {
    #[serde(rename = "type", borrow, default)]
    pub(crate) kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(crate) text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(crate) thinking: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(crate) signature: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(crate) partial_json: Option<Cow<'a, str>>,
}

/// The chunk of a `content_block_delta` event (SSE name `name`) that fits the view:
/// what the Anthropic decoder makes of it, without building a `Value`
/// (`output_block`: the block of the response format's tool, whose input is text);
/// `None` for any other event, or one that does not fit.
#[cfg(feature = "anthropic")]
pub(crate) fn anthropic_delta(
    data: &str,
    name: &str,
    output_block: Option<usize>,
) -> Option<Option<ModelChunk>> {
    let v = view::<AnthropicDelta<'_>>(data)?;
    if nonempty(&v.kind).unwrap_or(name) != "content_block_delta" {
        return None;
    }
    let index = usize::try_from(v.index?).ok()?;
    let Some(Obj(delta)) = &v.delta else {
        return Some(None);
    };
    let text = |field: &Option<Cow<'_, str>>| nonempty(field).map(str::to_owned);
    Some(match nonempty(&delta.kind) {
        Some("text_delta") => text(&delta.text).map(ModelChunk::Text),
        Some("thinking_delta") => text(&delta.thinking).map(ModelChunk::Thinking),
        Some("signature_delta") => text(&delta.signature).map(ModelChunk::ThinkingSignature),
        Some("input_json_delta") if output_block == Some(index) => {
            text(&delta.partial_json).map(ModelChunk::Text)
        }
        Some("input_json_delta") => {
            text(&delta.partial_json).map(|arguments| ModelChunk::ToolCall {
                index,
                id: None,
                name: None,
                arguments,
            })
        }
        _ => None,
    })
}

#[cfg(all(test, feature = "openai", feature = "anthropic"))]
mod tests {
    use std::collections::VecDeque;

    use crate::anthropic::AnthropicDecoder;
    use crate::openai::OpenAiDecoder;
    use crate::sse::Event;
    use crate::transport::Decoder;

    thread_local! {
        /// Set: every event takes the `Value` path.
        pub(super) static VALUE_PATH_ONLY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
        /// Events that fit their view.
        pub(super) static VIEWS_FIT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    /// Decodes `events` with a fresh `decoder` through the views, then through the
    /// `Value` path only, and checks that every outcome, chunk and decoder state agree.
    fn same<D: Decoder + std::fmt::Debug>(decoder: D, events: &[(&str, &str)], fit: usize) {
        let run = |value_only: bool| {
            VALUE_PATH_ONLY.with(|c| c.set(value_only));
            let mut d = decoder.clone();
            let mut out = Vec::new();
            for (event, data) in events {
                let mut chunks = VecDeque::new();
                let event = Event {
                    event: (*event).to_owned(),
                    data: (*data).to_owned(),
                };
                let flow = d.decode(&event, &mut chunks);
                out.push(format!("{data} => {flow:?} {chunks:?} {d:?}"));
            }
            VALUE_PATH_ONLY.with(|c| c.set(false));
            out
        };
        VIEWS_FIT.with(|c| c.set(0));
        let fast = run(false);
        // The views are taken where they fit (so both paths are compared there).
        assert_eq!(VIEWS_FIT.with(std::cell::Cell::get), fit);
        let value = run(true);
        for (f, v) in fast.iter().zip(&value) {
            assert_eq!(f, v);
        }
    }

    #[test]
    fn openai_views_read_what_the_value_path_reads() {
        let payloads = [
            r#"{"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"finish_reason":null}],"usage":null}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"Hi \"there\"\n\u00e9"}}],"obfuscation":"x"}"#,
            r#"{"choices":[{"delta":{"refusal":"no"}},{"index":1,"delta":{"content":"other"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"reasoning_content":"","reasoning":"think"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\""}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"x","function":{"name":"g"}},{"id":"y"},{"function":{"arguments":"1"}},{"id":"x"}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":18446744073709551615}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[{"finish_reason":"weird"},{"finish_reason":""}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}"#,
            r#"{"usage":{"prompt_tokens":1e30,"completion_tokens":-3}}"#,
            r#"{"usage":{"prompt_tokens":"7"}}"#,
            r#"{"usage":5}"#,
            r#"{"usage":{"prompt_tokens":9,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":6},"completion_tokens_details":{"reasoning_tokens":2}}}"#,
            r#"{"usage":{"prompt_tokens":9,"prompt_tokens_details":null,"completion_tokens_details":{"reasoning_tokens":-1}}}"#,
            r#"{"choices":null}"#,
            r#"{"choices":5}"#,
            r#"{"choices":[5,{"index":-1,"delta":{"content":"neg"}},{"index":2.0,"delta":{"content":"f"}}]}"#,
            r#"{"choices":[{"delta":["x"]},{"delta":null},{"delta":"s"}]}"#,
            r#"{"choices":[{"delta":{"content":5,"refusal":"r"}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":{}}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":{"a":1}}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[5,{"function":null}]}}]}"#,
            r#"{"error":{"type":"rate_limit_error","message":"slow down"}}"#,
            r#"{"error":null,"choices":[{"delta":{"content":"ok"}}]}"#,
            r#"{"error":"boom","choices":5}"#,
            r#"{"choices":[{"delta":{"content":"a"}}],"choices":[]}"#,
            r#"[null,[{"index":0,"delta":{"content":"array"}}],null]"#,
            r#"42"#,
            r#"{"choices":[{"delta":{"content":"x"}}]"#,
            r#"{"choices":[{"delta":{"content":"a"},"delta":{"content":"b"}}]}"#,
        ];
        let events: Vec<_> = payloads.iter().map(|p| ("message", *p)).collect();
        same(OpenAiDecoder::default(), &events, 15);
    }

    #[test]
    fn anthropic_views_read_what_the_value_path_reads() {
        let d = "content_block_delta";
        let events = [
            (
                "message_start",
                r#"{"type":"message_start","message":{"usage":{"input_tokens":5}}}"#,
            ),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"t","name":"f","input":{}}}"#,
            ),
            (
                d,
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi \"x\""}}"#,
            ),
            (
                d,
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":""}}"#,
            ),
            (
                d,
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hm"}}"#,
            ),
            (
                d,
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"sig"}}"#,
            ),
            (
                d,
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"a\""}}"#,
            ),
            (
                d,
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"unknown_delta","text":"t"}}"#,
            ),
            (
                d,
                r#"{"type":"content_block_delta","delta":{"type":"text_delta","text":"no index"}}"#,
            ),
            (
                d,
                r#"{"type":"content_block_delta","index":"0","delta":{"type":"text_delta","text":"s"}}"#,
            ),
            (
                d,
                r#"{"type":"content_block_delta","index":-1,"delta":{"type":"text_delta","text":"s"}}"#,
            ),
            (
                d,
                r#"{"type":"content_block_delta","index":0,"delta":null}"#,
            ),
            (d, r#"{"type":"content_block_delta","index":0}"#),
            (
                d,
                r#"{"type":"content_block_delta","index":0,"delta":["text_delta","arr"]}"#,
            ),
            (
                d,
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":5}}"#,
            ),
            (
                d,
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a","text":"b"}}"#,
            ),
            (
                d,
                r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}}"#,
            ),
            (
                d,
                r#"{"index":0,"delta":{"type":"text_delta","text":"typeless"}}"#,
            ),
            (
                d,
                r#"{"type":"","index":0,"delta":{"type":"text_delta","text":"empty type"}}"#,
            ),
            (
                d,
                r#"["content_block_delta",0,{"type":"text_delta","text":"arr"}]"#,
            ),
            (
                d,
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}"#,
            ),
            (
                "error",
                r#"{"type":"error","error":{"type":"overloaded_error","message":"busy"}}"#,
            ),
            ("message_stop", r#"{"type":"message_stop"}"#),
        ];
        same(AnthropicDecoder::default(), &events, 12);
    }
}
