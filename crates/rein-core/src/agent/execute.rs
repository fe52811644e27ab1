//! The acting step's execution: running a turn's planned calls (concurrency-safe ones
//! together, at most the agent's tool concurrency at a time), settling journaled ones,
//! routing progress to `ActingChunk`, and turning every failure into a result.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, PoisonError};

use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender, unbounded};
use futures::{FutureExt, StreamExt};
use serde_json::Value;
use tracing::Instrument;
use tracing::field::Empty;

use super::acting::{Planned, Ran};
use super::journal::Entry;
use super::memory::CallMemory;
use super::run::{Call, emit};
use super::stream::AgentEvent;
use crate::context::{DecisionSink, EventSink};
use crate::error::Error;
use crate::hook::{ActingChunkEvent, DecisionKind, EventKind, Forward, HookEvent};
use crate::label::Label;
use crate::message::{ToolResult, ToolUse};
use crate::tool::{EffectClass, ProgressChunk, ToolCapabilities, ToolContext};
use crate::util::panic_message;

impl Call<'_> {
    /// Merges into the trail the decisions the subagents of this step's delegation
    /// calls recorded so far (already passed on up the tree), in the order they were
    /// recorded.
    pub(super) fn merge_forwarded(&self, sink: Option<&DecisionSink>) {
        let Some(f) = sink.and_then(DecisionSink::get::<Forward>) else {
            return;
        };
        let got = f.take();
        if !got.is_empty() {
            self.trail
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .extend(got);
        }
    }

    /// Runs the turn's calls: contiguous concurrency-safe calls together (at most the
    /// agent's tool concurrency at once), an unsafe call alone; results in call order.
    /// Progress chunks are routed to `ActingChunk` hooks while the tools run.
    pub(super) async fn execute(
        &self,
        memory: &mut CallMemory,
        planned: &[Planned],
    ) -> Result<Vec<Ran>, Error> {
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
        // A delegating agent that records decisions collects its subagents' decisions
        // here while the calls run (one forwarder per step, only then).
        let decisions = (self.meta.mode.on && self.agent.delegation.is_some()).then(|| {
            DecisionSink::new(Forward::new(
                &self.agent.info.name,
                self.ctx.decision_sink(),
            ))
        });
        let concurrency = self.agent.limits.tool_concurrency.max(1);
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
            for p in &planned[start..end] {
                if p.runs() {
                    memory.started(&p.tool_use.id);
                }
            }
            let calls =
                (start..end).map(|i| self.run_tool(&planned[i], i, tx.clone(), decisions.as_ref()));
            // `join_all` for a group within the limit (no per-future task node); a
            // larger group runs through an ordered buffer of `concurrency` slots.
            let group = if end - start <= concurrency {
                futures::future::join_all(calls).left_future()
            } else {
                futures::stream::iter(calls)
                    .buffered(concurrency)
                    .collect::<Vec<_>>()
                    .right_future()
            };
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
            if memory.journaling() {
                let ended: Vec<_> = planned[start..end]
                    .iter()
                    .zip(&group_results)
                    .filter(|(p, _)| p.rejection.is_none() && p.denial.is_none())
                    .filter_map(|(p, (result, pending, label))| {
                        let (class, attempt, decision) = p.journal?;
                        let entry = Entry::claimed(class, attempt, decision.map(str::to_owned));
                        Some((entry, result.clone(), pending.is_some(), *label))
                    })
                    .collect();
                self.settle(memory, ended).await?;
            }
            results.extend(group_results);
            start = end;
        }
        Ok(results)
    }

    /// The capabilities of the agent's tool `name`, resolved (an unknown tool: what an
    /// MCP tool is, failing closed; it never runs).
    pub(super) fn capabilities(&self, name: &str) -> ToolCapabilities {
        self.agent
            .toolkit
            .entry(name)
            .map_or_else(ToolCapabilities::remote, |e| e.capabilities)
    }

    /// The effect class of the agent's tool `name` (an unknown tool never runs).
    pub(super) fn effect_class(&self, name: &str) -> EffectClass {
        self.agent
            .toolkit
            .entry(name)
            .map_or(EffectClass::AtMostOnce, |e| e.tool.effect_class())
    }

    pub(super) fn is_concurrency_safe(&self, p: &Planned) -> bool {
        p.denial.is_some()
            || p.rejection.is_some()
            || self
                .agent
                .toolkit
                .entry(&p.tool_use.name)
                .is_none_or(|e| e.tool.concurrency_safe())
    }

    pub(super) async fn progress(&self, planned: &[Planned], chunk: ProgressChunk) {
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
            let _ = super::fire::dispatch!(self, &mut ev);
        }
    }

    /// Runs one call and turns every failure into an error result naming the tool.
    pub(super) async fn run_tool(
        &self,
        p: &Planned,
        index: usize,
        progress: Option<UnboundedSender<ProgressChunk>>,
        decisions: Option<&DecisionSink>,
    ) -> Ran {
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
        let suspend = self
            .agent
            .delegation
            .as_ref()
            .map(|_| Arc::new(std::sync::Mutex::new(None)));
        let (mut result, status, label) = self
            .run_tool_in_span(p, index, progress, suspend.clone(), decisions)
            .instrument(span.clone())
            .await;
        // What its subagents decided precedes what happens to the call's result.
        self.merge_forwarded(decisions);
        let pending =
            suspend.and_then(|slot| slot.lock().unwrap_or_else(PoisonError::into_inner).take());
        self.cap_result(&mut result);
        span.record("rein.tool.status", status);
        if self.agent.record_content && !span.is_disabled() {
            span.record("gen_ai.tool.call.result", result.content.as_str());
        }
        #[cfg(feature = "metrics")]
        self.agent.metric_keys.tool_call(
            crate::observe::metrics_impl::tool_label(self.agent.tool_labels.as_deref(), name),
            status,
        );
        (result, pending, label)
    }

    /// Truncates a result longer than the agent's maximum (on a char boundary) and
    /// appends a marker saying how much was cut; the cut is recorded in the trail.
    pub(super) fn cap_result(&self, result: &mut ToolResult) {
        let max = self.agent.limits.max_tool_result_bytes;
        let len = result.content.len();
        if len <= max {
            return;
        }
        let mut end = max;
        while !result.content.is_char_boundary(end) {
            end -= 1;
        }
        result.content.truncate(end);
        result.content.push_str(&format!(
            "\n[truncated by the runtime: the tool returned {len} bytes; the first {end} are shown]"
        ));
        self.note_runtime(
            DecisionKind::ToolResultTruncated,
            "tool_result.content",
            &len.to_string(),
            &format!("tool result over {max} bytes"),
            &result.id,
        );
    }

    /// Runs one call; returns the result, a status label (`ok`, `denied`,
    /// `unknown_tool`, `invalid_arguments`, `too_many_calls`, `error`, `panic`,
    /// `timeout`) and the result's information-flow label: the runtime's own refusals
    /// are [`Label::BOTTOM`]; what a tool returned carries its declared label joined
    /// with its arguments' documents (integrity kept when the tool endorsed it) and
    /// whatever it raised.
    pub(super) async fn run_tool_in_span(
        &self,
        p: &Planned,
        index: usize,
        progress: Option<UnboundedSender<ProgressChunk>>,
        suspend: Option<Arc<std::sync::Mutex<Option<Vec<Value>>>>>,
        decisions: Option<&DecisionSink>,
    ) -> (ToolResult, &'static str, Label) {
        let ToolUse { id, name, input } = &p.tool_use;
        if let Some((text, status)) = &p.rejection {
            return (
                ToolResult::error(id, name, text.clone()),
                status,
                Label::BOTTOM,
            );
        }
        if let Some(result) = &p.replay {
            return (result.clone(), "replayed", p.flow);
        }
        if let Some(reason) = &p.denial {
            let text = format!("Tool call `{name}` was denied: {reason}");
            return (ToolResult::error(id, name, text), "denied", Label::BOTTOM);
        }
        // Checked again: a hook may have renamed the call or rewritten its arguments.
        let Some(entry) = self.agent.toolkit.entry(name) else {
            return (
                ToolResult::error(id, name, self.unknown_tool(name)),
                "unknown_tool",
                Label::BOTTOM,
            );
        };
        let input = p.args.as_ref().unwrap_or(input);
        let args = if p.checked {
            input.clone()
        } else {
            match entry.prepare(input) {
                Ok(pruned) => pruned.unwrap_or_else(|| input.clone()),
                Err(msg) => {
                    let text = self.invalid_arguments(&entry.schema, &msg);
                    return (
                        ToolResult::error(id, name, text),
                        "invalid_arguments",
                        Label::BOTTOM,
                    );
                }
            }
        };
        let flow = Arc::new(crate::tool::ResultFlow::default());
        let ctx = ToolContext {
            run: self.ctx.clone(),
            agent: Arc::clone(&self.agent.info),
            tool_use_id: id.clone(),
            index,
            progress,
            // Only a delegating tool reads the sink: erased once per call, and only
            // on agents that delegate while a caller streams.
            events: self
                .sink
                .filter(|_| self.agent.delegation.is_some())
                .map(|s| EventSink::new(s.clone())),
            suspend,
            decisions: decisions.cloned(),
            retry: p.retry,
            resume_child: p.resume_child,
            flow: Arc::clone(&flow),
            call_label: self.label,
        };
        let limit = entry.tool.timeout().unwrap_or(self.agent.tool_timeout);
        // Created inside the guarded block: a tool that panics before returning its
        // future is caught too.
        let fut = AssertUnwindSafe(async { entry.tool.call(args, ctx).await }).catch_unwind();
        let declared = entry.capabilities.result;
        let ran = tokio::time::timeout(limit, fut).await;
        let (raised, endorsed) = flow.get();
        let carried = if endorsed {
            Label::new(declared.integrity, p.flow.confidentiality)
        } else {
            p.flow
        };
        let label = declared.join(carried).join(raised);
        let (result, status) = match ran {
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
        };
        (result, status, label)
    }
}
