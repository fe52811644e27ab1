//! Integration tests: one binary, one module per area, each test named as the claim
//! it proves.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    unreachable_pub
)]

mod build;
mod crash;
mod durable;
mod failure_policy;
mod faults;
mod hook_chain;
mod loop_control;
mod messages;
mod mutators;
mod observability;
mod sessions;
mod streaming;
mod subagent_properties;
mod subagents;
mod support;
mod tools;
