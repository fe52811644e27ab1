//! The providers' stream decoding without HTTP, for the fuzz target
//! (`fuzz/fuzz_targets/sse_decoders.rs`) and its stable replay
//! (`tests/it/agent/fuzz_inputs.rs`). Not part of the public API: no stability promise,
//! hidden from the docs.
//!
//! [`decode`] runs body bytes through the same SSE parser and provider decoder as a
//! real call, in the same order (complete events are decoded before more bytes are
//! parsed), with the same limits.

use crate::anthropic::AnthropicDecoder;
use crate::openai::OpenAiDecoder;
use crate::sse::SseParser;
use crate::transport::{Decoder, Flow, HttpConfig};
use rein_core::model::{ModelChunk, ModelError, ModelErrorKind};

/// A provider wire format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    /// OpenAI-compatible chat completions.
    OpenAi,
    /// Anthropic messages.
    Anthropic,
}

/// How one body decoded.
#[derive(Clone, Debug, PartialEq)]
pub struct Decoded {
    /// The chunks, in order, up to the end, the terminal event or the error.
    pub chunks: Vec<ModelChunk>,
    /// The error that ended the stream (as the call would report it).
    pub error: Option<ModelError>,
    /// The answer is complete: the terminal event arrived, or the body ended where the
    /// decoder accepts that (an OpenAI finish reason without `[DONE]`).
    pub complete: bool,
}

/// The limits of [`HttpConfig::default`]: `(max_line_bytes, max_event_bytes)`.
pub fn default_limits() -> (usize, usize) {
    let http = HttpConfig::default();
    (http.max_line_bytes, http.max_event_bytes)
}

/// Decodes a body that arrives in `pieces` (each one network read), with the given
/// line and event limits.
pub fn decode(wire: Wire, pieces: &[&[u8]], max_line: usize, max_event: usize) -> Decoded {
    match wire {
        Wire::OpenAi => run(OpenAiDecoder::default(), pieces, max_line, max_event),
        Wire::Anthropic => run(AnthropicDecoder::default(), pieces, max_line, max_event),
    }
}

fn run<D: Decoder>(mut decoder: D, pieces: &[&[u8]], max_line: usize, max_event: usize) -> Decoded {
    let mut parser = SseParser::new(max_line, max_event);
    let mut out = std::collections::VecDeque::new();
    let mut pieces = pieces.iter();
    let end = |out: std::collections::VecDeque<ModelChunk>, error, complete| Decoded {
        chunks: out.into_iter().collect(),
        error,
        complete,
    };
    loop {
        match parser.next_event() {
            Some(Ok(event)) => {
                let decoded = decoder.decode(&event, &mut out);
                parser.recycle(event);
                match decoded {
                    Ok(Flow::More) => {}
                    Ok(Flow::Done) => return end(out, None, true),
                    Err(e) => return end(out, Some(e), false),
                }
            }
            Some(Err(e)) => {
                let error = ModelError::new(ModelErrorKind::Stream, e.to_string());
                return end(out, Some(error), false);
            }
            None => match pieces.next() {
                Some(piece) => parser.push(piece),
                None => {
                    let complete = decoder.complete_without_terminal();
                    return end(out, None, complete);
                }
            },
        }
    }
}
