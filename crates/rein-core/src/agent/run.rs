//! The ReAct loop: the only place events are constructed and dispatched.

use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::mpsc::UnboundedSender as EventSender;

use super::acting::Acted;
use super::fire::fire;
use super::memory::CallMemory;
use super::model_turn::Phase;
use super::stream::AgentEvent;
use super::typed::{Output, OutputMode};
use super::{AgentInner, CallOutcome, RunContext, StopReason};
use crate::error::Error;
use crate::hook::{Decision, TrailMode};
use crate::hook::{
    ErrorEvent, EventKind, EventMeta, HookEvent, PostCallEvent, PostReasoningEvent, PreCallEvent,
    PreReasoningEvent,
};
use crate::message::{ContentBlock, Msg, Role, ToolUse};
use crate::model::{GenerateOptions, Messages, ModelRequest, Usage};
use crate::store::SessionKey;
use tracing::Instrument;
use tracing::field::Empty;

/// The re-ask after an empty model turn (neither visible text nor tool calls): a
/// user-role message (marked synthetic) sent after the conversation in the next reasoning
/// request only, never stored — the empty turn is not stored either, so memory holds
/// only what the model actually said. Small models misread a reminder about "your
/// previous response" when that response is not in front of them, and read "my last
/// message" as the nudge itself, so the wording points at the question and the tool
/// results already in the conversation (on Qwen2.5-Coder-1.5B this wording got the answer
/// where both others got "I am unable to assist").
pub(super) const EMPTY_NUDGE: &str =
    "Please answer my question above, using the tool results you already have.";

/// Result text for pending tool uses superseded by new input.
pub(super) const SUPERSEDED: &str =
    "not executed: the conversation continued with new input before this tool ran";

pub(super) type Sink = EventSender<AgentEvent>;

pub(super) fn emit(sink: Option<&Sink>, event: impl FnOnce() -> AgentEvent) {
    if let Some(tx) = sink {
        // A dropped receiver means nobody reads the stream any more; the call itself
        // is dropped with it, so there is nothing else to do.
        let _ = tx.send(event());
    }
}

/// One call in progress.
pub(super) struct Call<'a> {
    pub(super) agent: &'a AgentInner,
    pub(super) meta: EventMeta,
    pub(super) ctx: &'a RunContext,
    /// The call's session.
    pub(super) key: &'a SessionKey,
    pub(super) sink: Option<&'a Sink>,
    pub(super) system: Option<Arc<Msg>>,
    /// Usage summed over the call's model turns.
    pub(super) usage: Usage,
    /// Usage of the last model turn.
    pub(super) last_usage: Usage,
    /// Model turns so far.
    pub(super) model_calls: u32,
    /// Decisions recorded so far (only touched when the call records).
    pub(super) trail: Mutex<Vec<Decision>>,
    /// Withdrawn turns and their corrections ([`PostReasoningEvent::retract_and_redo`]),
    /// and the re-ask after an empty turn ([`EMPTY_NUDGE`]): sent after the conversation
    /// until a turn is accepted, never stored.
    pub(super) retracted: Vec<Msg>,
    /// The call's structured output ([`Agent::run_typed`](crate::Agent::run_typed)): its
    /// format and how it is asked for (see [`OutputMode`](super::OutputMode)).
    pub(super) output: Option<Output<'a>>,
    /// The budgets the call draws from ([`crate::budget`]); `None` without any.
    pub(super) ledgers: Option<super::budgets::Ledgers>,
    /// The budget that refused the next spending, for the stop that follows.
    pub(super) exhausted: Option<Box<crate::budget::BudgetExhausted>>,
    /// The model's count of the prompt tokens of the request the window check just
    /// passed, taken by the budget check of the same request (one count, not two).
    pub(super) counted: Option<u64>,
    /// The label of the last model turn: the join of the session's labels when it was
    /// sent ([`crate::label`]); the turn's message and its tool calls carry it.
    pub(super) label: crate::label::Label,
}

