//! The core of rein: messages, the model interface, tools, the run context, the hook
//! chain, the agent loop, sessions and their stores, and subagents.
//!
//! Applications depend on the `rein` facade, which re-exports every item here at the
//! same path (`rein_core::Agent` is `rein::Agent`) together with the production hooks,
//! providers, engine stores and the MCP client. Extensions (a hook library, a provider,
//! a store, a tool client) depend on `rein-core` alone and use only its public API —
//! the crates of this workspace do.
//!
//! Layers point one way inside the crate: `message ← model, tool ← context ← hook ←
//! agent ← subagent`; `store` (the session contract) sits below `agent`, which holds a
//! store and leases around calls.

pub mod agent;
#[doc(hidden)]
pub mod bench_support;
pub mod budget;
mod context;
mod error;
pub mod hook;
pub mod label;
pub mod mcp;
mod message;
pub mod model;
pub mod observe;
pub mod store;
mod strict;
pub mod subagent;
pub mod testing;
pub mod tool;
mod util;

pub use agent::{
    Agent, AgentBuilder, AgentEvent, AgentInfo, AgentStream, CallOutcome, ContextPolicy,
    DoubleText, Extensions, OutputMode, RunContext, StopReason, StreamRelease, TypedOutcome,
};
pub use budget::{Budget, BudgetExhausted, ModelPrice, Prices};
pub use error::{BuildError, BuildErrorKind, Error, ErrorKind, HookFailureKind};
pub use hook::RegistrationGuard;
pub use hook::{
    ActingChunkEvent, ErrorEvent, EventKind, FailurePolicy, Hook, HookError, HookEvent,
    HookRegistry, HookSite, Interest, IntoHook, PostActingEvent, PostCallEvent, PostCompactEvent,
    PostReasoningEvent, PostSummaryEvent, PreActingEvent, PreCallEvent, PreCompactEvent,
    PreReasoningEvent, PreSummaryEvent, ReasoningChunkEvent, SummaryChunkEvent, SyncHook,
};
pub use hook::{Decision, DecisionKind};
pub use hook::{HookFn, HookSettings, hook_fn};
pub use label::{Confidentiality, Integrity, Label};
pub use message::{ContentBlock, Msg, Role, Thinking, ToolResult, ToolUse};
pub use model::{
    FinishReason, GenerateOptions, Model, ModelCapabilities, ModelChunk, ModelError,
    ModelErrorKind, ModelRequest, ModelStream, ResponseFormat, ScriptedModel, ScriptedTurn,
    TokenCount, ToolChoice, Usage,
};
pub use store::{
    FileSessionStore, InMemorySessionStore, LeaseConfig, SessionKey, SessionStore, StoreError,
    StoreErrorKind, StoredSession,
};
pub use store::{Lease, SessionAdmin, SessionLeases};
pub use subagent::{
    DelegationStyle, GENERAL_PURPOSE, ModelResolver, SPAWN_TOOL, SubagentDeclaration,
    SubagentDeclarationBuilder, SubagentFactory,
};
pub use subagent::{SubagentWorkspace, WorkspaceMode};
pub use tool::SharedTool;
pub use tool::{
    EffectClass, FunctionTool, IntoTool, MAX_ARGUMENT_DEPTH, Tool, ToolCapabilities, ToolContext,
    ToolError, ToolSchema, Toolkit, ToolkitError,
};
