//! The context window: every model request is checked against the model's window
//! before it is sent, and one that would not fit is failed with a typed error or cut
//! to the newest whole turns that fit.
//!
//! The check runs after `PreReasoning` / `PreSummary` hooks (they see the whole
//! conversation; what is sent is a window of it) and before budgets reserve anything.
//! The cut is a pure function of the stored conversation, so every replica sends the
//! same request for the same session; the stored conversation is never changed.

use super::budgets::{message_bytes, request_bytes};
use super::run::Call;
use crate::error::Error;
use crate::message::{ContentBlock, Msg, Role};
use crate::model::ModelRequest;

/// Metadata key that keeps a message in every request window (`true`), e.g. a message
/// of facts the application added that must never drop out. Only a message without
/// tool calls or results can be pinned (a pinned half of a pair would break it); the
/// key is ignored on others.
pub const PINNED_KEY: &str = "rein.pinned";

/// Bytes of text per token for the window check: fewer than the budgets' estimate
/// ([`BYTES_PER_TOKEN`](crate::budget::BYTES_PER_TOKEN)), because an overflow fails
/// the server's request while a budget charge is settled with the real usage.
pub const WINDOW_BYTES_PER_TOKEN: u64 = 3;

/// Tokens counted per message for the chat template's role markers.
const PER_MESSAGE_TOKENS: u64 = 8;

/// Tokens counted per request for the template's own text (tool-calling preamble).
const PER_REQUEST_TOKENS: u64 = 64;

/// What happens to a model request that would not fit the context window. Set with
/// [`AgentBuilder::context_policy`](super::AgentBuilder::context_policy); the window
/// is [`AgentBuilder::context_window`](super::AgentBuilder::context_window) or the
/// model's [`ModelCapabilities::context_window`](crate::ModelCapabilities::context_window).
/// Without a window nothing is checked.
///
/// The estimate is the bytes of the request's text (messages, tool calls and results,
/// tool schemas) / [`WINDOW_BYTES_PER_TOKEN`], plus 8 tokens per message and 64 per
/// request for the chat template, plus the answer's reserve: the request's
/// `max_tokens`, when set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ContextPolicy {
    /// The call fails with [`ErrorKind::ContextWindow`](crate::ErrorKind::ContextWindow)
    /// before the request is sent (the default: nothing is left out silently).
    #[default]
    Fail,
    /// The oldest whole turns (a user message and everything up to the next one) are
    /// left out of the request until it fits. The system prompt, the current turn
    /// (the last user message and what followed it, so pending approvals and calls
    /// being resolved) and pinned messages ([`PINNED_KEY`]) are always sent; a tool
    /// call is never separated from its result. When the current turn alone does not
    /// fit, the call fails as with [`Fail`](Self::Fail). The stored conversation keeps
    /// every turn.
    DropOldest,
}

/// The estimated tokens of `request`, with the answer's reserve.
pub(crate) fn estimate(request: &ModelRequest) -> u64 {
    let text = (request_bytes(request) as u64).div_ceil(WINDOW_BYTES_PER_TOKEN);
    let messages = request.messages.len() as u64 * PER_MESSAGE_TOKENS;
    let reserve = request.options.max_tokens.map_or(0, u64::from);
    text + messages + PER_REQUEST_TOKENS + reserve
}

/// Whether `msg` is kept in every window.
fn pinned(msg: &Msg) -> bool {
    msg.metadata.get(PINNED_KEY).and_then(|v| v.as_bool()) == Some(true)
        && !msg
            .content
            .iter()
            .any(|b| matches!(b, ContentBlock::ToolUse(_) | ContentBlock::ToolResult(_)))
}

impl Call<'_> {
    /// `request`, checked against the agent's window: as it is when it fits (or the
    /// agent has no window), cut to its newest turns under `DropOldest`.
    ///
    /// # Errors
    /// [`ErrorKind::ContextWindow`](crate::ErrorKind::ContextWindow) when it cannot be
    /// made to fit.
    pub(super) fn fit_window(&self, request: ModelRequest) -> Result<ModelRequest, Error> {
        let Some((window, policy)) = self.agent.window else {
            return Ok(request);
        };
        let window = u64::from(window);
        let needed = estimate(&request);
        if needed <= window {
            return Ok(request);
        }
        if policy == ContextPolicy::Fail {
            return Err(overflow(needed, window, &request, "Fail"));
        }
        let history = request.messages.history();
        // Turn starts: where a user message begins a turn; the last one is the current.
        let starts: Vec<usize> = history
            .iter()
            .enumerate()
            .filter(|(_, m)| m.role == Role::User)
            .map(|(i, _)| i)
            .collect();
        // Drop turn by turn from the oldest, counting what is left out, never the
        // current (last) turn.
        let mut saved = 0u64;
        let mut cut = 0usize;
        for &start in starts.iter().skip(1) {
            saved += history[cut..start]
                .iter()
                .filter(|m| !pinned(m))
                .map(tokens_of)
                .sum::<u64>();
            cut = start;
            if needed.saturating_sub(saved) <= window {
                break;
            }
        }
        if cut == 0 || needed.saturating_sub(saved) > window {
            return Err(overflow(
                needed.saturating_sub(saved),
                window,
                &request,
                "DropOldest (the current turn alone does not fit)",
            ));
        }
        let kept: Vec<Msg> = history[..cut]
            .iter()
            .filter(|m| pinned(m))
            .chain(&history[cut..])
            .cloned()
            .collect();
        tracing::debug!(
            agent = %self.agent.info.name,
            dropped = history.len() - kept.len(),
            window,
            "oldest turns left out of the request to fit the context window"
        );
        Ok(ModelRequest {
            messages: request.messages.with_history(kept),
            ..request
        })
    }
}

/// The estimated tokens `msg` adds to a request.
fn tokens_of(msg: &Msg) -> u64 {
    (message_bytes(msg) as u64).div_ceil(WINDOW_BYTES_PER_TOKEN) + PER_MESSAGE_TOKENS
}

/// The error for a request of `needed` estimated tokens over `window`.
fn overflow(needed: u64, window: u64, request: &ModelRequest, policy: &str) -> Error {
    let reserve = request.options.max_tokens.map_or(0, u64::from);
    Error::context_window(format!(
        "the model request needs about {needed} tokens ({} messages, {} tools, {reserve} \
         reserved for the answer) but the context window is {window} tokens; context \
         policy {policy}. Nothing was sent",
        request.messages.len(),
        request.tools.len()
    ))
}