impl AgentInner {
    /// Runs one call inside its `invoke_agent` span.
    pub(crate) async fn run_call(
        &self,
        input: Vec<Msg>,
        ctx: RunContext,
        sink: Option<Sink>,
        output: Option<Output<'_>>,
    ) -> Result<CallOutcome, Error> {
        // Held until the call ends (or its future is dropped).
        let (ctx, _active) = ctx.begin_run();
        let span = tracing::info_span!(
            "invoke_agent",
            otel.name = Empty,
            gen_ai.operation.name = "invoke_agent",
            gen_ai.provider.name = self.model.provider(),
            gen_ai.request.model = self.model.name(),
            gen_ai.agent.id = %self.info.id,
            gen_ai.agent.name = %self.info.name,
            rein.agent.parent_id = Empty,
            rein.agent.depth = self.info.depth,
            rein.session.id = %ctx.session_id(),
            rein.run.id = %ctx.run_id(),
            gen_ai.usage.input_tokens = Empty,
            gen_ai.usage.output_tokens = Empty,
            rein.budget.model_calls = Empty,
            rein.budget.tool_calls = Empty,
            rein.budget.cost = Empty,
            rein.stop_reason = Empty,
            error.type = Empty,
        );
        if !span.is_disabled() {
            span.record("otel.name", format!("invoke_agent {}", self.info.name));
            if let Some(parent) = &self.info.parent_id {
                span.record("rein.agent.parent_id", parent.as_str());
            }
        }
        // Boxed once: the loop's state machine is several KB, and every future that
        // wraps it (`call_with`, `run`, the caller's own) would copy all of it when moved.
        let result = Box::pin(self.run_call_in_span(input, ctx, sink, output))
            .instrument(span.clone())
            .await;
        match &result {
            Ok(outcome) => {
                span.record("gen_ai.usage.input_tokens", outcome.usage.input_tokens);
                span.record("gen_ai.usage.output_tokens", outcome.usage.output_tokens);
                if !span.is_disabled() {
                    span.record("rein.stop_reason", format!("{:?}", outcome.reason));
                    // What the call and its subagents spent, with budgets on.
                    if let Some(spend) = &outcome.spend {
                        span.record("rein.budget.model_calls", spend.model_calls);
                        span.record("rein.budget.tool_calls", spend.tool_calls);
                        span.record("rein.budget.cost", spend.cost);
                    }
                }
            }
            Err(e) => {
                span.record("error.type", format!("{:?}", e.kind()));
            }
        }
        #[cfg(feature = "metrics")]
        self.metric_keys
            .call(&self.info.name, if result.is_ok() { "ok" } else { "error" });
        result
    }

