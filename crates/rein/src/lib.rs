//! # rein — an embeddable agent runtime you can govern
//!
//! A prompt can tell a model "never claim a refund was paid"; the model can still
//! sample the sentence. Only code on the path can guarantee it. `rein` is that path: a
//! ReAct agent loop whose every step passes through a typed, priority-ordered chain of
//! [`Hook`]s that can observe and *change* what happens — rewrite the model options,
//! the tool arguments, the tool results and the final reply; deny a tool call; make the
//! model think again; stop for a human.
//!
//! ```
//! use rein::*;
//! use serde_json::json;
//!
//! /// The refund tool's arguments; its JSON Schema is generated from them.
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct RefundArgs { order: String, amount: f64 }
//!
//! /// Refuses refunds above 100, whatever the model decides.
//! struct RefundCap;
//!
//! impl Hook for RefundCap {
//!     fn priority(&self) -> i32 { 20 }
//!     fn interest(&self) -> Interest { Interest::only(EventKind::PreActing) }
//!     async fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError> {
//!         if let HookEvent::PreActing(e) = event {
//!             let amount = e.tool_use().input["amount"].as_f64().unwrap_or(0.0);
//!             if e.tool_use().name == "refund" && amount > 100.0 {
//!                 e.deny("refunds above 100 need a human");
//!             }
//!         }
//!         Ok(())
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut tools = Toolkit::new();
//! tools.register(FunctionTool::typed("refund", "Refunds an order.", |args: RefundArgs| async move {
//!     Ok(format!("refunded {} on {}", args.amount, args.order))
//! }))?;
//! let model = ScriptedModel::new([
//!     ScriptedTurn::tool_call("refund", json!({"order": "A-1", "amount": 500})),
//!     ScriptedTurn::text("I could not refund that; a colleague will follow up."),
//! ]);
//! let agent = Agent::builder().model(model.clone()).toolkit(tools).hook(RefundCap).build()?;
//! let reply = agent.call(Msg::user("refund my order")).await?;
//! assert!(reply.text().contains("colleague"));
//! // The model was told why: the denial reached it as an error tool result.
//! let second = &model.requests()[1];
//! assert!(second.messages.iter().any(|m| m.tool_results().iter().any(|r| r.is_error)));
//! # Ok(()) }
//! ```
//!
//! ## The model
//! - [`Agent`] runs the loop (see [`agent`] for the diagram and memory rules).
//! - [`Hook`] is the one trait you implement; [`HookEvent`] is what it receives. Hooks
//!   run in ascending priority, ties in registration order, and rewrites are threaded
//!   (see [`hook`]).
//! - [`Model`] streams chunks; [`ScriptedModel`] is the offline model for tests. Real
//!   providers are cargo features: `openai` (`OpenAiChatModel`, any OpenAI-compatible
//!   chat-completions server) and `anthropic` (`AnthropicModel`); see [`model`].
//! - [`Tool`]s live in a [`Toolkit`]; their arguments are validated against their JSON
//!   Schema, and every failure becomes an error result the model can read.
//!   [`FunctionTool::typed`] generates the schema from a Rust type.
//! - [`hook_fn`] makes a hook from a closure; [`testing::HookHarness`] unit-tests hooks
//!   without an agent.
//! - [`hooks`] is the production hook library: latency percentiles, masking, audit,
//!   self-correction, tool guard, dynamic options and approval, configured from one
//!   [`hooks::HooksConfig`]. They are built on the same public API as your own hooks.
//! - A [`SessionStore`] makes conversations durable: [`FileSessionStore`] keeps one
//!   file per session, saved atomically after every call with a version check.
//! - Failures of a call are values: [`Error`] with an [`ErrorKind`]; building fails
//!   with a [`BuildError`].
//!
//! ## Crates
//! This crate is a facade: every path above is re-exported from the crates that define
//! it, and depending on `rein` alone is enough. `rein-core` (messages, models' interface,
//! tools, the hook chain, the agent loop, sessions, subagents), `rein-hooks` (the
//! production hooks), `rein-pii` (the masker), and behind features `rein-providers`
//! (`openai`, `anthropic`), `rein-stores` (`redis`, `postgres`) and `rein-mcp` (`mcp`).
//! [`prelude`] holds the names most programs use.
//!
//! ## Guarantees
//! 1. A hook installed on an agent sees every event of that agent.
//! 2. Memory is always valid: every stored tool use has exactly one result, whatever a
//!    hook does, whatever fails, and when a call's future is dropped.
//! 3. Ordering is explicit and a denial cannot be undone.
//! 4. Observing is nearly free: an event no hook subscribed to is never built.
//! 5. Per-call state lives in the call ([`RunContext::extensions`]), not in hooks.
//! 6. Each hook decides whether its failures abort the call or are only logged;
//!    panics and timeouts count as failures; the caller never sees a panic.
//! 7. The tool call that runs is the one every subscribed `PreActing` hook saw in its
//!    final form: calls are admitted (arguments normalised, malformed or unknown calls
//!    refused) before any hook, and a rewrite sends the hooks that had not seen it
//!    through the call again (see [`agent::MAX_PRE_ACTING_PASSES`]).
//! 8. Tool-call ids are assigned by the runtime, unique per call; an approval decision
//!    applies only to the call it was made for.
//! 9. A streaming caller can be shown only turns the post-hooks accepted
//!    ([`StreamRelease::AfterAcceptance`]).

