//! The call-level events (`PreCall`, summary, `PostCall`, `Error`) and [`HookEvent`],
//! the enum hooks receive. The reasoning and acting payloads live beside this file.

use std::sync::Arc;

use tokio::time::Instant;

use super::decision::{Decision, DecisionKind};
use crate::context::{AgentInfo, RunContext, StopReason};
use crate::error::Error;
use crate::message::{Msg, Role};
use crate::model::{GenerateOptions, Messages, ModelChunk, Usage};

use super::EventKind;
use super::acting::{ActingChunkEvent, PostActingEvent, PreActingEvent};
use super::meta::EventMeta;
use super::reasoning::{PostReasoningEvent, PreReasoningEvent, ReasoningChunkEvent};
use super::state::CallState;

macro_rules! meta_accessors {
    ($($ty:ident),* $(,)?) => {$(
        impl $ty {
            /// The agent whose loop fired this event (a subagent's events carry the
            /// child's identity, with `parent_id` and `depth`).
            #[inline]
            pub fn agent(&self) -> &AgentInfo {
                &self.meta.call.agent
            }

            /// The run context of the call (ids and typed extensions).
            #[inline]
            pub fn context(&self) -> &RunContext {
                &self.meta.call.ctx
            }

            /// See [`HookEvent::timestamp`].
            #[inline]
            pub fn timestamp(&self) -> Instant {
                self.meta.timestamp()
            }

            /// See [`HookEvent::state`].
            #[inline]
            pub fn state(&self) -> CallState<'_> {
                CallState::of(&self.meta)
            }

            /// See [`HookEvent::records_content`].
            #[inline]
            pub fn records_content(&self) -> bool {
                self.meta.mode.reveal
            }
        }
    )*};
}

meta_accessors!(
    PreCallEvent,
    PreReasoningEvent,
    ReasoningChunkEvent,
    PostReasoningEvent,
    PreActingEvent,
    ActingChunkEvent,
    PostActingEvent,
    PreSummaryEvent,
    SummaryChunkEvent,
    PostSummaryEvent,
    PostCallEvent,
    ErrorEvent,
);

/// Fires once per call, before anything else.
#[derive(Debug)]
#[repr(C)] // `meta` first at one offset in every variant: reaching it is one add.
pub struct PreCallEvent {
    pub(crate) meta: EventMeta,
    pub(crate) messages: Vec<Msg>,
    /// Shared with the agent (a reference count, not a copy, per call).
    pub(crate) system_prompt: Option<Arc<str>>,
}

impl PreCallEvent {
    /// The call's input messages (not the stored history). Empty when the call resumes
    /// a stopped session.
    #[inline]
    pub fn messages(&self) -> &[Msg] {
        &self.messages
    }

    /// Replaces the call's input messages: what is set is what the conversation records
    /// and the model sees. System-role messages are rejected at this point with an
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) error: use
    /// [`PreCallEvent::set_system_prompt`] instead.
    pub fn set_messages(&mut self, messages: Vec<Msg>) {
        if self.meta.recording() && messages != self.messages {
            let (b, a) = (
                self.meta.digest(&self.messages),
                self.meta.digest(&messages),
            );
            self.meta.note(
                EventKind::PreCall,
                DecisionKind::MessagesReplaced,
                "messages",
                b,
                a,
                None,
                None,
            );
        }
        self.messages = messages;
    }

    /// The system prompt for this call (the agent's, unless a hook changed it).
    #[inline]
    pub fn system_prompt(&self) -> Option<&str> {
        self.system_prompt.as_deref()
    }

    /// Replaces the system prompt for this call only. It is frozen after `PreCall` and
    /// prepended to every model request of the call; it is never stored in memory.
    pub fn set_system_prompt(&mut self, prompt: Option<String>) {
        let prompt: Option<Arc<str>> = prompt.map(Arc::from);
        if self.meta.recording() && prompt != self.system_prompt {
            let (b, a) = (
                self.meta.digest(&self.system_prompt),
                self.meta.digest(&prompt),
            );
            self.meta.note(
                EventKind::PreCall,
                DecisionKind::SystemPromptReplaced,
                "system_prompt",
                b,
                a,
                None,
                None,
            );
        }
        self.system_prompt = prompt;
    }
}

