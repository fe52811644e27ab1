//! The one "needs a server" check. A test that needs a service (a Redis or PostgreSQL
//! server, the MCP reference server, Node.js, a real model server) asks here: when the
//! service is missing it prints a visible `SKIPPED: <test> needs <service> (<how to start
//! it>)` line and gets `None` — except under `CI=true`, where a missing server is a
//! failure (CI starts every server), never a green skip.

use std::fmt::Display;

/// Whether the tests run under CI (`CI=true`).
pub fn under_ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

/// The name of the running test (libtest names its thread after it), else the caller.
#[track_caller]
fn current_test() -> String {
    match std::thread::current().name() {
        Some(name) if name != "main" => name.to_owned(),
        _ => std::panic::Location::caller().to_string(),
    }
}

/// `available` when it is `Some`. Otherwise prints `SKIPPED: <test> needs <service>
/// (<how>)` and returns `None`; under `CI=true`, panics instead.
#[track_caller]
pub fn needs<T>(service: &str, available: Option<T>, how: impl Display) -> Option<T> {
    if available.is_some() {
        return available;
    }
    let test = current_test();
    if under_ci() {
        panic!("CI=true and {test} needs {service}, which is missing: {how}");
    }
    eprintln!("SKIPPED: {test} needs {service} ({how})");
    None
}

/// The value of the environment variable `var` when it is set and `usable`; otherwise
/// [`needs`] skips (or, under CI, fails) with `<var> is <what it is>: <how>`.
#[track_caller]
pub fn needs_env(
    var: &str,
    service: &str,
    usable: impl Fn(&str) -> bool,
    how: impl Display,
) -> Option<String> {
    match std::env::var(var) {
        Ok(value) if usable(&value) => Some(value),
        other => needs(service, None, format!("{var} is {other:?}: {how}")),
    }
}
