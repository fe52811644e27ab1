//! The ReAct loop: the only place events are constructed and dispatched.

use std::collections::{HashMap, HashSet};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, PoisonError};

use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender, unbounded};
use futures::{FutureExt, StreamExt};
use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender as EventSender;

use super::memory::{CallMemory, Persistence, SessionKey};
use super::stream::AgentEvent;
use super::{AgentInner, CallOutcome, RunContext, StopReason};
use crate::error::Error;
use crate::hook::{
    ActingChunkEvent, ErrorEvent, EventKind, EventMeta, HookEvent, PostActingEvent, PostCallEvent,
    PostReasoningEvent, PostSummaryEvent, PreActingEvent, PreCallEvent, PreReasoningEvent,
    PreSummaryEvent, ReasoningChunkEvent, SummaryChunkEvent,
};
use crate::message::{ContentBlock, Msg, Role, Thinking, ToolResult, ToolUse};
use crate::model::{
    FinishReason, Messages, ModelChunk, ModelError, ModelErrorKind, ModelRequest, Usage,
};
use crate::observe::{Decision, TrailMode};
use crate::tool::{ProgressChunk, ToolContext};
use crate::util::{new_id, panic_message};
use tracing::Instrument;
use tracing::field::Empty;

/// Appended (persisted, marked synthetic) when the model answers with neither text nor
/// tool calls.
const EMPTY_REMINDER: &str = "Your previous response was empty. Answer the user, or call a tool.";

/// Given to the summary call (not persisted) when the iteration limit is reached.
const SUMMARY_INSTRUCTION: &str = "You have failed to generate a response within the maximum \
     iterations. Now respond directly by summarizing the current situation.";

/// Result text for tool uses a redo left without a result.
const REDONE: &str = "not executed: reasoning was redone";

/// Result text for pending tool uses superseded by new input.
const SUPERSEDED: &str =
    "not executed: the conversation continued with new input before this tool ran";

type Sink = EventSender<AgentEvent>;

fn emit(sink: Option<&Sink>, event: impl FnOnce() -> AgentEvent) {
    if let Some(tx) = sink {
        // A dropped receiver means nobody reads the stream any more; the call itself
        // is dropped with it, so there is nothing else to do.
        let _ = tx.send(event());
    }
}

/// A tool call after `PreActing`.
struct Planned {
    tool_use: ToolUse,
    denial: Option<String>,
}

/// Which model step a stream belongs to.
#[derive(Clone, Copy)]
enum Phase {
    Reasoning,
    Summary,
}

impl Phase {
    fn as_str(self) -> &'static str {
        match self {
            Phase::Reasoning => "reasoning",
            Phase::Summary => "summary",
        }
    }

    fn chunk_kind(self) -> EventKind {
        match self {
            Phase::Reasoning => EventKind::ReasoningChunk,
            Phase::Summary => EventKind::SummaryChunk,
        }
    }
}

/// One call in progress.
struct Call<'a> {
    agent: &'a AgentInner,
    meta: EventMeta,
    ctx: &'a RunContext,
    sink: Option<&'a Sink>,
    system: Option<Arc<Msg>>,
    usage: Usage,
    last_usage: Usage,
    model_calls: u32,
    /// Decisions recorded so far (only touched when the call records).
    trail: Mutex<Vec<Decision>>,
}

