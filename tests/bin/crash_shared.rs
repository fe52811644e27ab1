//! What the crash test's child saves, shared by the child binary
//! (`tests/bin/crash_child.rs`) and the test that checks it (`tests/it/crash.rs`).

use rein::*;

/// Sessions the child saves round-robin.
pub(crate) const SESSIONS: usize = 4;

/// The key of session `i`.
pub(crate) fn crash_key(i: usize) -> SessionKey {
    SessionKey::new(Some("crash-user"), &format!("session/{i}"))
}

/// The exact conversation the child saves as `version` of session `i`: it grows and
/// shrinks with the version, and ends with a tool use and its result.
pub(crate) fn expected(i: usize, version: u64) -> Vec<Msg> {
    let n = 1 + (version % 7) as usize;
    let pad = "x".repeat(512 * (1 + (version % 5) as usize));
    let mut msgs = Vec::new();
    for j in 0..n {
        let mut m = Msg::user(format!("s{i} v{version} m{j} {pad}"));
        m.id = format!("m-{i}-{version}-{j}");
        msgs.push(m);
    }
    let mut call = Msg::new(
        Role::Assistant,
        vec![ContentBlock::ToolUse(ToolUse {
            id: format!("t-{version}"),
            name: "save".into(),
            input: serde_json::json!({"v": version}),
        })],
    );
    call.id = format!("a-{i}-{version}");
    let mut result = Msg::tool([ToolResult::new(format!("t-{version}"), "save", "ok")]);
    result.id = format!("r-{i}-{version}");
    msgs.push(call);
    msgs.push(result);
    msgs
}
