//! Integration tests: one binary, one module per area, each test named as the claim
//! it proves.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    unreachable_pub
)]

mod build;
mod failure_policy;
mod hook_chain;
mod loop_control;
mod messages;
mod mutators;
#[cfg(any(feature = "openai", feature = "anthropic"))]
mod providers_agent;
#[cfg(feature = "anthropic")]
mod providers_anthropic;
#[cfg(feature = "openai")]
mod providers_openai;
#[cfg(any(feature = "openai", feature = "anthropic"))]
mod providers_support;
#[cfg(any(feature = "openai", feature = "anthropic"))]
mod providers_transport;
mod sessions;
mod streaming;
mod subagent_properties;
mod subagents;
mod support;
mod tools;
