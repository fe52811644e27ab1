//! [`MaskingHook`]: masks personal data in final replies, optionally in tool results,
//! and (through [`MaskedStream`]) in streamed text.

use std::borrow::Cow;
use std::fmt;

use futures::Stream;
use serde::{Deserialize, Serialize};

use rein_core::agent::AgentEvent;
use rein_core::hook::{EventKind, FailurePolicy, HookError, HookEvent, Interest, SyncHook};
use rein_core::{ContentBlock, Msg, Thinking, ToolResult};
use rein_pii::SensitiveDataMasker;

mod json;
mod stream;
pub use stream::MaskedStream;

/// What a mutating guard hook's failure (an error or a panic inside it) means.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum OnError {
    /// The call fails with a hook error; nothing unguarded gets out (default).
    #[default]
    FailClosed,
    /// The failure is logged and the event passes through unchanged.
    FailOpen,
}

impl OnError {
    pub(crate) fn policy(self) -> FailurePolicy {
        match self {
            OnError::FailClosed => FailurePolicy::Abort,
            OnError::FailOpen => FailurePolicy::Ignore,
        }
    }
}

/// Settings of [`MaskingHook`] (the `masking` section of
/// [`HooksConfig`](super::HooksConfig)). What counts as sensitive is the masker's
/// business: see the `masker` section and [`MaskerConfig`](super::MaskerConfig).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MaskingConfig {
    /// Install the hook (default `false`).
    pub enabled: bool,
    /// Also mask tool results before they are stored and reach the model (default
    /// `false`: the model may need the data; the caller still gets a masked reply).
    pub mask_tool_results: bool,
    /// Also mask thinking blocks of the final reply (default `true`).
    pub mask_thinking: bool,
    /// Failure policy (default `fail_closed`: a masking failure fails the call, the
    /// unmasked text is withheld).
    pub on_error: OnError,
    /// Largest carry-over (bytes) [`MaskedStream`] holds back per agent while waiting
    /// for a hard boundary (default 256). Beyond it the text before the trailing
    /// unfinished token is emitted; the token itself is held up to `max(limit, 64)`
    /// bytes and masked whole beyond that, never split.
    pub stream_carry_limit: usize,
    /// Where a subagent's reply is masked (default `parent`). See [`SubagentBoundary`].
    pub subagent_replies: SubagentBoundary,
}

/// Whether a subagent's reply is masked before its parent reads it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SubagentBoundary {
    /// Masked when it crosses to the parent (default): the parent model never reads the
    /// child's personal data, so it cannot repeat it — the safe choice when the parent
    /// does not need the data (most delegations summarise or analyse).
    #[default]
    Parent,
    /// Masked only where it reaches the user: the parent model reads the child's reply
    /// as the child wrote it (still subject to `mask_tool_results`, since it arrives as
    /// the delegation tool's result), and the top-level reply and masked streams are
    /// masked as always. For parents that must act on the data (e.g. pass an order's
    /// phone number to a tool).
    User,
}

impl Default for MaskingConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            mask_tool_results: false,
            mask_thinking: true,
            on_error: OnError::FailClosed,
            stream_carry_limit: 256,
            subagent_replies: SubagentBoundary::Parent,
        }
    }
}

/// Masks personal data on the way out. Priority **900** (after the audit hook, so the
/// audit sees the raw reply and applies its own masking); off by default in
/// [`HooksConfig`](super::HooksConfig).
///
/// - `PostCall`: the final reply's text blocks (and thinking blocks, and the results of
///   a stopped turn's tool message) are masked with the
///   [`SensitiveDataMasker`]; the message keeps its id, role, name, metadata and
///   non-text blocks, in order. A reply without sensitive data is left untouched (not
///   replaced). The stored conversation keeps the original (see
///   [`PostCallEvent::set_final_message`](rein_core::PostCallEvent::set_final_message)).
/// - `PostActing` (with `mask_tool_results`): the tool result text is masked before it
///   is stored and sent to the model, and so is the decoded value of every JSON string
///   literal in it (a result rendered as JSON, such as an MCP resource or structured
///   content, escapes a line end as `\n`, which would hide the data after it).
/// - Streamed deltas: wrap the call's [`AgentStream`](rein_core::AgentStream) with
///   [`MaskingHook::mask_stream`].
///
/// Tool arguments are never masked on their way to the tool: the tools need the real
/// order numbers and phone numbers (a masked stream masks only the copy it shows). With the default `on_error = fail_closed`, a failure inside the hook fails
/// the call (the caller gets an [`Error`](rein_core::Error) naming the hook and never the
/// unmasked text).
#[derive(Clone)]
pub struct MaskingHook {
    config: MaskingConfig,
    masker: SensitiveDataMasker,
}

