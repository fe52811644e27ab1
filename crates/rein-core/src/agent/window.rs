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
use crate::budget::worst_estimate;
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
/// `max_tokens`, when set. Near the window (twice the estimated prompt plus
/// [`COUNT_SLACK`](crate::budget::COUNT_SLACK), with the reserve, past it) a model that
/// counts tokens ([`Model::count_tokens`](crate::Model::count_tokens)) decides instead:
/// a request is sent whole when its count fits and cut further when it does not.
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
    /// The oldest whole turns are summarized (no tools; a summary of at most an eighth
    /// of the window or 512 tokens, with a quarter of the window kept for it; in rolling
    /// calls, each with as many whole turns as
    /// fit the window and the summary so far) until what is kept fits half the window
    /// (or, when the current turn needs more, the window less the summary's quarter),
    /// so the next turns fit beside the summary, and replaced by the summary in the stored
    /// conversation, before `PreReasoning`: the summary, as a user message marked with
    /// [`COMPACTION_KEY`](super::COMPACTION_KEY), and a short assistant acknowledgement
    /// (which carries the session's budget record). The same turns as `DropOldest` are
    /// kept (system prompt, current turn, pinned messages, whole tool-call pairs).
    /// `PreCompact` hooks may change what is summarized or veto (the call then fails
    /// with [`ErrorKind::ContextWindow`](crate::ErrorKind::ContextWindow));
    /// `PostCompact` hooks may rewrite the summary. The summary call counts against
    /// budgets. A request still over the window after compaction fails as with
    /// [`Fail`](Self::Fail).
    Compact,
}

/// The estimated tokens of `request`, with the answer's reserve.
pub(super) fn estimate(request: &ModelRequest) -> u64 {
    let text = (request_bytes(request) as u64).div_ceil(WINDOW_BYTES_PER_TOKEN);
    let messages = request.messages.len() as u64 * PER_MESSAGE_TOKENS;
    let reserve = request.options.max_tokens.map_or(0, u64::from);
    text + messages + PER_REQUEST_TOKENS + reserve
}

/// Whether `msg` is kept in every window.
pub(super) fn pinned(msg: &Msg) -> bool {
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
    /// Near the window (twice the estimated prompt plus
    /// [`COUNT_SLACK`](crate::budget::COUNT_SLACK), with the reserve, past it) a model
    /// that counts tokens decides instead of the estimate: a request the estimate
    /// rejects is sent whole when its count fits, and one the estimate admits is cut
    /// further (or failed) when its count does not. The count is kept for the budget
    /// check of the same request.
    ///
    /// # Errors
    /// [`ErrorKind::ContextWindow`](crate::ErrorKind::ContextWindow) when it cannot be
    /// made to fit.
    pub(super) async fn fit_window(
        &mut self,
        request: ModelRequest,
    ) -> Result<ModelRequest, Error> {
        self.counted = None;
        let Some((window, policy)) = self.agent.window else {
            return Ok(request);
        };
        let window = u64::from(window);
        let reserve = request.options.max_tokens.map_or(0, u64::from);
        let needed = estimate(&request);
        let near = worst_estimate(needed - reserve).saturating_add(reserve) > window;
        let counted = if near {
            self.count_tokens(&request).await
        } else {
            None
        };
        let Some(count) = counted else {
            // The estimate decides.
            return self.cut_to(request, needed, window, policy, None);
        };
        if count + reserve <= window {
            self.counted = Some(count);
            return Ok(request);
        }
        // Over by the model's count: cut as if the estimate had been that much larger,
        // and count again what is left (the count of a cut cannot be derived).
        let mut shortfall = (count + reserve).saturating_sub(needed);
        for _ in 0..CUT_ATTEMPTS {
            let cut = self.cut_to(
                request.clone(),
                needed + shortfall,
                window,
                policy,
                Some(count),
            )?;
            let Some(count) = self.count_tokens(&cut).await else {
                return Ok(cut);
            };
            if count + reserve <= window {
                self.counted = Some(count);
                return Ok(cut);
            }
            shortfall += (count + reserve - window).max(1);
        }
        Err(overflow(
            needed + shortfall,
            window,
            &request,
            "DropOldest (still over the window by the model's count after cutting)",
        ))
    }

    /// `request` (estimated at `needed` tokens, or counted at `counted` prompt tokens)
    /// as the policy makes it fit `window` by the estimate.
    fn cut_to(
        &self,
        request: ModelRequest,
        needed: u64,
        window: u64,
        policy: ContextPolicy,
        counted: Option<u64>,
    ) -> Result<ModelRequest, Error> {
        if needed <= window {
            return Ok(request);
        }
        let shown = counted.map_or(needed, |c| {
            c + request.options.max_tokens.map_or(0, u64::from)
        });
        if policy != ContextPolicy::DropOldest {
            let name = match (policy, counted) {
                (ContextPolicy::Compact, None) => {
                    "Compact (still over the window after compaction)"
                }
                (ContextPolicy::Compact, Some(_)) => {
                    "Compact (still over the window by the model's count after compaction)"
                }
                (_, None) => "Fail",
                (_, Some(_)) => "Fail (over the window by the model's own count)",
            };
            return Err(overflow(shown, window, &request, name));
        }
        let history = request.messages.history();
        let Some(cut) = cut_index(history, needed, window) else {
            return Err(overflow(
                shown,
                window,
                &request,
                "DropOldest (the current turn alone does not fit)",
            ));
        };
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

/// How often a cut that the model's count still finds over the window is cut further.
const CUT_ATTEMPTS: usize = 4;

/// Where to cut `history` (a request estimated at `needed` tokens) so that the rest fits
/// `target`: the start of the oldest turn to keep, never past the current (last) turn;
/// pinned messages before it count as kept. `None` when no cut fits.
pub(super) fn cut_index(history: &[Msg], needed: u64, target: u64) -> Option<usize> {
    // Turn starts: where a user message begins a turn; the last one is the current.
    let starts = history
        .iter()
        .enumerate()
        .filter(|(_, m)| m.role == Role::User)
        .map(|(i, _)| i);
    let mut saved = 0u64;
    let mut cut = 0usize;
    for start in starts.skip(1) {
        saved += history[cut..start]
            .iter()
            .filter(|m| !pinned(m))
            .map(tokens_of)
            .sum::<u64>();
        cut = start;
        if needed.saturating_sub(saved) <= target {
            return Some(cut);
        }
    }
    None
}

/// The estimated tokens `msg` adds to a request.
pub(super) fn tokens_of(msg: &Msg) -> u64 {
    (message_bytes(msg) as u64).div_ceil(WINDOW_BYTES_PER_TOKEN) + PER_MESSAGE_TOKENS
}

/// The error for a request of `needed` estimated tokens over `window`.
pub(super) fn overflow(needed: u64, window: u64, request: &ModelRequest, policy: &str) -> Error {
    let reserve = request.options.max_tokens.map_or(0, u64::from);
    Error::context_window(format!(
        "the model request needs about {needed} tokens ({} messages, {} tools, {reserve} \
         reserved for the answer) but the context window is {window} tokens; context \
         policy {policy}. Nothing was sent",
        request.messages.len(),
        request.tools.len()
    ))
}
