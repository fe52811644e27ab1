//! One model turn: the `chat` span, the model stream (panics caught), reassembly
//! ([`crate::model::accumulate`]), and the chunks handed to chunk hooks and a streaming
//! caller on the way. A call's runtime id is assigned when its first fragment arrives, so
//! what a streaming caller is told (`ToolCallStart`) and what memory records carry the
//! same id.

use std::panic::AssertUnwindSafe;

use futures::{FutureExt, StreamExt};
use tracing::Instrument;
use tracing::field::Empty;

use super::run::{Call, Sink};
use super::stream::AgentEvent;
use crate::error::Error;
use crate::hook::{EventKind, HookEvent, ReasoningChunkEvent, SummaryChunkEvent};
use crate::message::{ContentBlock, Msg, Role};
use crate::model::accumulate::{PartialCall, apply_chunk};
use crate::model::{
    FinishReason, ModelChunk, ModelError, ModelErrorKind, ModelRequest, ModelStream, Usage,
};
use crate::util::panic_message;

/// Moves the chunk and the accumulated message into the chunk event.
fn swap_chunk(ev: &mut HookEvent, chunk: ModelChunk, msg: &mut Msg) {
    match ev {
        HookEvent::ReasoningChunk(e) => {
            e.chunk = chunk;
            std::mem::swap(&mut e.accumulated, msg);
            e.meta.restamp();
        }
        HookEvent::SummaryChunk(e) => {
            e.chunk = chunk;
            std::mem::swap(&mut e.accumulated, msg);
            e.meta.restamp();
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

/// Forwards a chunk to a streaming caller. Called before the chunk is applied, so
/// `calls` tells whether a tool-call index is new; `next_id` is the id the call will get.
fn forward_chunk(sink: &Sink, chunk: &ModelChunk, calls: &[PartialCall]) -> Option<usize> {
    let event = match chunk {
        ModelChunk::Text(t) => AgentEvent::TextDelta(t.clone()),
        ModelChunk::Thinking(t) => AgentEvent::ThinkingDelta(t.clone()),
        ModelChunk::ToolCall {
            index,
            name: Some(_),
            ..
        } if !calls.iter().any(|c| c.index == *index) => return Some(*index),
        _ => return None,
    };
    let _ = sink.send(event);
    None
}

/// Announces a tool call whose first fragment (with its name) was just applied.
fn announce_call(sink: &Sink, calls: &[PartialCall], index: usize) {
    if let Some(c) = calls.iter().find(|c| c.index == index) {
        let _ = sink.send(AgentEvent::ToolCallStart {
            id: c.id.clone(),
            name: c.name.clone(),
        });
    }
}

/// The error for a model that panicked while starting or polling its stream.
fn model_panicked(phase: Phase, model: &str, payload: &(dyn std::any::Any + Send)) -> Error {
    Error::model(
        phase.as_str(),
        model,
        ModelError::new(
            ModelErrorKind::Other,
            format!("the model panicked: {}", panic_message(payload)),
        ),
    )
}

/// Which model step a stream belongs to.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    Reasoning,
    Summary,
    /// The summary of a compaction: its chunks reach no hook and no caller.
    Compaction,
}

impl Phase {
    fn as_str(self) -> &'static str {
        match self {
            Phase::Reasoning => "reasoning",
            Phase::Summary => "summary",
            Phase::Compaction => "compaction",
        }
    }

    /// The chunk event of this phase; `None` for a compaction.
    fn chunk_kind(self) -> Option<EventKind> {
        match self {
            Phase::Reasoning => Some(EventKind::ReasoningChunk),
            Phase::Summary => Some(EventKind::SummaryChunk),
            Phase::Compaction => None,
        }
    }
}

impl Call<'_> {
    /// One model call: streams chunks to chunk hooks and the caller, reassembles the
    /// assistant message.
    ///
    /// Not an `async fn`: the span is made and the model's stream started here (inside
    /// the span), so no state machine of the call holds the request (with its options)
    /// while the turn streams.
    pub(super) fn stream_model(
        &mut self,
        request: ModelRequest,
        phase: Phase,
    ) -> impl Future<Output = Result<Msg, Error>> {
        let agent = self.agent;
        // Borrowed: formatted only into a span someone listens to.
        let model_name: &str = request
            .options
            .model
            .as_deref()
            .unwrap_or_else(|| agent.model.name());
        // Owned only for the model-call metric.
        let metric_model = cfg!(feature = "metrics").then(|| model_name.to_owned());
        let span = tracing::info_span!(
            "chat",
            otel.name = Empty,
            gen_ai.operation.name = "chat",
            gen_ai.provider.name = agent.model.provider(),
            gen_ai.request.model = model_name,
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
        self.model_calls += 1;
        self.last_usage = Usage::default();
        let started = span
            .in_scope(|| std::panic::catch_unwind(AssertUnwindSafe(|| agent.model.stream(request))))
            .map_err(|payload| model_panicked(phase, agent.model.name(), &*payload));
        self.stream_model_in_span(started, phase, span.clone(), metric_model)
            .instrument(span)
    }

    /// The turn inside its `chat` span; records the span's outcome fields (and the
    /// model-call metric) when it ends.
    async fn stream_model_in_span(
        &mut self,
        started: Result<ModelStream, Error>,
        phase: Phase,
        span: tracing::Span,
        metric_model: Option<String>,
    ) -> Result<Msg, Error> {
        let agent = self.agent;
        let result = match started {
            Ok(stream) => self.turn(stream, phase).await,
            Err(e) => Err(e),
        };
        if let Ok((msg, finish)) = &result {
            // Formatted only for a span someone listens to (two allocations per turn).
            if let Some(reason) = finish
                && !span.is_disabled()
            {
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
        if let Some(model) = &metric_model {
            agent.metric_keys.model_call(
                &agent.info.name,
                model,
                self.last_usage.input_tokens,
                self.last_usage.output_tokens,
            );
        }
        #[cfg(not(feature = "metrics"))]
        drop(metric_model);
        result.map(|(msg, _)| msg)
    }

    /// Streams the model's reply and reassembles it.
    async fn turn(
        &mut self,
        mut stream: ModelStream,
        phase: Phase,
    ) -> Result<(Msg, Option<FinishReason>), Error> {
        let agent = self.agent;
        let mut finish = None;
        let listen = phase.chunk_kind().is_some_and(|kind| self.wants(kind));
        let mut msg = Msg::new(Role::Assistant, Vec::new()).with_name(agent.info.name.clone());
        let mut calls: Vec<PartialCall> = Vec::new();
        let mut usage = Usage::default();
        let mut event: Option<HookEvent> = None;
        let model_err = |e| Error::model(phase.as_str(), agent.model.name(), e);
        let panicked = |payload: Box<dyn std::any::Any + Send>| {
            model_panicked(phase, agent.model.name(), &*payload)
        };
        loop {
            let next = AssertUnwindSafe(stream.next())
                .catch_unwind()
                .await
                .map_err(panicked)?;
            let Some(item) = next else { break };
            let chunk = item.map_err(model_err)?;
            // Held deltas are released after the post-hooks accepted the turn.
            let live = self
                .sink
                .filter(|_| !agent.hold_deltas && phase != Phase::Compaction);
            let started = live.and_then(|sink| forward_chunk(sink, &chunk, &calls));
            if let ModelChunk::Finish(reason) = &chunk {
                finish = Some(reason.clone());
            }
            apply_chunk(&mut msg, &mut calls, &mut usage, &chunk);
            if let (Some(sink), Some(index)) = (live, started) {
                announce_call(sink, &calls, index);
            }
            if listen {
                let ev = event.get_or_insert_with(|| match phase {
                    Phase::Reasoning => HookEvent::ReasoningChunk(ReasoningChunkEvent {
                        meta: self.meta.clone(),
                        chunk: ModelChunk::Text(String::new()),
                        accumulated: Msg::placeholder(),
                    }),
                    Phase::Summary | Phase::Compaction => {
                        HookEvent::SummaryChunk(SummaryChunkEvent {
                            meta: self.meta.clone(),
                            chunk: ModelChunk::Text(String::new()),
                            accumulated: Msg::placeholder(),
                        })
                    }
                });
                swap_chunk(ev, chunk, &mut msg);
                // Notification event: failures are logged by the chain.
                let _ = super::fire::dispatch!(self, ev);
                swap_back(ev, &mut msg);
            }
        }
        for call in calls {
            msg.content.push(ContentBlock::ToolUse(call.finish()));
        }
        self.usage.add(usage);
        self.last_usage = usage;
        Ok((msg, finish))
    }
}