#![cfg_attr(docsrs, feature(doc_cfg))]

pub use rein_core::*;

/// Models: the streaming interface the agent loop talks to, the offline
/// [`ScriptedModel`], and (features `openai`, `anthropic`) the
/// real providers of `rein-providers`. See [`rein_core::model`].
pub mod model {
    pub use rein_core::model::*;

    /// Recording real model runs and replaying them offline: [`RecordingModel`]
    /// (`replay::RecordingModel`), [`ReplayModel`](replay::ReplayModel), the fixture
    /// format, and [`PiiRedactor`](replay::PiiRedactor), the `rein-pii` masker plus
    /// secret patterns as the redactor of what a recording writes. See
    /// [`rein_core::model::replay`] for the format and what a replay compares; the
    /// decision trail a replay is checked against is
    /// [`testing::DecisionTrail`](crate::testing::DecisionTrail).
    ///
    /// [`RecordingModel`]: replay::RecordingModel
    pub mod replay {
        pub use rein_core::model::replay::*;
        pub use rein_hooks::{PiiRedactor, SECRET_PATTERNS};
    }
    #[cfg(all(feature = "openai", feature = "anthropic"))]
    #[doc(hidden)]
    pub use rein_providers::sse_probe;
    #[cfg(feature = "anthropic")]
    #[cfg_attr(docsrs, doc(cfg(feature = "anthropic")))]
    pub use rein_providers::{AnthropicModel, AnthropicModelBuilder};
    #[cfg(any(feature = "openai", feature = "anthropic"))]
    #[cfg_attr(docsrs, doc(cfg(any(feature = "openai", feature = "anthropic"))))]
    pub use rein_providers::{HttpConfig, RetryPolicy, transport};
    #[cfg(feature = "openai")]
    #[cfg_attr(docsrs, doc(cfg(feature = "openai")))]
    pub use rein_providers::{OpenAiChatModel, OpenAiChatModelBuilder};
}

/// Sessions: the store contract, the file and in-memory stores, and (features `redis`,
/// `postgres`) the stores on shared engines of `rein-stores`. See [`rein_core::store`]
/// for the consistency model.
pub mod store {
    pub use rein_core::store::*;
    #[cfg(feature = "postgres")]
    #[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
    pub use rein_stores::{
        PostgresAuditSink, PostgresAuditSinkBuilder, PostgresSessionStore,
        PostgresSessionStoreBuilder,
    };
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub use rein_stores::{RedisSessionStore, RedisSessionStoreBuilder};
}

/// The production hooks and their configuration: the `rein-hooks` crate.
pub mod hooks {
    pub use rein_hooks::*;
}

/// MCP tools: server declarations (always) and, with the feature `mcp`, the client of
/// `rein-mcp` that connects them (`build_async`).
pub mod mcp {
    pub use rein_core::mcp::*;
    #[cfg(feature = "mcp")]
    #[cfg_attr(docsrs, doc(cfg(feature = "mcp")))]
    pub use rein_mcp::*;
}

#[doc(hidden)]
pub mod bench_support {
    pub use rein_core::bench_support::*;
    pub use rein_hooks::bench_support::*;
}

#[cfg(feature = "anthropic")]
#[cfg_attr(docsrs, doc(cfg(feature = "anthropic")))]
pub use model::{AnthropicModel, AnthropicModelBuilder};
#[cfg(any(feature = "openai", feature = "anthropic"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "openai", feature = "anthropic"))))]
pub use model::{HttpConfig, RetryPolicy};
#[cfg(feature = "openai")]
#[cfg_attr(docsrs, doc(cfg(feature = "openai")))]
pub use model::{OpenAiChatModel, OpenAiChatModelBuilder};
#[cfg(feature = "mcp")]
#[cfg_attr(docsrs, doc(cfg(feature = "mcp")))]
pub use rein_mcp::BuildAsync;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use store::PostgresSessionStore;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use store::RedisSessionStore;

/// The names most programs use: `use rein::prelude::*;`.
pub mod prelude {
    pub use rein_core::{
        Agent, AgentBuilder, AgentEvent, Budget, BuildError, CallOutcome, ContentBlock, Error,
        ErrorKind, EventKind, FunctionTool, Hook, HookError, HookEvent, Interest, Model, Msg, Role,
        RunContext, ScriptedModel, ScriptedTurn, SessionKey, SessionStore, StopReason, SyncHook,
        Tool, ToolContext, ToolError, Toolkit, hook_fn,
    };
    pub use rein_hooks::{Hooks, HooksConfig};
    #[cfg(feature = "mcp")]
    pub use rein_mcp::BuildAsync as _;
}