/// Fires before the summary model call, when the iteration limit is reached.
#[derive(Debug)]
#[repr(C)] // `meta` first at one offset in every variant: reaching it is one add.
pub struct PreSummaryEvent {
    pub(crate) meta: EventMeta,
    pub(crate) messages: Messages,
    /// Boxed, as in [`PreReasoningEvent`](super::PreReasoningEvent).
    pub(crate) options: Box<GenerateOptions>,
    pub(crate) max_iters: u32,
}

impl PreSummaryEvent {
    /// The messages the summary call receives: system message, conversation, and the
    /// summarize instruction.
    #[inline]
    pub fn messages(&self) -> &Messages {
        &self.messages
    }

    /// Replaces the summary call's messages (not persisted).
    pub fn set_messages(&mut self, messages: Vec<Msg>) {
        self.meta
            .replace_messages(EventKind::PreSummary, &mut self.messages, messages);
    }

    /// The effective options for the summary call.
    #[inline]
    pub fn generate_options(&self) -> &GenerateOptions {
        &self.options
    }

    /// Replaces the summary call's options.
    pub fn set_generate_options(&mut self, options: GenerateOptions) {
        self.meta
            .replace_options(EventKind::PreSummary, &mut self.options, options);
    }

    /// The iteration limit that was reached.
    #[inline]
    pub fn max_iters(&self) -> u32 {
        self.max_iters
    }
}

/// Fires for each chunk the model streams during the summary. Read-only.
#[derive(Debug)]
#[repr(C)] // `meta` first at one offset in every variant: reaching it is one add.
pub struct SummaryChunkEvent {
    pub(crate) meta: EventMeta,
    pub(crate) chunk: ModelChunk,
    pub(crate) accumulated: Msg,
}

impl SummaryChunkEvent {
    /// The chunk just received.
    #[inline]
    pub fn chunk(&self) -> &ModelChunk {
        &self.chunk
    }

    /// The summary so far.
    #[inline]
    pub fn accumulated(&self) -> &Msg {
        &self.accumulated
    }
}

/// Fires after the summary model call, before the summary is stored and returned.
#[derive(Debug)]
#[repr(C)] // `meta` first at one offset in every variant: reaching it is one add.
pub struct PostSummaryEvent {
    pub(crate) meta: EventMeta,
    pub(crate) message: Msg,
}

impl PostSummaryEvent {
    /// The summary message.
    #[inline]
    pub fn message(&self) -> &Msg {
        &self.message
    }

    /// Replaces the summary that is stored and returned. The role is forced to
    /// `Assistant`.
    pub fn set_message(&mut self, mut message: Msg) {
        message.role = Role::Assistant;
        self.meta
            .replace_message(EventKind::PostSummary, &mut self.message, message);
    }
}

/// Fires before the oldest turns of the conversation are summarized to make a request
/// fit the context window ([`ContextPolicy::Compact`](crate::agent::ContextPolicy::Compact)).
/// A hook may change what is summarized, or veto the compaction (the call then fails
/// with [`ErrorKind::ContextWindow`](crate::ErrorKind::ContextWindow): nothing is left
/// out silently).
#[derive(Debug)]
#[repr(C)] // `meta` first at one offset in every variant: reaching it is one add.
pub struct PreCompactEvent {
    pub(crate) meta: EventMeta,
    pub(crate) messages: Messages,
    pub(crate) veto: Option<String>,
}

impl PreCompactEvent {
    /// The turns to summarize (whole turns, tool calls with their results; pinned
    /// messages are not among them: they are kept as they are).
    #[inline]
    pub fn messages(&self) -> &Messages {
        &self.messages
    }

    /// Replaces what the summary call summarizes (the turns are replaced by the summary
    /// all the same), e.g. with personal data masked.
    pub fn set_messages(&mut self, messages: Vec<Msg>) {
        self.meta
            .replace_messages(EventKind::PreCompact, &mut self.messages, messages);
    }

    /// Refuses the compaction; the call fails with a context-window error naming the
    /// reason.
    pub fn veto(&mut self, reason: impl Into<String>) {
        let reason = reason.into();
        self.meta.note(
            EventKind::PreCompact,
            DecisionKind::Stop,
            "compaction",
            String::new(),
            String::new(),
            Some(reason.clone()),
            None,
        );
        self.veto = Some(reason);
    }

