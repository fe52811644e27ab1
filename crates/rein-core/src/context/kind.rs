//! The lifecycle event kinds.

use std::fmt;

use serde::Serialize;

/// The fourteen event kinds: the twelve of the loop in loop order, then the two of
/// context compaction (which fire between `PreReasoning` or `PreSummary` and its model
/// call, when a request is compacted to fit the context window).
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
    /// Before the oldest turns are summarized to fit the context window
    /// ([`ContextPolicy::Compact`](crate::agent::ContextPolicy::Compact)).
    PreCompact = 12,
    /// After the summary of the compacted turns, before it replaces them.
    PostCompact = 13,
}

impl EventKind {
    /// How many kinds there are.
    pub const COUNT: usize = 14;

    /// Every kind, in the order of their values (loop order, then compaction).
    pub const ALL: [EventKind; Self::COUNT] = [
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
        EventKind::PreCompact,
        EventKind::PostCompact,
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
            EventKind::PreCompact => "PreCompact",
            EventKind::PostCompact => "PostCompact",
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