    /// Waits for the session, loads it if needed, runs the loop, fires `Error` on
    /// failure, saves the session.
    async fn run_call_in_span(
        &self,
        input: Vec<Msg>,
        ctx: RunContext,
        sink: Option<Sink>,
        output: Option<Output<'_>>,
    ) -> Result<CallOutcome, Error> {
        // A subagent records when its delegating call does (its decisions reach it).
        let mode = TrailMode::decide(
            self.trail || ctx.decision_sink().is_some(),
            self.record_content,
        );
        let key = SessionKey::new(ctx.user_id(), ctx.session_id());
        // The session's slot (in-process FIFO), its lease (with leasing), in line
        // with the store; on a failure (e.g. `Busy`) nothing ran.
        // A resume (no input) with approval decisions that another call already
        // resumed fails with a `Conflict`, the conversation untouched.
        let resume = input
            .is_empty()
            .then(|| ctx.extensions().get::<super::ApprovalDecisions>())
            .flatten();
        let policy = ctx.double_text().unwrap_or(self.double_text);
        let mut memory = match self.open_memory(&key, resume.as_deref(), policy).await {
            Ok(memory) => memory,
            Err(e) => {
                return Err(self
                    .fail(Error::store(e), &ctx, mode, Vec::new(), None)
                    .await);
            }
        };
        // From here on the call changes the conversation: it is saved when the call
        // ends, whichever way (a dropped call hands the save to a task).
        memory.conversation().dirty = true;
        let ledgers = self.ledgers(&ctx, &memory);
        let ctx = match &ledgers {
            Some(l) => ctx.with_ledger(Some(Arc::clone(&l.own))),
            None => ctx,
        };
        let mut call = Call {
            agent: self,
            key: &key,
            meta: EventMeta::new(&self.info, &ctx, Arc::clone(self.chain.labels()), mode),
            ctx: &ctx,
            sink: sink.as_ref(),
            system: None,
            usage: Usage::default(),
            last_usage: Usage::default(),
            model_calls: 0,
            trail: Mutex::new(Vec::new()),
            retracted: Vec::new(),
            output,
            ledgers,
            exhausted: None,
            counted: None,
            label: crate::label::Label::BOTTOM,
        };
        // Renews the lease while the call runs; a lost lease cancels it.
        let lease = memory.lease();
        let result = {
            let work = std::pin::pin!(call.run(&mut memory, input));
            super::leasing::kept(lease, work).await
        };
        let mut result = result;
        call.close_budgets(&mut memory, result.as_mut().ok());
        let result = match result {
            Ok(outcome) => Ok(outcome),
            Err(err) => {
                memory.repair(&format!("not executed: the call failed ({err})"));
                let decisions = call.take_trail();
                Err(self
                    .fail(err, &ctx, mode, decisions, Some(&call.meta))
                    .await)
            }
        };
        memory.disarm();
        // Saved, or the save failed and said so: either way no background save (an
        // unsaved conversation is saved by the next call on the session); the lease,
        // if any, released.
        let saved = memory.finish().await;
        if let Err(e) = saved {
            return match result {
                Ok(outcome) => Err(self
                    .fail(
                        Error::store(e),
                        &ctx,
                        mode,
                        outcome.decisions,
                        Some(&call.meta),
                    )
                    .await),
                Err(first) => {
                    tracing::error!(
                        session = %key,
                        error = %e,
                        "session save after a failed call also failed"
                    );
                    Err(first)
                }
            };
        }
        if let (Some(tx), Ok(outcome)) = (&sink, &result) {
            let _ = tx.send(AgentEvent::Final(outcome.clone()));
        }
        result
    }

    /// Fires the `Error` event (hook failures are logged, never change the error) and
    /// returns the error. `call` is the failed call's event header, when the call got
    /// that far: the event then shares the call's hook states (a latency timer ends as
    /// an error, not as cancelled).
    async fn fail(
        &self,
        error: Error,
        ctx: &RunContext,
        mode: TrailMode,
        decisions: Vec<Decision>,
        call: Option<&EventMeta>,
    ) -> Error {
        if !self.chain.wants(EventKind::Error) {
            return error;
        }
        let meta = match call {
            Some(meta) => meta.clone(),
            None => EventMeta::new(&self.info, ctx, Arc::clone(self.chain.labels()), mode),
        };
        let mut event = HookEvent::Error(ErrorEvent {
            meta,
            error,
            decisions,
        });
        // Notification event: the chain never returns an error for it.
        let _ = self.chain.dispatch(&mut event).await;
        match event {
            HookEvent::Error(e) => e.error,
            // Dispatch never changes the variant.
            _ => Error::internal("error event changed variant"),
        }
    }
}

