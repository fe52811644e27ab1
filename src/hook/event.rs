//! Event payloads: one struct per [`EventKind`], each with the mutators its event allows.

use std::sync::{Arc, OnceLock};

use tokio::time::Instant;

use super::decision::{Decision, DecisionKind, TrailMode, digest};
use crate::context::{AgentInfo, RunContext, StopReason};
use crate::error::Error;
use crate::message::{Msg, Role, ToolResult, ToolUse};
use crate::model::{GenerateOptions, Messages, ModelChunk, Usage};

use super::EventKind;

/// A hook's name and priority, as the chain knows them (indexed like its entries).
#[derive(Debug)]
pub(crate) struct HookLabel {
    pub(crate) name: Arc<str>,
    pub(crate) priority: i32,
}

/// What every event of one call shares: built once per call.
#[derive(Debug)]
pub(crate) struct CallInfo {
    pub(crate) agent: Arc<AgentInfo>,
    pub(crate) ctx: RunContext,
    pub(crate) hooks: Arc<[HookLabel]>,
}

/// What every event carries: who is running, in which call, and which hook is being
/// called. Cloning it for an event costs one reference count.
#[derive(Debug)]
pub(crate) struct EventMeta {
    pub(crate) call: Arc<CallInfo>,
    /// Index of the hook currently being called (set by the chain).
    pub(crate) current: Option<u16>,
    /// Whether (and how) decisions are recorded in this call.
    pub(crate) mode: TrailMode,
    /// Decisions made during this dispatch; drained by the loop afterwards.
    pub(crate) trail: Vec<Decision>,
    /// The event's timestamp, read from the clock on first request; reset by the
    /// chain at the start of every dispatch.
    pub(crate) stamp: OnceLock<Instant>,
}

impl Clone for EventMeta {
    /// A header for a new event of the same call: no hook running, no decisions, no
    /// timestamp yet.
    fn clone(&self) -> Self {
        Self {
            call: Arc::clone(&self.call),
            current: None,
            mode: self.mode,
            trail: Vec::new(),
            stamp: OnceLock::new(),
        }
    }
}

impl EventMeta {
    pub(crate) fn new(
        agent: &Arc<AgentInfo>,
        ctx: &RunContext,
        hooks: Arc<[HookLabel]>,
        mode: TrailMode,
    ) -> Self {
        Self {
            call: Arc::new(CallInfo {
                agent: Arc::clone(agent),
                ctx: ctx.clone(),
                hooks,
            }),
            current: None,
            mode,
            trail: Vec::new(),
            stamp: OnceLock::new(),
        }
    }

    /// The event's timestamp (see [`HookEvent::timestamp`]).
    #[inline]
    pub(crate) fn timestamp(&self) -> Instant {
        *self.stamp.get_or_init(Instant::now)
    }

    /// The hook currently being called.
    pub(crate) fn current_hook(&self) -> Option<&HookLabel> {
        self.current
            .and_then(|i| self.call.hooks.get(usize::from(i)))
    }

    /// Whether decisions are recorded (check before computing digests).
    #[inline]
    pub(crate) fn recording(&self) -> bool {
        self.mode.on
    }

    /// Digest of a value for a decision record.
    pub(crate) fn digest<T: serde::Serialize + ?Sized>(&self, value: &T) -> String {
        digest(value, self.mode.reveal)
    }

    /// Records a decision by the current hook.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn note(
        &mut self,
        event: super::EventKind,
        kind: DecisionKind,
        field: &'static str,
        before: String,
        after: String,
        reason: Option<String>,
        tool_call_id: Option<&str>,
    ) {
        let (hook, priority) = match self.current_hook() {
            Some(h) => (h.name.to_string(), h.priority),
            None => ("<runtime>".to_owned(), 0),
        };
        self.trail.push(Decision {
            hook,
            priority,
            event,
            kind,
            field,
            before,
            after,
            reason,
            agent_id: self.call.agent.id.clone(),
            tool_call_id: tool_call_id.map(str::to_owned),
        });
    }
}

