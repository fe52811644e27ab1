//! The loop's two ways of ending a run of turns that are not answers: a `goto_reasoning`
//! redo (what the redone turn leaves in memory) and the summary call at the iteration
//! limit.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::fire::fire;
use super::memory::CallMemory;
use super::model_turn::Phase;
use super::run::Call;
use crate::error::Error;
use crate::hook::{EventKind, PostSummaryEvent, PreSummaryEvent};
use crate::message::{ContentBlock, Msg, Role, ToolResult, ToolUse};
use crate::model::{Messages, ModelRequest};

/// Given to the summary call (not persisted) when the iteration limit is reached.
const SUMMARY_INSTRUCTION: &str = "You have failed to generate a response within the maximum \
     iterations. Now respond directly by summarizing the current situation.";

/// Result text for tool uses a redo left without a result.
const REDONE: &str = "not executed: reasoning was redone";

/// The messages a redo leaves: the redone message, its tool uses paired with results
/// the hook supplied (synthetic error results for the rest), then the hook's other
/// messages.
pub(super) fn redo_messages(msg: Msg, extra: Vec<Msg>) -> Result<Vec<Msg>, Error> {
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
    let mut out = vec![msg];
    if !uses.is_empty() {
        let results = uses.into_iter().map(|u| {
            supplied
                .remove(&u.id)
                .unwrap_or_else(|| ToolResult::error(u.id, u.name, REDONE))
        });
        out.push(Msg::tool(results));
    }
    out.extend(rest);
    Ok(out)
}

impl Call<'_> {
    /// The iteration limit was reached: `PreSummary`, a model call without tools,
    /// `PostSummary`; the summary is stored.
    pub(super) async fn summarize(
        &mut self,
        memory: &mut CallMemory,
    ) -> Result<Option<Msg>, Error> {
        let agent = self.agent;
        memory.repair(&format!(
            "cancelled: maximum iterations ({}) reached",
            agent.max_iters
        ));
        self.label = memory.session_label();
        let mut messages = Messages::from_parts(
            self.system.clone(),
            memory.shared(),
            vec![Msg::user(SUMMARY_INSTRUCTION).synthetic()],
        );
        let mut options = self.request_options(true);
        if self.wants(EventKind::PreSummary) {
            let (changed, changed_options) = fire!(self, PreSummary(PreSummaryEvent {
                meta: self.meta.clone(),
                messages,
                options: Box::new(options),
                max_iters: agent.max_iters,
            }) => { messages, options });
            messages = changed;
            options = *changed_options;
        }
        let request = self
            .fit_window(ModelRequest {
                messages,
                tools: Arc::default(),
                options,
            })
            .await?;
        let summary = if self.ledgers.is_none() {
            Some(self.stream_model(request, Phase::Summary).await?)
        } else {
            Box::pin(self.model_call(memory, request, Phase::Summary)).await?
        };
        let Some(mut summary) = summary else {
            return Ok(None);
        };
        // A summary never carries tool uses: there were no tools to call.
        summary
            .content
            .retain(|b| !matches!(b, ContentBlock::ToolUse(_)));
        if self.wants(EventKind::PostSummary) {
            summary = fire!(self, PostSummary(PostSummaryEvent {
                meta: self.meta.clone(),
                message: summary,
            }) => { message });
        }
        summary.raise_label(self.label);
        self.release(&summary);
        memory.push(summary.clone());
        Ok(Some(summary))
    }
}
