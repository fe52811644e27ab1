//! How a tool may be retried ([`EffectClass`]) and the idempotency key of a tool call.
//!
//! The runtime keeps an **effect journal** with the session: before a tool that is not
//! [`EffectClass::ReadOnly`] starts, its call is durably *claimed* (a versioned save of
//! the session, fenced under a lease); when it ends, its result is *settled* the same
//! way before any hook sees it. A claim can succeed once per call id, so a call never
//! starts twice, whatever happened to the process, the lease or the decisions that
//! approved it. After a crash the class decides what happens to a call that was
//! claimed but never settled (its outcome is unknown): see [`EffectClass`].

use serde::{Deserialize, Serialize};

/// How a tool may be retried when the runtime cannot know whether an earlier attempt
/// of the same call took effect (a crash, a lost lease or a cancelled call between the
/// start of the tool and the record of its result).
///
/// Declared by [`Tool::effect_class`](crate::Tool::effect_class) (default
/// [`EffectClass::AtMostOnce`]: a tool that declares nothing is never re-run, so a tool
/// with a side effect nobody described fails closed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum EffectClass {
    /// Reads only: safe to run again. Not journaled (no store write before it runs); a
    /// call interrupted before its result was recorded simply runs again on resume.
    ReadOnly,
    /// Has an effect, but running it again with the same
    /// [`ToolContext::idempotency_key`](crate::ToolContext::idempotency_key) has no
    /// further effect (the tool, or the service behind it, deduplicates by the key). A
    /// call whose outcome is unknown runs again on resume, with the same key.
    Idempotent,
    /// Must not run twice: a call whose outcome is unknown is never re-run
    /// automatically. The call that finds it stops with
    /// [`StopReason::OutcomeUnknown`](crate::StopReason::OutcomeUnknown), listing it
    /// like a call waiting for approval, until a human records its outcome, retries it
    /// (with the same key) or abandons it (see
    /// [`ApprovalDecision`](crate::agent::ApprovalDecision)). The default.
    #[default]
    AtMostOnce,
}

impl EffectClass {
    /// The class's name as stored in the journal and shown in errors: `read_only`,
    /// `idempotent`, `at_most_once`.
    pub fn as_str(self) -> &'static str {
        match self {
            EffectClass::ReadOnly => "read_only",
            EffectClass::Idempotent => "idempotent",
            EffectClass::AtMostOnce => "at_most_once",
        }
    }

    /// Whether calls of this class are claimed in the journal before they run.
    pub fn is_journaled(self) -> bool {
        !matches!(self, EffectClass::ReadOnly)
    }
}

/// The idempotency key of tool call `call_id` in the session of `user_id` /
/// `session_id`: `rein-<16 hex digits of the session>-<call id>`. The same on every
/// retry, resume and replica of that call (the call id is stored with the session);
/// distinct for distinct calls (runtime call ids are unique, and the session digest
/// separates sessions that reuse an id a hook chose).
pub(crate) fn idempotency_key(user_id: Option<&str>, session_id: &str, call_id: &str) -> String {
    // FNV-1a: defined bit for bit, so every process and version derives the same key.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    match user_id {
        Some(u) => {
            eat(b"u");
            eat(u.as_bytes());
        }
        None => eat(b"-"),
    }
    eat(&[0]);
    eat(session_id.as_bytes());
    format!("rein-{h:016x}-{call_id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_idempotency_key_is_stable_and_separates_sessions_and_users() {
        let a = idempotency_key(None, "s1", "call_1");
        assert_eq!(a, idempotency_key(None, "s1", "call_1"));
        assert!(a.starts_with("rein-") && a.ends_with("-call_1"), "{a}");
        assert_ne!(a, idempotency_key(None, "s2", "call_1"));
        assert_ne!(a, idempotency_key(Some(""), "s1", "call_1"));
        assert_ne!(
            idempotency_key(Some("a"), "b", "c"),
            idempotency_key(Some("ab"), "", "c")
        );
        // Fixed across processes and releases (FNV-1a of "-\0s1").
        assert_eq!(a, "rein-2d93fa8dd9927e50-call_1");
    }

    #[test]
    fn a_tool_that_declares_nothing_is_at_most_once() {
        assert_eq!(EffectClass::default(), EffectClass::AtMostOnce);
        assert!(EffectClass::Idempotent.is_journaled());
        assert!(!EffectClass::ReadOnly.is_journaled());
    }
}
