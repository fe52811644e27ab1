//! Event kinds and the interest sets hooks subscribe with.

use std::fmt;
use std::ops::BitOr;

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

/// A set of [`EventKind`]s a hook subscribes to: read once, when the agent is built; the
/// chain then calls the hook only for these kinds, and an event no hook wants is never
/// built. An [`EventKind`] converts into the set of just that kind.
///
/// ```
/// use rein::{EventKind, Interest};
///
/// let tools = Interest::only(EventKind::PreActing) | EventKind::PostActing;
/// assert!(tools.contains(EventKind::PostActing));
/// assert!(!tools.contains(EventKind::PreCall));
/// assert_eq!(tools, Interest::of([EventKind::PostActing, EventKind::PreActing]));
///
/// // Everything but streamed chunks (an observer that does not need per-token calls):
/// let lifecycle = Interest::LIFECYCLE;
/// assert!(!lifecycle.contains(EventKind::ReasoningChunk));
/// assert_eq!(Interest::ALL.without(EventKind::ReasoningChunk)
///     .without(EventKind::ActingChunk)
///     .without(EventKind::SummaryChunk), lifecycle);
/// assert_eq!(Interest::from(EventKind::Error), Interest::only(EventKind::Error));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Interest(u16);

impl Interest {
    /// No events.
    pub const NONE: Interest = Interest(0);
    /// Every event kind.
    pub const ALL: Interest = Interest((1 << 12) - 1);
    /// Every kind except the three chunk kinds.
    pub const LIFECYCLE: Interest = Interest(
        Self::ALL.0
            & !(1 << EventKind::ReasoningChunk as u16)
            & !(1 << EventKind::ActingChunk as u16)
            & !(1 << EventKind::SummaryChunk as u16),
    );

    /// Exactly one kind.
    pub const fn only(kind: EventKind) -> Interest {
        Interest(1 << kind as u16)
    }

    /// This set plus `kind`.
    #[must_use]
    pub const fn with(self, kind: EventKind) -> Interest {
        Interest(self.0 | 1 << kind as u16)
    }

    /// This set minus `kind`.
    #[must_use]
    pub const fn without(self, kind: EventKind) -> Interest {
        Interest(self.0 & !(1 << kind as u16))
    }

    /// The set of the given kinds.
    pub fn of(kinds: impl IntoIterator<Item = EventKind>) -> Interest {
        kinds.into_iter().fold(Interest::NONE, Interest::with)
    }

    /// Whether `kind` is in the set.
    pub const fn contains(self, kind: EventKind) -> bool {
        self.0 & (1 << kind as u16) != 0
    }
}

impl BitOr for Interest {
    type Output = Interest;
    fn bitor(self, rhs: Interest) -> Interest {
        Interest(self.0 | rhs.0)
    }
}

impl BitOr<EventKind> for Interest {
    type Output = Interest;
    fn bitor(self, rhs: EventKind) -> Interest {
        self.with(rhs)
    }
}

impl fmt::Debug for Interest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set()
            .entries(EventKind::ALL.iter().filter(|k| self.contains(**k)))
            .finish()
    }
}