macro_rules! meta_accessors {
    ($($ty:ident),* $(,)?) => {$(
        impl $ty {
            /// The agent whose loop fired this event (a subagent's events carry the
            /// child's identity, with `parent_id` and `depth`).
            pub fn agent(&self) -> &AgentInfo {
                &self.meta.call.agent
            }

            /// The run context of the call (ids and typed extensions).
            pub fn context(&self) -> &RunContext {
                &self.meta.call.ctx
            }

            /// See [`HookEvent::timestamp`].
            pub fn timestamp(&self) -> Instant {
                self.meta.timestamp()
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
    pub(crate) system_prompt: Option<String>,
}

impl PreCallEvent {
    /// The call's input messages (not the stored history). Empty when the call resumes
    /// a stopped session.
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
    pub fn system_prompt(&self) -> Option<&str> {
        self.system_prompt.as_deref()
    }

    /// Replaces the system prompt for this call only. It is frozen after `PreCall` and
    /// prepended to every model request of the call; it is never stored in memory.
    pub fn set_system_prompt(&mut self, prompt: Option<String>) {
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

/// Fires before each reasoning model call.
#[derive(Debug)]
#[repr(C)] // `meta` first at one offset in every variant: reaching it is one add.
pub struct PreReasoningEvent {
    pub(crate) meta: EventMeta,
    pub(crate) messages: Messages,
    pub(crate) options: GenerateOptions,
    pub(crate) tool_names: Arc<[String]>,
    pub(crate) iteration: u32,
}

impl PreReasoningEvent {
    /// Exactly the messages the model will receive: the system message first (if any),
    /// then the conversation (shared with memory, not copied).
    pub fn messages(&self) -> &Messages {
        &self.messages
    }

    /// Replaces the messages for this model call only; memory is not changed.
    pub fn set_messages(&mut self, messages: Vec<Msg>) {
        if self.meta.recording() && self.messages != messages {
            let (b, a) = (
                self.meta.digest(&self.messages),
                self.meta.digest(&messages),
            );
            self.meta.note(
                EventKind::PreReasoning,
                DecisionKind::MessagesReplaced,
                "messages",
                b,
                a,
                None,
                None,
            );
        }
        self.messages = messages.into();
    }

    /// The effective options: the agent's defaults, then earlier hooks' changes. Never
    /// empty when the agent has defaults.
    pub fn generate_options(&self) -> &GenerateOptions {
        &self.options
    }

    /// Replaces the effective options; what is set is what the model receives. To
    /// overlay a few fields, merge:
    /// `GenerateOptions::merge(&mine, event.generate_options())`.
    pub fn set_generate_options(&mut self, options: GenerateOptions) {
        if self.meta.recording() && options != self.options {
            let (b, a) = (options_text(&self.options), options_text(&options));
            self.meta.note(
                EventKind::PreReasoning,
                DecisionKind::OptionsSet,
                "generate_options",
                b,
                a,
                None,
                None,
            );
        }
        self.options = options;
    }

    /// Names of the tools offered to the model, in order.
    pub fn tool_names(&self) -> &[String] {
        &self.tool_names
    }

    /// The reasoning iteration, from 0.
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
    pub fn chunk(&self) -> &ModelChunk {
        &self.chunk
    }

    /// The message so far: text and thinking accumulated up to and including this
    /// chunk (tool calls appear once the model turn is complete).
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
    pub fn message(&self) -> &Msg {
        &self.message
    }

    /// Replaces the message that is stored and acted on (its tool uses are what runs).
    /// The role is forced to `Assistant`.
    pub fn set_message(&mut self, mut message: Msg) {
        message.role = Role::Assistant;
        if self.meta.recording() && message != self.message {
            let (b, a) = (self.meta.digest(&self.message), self.meta.digest(&message));
            self.meta.note(
                EventKind::PostReasoning,
                DecisionKind::MessageReplaced,
                "message",
                b,
                a,
                None,
                None,
            );
        }
        self.message = message;
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
    pub fn is_stop_requested(&self) -> bool {
        self.stop
    }

    /// Token usage of this model call.
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// The reasoning iteration, from 0.
    pub fn iteration(&self) -> u32 {
        self.iteration
    }
}

/// Why and by whom a tool call was denied.
#[derive(Clone, Debug)]
pub(crate) struct Denial {
    pub(crate) reason: String,
    pub(crate) hook: Option<Arc<str>>,
}

/// Fires once per tool call, in call order, before any tool of the turn runs.
#[derive(Debug)]
#[repr(C)] // `meta` first at one offset in every variant: reaching it is one add.
pub struct PreActingEvent {
    pub(crate) meta: EventMeta,
    pub(crate) tool_use: ToolUse,
    pub(crate) denial: Option<Denial>,
    /// Set when a hook changed the call (so memory is updated without comparing).
    pub(crate) changed: bool,
    /// The chain entry of the hook that last changed the call in the current pass
    /// (`None` for the runtime or no change): the hooks before it have not seen the
    /// call's final form and run again.
    pub(crate) changed_by: Option<u16>,
    /// The call as admitted, before the first rewrite (set on the first change only).
    pub(crate) original: Option<Box<ToolUse>>,
}

impl PreActingEvent {
    /// A `PreActing` event for a call as admitted.
    pub(crate) fn new(meta: EventMeta, tool_use: ToolUse) -> Self {
        Self {
            meta,
            tool_use,
            denial: None,
            changed: false,
            changed_by: None,
            original: None,
        }
    }

    /// The call as the model asked for it (after the runtime's admission, before any
    /// hook rewrote it). Equal to [`PreActingEvent::tool_use`] while no hook changed
    /// the call.
    pub fn original_tool_use(&self) -> &ToolUse {
        self.original.as_deref().unwrap_or(&self.tool_use)
    }

    /// Whether a hook changed the call's name or arguments.
    pub fn was_rewritten(&self) -> bool {
        self.changed
    }

    /// The tool call as it will run (after earlier hooks' rewrites).
    pub fn tool_use(&self) -> &ToolUse {
        &self.tool_use
    }

    /// Rewrites the call: the new name and input are what runs *and* what memory
    /// records. The id is kept (a changed id is ignored) so the result still pairs.
    /// Ignored, with a warning, once the call was denied.
    pub fn set_tool_use(&mut self, tool_use: ToolUse) {
        if self.denial.is_some() {
            tracing::warn!(
                hook = self.meta.current_hook().map(|h| &*h.name),
                tool = %self.tool_use.name,
                "set_tool_use ignored: the tool call was already denied"
            );
            return;
        }
        if self.meta.recording()
            && (tool_use.name != self.tool_use.name || tool_use.input != self.tool_use.input)
        {
            let b = self
                .meta
                .digest(&(&self.tool_use.name, &self.tool_use.input));
            let a = self.meta.digest(&(&tool_use.name, &tool_use.input));
            let id = self.tool_use.id.clone();
            self.meta.note(
                EventKind::PreActing,
                DecisionKind::ToolInputRewritten,
                "tool_use",
                b,
                a,
                None,
                Some(&id),
            );
        }
        if tool_use.name != self.tool_use.name || tool_use.input != self.tool_use.input {
            if self.original.is_none() {
                self.original = Some(Box::new(self.tool_use.clone()));
            }
            self.changed = true;
            self.changed_by = self.meta.current.or(Some(u16::MAX));
            self.tool_use.name = tool_use.name;
            self.tool_use.input = tool_use.input;
        }
    }

    /// Denies the call: the tool does not run and the model receives an error result
    /// with `reason`. Cannot be undone by a later hook; the first reason is kept.
    pub fn deny(&mut self, reason: impl Into<String>) {
        if self.denial.is_none() {
            let reason = reason.into();
            if self.meta.recording() {
                let id = self.tool_use.id.clone();
                self.meta.note(
                    EventKind::PreActing,
                    DecisionKind::ToolDenied,
                    "denied",
                    "false".into(),
                    "true".into(),
                    Some(reason.clone()),
                    Some(&id),
                );
            }
            self.denial = Some(Denial {
                reason,
                hook: self.meta.current_hook().map(|h| Arc::clone(&h.name)),
            });
        }
    }

    /// Whether the call was denied.
    pub fn is_denied(&self) -> bool {
        self.denial.is_some()
    }

    /// The denial reason, if denied.
    pub fn denial_reason(&self) -> Option<&str> {
        self.denial.as_ref().map(|d| d.reason.as_str())
    }

    /// The name of the hook that denied the call, if denied.
    pub fn denied_by(&self) -> Option<&str> {
        self.denial.as_ref().and_then(|d| d.hook.as_deref())
    }
}

/// Fires for each progress chunk a running tool emits. Read-only; never sent to the
/// model.
#[derive(Debug)]
#[repr(C)] // `meta` first at one offset in every variant: reaching it is one add.
pub struct ActingChunkEvent {
    pub(crate) meta: EventMeta,
    pub(crate) tool_use: ToolUse,
    pub(crate) chunk: String,
}

impl ActingChunkEvent {
    /// The running call.
    pub fn tool_use(&self) -> &ToolUse {
        &self.tool_use
    }

    /// The progress text.
    pub fn chunk(&self) -> &str {
        &self.chunk
    }
}

/// Fires once per tool call, in call order, after the turn's tools ran and before the
/// result is stored.
#[derive(Debug)]
#[repr(C)] // `meta` first at one offset in every variant: reaching it is one add.
pub struct PostActingEvent {
    pub(crate) meta: EventMeta,
    pub(crate) tool_use: ToolUse,
    pub(crate) result: ToolResult,
    pub(crate) denied: bool,
    pub(crate) stop: bool,
}

impl PostActingEvent {
    /// The call that ran (or was denied).
    pub fn tool_use(&self) -> &ToolUse {
        &self.tool_use
    }

    /// The result (after earlier hooks' rewrites).
    pub fn tool_result(&self) -> &ToolResult {
        &self.result
    }

    /// Replaces the result: what is set is what memory records and the model reads. The
    /// id and name are kept so the result still pairs with its call.
    pub fn set_tool_result(&mut self, mut result: ToolResult) {
        result.id.clone_from(&self.result.id);
        result.name.clone_from(&self.result.name);
        if self.meta.recording() && result != self.result {
            let b = self
                .meta
                .digest(&(&self.result.content, self.result.is_error));
            let a = self.meta.digest(&(&result.content, result.is_error));
            let id = self.result.id.clone();
            self.meta.note(
                EventKind::PostActing,
                DecisionKind::ToolResultReplaced,
                "tool_result",
                b,
                a,
                None,
                Some(&id),
            );
        }
        self.result = result;
    }

    /// Whether a `PreActing` hook denied this call (the tool did not run).
    pub fn was_denied(&self) -> bool {
        self.denied
    }

    /// Stop the loop once every result of this turn is stored. Honoured on any event of
    /// the turn, not only the last. The call returns the turn's tool message; a later
    /// call continues with reasoning.
    pub fn stop_agent(&mut self) {
        if self.meta.recording() && !self.stop {
            let id = self.tool_use.id.clone();
            self.meta.note(
                EventKind::PostActing,
                DecisionKind::Stop,
                "stop",
                "false".into(),
                "true".into(),
                None,
                Some(&id),
            );
        }
        self.stop = true;
    }

    /// Whether some hook requested a stop on this event.
    pub fn is_stop_requested(&self) -> bool {
        self.stop
    }
}

/// Fires before the summary model call, when the iteration limit is reached.
#[derive(Debug)]
#[repr(C)] // `meta` first at one offset in every variant: reaching it is one add.
pub struct PreSummaryEvent {
    pub(crate) meta: EventMeta,
    pub(crate) messages: Messages,
    pub(crate) options: GenerateOptions,
    pub(crate) max_iters: u32,
}

impl PreSummaryEvent {
    /// The messages the summary call receives: system message, conversation, and the
    /// summarize instruction.
    pub fn messages(&self) -> &Messages {
        &self.messages
    }

    /// Replaces the summary call's messages (not persisted).
    pub fn set_messages(&mut self, messages: Vec<Msg>) {
        if self.meta.recording() && self.messages != messages {
            let (b, a) = (
                self.meta.digest(&self.messages),
                self.meta.digest(&messages),
            );
            self.meta.note(
                EventKind::PreSummary,
                DecisionKind::MessagesReplaced,
                "messages",
                b,
                a,
                None,
                None,
            );
        }
        self.messages = messages.into();
    }

    /// The effective options for the summary call.
    pub fn generate_options(&self) -> &GenerateOptions {
        &self.options
    }

    /// Replaces the summary call's options.
    pub fn set_generate_options(&mut self, options: GenerateOptions) {
        if self.meta.recording() && options != self.options {
            let (b, a) = (options_text(&self.options), options_text(&options));
            self.meta.note(
                EventKind::PreSummary,
                DecisionKind::OptionsSet,
                "generate_options",
                b,
                a,
                None,
                None,
            );
        }
        self.options = options;
    }

    /// The iteration limit that was reached.
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
    pub fn chunk(&self) -> &ModelChunk {
        &self.chunk
    }

    /// The summary so far.
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
    pub fn message(&self) -> &Msg {
        &self.message
    }

    /// Replaces the summary that is stored and returned. The role is forced to
    /// `Assistant`.
    pub fn set_message(&mut self, mut message: Msg) {
        message.role = Role::Assistant;
        if self.meta.recording() && message != self.message {
            let (b, a) = (self.meta.digest(&self.message), self.meta.digest(&message));
            self.meta.note(
                EventKind::PostSummary,
                DecisionKind::MessageReplaced,
                "message",
                b,
                a,
                None,
                None,
            );
        }
        self.message = message;
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
    pub fn decisions(&self) -> &[Decision] {
        &self.decisions
    }

    /// Why the loop ended.
    pub fn reason(&self) -> StopReason {
        self.reason
    }

    /// Token usage summed over the call's model calls.
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
    pub fn error(&self) -> &Error {
        &self.error
    }

    /// The decisions hooks made during the failed call (empty unless the call records
    /// decisions: see [`crate::observe`]).
    pub fn decisions(&self) -> &[Decision] {
        &self.decisions
    }
}

/// Options shown in full in decision records: they hold no user data.
fn options_text(o: &GenerateOptions) -> String {
    serde_json::to_string(o).unwrap_or_default()
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
        }
    }

    /// The agent whose loop fired the event.
    pub fn agent(&self) -> &AgentInfo {
        each_event!(self, e => &e.meta.call.agent)
    }

    /// The run context of the call.
    pub fn context(&self) -> &RunContext {
        each_event!(self, e => &e.meta.call.ctx)
    }

    /// When this event happened, on tokio's clock (so paused test time applies): read
    /// from the clock the first time any hook asks during a dispatch of the event, and
    /// the same value for every later hook of that dispatch. Hooks that time segments
    /// (latency, audit durations) use it so that they agree with each other and an
    /// event costs at most one clock read, however many hooks look at it. A chunk
    /// event is re-stamped for each chunk.
    pub fn timestamp(&self) -> Instant {
        each_event!(self, e => e.meta.timestamp())
    }

    pub(crate) fn meta_mut(&mut self) -> &mut EventMeta {
        each_event!(self, e => &mut e.meta)
    }
}
