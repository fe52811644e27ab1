//! Streaming a call to a caller (e.g. a UI).

use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use futures::future::BoxFuture;
use tokio::sync::mpsc::UnboundedReceiver;

use super::CallOutcome;
use crate::error::Error;
use crate::message::{ToolResult, ToolUse};

/// What a streaming caller sees of a call, in order.
///
/// Deltas are provisional: when a hook redoes reasoning (`goto_reasoning`),
/// [`AgentEvent::ReasoningRedone`] follows the discarded turn's deltas. The governed
/// reply (after `PostCall` hooks) is in [`AgentEvent::Final`].
#[derive(Debug)]
#[non_exhaustive]
// `Final` is sent once per call; boxing it would break users' `Final(outcome)` patterns.
#[allow(clippy::large_enum_variant)]
pub enum AgentEvent {
    /// A text delta from the model (reasoning or summary).
    TextDelta(String),
    /// A thinking delta from the model.
    ThinkingDelta(String),
    /// The model started a tool call.
    ToolCallStart {
        /// The call id (empty if the provider sends it later).
        id: String,
        /// The tool name.
        name: String,
    },
    /// A tool call is about to run (after `PreActing` rewrites), or was denied.
    ToolCall(ToolUse),
    /// A running tool emitted progress.
    ToolProgress {
        /// The call id.
        id: String,
        /// The progress text.
        text: String,
    },
    /// A tool result as recorded (after `PostActing` rewrites).
    ToolResult(ToolResult),
    /// A hook redid reasoning, or the model's turn was empty (blank text or thinking
    /// only) and the loop asks again: the deltas of the last model turn were not the
    /// answer.
    ReasoningRedone,
    /// An event of a subagent, tagged with its agent path from the top-level agent
    /// (e.g. `"support/log-analyst"`). Nested subagents' events carry their full path.
    Subagent {
        /// Agent names from the top-level agent down to the subagent, `/`-separated.
        path: String,
        /// The subagent's event.
        event: Box<AgentEvent>,
    },
    /// A newer call on the session stopped this one at a safe point
    /// ([`DoubleText`](super::DoubleText)): `reason` is
    /// [`StopReason::Interrupted`](super::StopReason::Interrupted) or [`StopReason::RolledBack`](super::StopReason::RolledBack); `kept_effects` names
    /// the tool calls (`` `name` (id) ``) a rollback could not undo. `Final` follows.
    Superseded {
        /// Why the call stopped.
        reason: super::StopReason,
        /// The tool calls with an effect a rollback kept (empty for an interrupt).
        kept_effects: Vec<String>,
    },
    /// A budget ran out and the call stops
    /// ([`StopReason::BudgetExhausted`](super::StopReason::BudgetExhausted)): which
    /// budget, its limit and what was used. Sent before the call's `PostCall`; `Final`
    /// follows. (A tool call refused by a tool-call budget is not a stop: the model
    /// reads its error result in [`AgentEvent::ToolResult`].)
    BudgetExhausted(crate::budget::BudgetExhausted),
    /// The call finished; the last item of a successful stream.
    Final(CallOutcome),
    /// The call failed; the last item of a failed stream.
    Error(Error),
}

/// When a streaming caller sees a model turn's text (set with
/// [`AgentBuilder::stream_release`](crate::AgentBuilder::stream_release)).
///
/// A `PostReasoning` hook may reject a turn the model already streamed (the
/// self-correction hook redoes a reply that promises a refund; a masking hook rewrites
/// it). What the UI was shown of that turn depends on this setting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum StreamRelease {
    /// Deltas are sent as the model produces them (default: lowest latency). A turn the
    /// post-hooks reject was already shown; [`AgentEvent::ReasoningRedone`] tells the
    /// UI to withdraw it, and a rewrite by a `PostReasoning` hook shows only in
    /// [`AgentEvent::Final`].
    #[default]
    Immediate,
    /// A turn's text, thinking and tool-call starts are held until the `PostReasoning`
    /// (or `PostSummary`) hooks accepted it, then sent once, as the hooks left them (one
    /// delta per content block). A rejected turn is never shown (no
    /// `ReasoningRedone` is sent): a withdrawn promise never reaches the screen. The
    /// caller sees each turn only when its model call has finished.
    AfterAcceptance,
}

/// The stream returned by [`Agent::stream`](crate::Agent::stream).
///
/// The call runs as the stream is polled; dropping the stream cancels the call (memory
/// stays valid, as for a dropped `call` future).
pub struct AgentStream {
    call: Option<BoxFuture<'static, Result<CallOutcome, Error>>>,
    rx: UnboundedReceiver<AgentEvent>,
    last: Option<AgentEvent>,
    /// A stream that wraps another one (a stream filter's output): yields its items.
    wrapped: Option<Pin<Box<dyn Stream<Item = AgentEvent> + Send>>>,
}

impl AgentStream {
    pub(crate) fn new(
        call: BoxFuture<'static, Result<CallOutcome, Error>>,
        rx: UnboundedReceiver<AgentEvent>,
    ) -> Self {
        Self {
            call: Some(call),
            rx,
            last: None,
            wrapped: None,
        }
    }

    /// An agent stream that yields what `stream` yields: how a stream filter
    /// ([`AgentBuilder::stream_filter`](super::AgentBuilder::stream_filter)) hands back
    /// the stream it wrapped (e.g. a masked one). Dropping it drops `stream`, and so the
    /// call inside it.
    pub fn from_stream(stream: impl Stream<Item = AgentEvent> + Send + 'static) -> Self {
        let (_tx, rx) = tokio::sync::mpsc::unbounded_channel();
        Self {
            call: None,
            rx,
            last: None,
            wrapped: Some(Box::pin(stream)),
        }
    }
}

impl std::fmt::Debug for AgentStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentStream")
            .field("running", &self.call.is_some())
            .finish_non_exhaustive()
    }
}

impl Stream for AgentStream {
    type Item = AgentEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<AgentEvent>> {
        let this = &mut *self;
        if let Some(inner) = this.wrapped.as_mut() {
            return inner.as_mut().poll_next(cx);
        }
        loop {
            let Some(call) = this.call.as_mut() else {
                // The call is over: every event it sent is already in the channel.
                // `try_recv` rather than `poll_recv`, which may answer `Pending` for a
                // non-empty channel when the task's cooperative budget is spent.
                return Poll::Ready(match this.rx.try_recv() {
                    Ok(event) => Some(event),
                    Err(_) => this.last.take(),
                });
            };
            if let Poll::Ready(Some(event)) = this.rx.poll_recv(cx) {
                return Poll::Ready(Some(event));
            }
            match call.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(result) => {
                    this.call = None;
                    // A success's `Final` item was sent through the channel; an error
                    // is delivered here, after everything the call emitted.
                    if let Err(e) = result {
                        this.last = Some(AgentEvent::Error(e));
                    }
                }
            }
        }
    }
}
