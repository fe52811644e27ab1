//! Integration tests: one binary, one module per area, each test named as the claim
//! it proves.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    unreachable_pub
)]

mod build;
mod chain_properties;
mod crash;
mod durable;
mod failure_policy;
mod faults;
mod fuzz_inputs;
mod hook_chain;
mod load;
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
