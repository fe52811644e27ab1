//! The reasoning events: before, during and after each model call of the loop.

use std::sync::Arc;

use super::decision::DecisionKind;
use crate::message::{Msg, Role};
use crate::model::{GenerateOptions, Messages, ModelChunk, Usage};

use super::EventKind;
use super::meta::EventMeta;

/// Fires before each reasoning model call.
#[derive(Debug)]
#[repr(C)] // `meta` first at one offset in every variant: reaching it is one add.
pub struct PreReasoningEvent {
    pub(crate) meta: EventMeta,
    pub(crate) messages: Messages,
    /// Boxed: the options are the largest payload of any event, and an event
    /// dispatched to `async fn` hooks moves with the call's future while they run; one
    /// allocation is cheaper than those moves.
    pub(crate) options: Box<GenerateOptions>,
    pub(crate) tool_names: Arc<[String]>,
    pub(crate) iteration: u32,
}

impl PreReasoningEvent {
    /// Exactly the messages the model will receive: the system message first (if any),
    /// then the conversation (shared with memory, not copied).
    #[inline]
    pub fn messages(&self) -> &Messages {
        &self.messages
    }

    /// Replaces the messages for this model call only; memory is not changed.
    pub fn set_messages(&mut self, messages: Vec<Msg>) {
        self.meta
            .replace_messages(EventKind::PreReasoning, &mut self.messages, messages);
    }

    /// The effective options: the agent's defaults, then earlier hooks' changes. Never
    /// empty when the agent has defaults.
    #[inline]
    pub fn generate_options(&self) -> &GenerateOptions {
        &self.options
    }

    /// Replaces the effective options; what is set is what the model receives. To
    /// overlay a few fields, merge:
    /// `GenerateOptions::merge(&mine, event.generate_options())`.
    pub fn set_generate_options(&mut self, options: GenerateOptions) {
        self.meta
            .replace_options(EventKind::PreReasoning, &mut self.options, options);
    }

    /// Names of the tools offered to the model, in order.
    #[inline]
    pub fn tool_names(&self) -> &[String] {
        &self.tool_names
    }

    /// The reasoning iteration, from 0.
    #[inline]
    pub fn iteration(&self) -> u32 {
        self.iteration
    }
}

/// Fires for each chunk the model streams during reasoning. Read-only.
#[derive(Debug)]
#[repr(C)] // `meta` first at one offset in every variant: reaching it is one add.
pub struct ReasoningChunkEvent {
    pub(crate) meta: EventMeta,
    pub(crate) chunk: ModelChunk,
    pub(crate) accumulated: Msg,
}

impl ReasoningChunkEvent {
    /// The chunk just received.
    #[inline]
    pub fn chunk(&self) -> &ModelChunk {
        &self.chunk
    }

    /// The message so far: text and thinking accumulated up to and including this
    /// chunk (tool calls appear once the model turn is complete).
    #[inline]
    pub fn accumulated(&self) -> &Msg {
        &self.accumulated
    }
}

/// Fires after each reasoning model call, before the message is stored.
#[derive(Debug)]
#[repr(C)] // `meta` first at one offset in every variant: reaching it is one add.
pub struct PostReasoningEvent {
    pub(crate) meta: EventMeta,
    pub(crate) message: Msg,
    pub(crate) goto: Option<Vec<Msg>>,
    /// The redo withdraws the turn (see [`PostReasoningEvent::retract_and_redo`]).
    pub(crate) retract: bool,
    pub(crate) stop: bool,
    pub(crate) usage: Usage,
    pub(crate) iteration: u32,
}

impl PostReasoningEvent {
    /// The model's message (as rewritten by earlier hooks).
    #[inline]
    pub fn message(&self) -> &Msg {
        &self.message
    }

    /// Replaces the message that is stored and acted on (its tool uses are what runs).
    /// The role is forced to `Assistant`.
    pub fn set_message(&mut self, mut message: Msg) {
        message.role = Role::Assistant;
        self.meta
            .replace_message(EventKind::PostReasoning, &mut self.message, message);
    }

    /// Redo reasoning: the message is stored, then `messages` (typically a correction
    /// hint), then the model is called again. Tool uses in the message that `messages`
    /// supplies no result for get a synthetic error result ("not executed: reasoning was
    /// redone"), so memory stays valid. Consecutive redos are bounded by the agent's
    /// `max_gotos` (default 3); exceeding it fails the call with
    /// [`ErrorKind::GotoLimit`](crate::ErrorKind::GotoLimit). A later call replaces an
    /// earlier one's messages. [`PostReasoningEvent::stop_agent`] takes precedence.
    pub fn goto_reasoning(&mut self, messages: Vec<Msg>) {
        if self.meta.recording() {
            let b = self.meta.digest(&self.goto);
            let a = self.meta.digest(&messages);
            self.meta.note(
                EventKind::PostReasoning,
                DecisionKind::Goto,
                "goto",
                b,
                a,
                None,
                None,
            );
        }
        self.goto = Some(messages);
        self.retract = false;
    }

    /// Redo reasoning and withdraw this turn: as [`goto_reasoning`](Self::goto_reasoning),
    /// except that neither the message nor `messages` is stored. They are sent after the
    /// conversation, in that order, in this call's re-ask requests only, until a turn is
    /// accepted; memory keeps only what the user finally got. Use a user-role message
    /// for the correction: the re-ask request then ends with it, not with the withdrawn
    /// reply (Anthropic reads a request that ends with an assistant turn as a prefill to
    /// continue, and providers hoist system messages into the system prompt). The
    /// message's tool uses get the same synthetic results as with `goto_reasoning`,
    /// inside the withdrawn part. Bounded by `max_gotos` like `goto_reasoning`; a later
    /// `goto_reasoning` replaces it (the turn is then stored).
    pub fn retract_and_redo(&mut self, messages: Vec<Msg>) {
        self.goto_reasoning(messages);
        self.retract = true;
    }

    /// The messages of a pending redo, if one was requested.
    #[inline]
    pub fn goto_requested(&self) -> Option<&[Msg]> {
        self.goto.as_deref()
    }

    /// Stop the loop after storing the message: the call returns it with its tool uses
    /// pending; a later call on the same session with no new messages runs them and
    /// continues. Cannot be undone by a later hook.
    pub fn stop_agent(&mut self) {
        if self.meta.recording() && !self.stop {
            self.meta.note(
                EventKind::PostReasoning,
                DecisionKind::Stop,
                "stop",
                "false".into(),
                "true".into(),
                None,
                None,
            );
        }
        self.stop = true;
    }

    /// Whether some hook requested a stop.
    #[inline]
    pub fn is_stop_requested(&self) -> bool {
        self.stop
    }

    /// Token usage of this model call.
    #[inline]
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// The reasoning iteration, from 0.
    #[inline]
    pub fn iteration(&self) -> u32 {
        self.iteration
    }
}