impl fmt::Debug for MaskingHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MaskingHook")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl MaskingHook {
    /// A hook with these settings and this masker.
    pub fn new(config: MaskingConfig, masker: SensitiveDataMasker) -> Self {
        Self { config, masker }
    }

    /// The settings.
    pub fn config(&self) -> &MaskingConfig {
        &self.config
    }

    /// The masker.
    pub fn masker(&self) -> &SensitiveDataMasker {
        &self.masker
    }

    /// Adds this hook to `builder` **and** masks every stream of the agent by default
    /// (a [`stream_filter`](rein_core::AgentBuilder::stream_filter) that wraps
    /// [`Agent::stream`](rein_core::Agent::stream) in [`MaskingHook::mask_stream`]), so a
    /// masked stream does not depend on remembering the wrapper.
    /// [`Agent::stream_raw`](rein_core::Agent::stream_raw) is the opt-out for trusted
    /// internal consumers. [`Hooks::install`](super::Hooks::install) does this for the
    /// configured masking hook.
    pub fn install<S>(&self, builder: rein_core::AgentBuilder<S>) -> rein_core::AgentBuilder<S> {
        let mask = self.clone();
        builder
            .hook(self.clone())
            .stream_filter(move |s| rein_core::AgentStream::from_stream(mask.mask_stream(s)))
    }

    /// Wraps a stream of a call (normally [`Agent::stream`](rein_core::Agent::stream)) so
    /// every item is masked before it is yielded (deltas, tool calls, progress, results,
    /// the final reply, errors, and subagents' events); see [`MaskedStream`].
    pub fn mask_stream<S>(&self, stream: S) -> MaskedStream<S>
    where
        S: Stream<Item = AgentEvent> + Unpin,
    {
        MaskedStream::new(stream, self.masker.clone(), self.config.stream_carry_limit)
    }

    /// The message with its text (and per the settings, thinking and tool-result)
    /// content masked, or `None` when nothing needed masking.
    pub fn mask_message(&self, msg: &Msg) -> Option<Msg> {
        let mut changed: Vec<(usize, ContentBlock)> = Vec::new();
        for (i, block) in msg.content.iter().enumerate() {
            let masked = match block {
                ContentBlock::Text(t) => match self.masker.mask(t) {
                    Cow::Owned(m) => Some(ContentBlock::Text(m)),
                    Cow::Borrowed(_) => None,
                },
                ContentBlock::Thinking(th) if self.config.mask_thinking => {
                    match self.masker.mask(&th.text) {
                        Cow::Owned(m) => Some(ContentBlock::Thinking(Thinking {
                            text: m,
                            signature: th.signature.clone(),
                        })),
                        Cow::Borrowed(_) => None,
                    }
                }
                ContentBlock::ToolResult(r) => self.mask_result(r).map(ContentBlock::ToolResult),
                _ => None,
            };
            if let Some(m) = masked {
                changed.push((i, m));
            }
        }
        if changed.is_empty() {
            return None;
        }
        let mut out = msg.clone();
        for (i, block) in changed {
            if let Some(slot) = out.content.get_mut(i) {
                *slot = block;
            }
        }
        Some(out)
    }

    fn mask_result(&self, result: &ToolResult) -> Option<ToolResult> {
        let content = json::mask_tool_text(&self.masker, &result.content)?;
        Some(ToolResult {
            content,
            ..result.clone()
        })
    }
}

impl SyncHook for MaskingHook {
    fn name(&self) -> &str {
        "MaskingHook"
    }

    fn priority(&self) -> i32 {
        900
    }

    fn interest(&self) -> Interest {
        if !self.config.enabled || !self.masker.has_rules() {
            return Interest::NONE;
        }
        let base = Interest::only(EventKind::PostCall);
        if self.config.mask_tool_results {
            base.with(EventKind::PostActing)
        } else {
            base
        }
    }

    fn failure_policy(&self) -> FailurePolicy {
        self.config.on_error.policy()
    }

    fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError> {
        match event {
            HookEvent::PostCall(e)
                if e.agent().depth == 0
                    || self.config.subagent_replies == SubagentBoundary::Parent =>
            {
                if let Some(masked) = self.mask_message(e.final_message()) {
                    tracing::info!(
                        target: "rein::masking",
                        agent = %e.agent().name,
                        run_id = e.context().run_id(),
                        "final reply masked"
                    );
                    e.set_final_message(masked);
                }
            }
            HookEvent::PostActing(e) if self.config.mask_tool_results => {
                if let Some(masked) = self.mask_result(e.tool_result()) {
                    tracing::debug!(
                        target: "rein::masking",
                        tool = %e.tool_use().name,
                        "tool result masked"
                    );
                    e.set_tool_result(masked);
                }
            }
            _ => {}
        }
        Ok(())
    }
}
