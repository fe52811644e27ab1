//! The lifecycle event kinds.

use std::fmt;

use serde::Serialize;

/// The twelve event kinds, in loop order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
#[non_exhaustive]
pub enum EventKind {
    /// Before anything else in a call.
    PreCall = 0,
    /// Before each model call of the reasoning loop.
    PreReasoning = 1,
    /// For each streamed model chunk (read-only).
    ReasoningChunk = 2,
    /// After each reasoning model call.
    PostReasoning = 3,
    /// Before each tool call.
    PreActing = 4,
    /// For each progress chunk a tool emits (read-only).
    ActingChunk = 5,
    /// After each tool call.
    PostActing = 6,
    /// Before the summary model call when the iteration limit is reached.
    PreSummary = 7,
    /// For each streamed chunk of the summary (read-only).
    SummaryChunk = 8,
    /// After the summary model call.
    PostSummary = 9,
    /// After the call produced its reply, before it is returned.
    PostCall = 10,
    /// When the call fails, before the error is returned (read-only).
    Error = 11,
}

impl EventKind {
    /// Every kind, in loop order.
    pub const ALL: [EventKind; 12] = [
        EventKind::PreCall,
        EventKind::PreReasoning,
        EventKind::ReasoningChunk,
        EventKind::PostReasoning,
        EventKind::PreActing,
        EventKind::ActingChunk,
        EventKind::PostActing,
        EventKind::PreSummary,
        EventKind::SummaryChunk,
        EventKind::PostSummary,
        EventKind::PostCall,
        EventKind::Error,
    ];

    /// The kind's name, e.g. `"PreActing"`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::PreCall => "PreCall",
            EventKind::PreReasoning => "PreReasoning",
            EventKind::ReasoningChunk => "ReasoningChunk",
            EventKind::PostReasoning => "PostReasoning",
            EventKind::PreActing => "PreActing",
            EventKind::ActingChunk => "ActingChunk",
            EventKind::PostActing => "PostActing",
            EventKind::PreSummary => "PreSummary",
            EventKind::SummaryChunk => "SummaryChunk",
            EventKind::PostSummary => "PostSummary",
            EventKind::PostCall => "PostCall",
            EventKind::Error => "Error",
        }
    }

    /// `true` for the read-only notification kinds whose hook errors never affect the
    /// loop: the three chunk kinds and `Error`.
    pub fn is_notification(self) -> bool {
        matches!(
            self,
            EventKind::ReasoningChunk
                | EventKind::ActingChunk
                | EventKind::SummaryChunk
                | EventKind::Error
        )
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for EventKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}
