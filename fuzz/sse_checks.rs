//! The property of the `sse_decoders` fuzz target, shared by the cargo-fuzz target
//! (`fuzz/fuzz_targets/sse_decoders.rs`) and the stable test `tests/it/agent/fuzz_inputs.rs`
//! (which compiles it only with both provider features on).
//!
//! `sse_decoders`: any bytes a server sends, run through the SSE parser and each
//! provider's decoder (`rein::model::sse_probe`, the code path of a real call), never
//! panic (token counts of any size included), decode deterministically, and decode the
//! same however the body is split into network reads (whole, byte by byte, in two at
//! a position derived from the input), with the default limits and with small ones.
//! An error that names a size limit is only reported when the body really holds a line
//! (or event) over that limit, and every error has a message.

use rein::model::sse_probe::{Decoded, Wire, decode, default_limits};

/// Small limits, so the fuzzer reaches the limit errors with short inputs.
const SMALL: (usize, usize) = (64, 256);

/// The longest line of `data` (lines end with LF, CR or CRLF).
fn longest_line(data: &[u8]) -> usize {
    data.split(|&b| b == b'\n' || b == b'\r')
        .map(<[u8]>::len)
        .max()
        .unwrap_or(0)
}

fn check(what: &str, got: &Decoded, want: &Decoded) {
    assert_eq!(got, want, "{what}");
}

pub fn sse_decoders(data: &[u8]) {
    let mid = if data.is_empty() {
        0
    } else {
        // A position that depends on the content, not only on the length.
        data.iter().fold(data.len(), |h, &b| {
            h.wrapping_mul(31).wrapping_add(usize::from(b))
        }) % data.len()
    };
    for wire in [Wire::OpenAi, Wire::Anthropic] {
        for (max_line, max_event) in [default_limits(), SMALL] {
            let whole = decode(wire, &[data], max_line, max_event);
            check(
                "deterministic",
                &decode(wire, &[data], max_line, max_event),
                &whole,
            );
            let bytes: Vec<&[u8]> = data.chunks(1).collect();
            check(
                "byte by byte",
                &decode(wire, &bytes, max_line, max_event),
                &whole,
            );
            let (a, b) = data.split_at(mid);
            check(
                "split in two",
                &decode(wire, &[a, b], max_line, max_event),
                &whole,
            );
            if let Some(e) = &whole.error {
                assert!(
                    !e.message().is_empty(),
                    "{wire:?}: an error without a message"
                );
                if e.message()
                    .starts_with("an event-stream line exceeds max_line_bytes")
                {
                    assert!(longest_line(data) > max_line, "{wire:?}: {e}");
                }
                if e.message().starts_with("an event exceeds max_event_bytes") {
                    assert!(data.len() > max_event, "{wire:?}: {e}");
                }
                assert!(!whole.complete, "{wire:?}: complete despite {e}");
            }
        }
    }
}
