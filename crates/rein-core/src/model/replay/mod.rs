//! Recording real model runs and replaying them offline.
//!
//! [`RecordingModel`] wraps any [`Model`](super::Model): every request passes through
//! to it, and when its stream ends the exchange — the request and every streamed chunk
//! (text and thinking deltas, tool-call fragments, usage, the finish reason or the
//! error) — is appended to a fixture file, with personal data and secrets replaced by a
//! [`Redactor`]. [`ReplayModel`] serves such a file back, chunk by chunk with the same
//! chunk boundaries, and fails with a typed error when a request diverges from the
//! recording. Together they turn one real conversation into an offline regression test:
//! record once against the real model, commit the fixture, replay it in CI and compare
//! the hooks' decision trail with the recorded one (`rein::testing::DecisionTrail`).
//!
//! # The fixture format (`rein-recording/1`)
//!
//! JSON Lines, one JSON object per line, in this order:
//!
//! ```text
//! {"format":"rein-recording/1","model":"local","provider":"openai","redactor":"rein-pii+secrets"}
//! {"exchange":0,"request":{"messages":[…],"tools":[…],"options":{…}}}
//! {"exchange":0,"chunk":{"text":"Let me "}}
//! {"exchange":0,"chunk":{"tool_call":{"index":0,"id":"call_1","name":"refund","arguments":"{\"order\":"}}}
//! {"exchange":0,"chunk":{"usage":{"input_tokens":312,"output_tokens":24}}}
//! {"exchange":0,"chunk":{"finish":"tool_calls"}}
//! {"exchange":0,"end":"complete"}
//! {"exchange":1,"request":…}
//! ```
//!
//! - The header names the format version, the recorded model's name and provider (what
//!   [`ReplayModel`] reports) and the redactor used.
//! - Each exchange is a `request` line, one `chunk` line per streamed chunk in order,
//!   and an `end` line: `complete` (the stream ended), `error` (its last chunk is an
//!   `{"error":{"kind":…,"message":…}}` item, replayed as that [`ModelError`](super::ModelError)) or
//!   `dropped` (the consumer dropped the stream before its end).
//! - The request is stored in its *canonical* form, which is also what a replay
//!   compares: messages without their ids and metadata (the model never sees them),
//!   tool-call ids replaced by `call#1`, `call#2`, … in order of first appearance (the
//!   runtime assigns fresh random ids on every run), the tools offered, and the options
//!   with every `extra_headers` value replaced by `[redacted]` (headers carry
//!   credentials).
//! - Every text the model sees or says is redacted before it is written: message text,
//!   thinking text, tool-call arguments (string values, and numbers whose digits match),
//!   tool results, string values of `extra_body`, and the streamed text, thinking and
//!   argument deltas. A streamed text is redacted as a whole (a card number split over
//!   two deltas is still found) and cut again at the recorded chunk boundaries, mapped
//!   through the replacements (a delta that fell inside a replaced span becomes empty).
//!   Tool-call arguments that would stop being valid JSON (a sensitive JSON number) are
//!   redacted value by value instead and replayed whole in the call's first fragment.
//!
//! An exchange is written — and the file flushed — when its stream ends, in one write:
//! a crash keeps every exchange that finished, and the streamed chunks are only cloned
//! into memory on the way (no I/O on the stream's hot path). Exchanges are numbered in
//! the order they finish: record one conversation at a time, since a replay serves them
//! in that order.
//!
//! # What a replay compares
//!
//! Each request a [`ReplayModel`] receives is put in canonical form and redacted with
//! the replay's redactor — the same redactor the recording used, so masked requests are
//! compared with masked requests — then compared with the recorded request of the next
//! exchange: messages, tools and options (all fields; see
//! [`ReplayModel::compare_options`]). The first difference fails the model call with a
//! [`ModelErrorKind::Replay`](super::ModelErrorKind::Replay) error whose source is a
//! [`ReplayError::Diverged`] naming the exchange and the field (a path such as
//! `messages[3].content[0].tool_result.content`). A request past the last exchange is
//! [`ReplayError::Exhausted`].
//!
//! Hooks that react to personal data in the model's *output* see the redactor's
//! placeholders on a replay, not the data: a masking hook that rewrote a reply during
//! the recording has nothing to rewrite when it is replayed. Assert such hooks with
//! scripted tests; a recorded run is for the decisions taken on what the model asked
//! for (tool calls, arguments, caps, denials, approvals).

mod format;
mod load;
mod record;
mod redact;
mod serve;

pub use format::{
    ExchangeEnd, FixtureError, FixtureErrorKind, RECORDING_FORMAT, RecordedChunk, RecordedMsg,
    RecordedRequest,
};
pub use load::{Exchange, Recording};
pub use record::RecordingModel;
pub use redact::{NoRedaction, Redaction, Redactor, redact_text};
pub use serve::{ReplayError, ReplayModel};