    /// The veto's reason, when some hook vetoed.
    #[inline]
    pub fn vetoed(&self) -> Option<&str> {
        self.veto.as_deref()
    }
}

/// Fires after the summary model call of a compaction, before the summary replaces the
/// compacted turns in the stored conversation.
#[derive(Debug)]
#[repr(C)] // `meta` first at one offset in every variant: reaching it is one add.
pub struct PostCompactEvent {
    pub(crate) meta: EventMeta,
    pub(crate) message: Msg,
    pub(crate) compacted: usize,
}

impl PostCompactEvent {
    /// The summary, as the user message that will stand for the compacted turns.
    #[inline]
    pub fn message(&self) -> &Msg {
        &self.message
    }

    /// Replaces the summary that is stored (the role is forced to `User`).
    pub fn set_message(&mut self, mut message: Msg) {
        message.role = Role::User;
        self.meta
            .replace_message(EventKind::PostCompact, &mut self.message, message);
    }

    /// How many stored messages the summary replaces.
    #[inline]
    pub fn compacted(&self) -> usize {
        self.compacted
    }
}

/// Fires once per successful call, after the reply is final and stored.
#[derive(Debug)]
#[repr(C)] // `meta` first at one offset in every variant: reaching it is one add.
pub struct PostCallEvent {
    pub(crate) meta: EventMeta,
    pub(crate) message: Msg,
    pub(crate) reason: StopReason,
    pub(crate) usage: Usage,
    pub(crate) decisions: Vec<Decision>,
}

impl PostCallEvent {
    /// The reply the caller will get.
    #[inline]
    pub fn final_message(&self) -> &Msg {
        &self.message
    }

    /// Replaces the reply the caller gets. The stored conversation keeps the original
    /// (memory records what the model said; the caller sees the governed reply).
    pub fn set_final_message(&mut self, message: Msg) {
        if self.meta.recording() && message != self.message {
            let (b, a) = (self.meta.digest(&self.message), self.meta.digest(&message));
            self.meta.note(
                EventKind::PostCall,
                DecisionKind::FinalMessageReplaced,
                "final_message",
                b,
                a,
                None,
                None,
            );
        }
        self.message = message;
    }

    /// The decisions hooks made during this call so far (empty unless the call
    /// records decisions: see [`crate::observe`]).
    #[inline]
    pub fn decisions(&self) -> &[Decision] {
        &self.decisions
    }

    /// Why the loop ended.
    #[inline]
    pub fn reason(&self) -> StopReason {
        self.reason
    }

    /// Token usage summed over the call's model calls.
    #[inline]
    pub fn usage(&self) -> Usage {
        self.usage
    }
}

/// Fires when the call fails, before the error is returned. Read-only.
#[derive(Debug)]
#[repr(C)] // `meta` first at one offset in every variant: reaching it is one add.
pub struct ErrorEvent {
    pub(crate) meta: EventMeta,
    pub(crate) error: Error,
    pub(crate) decisions: Vec<Decision>,
}

impl ErrorEvent {
    /// The error the caller will get.
    #[inline]
    pub fn error(&self) -> &Error {
        &self.error
    }

    /// The decisions hooks made during the failed call (empty unless the call records
    /// decisions: see [`crate::observe`]).
    #[inline]
    pub fn decisions(&self) -> &[Decision] {
        &self.decisions
    }
}

/// One lifecycle event, as hooks receive it. Match on it to reach the payload's
/// mutators.
#[derive(Debug)]
#[non_exhaustive]
// Tag, then every payload at the same offset (with `meta` first in each): the header
// the chain touches per hook is reached without a branch on the variant.
#[repr(u8)]
pub enum HookEvent {
    /// See [`PreCallEvent`].
    PreCall(PreCallEvent),
    /// See [`PreReasoningEvent`].
    PreReasoning(PreReasoningEvent),
    /// See [`ReasoningChunkEvent`].
    ReasoningChunk(ReasoningChunkEvent),
    /// See [`PostReasoningEvent`].
    PostReasoning(PostReasoningEvent),
    /// See [`PreActingEvent`].
    PreActing(PreActingEvent),
    /// See [`ActingChunkEvent`].
    ActingChunk(ActingChunkEvent),
    /// See [`PostActingEvent`].
    PostActing(PostActingEvent),
    /// See [`PreSummaryEvent`].
    PreSummary(PreSummaryEvent),
    /// See [`SummaryChunkEvent`].
    SummaryChunk(SummaryChunkEvent),
    /// See [`PostSummaryEvent`].
    PostSummary(PostSummaryEvent),
    /// See [`PostCallEvent`].
    PostCall(PostCallEvent),
    /// See [`ErrorEvent`].
    Error(ErrorEvent),
    /// See [`PreCompactEvent`].
    PreCompact(PreCompactEvent),
    /// See [`PostCompactEvent`].
    PostCompact(PostCompactEvent),
}