impl AgentInner {
    /// Runs one call inside its `invoke_agent` span.
    pub(crate) async fn run_call(
        &self,
        input: Vec<Msg>,
        ctx: RunContext,
        sink: Option<Sink>,
    ) -> Result<CallOutcome, Error> {
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
            error.type = Empty,
        );
        if !span.is_disabled() {
            span.record("otel.name", format!("invoke_agent {}", self.info.name));
            if let Some(parent) = &self.info.parent_id {
                span.record("rein.agent.parent_id", parent.as_str());
            }
        }
        let result = self
            .run_call_in_span(input, ctx, sink)
            .instrument(span.clone())
            .await;
        match &result {
            Ok(outcome) => {
                span.record("gen_ai.usage.input_tokens", outcome.usage.input_tokens);
                span.record("gen_ai.usage.output_tokens", outcome.usage.output_tokens);
            }
            Err(e) => {
                span.record("error.type", format!("{:?}", e.kind()));
            }
        }
        #[cfg(feature = "metrics")]
        crate::observe::metrics_impl::call(
            &self.info.name,
            if result.is_ok() { "ok" } else { "error" },
        );
        result
    }

    /// Waits for the session, loads it if needed, runs the loop, fires `Error` on
    /// failure, saves the session.
    async fn run_call_in_span(
        &self,
        input: Vec<Msg>,
        ctx: RunContext,
        sink: Option<Sink>,
    ) -> Result<CallOutcome, Error> {
        let mode = TrailMode::decide(self.trail, self.record_content);
        let key = SessionKey::new(ctx.user_id(), ctx.session_id());
        let slot = self.sessions.slot(&key);
        let guard = Arc::clone(&slot).lock_owned().await;
        let persistence = self.store.as_ref().map(|store| Persistence {
            store: Arc::clone(store),
            key: key.clone(),
            slot,
        });
        let mut memory = CallMemory::new(guard, persistence);
        match &self.store {
            Some(store) => {
                if let Err(e) = memory.conversation().sync(&**store, &key).await {
                    memory.disarm();
                    memory.settle();
                    return Err(self.fail(Error::store(e), &ctx, mode, Vec::new()).await);
                }
            }
            None => memory.conversation().loaded = true,
        }
        // From here on the call changes the conversation: it is saved when the call
        // ends, whichever way (a dropped call hands the save to a task).
        memory.conversation().dirty = true;
        let mut call = Call {
            agent: self,
            meta: EventMeta::new(&self.info, &ctx, Arc::clone(self.chain.labels()), mode),
            ctx: &ctx,
            sink: sink.as_ref(),
            system: None,
            usage: Usage::default(),
            last_usage: Usage::default(),
            model_calls: 0,
            trail: Mutex::new(Vec::new()),
        };
        let result = call.run(&mut memory, input).await;
        let result = match result {
            Ok(outcome) => Ok(outcome),
            Err(err) => {
                memory.repair(&format!("not executed: the call failed ({err})"));
                let decisions = call.take_trail();
                Err(self.fail(err, &ctx, mode, decisions).await)
            }
        };
        memory.disarm();
        let saved = match &self.store {
            Some(store) => memory.conversation().persist(&**store, &key).await,
            None => Ok(()),
        };
        // Saved, or the save failed and said so: either way no background save. An
        // unsaved conversation is saved by the next call on the session.
        memory.settle();
        if let Err(e) = saved {
            return match result {
                Ok(outcome) => Err(self
                    .fail(Error::store(e), &ctx, mode, outcome.decisions)
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
    /// returns the error.
    async fn fail(
        &self,
        error: Error,
        ctx: &RunContext,
        mode: TrailMode,
        decisions: Vec<Decision>,
    ) -> Error {
        if !self.chain.wants(EventKind::Error) {
            return error;
        }
        let mut event = HookEvent::Error(ErrorEvent {
            meta: EventMeta::new(&self.info, ctx, Arc::clone(self.chain.labels()), mode),
            error,
            decisions,
        });
        // Notification event: the chain never returns an error for it.
        let _ = self.chain.dispatch(&mut event).await;
        match event {
            HookEvent::Error(e) => e.error,
            // Dispatch never changes the variant.
            _ => Error::invalid_input("internal: error event changed variant"),
        }
    }
}

impl Call<'_> {
    /// Dispatches an event; decisions hooks made are emitted on the current span and
    /// kept for the outcome.
    async fn dispatch(&self, event: &mut HookEvent) -> Result<(), Error> {
        let chain = &self.agent.chain;
        let result = if chain.is_sync(event.kind()) {
            chain.dispatch_sync(event)
        } else {
            chain.dispatch(event).await
        };
        if self.meta.mode.on {
            let made = std::mem::take(&mut event.meta_mut().trail);
            if !made.is_empty() {
                for d in &made {
                    crate::observe::emit_decision(d);
                }
                self.trail
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .extend(made);
            }
        }
        result
    }

    fn take_trail(&self) -> Vec<Decision> {
        std::mem::take(&mut *self.trail.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn wants(&self, kind: EventKind) -> bool {
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
        let mut system_prompt = agent.sys_prompt.clone();
        if self.wants(EventKind::PreCall) {
            let mut ev = HookEvent::PreCall(PreCallEvent {
                meta: self.meta.clone(),
                messages: input,
                system_prompt,
            });
            self.dispatch(&mut ev).await?;
            let HookEvent::PreCall(e) = ev else {
                return Err(Error::invalid_input("internal: PreCall changed variant"));
            };
            input = e.messages;
            system_prompt = e.system_prompt;
        }
        if let Some(i) = input.iter().position(|m| m.role == Role::System) {
            return Err(Error::invalid_input(format!(
                "call input message {i} has the System role; set the system prompt instead \
                 (AgentBuilder::sys_prompt or PreCallEvent::set_system_prompt)"
            )));
        }
        self.system = system_prompt
            .filter(|p| !p.trim().is_empty())
            .map(|p| Arc::new(Msg::system(p)));

        let resume = self.admit_input(memory, input)?;
        if let Some(batch) = resume
            && let Some(stopped) = self.act(memory, batch).await?
        {
            return self.finish(stopped, StopReason::ActingStopped).await;
        }

        let mut iteration: u32 = 0;
        let mut gotos: u32 = 0;
        loop {
            if iteration >= agent.max_iters {
                let summary = self.summarize(memory).await?;
                return self.finish(summary, StopReason::MaxIterations).await;
            }
            let msg = self.reason(memory, iteration).await?;
            let (msg, goto, stop) = self.post_reasoning(msg, iteration).await?;
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
                self.apply_goto(memory, msg, extra)?;
                emit(self.sink, || AgentEvent::ReasoningRedone);
                continue;
            }
            gotos = 0;
            let uses: Vec<ToolUse> = msg.tool_uses().into_iter().cloned().collect();
            if uses.is_empty() {
                if msg.has_visible_text() {
                    memory.push(msg.clone());
                    return self.finish(msg, StopReason::Final).await;
                }
                memory.push(msg);
                memory.push(Msg::user(EMPTY_REMINDER).synthetic());
                iteration += 1;
                continue;
            }
            memory.push(msg);
            if let Some(stopped) = self.act(memory, uses).await? {
                return self.finish(stopped, StopReason::ActingStopped).await;
            }
            iteration += 1;
        }
    }

    /// Adds the call's input to memory, reconciling it with tool uses left pending by
    /// an earlier call. Returns the tool uses to run before reasoning (resume).
    fn admit_input(
        &self,
        memory: &mut CallMemory,
        input: Vec<Msg>,
    ) -> Result<Option<Vec<ToolUse>>, Error> {
        let pending = memory.pending_tool_uses();
        let pending_ids: HashSet<&str> = pending.iter().map(|u| u.id.as_str()).collect();
        let mut supplied: HashSet<String> = HashSet::new();
        for (i, msg) in input.iter().enumerate() {
            for r in msg.tool_results() {
                if !pending_ids.contains(r.id.as_str()) {
                    return Err(Error::invalid_input(format!(
                        "call input message {i} has a result for tool call `{}` ({}), which is not pending",
                        r.id, r.name
                    )));
                }
                if !supplied.insert(r.id.clone()) {
                    return Err(Error::invalid_input(format!(
                        "call input has two results for tool call `{}`",
                        r.id
                    )));
                }
            }
        }
        if pending.is_empty() {
            for m in input {
                memory.push(m);
            }
            return Ok(None);
        }
        if input.is_empty() {
            return Ok(Some(pending));
        }
        let only_results = input.iter().all(|m| {
            m.content
                .iter()
                .all(|b| matches!(b, ContentBlock::ToolResult(_)))
        });
        if only_results {
            for m in input {
                memory.push(m);
            }
            let rest: Vec<ToolUse> = pending
                .into_iter()
                .filter(|u| !supplied.contains(&u.id))
                .collect();
            return Ok((!rest.is_empty()).then_some(rest));
        }
        // New input while tools are pending: results supplied alongside are kept, the
        // rest are marked as not executed, then the input is appended.
        let mut results = Vec::new();
        let mut others = Vec::new();
        for mut m in input {
            let (r, o): (Vec<ContentBlock>, Vec<ContentBlock>) = m
                .content
                .into_iter()
                .partition(|b| matches!(b, ContentBlock::ToolResult(_)));
            results.extend(r);
            if !o.is_empty() {
                m.content = o;
                others.push(m);
            }
        }
        if !results.is_empty() {
            memory.push(Msg::new(Role::Tool, results));
        }
        memory.repair(SUPERSEDED);
        for m in others {
            memory.push(m);
        }
        Ok(None)
    }

    /// `PreReasoning`, then one model call.
    async fn reason(&mut self, memory: &CallMemory, iteration: u32) -> Result<Msg, Error> {
        let agent = self.agent;
        let mut messages = Messages::from_parts(self.system.clone(), memory.shared(), Vec::new());
        let mut options = agent.options.clone();
        if self.wants(EventKind::PreReasoning) {
            let mut ev = HookEvent::PreReasoning(PreReasoningEvent {
                meta: self.meta.clone(),
                messages,
                options,
                tool_names: Arc::clone(&agent.tool_names),
                iteration,
            });
            self.dispatch(&mut ev).await?;
            let HookEvent::PreReasoning(e) = ev else {
                return Err(Error::invalid_input(
                    "internal: PreReasoning changed variant",
                ));
            };
            messages = e.messages;
            options = e.options;
        }
        let tools = match &agent.delegation {
            Some(d) => d.schemas(&agent.tool_schemas),
            None => agent.tool_schemas.clone(),
        };
        let request = ModelRequest {
            messages,
            tools,
            options,
        };
        self.stream_model(request, Phase::Reasoning).await
    }

    async fn post_reasoning(
        &self,
        msg: Msg,
        iteration: u32,
    ) -> Result<(Msg, Option<Vec<Msg>>, bool), Error> {
        if !self.wants(EventKind::PostReasoning) {
            return Ok((msg, None, false));
        }
        let mut ev = HookEvent::PostReasoning(PostReasoningEvent {
            meta: self.meta.clone(),
            message: msg,
            goto: None,
            stop: false,
            usage: self.last_usage,
            iteration,
        });
        self.dispatch(&mut ev).await?;
        let HookEvent::PostReasoning(e) = ev else {
            return Err(Error::invalid_input(
                "internal: PostReasoning changed variant",
            ));
        };
        Ok((e.message, e.goto, e.stop))
    }

    /// Stores the redone message, pairs its tool uses with results the hook supplied
    /// (synthetic error results for the rest), then appends the hook's other messages.
    fn apply_goto(&self, memory: &mut CallMemory, msg: Msg, extra: Vec<Msg>) -> Result<(), Error> {
        let uses: Vec<ToolUse> = msg.tool_uses().into_iter().cloned().collect();
        let ids: HashSet<&str> = uses.iter().map(|u| u.id.as_str()).collect();
        let mut supplied: HashMap<String, ToolResult> = HashMap::new();
        let mut rest = Vec::new();
        for mut m in extra {
            if m.role == Role::System {
                return Err(Error::invalid_input(
                    "goto_reasoning messages must not have the System role",
                ));
            }
            let mut others = Vec::new();
            for block in m.content {
                match block {
                    ContentBlock::ToolResult(r) if ids.contains(r.id.as_str()) => {
                        supplied.entry(r.id.clone()).or_insert(r);
                    }
                    ContentBlock::ToolResult(r) => {
                        tracing::warn!(id = %r.id, "goto_reasoning result for an unknown tool call dropped");
                    }
                    other => others.push(other),
                }
            }
            if !others.is_empty() {
                m.content = others;
                rest.push(m);
            }
        }
        memory.push(msg);
        if !uses.is_empty() {
            let results = uses.into_iter().map(|u| {
                supplied
                    .remove(&u.id)
                    .unwrap_or_else(|| ToolResult::error(u.id, u.name, REDONE))
            });
            memory.push(Msg::tool(results));
        }
        for m in rest {
            memory.push(m);
        }
        Ok(())
    }

    /// `PreActing` for each call, execution, `PostActing` for each result. Returns the
    /// turn's tool message when a hook stopped the loop.
    async fn act(
        &mut self,
        memory: &mut CallMemory,
        uses: Vec<ToolUse>,
    ) -> Result<Option<Msg>, Error> {
        let mut planned = Vec::with_capacity(uses.len());
        for tool_use in uses {
            if !self.wants(EventKind::PreActing) {
                planned.push(Planned {
                    tool_use,
                    denial: None,
                });
                continue;
            }
            let mut ev = HookEvent::PreActing(PreActingEvent {
                meta: self.meta.clone(),
                tool_use,
                denial: None,
                changed: false,
            });
            self.dispatch(&mut ev).await?;
            let HookEvent::PreActing(e) = ev else {
                return Err(Error::invalid_input("internal: PreActing changed variant"));
            };
            if e.changed {
                memory.update_tool_use(&e.tool_use);
            }
            #[cfg(feature = "metrics")]
            if let Some(d) = &e.denial {
                crate::observe::metrics_impl::denial(
                    d.hook.as_deref().unwrap_or("<runtime>"),
                    crate::observe::metrics_impl::tool_label(
                        self.agent.tool_labels.as_deref(),
                        &e.tool_use.name,
                    ),
                );
            }
            planned.push(Planned {
                tool_use: e.tool_use,
                denial: e.denial.map(|d| d.reason),
            });
        }
        for p in &planned {
            emit(self.sink, || AgentEvent::ToolCall(p.tool_use.clone()));
        }
        let results = self.execute(&planned).await;
        let mut stop = false;
        let mut batch = None;
        for (p, result) in planned.into_iter().zip(results) {
            let result = if self.wants(EventKind::PostActing) {
                let mut ev = HookEvent::PostActing(PostActingEvent {
                    meta: self.meta.clone(),
                    tool_use: p.tool_use,
                    result,
                    denied: p.denial.is_some(),
                    stop: false,
                });
                self.dispatch(&mut ev).await?;
                let HookEvent::PostActing(e) = ev else {
                    return Err(Error::invalid_input("internal: PostActing changed variant"));
                };
                stop |= e.stop;
                e.result
            } else {
                result
            };
            emit(self.sink, || AgentEvent::ToolResult(result.clone()));
            batch = Some(memory.record_result(batch, result));
        }
        if stop {
            let msg = batch
                .and_then(|i| memory.messages().get(i).cloned())
                .unwrap_or_else(|| Msg::tool([]));
            return Ok(Some(msg));
        }
        Ok(None)
    }

    /// Runs the turn's calls: contiguous concurrency-safe calls together, an unsafe call
    /// alone; results in call order. Progress chunks are routed to `ActingChunk` hooks
    /// while the tools run.
    async fn execute(&self, planned: &[Planned]) -> Vec<ToolResult> {
        let listen = self.wants(EventKind::ActingChunk) || self.sink.is_some();
        let (tx, mut rx): (
            Option<UnboundedSender<ProgressChunk>>,
            Option<UnboundedReceiver<ProgressChunk>>,
        ) = if listen {
            // futures' channel: creating it is one small allocation (tokio's allocates
            // a 32-slot block up front), and most tools never report progress.
            let (tx, rx) = unbounded();
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        let mut results = Vec::with_capacity(planned.len());
        let mut start = 0;
        while start < planned.len() {
            let alone = !self.is_concurrency_safe(&planned[start]);
            let mut end = start + 1;
            if !alone {
                while end < planned.len() && self.is_concurrency_safe(&planned[end]) {
                    end += 1;
                }
            }
            let group = futures::future::join_all(
                (start..end).map(|i| self.run_tool(&planned[i], i, tx.clone())),
            );
            let group_results = match rx.as_mut() {
                None => group.await,
                Some(rx) => {
                    tokio::pin!(group);
                    let out = loop {
                        tokio::select! {
                            biased;
                            out = &mut group => break out,
                            Some(chunk) = rx.next() => self.progress(planned, chunk).await,
                        }
                    };
                    while let Ok(chunk) = rx.try_recv() {
                        self.progress(planned, chunk).await;
                    }
                    out
                }
            };
            results.extend(group_results);
            start = end;
        }
        results
    }

    fn is_concurrency_safe(&self, p: &Planned) -> bool {
        p.denial.is_some()
            || self
                .agent
                .toolkit
                .entry(&p.tool_use.name)
                .is_none_or(|e| e.tool.concurrency_safe())
    }

    async fn progress(&self, planned: &[Planned], chunk: ProgressChunk) {
        let Some(p) = planned.get(chunk.index) else {
            return;
        };
        emit(self.sink, || AgentEvent::ToolProgress {
            id: p.tool_use.id.clone(),
            text: chunk.text.clone(),
        });
        if self.wants(EventKind::ActingChunk) {
            let mut ev = HookEvent::ActingChunk(ActingChunkEvent {
                meta: self.meta.clone(),
                tool_use: p.tool_use.clone(),
                chunk: chunk.text,
            });
            // Notification event: failures are logged by the chain.
            let _ = self.dispatch(&mut ev).await;
        }
    }

    /// Runs one call and turns every failure into an error result naming the tool.
    async fn run_tool(
        &self,
        p: &Planned,
        index: usize,
        progress: Option<UnboundedSender<ProgressChunk>>,
    ) -> ToolResult {
        let ToolUse { id, name, input } = &p.tool_use;
        let span = tracing::info_span!(
            "execute_tool",
            otel.name = Empty,
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = %name,
            gen_ai.tool.call.id = %id,
            gen_ai.tool.call.arguments = Empty,
            gen_ai.tool.call.result = Empty,
            rein.tool.status = Empty,
        );
        if !span.is_disabled() {
            span.record("otel.name", format!("execute_tool {name}"));
            if self.agent.record_content {
                span.record("gen_ai.tool.call.arguments", input.to_string());
            }
        }
        let (result, status) = self
            .run_tool_in_span(p, index, progress)
            .instrument(span.clone())
            .await;
        span.record("rein.tool.status", status);
        if self.agent.record_content && !span.is_disabled() {
            span.record("gen_ai.tool.call.result", result.content.as_str());
        }
        #[cfg(feature = "metrics")]
        crate::observe::metrics_impl::tool_call(
            crate::observe::metrics_impl::tool_label(self.agent.tool_labels.as_deref(), name),
            status,
        );
        result
    }

    /// Runs one call; returns the result and a status label (`ok`, `denied`,
    /// `unknown_tool`, `invalid_arguments`, `error`, `panic`, `timeout`).
    async fn run_tool_in_span(
        &self,
        p: &Planned,
        index: usize,
        progress: Option<UnboundedSender<ProgressChunk>>,
    ) -> (ToolResult, &'static str) {
        let ToolUse { id, name, input } = &p.tool_use;
        if let Some(reason) = &p.denial {
            let text = format!("Tool call `{name}` was denied: {reason}");
            return (ToolResult::error(id, name, text), "denied");
        }
        let Some(entry) = self.agent.toolkit.entry(name) else {
            let available = self.agent.tool_names.join(", ");
            let text = format!("Unknown tool `{name}`. Available tools: [{available}]");
            return (ToolResult::error(id, name, text), "unknown_tool");
        };
        let args = match entry.prepare(input) {
            Ok(args) => args,
            Err(msg) => {
                let text = format!("Invalid arguments for tool `{name}`: {msg}");
                return (ToolResult::error(id, name, text), "invalid_arguments");
            }
        };
        let ctx = ToolContext {
            run: self.ctx.clone(),
            agent: Arc::clone(&self.agent.info),
            tool_use_id: id.clone(),
            index,
            progress,
            events: self.sink.cloned(),
        };
        let limit = entry.tool.timeout().unwrap_or(self.agent.tool_timeout);
        // Created inside the guarded block: a tool that panics before returning its
        // future is caught too.
        let fut = AssertUnwindSafe(async { entry.tool.call(args, ctx).await }).catch_unwind();
        match tokio::time::timeout(limit, fut).await {
            Ok(Ok(Ok(text))) => (ToolResult::new(id, name, text), "ok"),
            Ok(Ok(Err(e))) => (
                ToolResult::error(id, name, format!("Tool `{name}` failed: {e}")),
                "error",
            ),
            Ok(Err(payload)) => (
                ToolResult::error(
                    id,
                    name,
                    format!("Tool `{name}` panicked: {}", panic_message(&*payload)),
                ),
                "panic",
            ),
            Err(_) => (
                ToolResult::error(id, name, format!("Tool `{name}` timed out after {limit:?}")),
                "timeout",
            ),
        }
    }

    /// The iteration limit was reached: `PreSummary`, a model call without tools,
    /// `PostSummary`; the summary is stored.
    async fn summarize(&mut self, memory: &mut CallMemory) -> Result<Msg, Error> {
        let agent = self.agent;
        memory.repair(&format!(
            "cancelled: maximum iterations ({}) reached",
            agent.max_iters
        ));
        let mut messages = Messages::from_parts(
            self.system.clone(),
            memory.shared(),
            vec![Msg::user(SUMMARY_INSTRUCTION).synthetic()],
        );
        let mut options = agent.options.clone();
        if self.wants(EventKind::PreSummary) {
            let mut ev = HookEvent::PreSummary(PreSummaryEvent {
                meta: self.meta.clone(),
                messages,
                options,
                max_iters: agent.max_iters,
            });
            self.dispatch(&mut ev).await?;
            let HookEvent::PreSummary(e) = ev else {
                return Err(Error::invalid_input("internal: PreSummary changed variant"));
            };
            messages = e.messages;
            options = e.options;
        }
        let request = ModelRequest {
            messages,
            tools: Vec::new(),
            options,
        };
        let mut summary = self.stream_model(request, Phase::Summary).await?;
        // A summary never carries tool uses: there were no tools to call.
        summary
            .content
            .retain(|b| !matches!(b, ContentBlock::ToolUse(_)));
        if self.wants(EventKind::PostSummary) {
            let mut ev = HookEvent::PostSummary(PostSummaryEvent {
                meta: self.meta.clone(),
                message: summary,
            });
            self.dispatch(&mut ev).await?;
            let HookEvent::PostSummary(e) = ev else {
                return Err(Error::invalid_input(
                    "internal: PostSummary changed variant",
                ));
            };
            summary = e.message;
        }
        memory.push(summary.clone());
        Ok(summary)
    }

    /// `PostCall`, then the outcome.
    async fn finish(&mut self, reply: Msg, reason: StopReason) -> Result<CallOutcome, Error> {
        let mut reply = reply;
        if self.wants(EventKind::PostCall) {
            let mut ev = HookEvent::PostCall(PostCallEvent {
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
            });
            self.dispatch(&mut ev).await?;
            let HookEvent::PostCall(e) = ev else {
                return Err(Error::invalid_input("internal: PostCall changed variant"));
            };
            reply = e.message;
        }
        Ok(CallOutcome {
            reply,
            reason,
            usage: self.usage,
            model_calls: self.model_calls,
            decisions: self.take_trail(),
        })
    }

    /// One model call: streams chunks to chunk hooks and the caller, reassembles the
    /// assistant message.
    async fn stream_model(&mut self, request: ModelRequest, phase: Phase) -> Result<Msg, Error> {
        let agent = self.agent;
        let model_name = request
            .options
            .model
            .clone()
            .unwrap_or_else(|| agent.model.name().to_owned());
        let span = tracing::info_span!(
            "chat",
            otel.name = Empty,
            gen_ai.operation.name = "chat",
            gen_ai.provider.name = agent.model.provider(),
            gen_ai.request.model = %model_name,
            gen_ai.request.temperature = request.options.temperature,
            gen_ai.request.top_p = request.options.top_p,
            gen_ai.request.max_tokens = request.options.max_tokens,
            gen_ai.response.finish_reasons = Empty,
            gen_ai.usage.input_tokens = Empty,
            gen_ai.usage.output_tokens = Empty,
            gen_ai.input.messages = Empty,
            gen_ai.output.messages = Empty,
            rein.phase = phase.as_str(),
        );
        if !span.is_disabled() {
            span.record("otel.name", format!("chat {model_name}"));
            if agent.record_content {
                span.record(
                    "gen_ai.input.messages",
                    serde_json::to_string(&request.messages).unwrap_or_default(),
                );
            }
        }
        let result = self
            .stream_model_in_span(request, phase)
            .instrument(span.clone())
            .await;
        if let Ok((msg, finish)) = &result {
            if let Some(reason) = finish {
                span.record(
                    "gen_ai.response.finish_reasons",
                    format!("{reason:?}").to_lowercase(),
                );
            }
            span.record("gen_ai.usage.input_tokens", self.last_usage.input_tokens);
            span.record("gen_ai.usage.output_tokens", self.last_usage.output_tokens);
            if agent.record_content && !span.is_disabled() {
                span.record(
                    "gen_ai.output.messages",
                    serde_json::to_string(msg).unwrap_or_default(),
                );
            }
        }
        #[cfg(feature = "metrics")]
        crate::observe::metrics_impl::model_call(
            &agent.info.name,
            &model_name,
            self.last_usage.input_tokens,
            self.last_usage.output_tokens,
        );
        result.map(|(msg, _)| msg)
    }

    async fn stream_model_in_span(
        &mut self,
        request: ModelRequest,
        phase: Phase,
    ) -> Result<(Msg, Option<FinishReason>), Error> {
        let agent = self.agent;
        self.model_calls += 1;
        self.last_usage = Usage::default();
        let mut finish = None;
        let listen = self.wants(phase.chunk_kind());
        let mut msg = Msg::new(Role::Assistant, Vec::new()).with_name(agent.info.name.clone());
        let mut calls: Vec<PartialCall> = Vec::new();
        let mut usage = Usage::default();
        let mut event: Option<HookEvent> = None;
        let model_err = |e| Error::model(phase.as_str(), agent.model.name(), e);
        let panicked = |payload: Box<dyn std::any::Any + Send>| {
            model_err(ModelError::new(
                ModelErrorKind::Other,
                format!("the model panicked: {}", panic_message(&*payload)),
            ))
        };
        let mut stream = std::panic::catch_unwind(AssertUnwindSafe(|| agent.model.stream(request)))
            .map_err(panicked)?;
        loop {
            let next = AssertUnwindSafe(stream.next())
                .catch_unwind()
                .await
                .map_err(panicked)?;
            let Some(item) = next else { break };
            let chunk = item.map_err(model_err)?;
            if let Some(sink) = self.sink {
                forward_chunk(sink, &chunk, &calls);
            }
            if let ModelChunk::Finish(reason) = &chunk {
                finish = Some(reason.clone());
            }
            apply_chunk(&mut msg, &mut calls, &mut usage, &chunk);
            if listen {
                let ev = event.get_or_insert_with(|| match phase {
                    Phase::Reasoning => HookEvent::ReasoningChunk(ReasoningChunkEvent {
                        meta: self.meta.clone(),
                        chunk: ModelChunk::Text(String::new()),
                        accumulated: Msg::placeholder(),
                    }),
                    Phase::Summary => HookEvent::SummaryChunk(SummaryChunkEvent {
                        meta: self.meta.clone(),
                        chunk: ModelChunk::Text(String::new()),
                        accumulated: Msg::placeholder(),
                    }),
                });
                swap_chunk(ev, chunk, &mut msg);
                // Notification event: failures are logged by the chain.
                let _ = self.dispatch(ev).await;
                swap_back(ev, &mut msg);
            }
        }
        for (i, call) in calls.into_iter().enumerate() {
            msg.content.push(ContentBlock::ToolUse(call.finish(i)));
        }
        self.usage.add(usage);
        self.last_usage = usage;
        Ok((msg, finish))
    }
}

/// Moves the chunk and the accumulated message into the chunk event.
fn swap_chunk(ev: &mut HookEvent, chunk: ModelChunk, msg: &mut Msg) {
    match ev {
        HookEvent::ReasoningChunk(e) => {
            e.chunk = chunk;
            std::mem::swap(&mut e.accumulated, msg);
        }
        HookEvent::SummaryChunk(e) => {
            e.chunk = chunk;
            std::mem::swap(&mut e.accumulated, msg);
        }
        _ => {}
    }
}

/// Takes the accumulated message back out of the chunk event.
fn swap_back(ev: &mut HookEvent, msg: &mut Msg) {
    match ev {
        HookEvent::ReasoningChunk(e) => std::mem::swap(&mut e.accumulated, msg),
        HookEvent::SummaryChunk(e) => std::mem::swap(&mut e.accumulated, msg),
        _ => {}
    }
}

/// A tool call being reassembled from fragments.
#[derive(Default)]
struct PartialCall {
    index: usize,
    id: Option<String>,
    name: String,
    arguments: String,
}

impl PartialCall {
    fn finish(self, position: usize) -> ToolUse {
        let id = self
            .id
            .filter(|id| !id.is_empty())
            .unwrap_or_else(|| format!("{}_{position}", new_id("call")));
        let input = if self.arguments.trim().is_empty() {
            Value::Object(Default::default())
        } else {
            serde_json::from_str(&self.arguments).unwrap_or(Value::String(self.arguments))
        };
        ToolUse {
            id,
            name: self.name,
            input,
        }
    }
}

fn apply_chunk(msg: &mut Msg, calls: &mut Vec<PartialCall>, usage: &mut Usage, chunk: &ModelChunk) {
    match chunk {
        ModelChunk::Text(t) => match msg.content.last_mut() {
            Some(ContentBlock::Text(s)) => s.push_str(t),
            _ => msg.content.push(ContentBlock::Text(t.clone())),
        },
        ModelChunk::Thinking(t) => match msg.content.last_mut() {
            Some(ContentBlock::Thinking(th)) => th.text.push_str(t),
            _ => msg.content.push(ContentBlock::Thinking(Thinking {
                text: t.clone(),
                signature: None,
            })),
        },
        ModelChunk::ThinkingSignature(sig) => {
            if let Some(ContentBlock::Thinking(th)) = msg
                .content
                .iter_mut()
                .rev()
                .find(|b| matches!(b, ContentBlock::Thinking(_)))
            {
                th.signature = Some(sig.clone());
            } else {
                msg.content.push(ContentBlock::Thinking(Thinking {
                    text: String::new(),
                    signature: Some(sig.clone()),
                }));
            }
        }
        ModelChunk::ToolCall {
            index,
            id,
            name,
            arguments,
        } => {
            let pos = match calls.iter().position(|c| c.index == *index) {
                Some(p) => p,
                None => {
                    calls.push(PartialCall {
                        index: *index,
                        ..PartialCall::default()
                    });
                    calls.len() - 1
                }
            };
            let call = &mut calls[pos];
            if let Some(id) = id
                && call.id.is_none()
            {
                call.id = Some(id.clone());
            }
            if let Some(name) = name {
                call.name.push_str(name);
            }
            call.arguments.push_str(arguments);
        }
        ModelChunk::Usage(u) => {
            if u.input_tokens > 0 {
                usage.input_tokens = u.input_tokens;
            }
            if u.output_tokens > 0 {
                usage.output_tokens = u.output_tokens;
            }
        }
        ModelChunk::Finish(_) => {}
    }
}

/// Forwards a chunk to a streaming caller (before it is applied, so `calls` tells
/// whether a tool-call index is new).
fn forward_chunk(sink: &Sink, chunk: &ModelChunk, calls: &[PartialCall]) {
    let event = match chunk {
        ModelChunk::Text(t) => AgentEvent::TextDelta(t.clone()),
        ModelChunk::Thinking(t) => AgentEvent::ThinkingDelta(t.clone()),
        ModelChunk::ToolCall {
            index,
            id,
            name: Some(name),
            ..
        } if !calls.iter().any(|c| c.index == *index) => AgentEvent::ToolCallStart {
            id: id.clone().unwrap_or_default(),
            name: name.clone(),
        },
        _ => return,
    };
    let _ = sink.send(event);
}
