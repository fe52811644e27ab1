//! The interest sets hooks subscribe with (the event kinds themselves live in the
//! bottom `context` layer and are re-exported here).

use std::fmt;
use std::ops::BitOr;

pub use crate::context::EventKind;

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
    pub const ALL: Interest = Interest((1 << EventKind::COUNT) - 1);
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