macro_rules! each_event {
    ($self:expr, $e:ident => $body:expr) => {
        match $self {
            HookEvent::PreCall($e) => $body,
            HookEvent::PreReasoning($e) => $body,
            HookEvent::ReasoningChunk($e) => $body,
            HookEvent::PostReasoning($e) => $body,
            HookEvent::PreActing($e) => $body,
            HookEvent::ActingChunk($e) => $body,
            HookEvent::PostActing($e) => $body,
            HookEvent::PreSummary($e) => $body,
            HookEvent::SummaryChunk($e) => $body,
            HookEvent::PostSummary($e) => $body,
            HookEvent::PostCall($e) => $body,
            HookEvent::Error($e) => $body,
            HookEvent::PreCompact($e) => $body,
            HookEvent::PostCompact($e) => $body,
        }
    };
}

impl HookEvent {
    /// The event's kind.
    pub fn kind(&self) -> EventKind {
        match self {
            HookEvent::PreCall(_) => EventKind::PreCall,
            HookEvent::PreReasoning(_) => EventKind::PreReasoning,
            HookEvent::ReasoningChunk(_) => EventKind::ReasoningChunk,
            HookEvent::PostReasoning(_) => EventKind::PostReasoning,
            HookEvent::PreActing(_) => EventKind::PreActing,
            HookEvent::ActingChunk(_) => EventKind::ActingChunk,
            HookEvent::PostActing(_) => EventKind::PostActing,
            HookEvent::PreSummary(_) => EventKind::PreSummary,
            HookEvent::SummaryChunk(_) => EventKind::SummaryChunk,
            HookEvent::PostSummary(_) => EventKind::PostSummary,
            HookEvent::PostCall(_) => EventKind::PostCall,
            HookEvent::Error(_) => EventKind::Error,
            HookEvent::PreCompact(_) => EventKind::PreCompact,
            HookEvent::PostCompact(_) => EventKind::PostCompact,
        }
    }

    /// The agent whose loop fired the event.
    #[inline]
    pub fn agent(&self) -> &AgentInfo {
        each_event!(self, e => &e.meta.call.agent)
    }

    /// The run context of the call.
    #[inline]
    pub fn context(&self) -> &RunContext {
        each_event!(self, e => &e.meta.call.ctx)
    }

    /// When this event happened, on tokio's clock (so paused test time applies): read
    /// from the clock the first time any hook asks during a dispatch of the event, and
    /// the same value for every later hook of that dispatch. Hooks that time segments
    /// (latency, audit durations) use it so that they agree with each other and an
    /// event costs at most one clock read, however many hooks look at it. A chunk
    /// event is re-stamped for each chunk.
    #[inline]
    pub fn timestamp(&self) -> Instant {
        each_event!(self, e => e.meta.timestamp())
    }

    /// The per-call state of the hooks of this call (see [`CallState`]): where a hook
    /// keeps what it remembers between the events of one call.
    #[inline]
    pub fn state(&self) -> CallState<'_> {
        CallState::of(self.meta())
    }

    /// Whether the agent records content in the clear
    /// ([`AgentBuilder::record_content`](crate::AgentBuilder::record_content)): decisions
    /// then carry readable values instead of digests, and a hook that logs values may
    /// log them readable too. Off by default.
    #[inline]
    pub fn records_content(&self) -> bool {
        self.meta().mode.reveal
    }

    pub(crate) fn meta(&self) -> &EventMeta {
        each_event!(self, e => &e.meta)
    }

    pub(crate) fn meta_mut(&mut self) -> &mut EventMeta {
        each_event!(self, e => &mut e.meta)
    }
}
