//! Integration tests: one binary, one module per area, each test named as the claim
//! it proves.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    unreachable_pub
)]

mod approval_on_final_call;
mod async_traits;
mod audit_jsonl;
mod boundaries;
mod build;
mod chain_properties;
mod crash;
mod decision_trail;
mod durable;
mod error_sources;
mod exactly_once;
mod exactly_once_crash;
mod failure_policy;
mod faults;
mod fuzz_inputs;
mod governance;
mod governance_fuzz;
mod governance_round3;
mod hook_api;
mod hook_chain;
mod hook_registry_scoped;
mod hooks_approval;
mod hooks_audit;
mod hooks_audit_batching;
mod hooks_audit_trail;
mod hooks_config;
mod hooks_dynamic_options;
mod hooks_fail_closed;
mod hooks_latency;
mod hooks_latency_agents;
mod hooks_masking;
mod hooks_masking_intl;
mod hooks_masking_stream;
mod hooks_self_correction;
mod hooks_tool_guard;
#[cfg(feature = "mcp")]
mod hostile_mcp;
#[cfg(all(feature = "openai", feature = "anthropic"))]
mod hostile_providers;
mod layers;
mod load;
mod loop_control;
#[cfg(feature = "mcp")]
mod mcp;
mod messages;
mod mutators;
mod observability;
#[cfg(any(feature = "openai", feature = "anthropic"))]
mod providers_agent;
#[cfg(feature = "anthropic")]
mod providers_anthropic;
#[cfg(any(feature = "openai", feature = "anthropic"))]
mod providers_capabilities;
#[cfg(feature = "openai")]
mod providers_openai;
#[cfg(any(feature = "openai", feature = "anthropic"))]
mod providers_support;
#[cfg(any(feature = "openai", feature = "anthropic"))]
mod providers_transport;
#[cfg(feature = "openai")]
mod real_model;
mod replicas;
mod sessions;
mod store_agents;
#[cfg(feature = "postgres")]
mod store_audit;
mod store_contract;
#[cfg(feature = "postgres")]
mod store_postgres;
#[cfg(feature = "redis")]
mod store_redis;
mod streaming;
mod structured_output;
mod subagent_hardening;
mod subagent_properties;
mod subagent_small_models;
mod subagent_workspaces;
mod subagents;
mod support;
mod sync_hooks;
mod tools;
mod typed_tools;