impl Call<'_> {
    /// Dispatches an event without a future, when every subscriber of the event's kind
    /// is a sync hook: the chain's result (the decisions hooks made emitted on the
    /// current span and kept for the outcome), or `None` (nothing called) when some
    /// subscriber is an `async fn` hook and the event must be awaited instead. With
    /// `list`, only those subscribers are called (a subsequence of the kind's
    /// subscribers). Used through the `dispatch!` macro, which falls back to the
    /// awaited path.
    #[inline]
    pub(super) fn dispatch_now(
        &self,
        event: &mut HookEvent,
        list: Option<&[u16]>,
    ) -> Option<Result<(), Error>> {
        let chain = &self.agent.chain;
        if !chain.is_sync(event.kind()) {
            return None;
        }
        let result = match list {
            None => chain.dispatch_sync(event),
            Some(list) => chain.dispatch_sync_list(event, list),
        };
        self.keep_trail(event);
        Some(result)
    }

    /// Moves the decisions hooks made during a dispatch to the call's trail.
    #[inline]
    pub(super) fn keep_trail(&self, event: &mut HookEvent) {
        // Most dispatches decide nothing: checked without touching the call's lock.
        if self.meta.mode.on && !event.meta().trail.is_empty() {
            self.keep_made(std::mem::take(&mut event.meta_mut().trail));
        }
    }

    /// [`Call::keep_trail`]'s work when a dispatch recorded decisions.
    #[cold]
    fn keep_made(&self, made: Vec<Decision>) {
        for d in &made {
            crate::hook::emit_decision(d);
        }
        self.forward(&made);
        self.trail
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(made);
    }

    /// With [`StreamRelease::AfterAcceptance`](super::StreamRelease::AfterAcceptance):
    /// sends a streaming caller the turn its post-hooks accepted (as they left it): its
    /// thinking, text and tool-call starts, as one delta each.
    pub(super) fn release(&self, msg: &Msg) {
        if !self.agent.hold_deltas {
            return;
        }
        let Some(sink) = self.sink else { return };
        for block in &msg.content {
            let event = match block {
                ContentBlock::Thinking(t) if !t.text.is_empty() => {
                    AgentEvent::ThinkingDelta(t.text.clone())
                }
                ContentBlock::Text(t) if !t.is_empty() => AgentEvent::TextDelta(t.clone()),
                ContentBlock::ToolUse(u) => AgentEvent::ToolCallStart {
                    id: u.id.clone(),
                    name: u.name.clone(),
                },
                _ => continue,
            };
            let _ = sink.send(event);
        }
    }

    fn take_trail(&self) -> Vec<Decision> {
        std::mem::take(&mut *self.trail.lock().unwrap_or_else(PoisonError::into_inner))
    }

    pub(super) fn wants(&self, kind: EventKind) -> bool {
        self.agent.chain.wants(kind)
    }

    async fn run(
        &mut self,
        memory: &mut CallMemory,
        input: Vec<Msg>,
    ) -> Result<CallOutcome, Error> {
        let agent = self.agent;
        // PreCall
        let mut input = input;
        // The agent's prebuilt system message, unless a hook changed the prompt.
        self.system = agent.system.clone();
        if self.wants(EventKind::PreCall) {
            let (messages, system_prompt) = fire!(self, PreCall(PreCallEvent {
                meta: self.meta.clone(),
                messages: input,
                system_prompt: agent.sys_prompt.clone(),
            }) => { messages, system_prompt });
            input = messages;
            if system_prompt != agent.sys_prompt {
                self.system = super::assemble::system_message(system_prompt.map(|p| p.to_string()));
            }
        }
        if let Some(text) = self.output.and_then(|o| o.instruction()) {
            let prompt = match &self.system {
                Some(system) => format!("{}\n\n{text}", system.text()),
                None => text,
            };
            self.system = Some(Arc::new(Msg::system(prompt)));
        }
        if let Some(i) = input.iter().position(|m| m.role == Role::System) {
            return Err(Error::invalid_input(format!(
                "call input message {i} has the System role; set the system prompt instead \
                 (AgentBuilder::sys_prompt or PreCallEvent::set_system_prompt)"
            )));
        }

        // Where this call's messages begin (what a rollback returns to).
        let start = memory.len();
        // Calls an earlier attempt of this session started (a crash, a cancelled
        // call, another replica) are finished before new input is taken: a settled
        // result is replayed, an unknown outcome stops the call for a human.
        if !input.is_empty() && memory.journaling() {
            let journaled = memory.journaled_pending().map_err(Error::store)?;
            if !journaled.is_empty() {
                let acted = self.act(memory, journaled).await?;
                if let Some(end) = self.end_of_call(memory, acted).await {
                    return end;
                }
            }
        }
        let resume = self.admit_input(memory, input)?;
        if let Some(batch) = resume {
            let acted = self.act(memory, batch).await?;
            if let Some(end) = self.end_of_call(memory, acted).await {
                return end;
            }
        }

        let mut iteration: u32 = 0;
        let mut gotos: u32 = 0;
        loop {
            if self.out_of_time() {
                return self.stop_for_budget(memory).await;
            }
            // A safe point: every tool of the last turn has settled.
            if let Some(signal) = self.superseded(memory, iteration).await? {
                return self.stop_superseded(memory, signal, start).await;
            }
            if iteration >= agent.max_iters {
                let Some(summary) = self.summarize(memory).await? else {
                    return self.stop_for_budget(memory).await;
                };
                return self.finish(summary, StopReason::MaxIterations).await;
            }
            let Some(msg) = self.reason(memory, iteration).await? else {
                return self.stop_for_budget(memory).await;
            };
            // The runtime's ids are unique; only ids a `PostReasoning` hook put in can
            // repeat one the session already used.
            let model_ids: Option<Vec<String>> = self
                .wants(EventKind::PostReasoning)
                .then(|| msg.tool_uses().into_iter().map(|u| u.id.clone()).collect());
            let (mut msg, goto, retract, stop) = self.post_reasoning(msg, iteration).await?;
            msg.raise_label(self.label);
            if let Some(ids) = model_ids
                && msg.has_tool_uses()
            {
                super::history::reid_repeated(&mut msg, &ids, memory.messages());
            }
            if goto.is_none() {
                self.release(&msg);
                // Accepted: what was withdrawn on the way is not part of what follows.
                self.retracted.clear();
            }
            if stop {
                memory.push(msg.clone());
                memory.disarm();
                return self.finish(msg, StopReason::ReasoningStopped).await;
            }
            if let Some(extra) = goto {
                gotos += 1;
                if gotos > agent.max_gotos {
                    return Err(Error::goto_limit(agent.max_gotos));
                }
                let redone = super::summary::redo_messages(msg, extra)?;
                if retract {
                    self.retracted.extend(redone);
                } else {
                    for m in redone {
                        memory.push(m);
                    }
                }
                if !self.agent.hold_deltas {
                    // Nothing of the turn was shown when deltas are held.
                    emit(self.sink, || AgentEvent::ReasoningRedone);
                }
                continue;
            }
            gotos = 0;
            if let Some(answer) = self.output.and_then(|o| o.take_answer(&mut msg)) {
                memory.push(answer.clone());
                return self.finish(answer, StopReason::Final).await;
            }
            let uses: Vec<ToolUse> = msg.tool_uses().into_iter().cloned().collect();
            if uses.is_empty() {
                if msg.has_visible_text() {
                    memory.push(msg.clone());
                    return self.finish(msg, StopReason::Final).await;
                }
                // Empty: neither the turn nor the nudge is stored; the nudge goes with
                // the next request only (cleared, like a withdrawn turn, once a turn is
                // accepted). Bounded by `max_iters`.
                if !self.agent.hold_deltas && streamed_something(&msg) {
                    emit(self.sink, || AgentEvent::ReasoningRedone);
                }
                self.retracted.push(Msg::user(EMPTY_NUDGE).synthetic());
                iteration += 1;
                continue;
            }
            memory.push(msg);
            if self.out_of_time() {
                return self.stop_for_budget(memory).await;
            }
            let acted = self.act(memory, uses).await?;
            if let Some(end) = self.end_of_call(memory, acted).await {
                return end;
            }
            iteration += 1;
        }
    }

    /// The call's outcome when an acting step ends it (a hook stopped, a subagent or a
    /// human is waited for), or `None` when the loop goes on. Calls left pending on
    /// purpose are not repaired.
    async fn end_of_call(
        &mut self,
        memory: &mut CallMemory,
        acted: Acted,
    ) -> Option<Result<CallOutcome, Error>> {
        let (msg, reason) = match acted {
            Acted::Continue => return None,
            Acted::Stopped(msg) => (msg, StopReason::ActingStopped),
            Acted::Suspended(msg) => {
                memory.disarm();
                (msg, StopReason::SubagentStopped)
            }
            Acted::Blocked(msg, reason) => {
                memory.disarm();
                (msg, reason)
            }
        };
        Some(self.finish(msg, reason).await)
    }

    /// The options a reasoning (or, `summary`, the summary) request starts from: the
    /// agent's, with the call's structured-output format where it is sent natively.
    pub(super) fn request_options(&self, summary: bool) -> GenerateOptions {
        let mut options = self.agent.options.clone();
        if let Some(output) = self.output
            && (output.mode == OutputMode::Native || (summary && output.native_summary))
        {
            options.response_format = Some(output.format.clone());
        }
        options
    }

    /// `PreReasoning`, then one model call.
    async fn reason(
        &mut self,
        memory: &mut CallMemory,
        iteration: u32,
    ) -> Result<Option<Msg>, Error> {
        let agent = self.agent;
        // Boxed: compaction is rare, and its state machine stays off this one's.
        if agent
            .window
            .is_some_and(|(_, policy)| policy == super::ContextPolicy::Compact)
            && Box::pin(self.compact_if_needed(memory)).await?
        {
            return Ok(None);
        }
        // Everything the session holds influenced this turn.
        self.label = memory.session_label();
        let mut messages =
            Messages::from_parts(self.system.clone(), memory.shared(), self.retracted.clone());
        let mut options = self.request_options(false);
        if self.wants(EventKind::PreReasoning) {
            let (changed, changed_options) = fire!(self, PreReasoning(PreReasoningEvent {
                meta: self.meta.clone(),
                messages,
                options: Box::new(options),
                tool_names: Arc::clone(&agent.tool_names),
                iteration,
            }) => { messages, options });
            messages = changed;
            options = *changed_options;
        }
        // Shared with the agent (one refcount), unless the delegation tool lists the
        // subagents known now.
        let mut tools = match &agent.delegation {
            Some(d) => d.schemas(&agent.tool_schemas).into(),
            None => Arc::clone(&agent.tool_schemas),
        };
        if let Some(tool) = self.output.and_then(|o| o.tool) {
            tools = tools.iter().cloned().chain([tool.clone()]).collect();
        }
        let request = self
            .fit_window(ModelRequest {
                messages,
                tools,
                options,
            })
            .await?;
        if self.ledgers.is_none() {
            // Without budgets no state machine of the call holds the request.
            return self.stream_model(request, Phase::Reasoning).await.map(Some);
        }
        // Boxed: the budgeted path holds the request across the reservation's save.
        Box::pin(self.model_call(memory, request, Phase::Reasoning)).await
    }

    async fn post_reasoning(
        &self,
        msg: Msg,
        iteration: u32,
    ) -> Result<(Msg, Option<Vec<Msg>>, bool, bool), Error> {
        if !self.wants(EventKind::PostReasoning) {
            return Ok((msg, None, false, false));
        }
        Ok(fire!(self, PostReasoning(PostReasoningEvent {
            meta: self.meta.clone(),
            message: msg,
            goto: None,
            retract: false,
            stop: false,
            usage: self.last_usage,
            iteration,
        }) => { message, goto, retract, stop }))
    }
}

