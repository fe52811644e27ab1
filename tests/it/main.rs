//! Integration tests: one binary, one folder per concern (each `mod.rs` says what its
//! group proves), each test named as the claim it proves. Helpers live in `support`
//! only (or in a group's own folder); `load` holds the `#[ignore]`d load tests, run as
//! `cargo test --all-features --test it load:: -- --ignored`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    unreachable_pub
)]

mod agent;
mod chain;
mod flow;
mod hooks;
mod load;
mod mcp;
mod providers;
mod session;
mod subagent;
mod support;
