//! Observability: the decision trail, GenAI spans and (feature `metrics`) metrics.
//!
//! # Decision trail
//! Every hook action that changes a run — options set, messages replaced, tool input
//! rewritten, tool denied, tool result replaced, redo, stop, final message replaced — is
//! recorded as a [`Decision`]: which hook (name and priority), on which event, which
//! field, a short digest of the value before and after, and the reason where there is
//! one. Pure observation leaves no record, and a mutation that sets the value it found
//! leaves none either.
//!
//! Whether a call records is decided once, when it starts: it does when the agent was
//! built with [`AgentBuilder::decision_trail`](crate::AgentBuilder::decision_trail), or
//! when a `tracing` subscriber is interested in target `rein::decision` at `INFO`. Then
//! each decision is emitted as a `tracing` event on the current span (a span event in
//! OpenTelemetry terms) and collected on [`CallOutcome::decisions`](crate::CallOutcome)
//! (also visible to `PostCall` and `Error` hooks). Otherwise nothing is built.
//!
//! # Subagents
//! A subagent's decisions are part of its delegating call's trail. Every decision a
//! subagent run through `agent_spawn` records — its hooks' and the runtime's (a
//! rejected call, a truncated result), at any depth — appears in the top-level call's
//! [`CallOutcome::decisions`](crate::CallOutcome) (and in its `PostCall`/`Error`
//! hooks' view and the streamed [`AgentEvent::Final`](crate::AgentEvent)), in the order
//! the decisions were made, each with [`Decision::agent_path`]: the path of agent
//! names from the called agent down to the one that decided (`support/refunder`, the
//! format of the pending-approval `agent` field); the called agent's own decisions
//! hold its name (`support`). Decisions are passed up as they are recorded, so those a
//! subagent made before it was cancelled (its `timeout_seconds`) or failed are kept. A
//! subagent records whenever its delegating call does. The order holds across
//! concurrent delegation calls of one turn too, and a subagent's decisions precede
//! the delegating call's decisions about that call's result. With the trail off nothing is collected,
//! forwarded or allocated for it, in any agent of the tree.
//!
//! # Digests and readable numbers (opt-in)
//! Digests reveal nothing by default: `"{len}B#{hash}"` (FNV-1a 64 of the JSON form), so
//! two digests compare equal exactly when the values do. Generation options are shown
//! in full (they hold no user data). With
//! [`AgentBuilder::record_content`](crate::AgentBuilder::record_content) digests show a
//! truncated preview instead. To see the numbers a hook changed without revealing any
//! other content, opt numeric argument fields in with [`RevealNumbers`] (e.g.
//! `/amount` of `refund`): a rewrite of such a field lists it readable, before and
//! after, in [`Decision::changes`] (and the `changes` field of the `tracing` event),
//! while `before`/`after` stay digests.
//!
//! # Spans
//! Spans follow the OpenTelemetry GenAI semantic conventions (span names carry the
//! `otel.name` field for `tracing-opentelemetry`):
//! - `invoke_agent {agent}` per call, with `gen_ai.agent.id`/`name`, `rein.session.id`,
//!   `rein.run.id`, `rein.agent.parent_id`, usage;
//! - `chat {model}` per model call, with request options, finish reasons and usage;
//! - `execute_tool {tool}` per tool call, with `gen_ai.tool.name` and
//!   `gen_ai.tool.call.id`. A subagent's `invoke_agent` span sits under its parent's
//!   `execute_tool agent_spawn` span.
//!
//! Message contents, tool arguments and results are recorded on spans only with
//! `record_content(true)`.

/// Re-exported from [`crate::hook`], where decisions are recorded.
pub use crate::hook::{Decision, DecisionKind, FieldChange, RevealNumbers};

/// Metrics through the `metrics` facade (feature `metrics`). Every function is a no-op
/// without the feature.
#[cfg(feature = "metrics")]
pub(crate) mod metrics_impl {
    use std::collections::HashSet;
    use std::sync::{PoisonError, RwLock};

    use metrics::{Key, Label, Level, Metadata};

    /// What the `counter!` macro would attach: this module, `INFO`.
    static METADATA: Metadata<'static> =
        Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

    /// One agent's counter keys, built on first use and kept with the agent: an update
    /// scans the agent's few keys under a shared read lock instead of building the key
    /// (allocating its labels) or hashing it under a process-wide lock. At most
    /// [`MAX_CACHED`] keys are kept per agent (its outcomes, models, tools and
    /// statuses are few); beyond that, keys are built per update.
    #[derive(Default)]
    pub(crate) struct Keys(RwLock<Vec<Key>>);

    impl std::fmt::Debug for Keys {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("metrics::Keys")
        }
    }

    const MAX_CACHED: usize = 256;

    /// The cached key `name{k0=v0, k1=v1}` (label names are fixed per metric name).
    fn find<'a>(
        cached: &'a [Key],
        name: &str,
        labels: &[(&'static str, &str); 2],
    ) -> Option<&'a Key> {
        cached.iter().find(|key| {
            key.name() == name && key.labels().zip(labels).all(|(l, (_, v))| l.value() == *v)
        })
    }

    impl Keys {
        /// Adds `n` to the counter `name{k0=v0, k1=v1}` of the installed recorder.
        fn count(&self, name: &'static str, labels: [(&'static str, &str); 2], n: u64) {
            let add = |key: &Key| {
                metrics::with_recorder(|r| r.register_counter(key, &METADATA).increment(n));
            };
            {
                let cached = self.0.read().unwrap_or_else(PoisonError::into_inner);
                if let Some(key) = find(&cached, name, &labels) {
                    add(key);
                    return;
                }
            }
            let key = Key::from_parts(
                name,
                labels
                    .iter()
                    .map(|&(k, v)| Label::new(k, v.to_owned()))
                    .collect::<Vec<_>>(),
            );
            add(&key);
            let mut cached = self.0.write().unwrap_or_else(PoisonError::into_inner);
            if cached.len() < MAX_CACHED && find(&cached, name, &labels).is_none() {
                cached.push(key);
            }
        }

        pub(crate) fn call(&self, agent: &str, outcome: &'static str) {
            self.count(
                "rein_calls_total",
                [("agent", agent), ("outcome", outcome)],
                1,
            );
        }

        pub(crate) fn model_call(&self, agent: &str, model: &str, input: u64, output: u64) {
            self.count(
                "rein_model_calls_total",
                [("agent", agent), ("model", model)],
                1,
            );
            let tokens = "rein_tokens_total";
            self.count(tokens, [("agent", agent), ("direction", "input")], input);
            self.count(tokens, [("agent", agent), ("direction", "output")], output);
        }

        pub(crate) fn tool_call(&self, tool: &str, status: &'static str) {
            self.count(
                "rein_tool_calls_total",
                [("tool", tool), ("status", status)],
                1,
            );
        }

        pub(crate) fn denial(&self, hook: &str, tool: &str) {
            self.count("rein_denials_total", [("hook", hook), ("tool", tool)], 1);
        }
    }

    /// Maps a tool name to its label: itself, or `"other"` outside a configured set.
    pub(crate) fn tool_label<'a>(labels: Option<&HashSet<String>>, tool: &'a str) -> &'a str {
        match labels {
            Some(set) if !set.contains(tool) => "other",
            _ => tool,
        }
    }
}