/// `true` when a streaming caller was sent deltas of `msg` (text or thinking, even
/// blank): then an empty turn is followed by `ReasoningRedone`.
fn streamed_something(msg: &Msg) -> bool {
    msg.content.iter().any(|b| match b {
        ContentBlock::Text(t) => !t.is_empty(),
        ContentBlock::Thinking(t) => !t.text.is_empty(),
        _ => false,
    })
}

impl Call<'_> {
    /// `PostCall`, then the outcome.
    pub(super) async fn finish(
        &mut self,
        reply: Msg,
        reason: StopReason,
    ) -> Result<CallOutcome, Error> {
        // A typed call decodes the answer the loop accepted; PostCall hooks change only
        // the text copies (the reply, the stream, the logs).
        let answer = self.output.map(|_| Box::new(reply.clone()));
        let mut reply = reply;
        if self.wants(EventKind::PostCall) {
            reply = fire!(self, PostCall(PostCallEvent {
                meta: self.meta.clone(),
                message: reply,
                reason,
                usage: self.usage,
                decisions: if self.meta.mode.on {
                    self.trail
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .clone()
                } else {
                    Vec::new()
                },
            }) => { message });
        }
        Ok(CallOutcome {
            reply,
            reason,
            usage: self.usage,
            model_calls: self.model_calls,
            decisions: self.take_trail(),
            spend: None,
            spend_by_agent: Vec::new(),
            remaining: None,
            answer,
        })
    }
}
