//! Child workspaces (issue 21): an isolated child's own `tools.json` only narrows its
//! tools, its `AGENTS.md` is its prompt base, and a bad child workspace fails closed.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use rein::subagent::spec::SpecErrorKind;
use rein::*;

use crate::subagent_hardening::read_write;
use crate::subagents::{Contributes, TempDir, md, named_tool, offered, spawn};
use crate::support::*;

/// A declaration with an isolated workspace at `path`.
fn isolated(
    name: &str,
    tools: &[&str],
    path: impl Into<std::path::PathBuf>,
) -> SubagentDeclaration {
    SubagentDeclaration::builder(name)
        .description(format!("the {name} subagent"))
        .tools(tools.iter().copied())
        .workspace(SubagentWorkspace::isolated(path))
        .build()
        .unwrap()
}

/// A parent script: spawn `w`, the child answers, the parent answers.
fn spawn_once() -> ScriptedModel {
    ScriptedModel::new([
        spawn("w", "t"),
        ScriptedTurn::text("c"),
        ScriptedTurn::text("p"),
    ])
}

/// A workspace with a child root `child/` whose tools.json is `policy`.
fn with_child_policy(label: &str, policy: &str) -> TempDir {
    let ws = TempDir::new(label);
    std::fs::create_dir_all(ws.0.join("child")).unwrap();
    ws.write("child/tools.json", policy);
    ws
}

#[tokio::test]
async fn an_empty_allowlist_still_applies_the_child_workspace_policy() {
    let ws = with_child_policy("empty-allow", r#"{"deny": ["write"]}"#);
    let log = Log::default();
    let model = spawn_once();
    let agent = builder(&model)
        .toolkit(read_write(&log))
        .workspace(&ws.0)
        .subagent(isolated("w", &[], "child"))
        .build()
        .unwrap();
    assert!(agent.tool_names().iter().any(|t| t == "write"));
    agent.call(Msg::user("go")).await.unwrap();
    assert_eq!(offered(&model, 1), ["read"]);
}

#[tokio::test]
async fn a_child_workspace_deny_removes_a_hook_contributed_tool_before_install() {
    let ws = with_child_policy("hook-deny-child", r#"{"deny": ["delete_logs"]}"#);
    let log = Log::default();
    let model = spawn_once();
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![named_tool("read", &log)]).without_deletion())
        .hook(Contributes {
            tools: vec![("delete_logs", "deleted!")],
            calls: Arc::new(AtomicUsize::new(0)),
        })
        .workspace(&ws.0)
        .subagent(isolated("w", &[], "child"))
        .build()
        .unwrap();
    assert!(agent.tool_names().iter().any(|t| t == "delete_logs"));
    agent.call(Msg::user("go")).await.unwrap();
    assert_eq!(offered(&model, 1), ["read"], "denied before install");
}

#[tokio::test]
async fn a_child_policy_cannot_widen_the_parents() {
    // The parent's tools.json denies `write`; the child's allows it: it stays denied.
    let ws = with_child_policy("no-widen", r#"{"allow": ["read", "write"]}"#);
    ws.write("tools.json", r#"{"deny": ["write"]}"#);
    let log = Log::default();
    let model = spawn_once();
    let agent = builder(&model)
        .toolkit(read_write(&log))
        .workspace(&ws.0)
        .subagent(isolated("w", &[], "child"))
        .build()
        .unwrap();
    agent.call(Msg::user("go")).await.unwrap();
    assert_eq!(offered(&model, 1), ["read"]);
}

#[test]
fn a_malformed_child_tools_json_fails_the_build_for_a_static_declaration() {
    let ws = with_child_policy("bad-child", r#"{"deny": ["write"],}"#);
    let model = ScriptedModel::new([]);
    let err = builder(&model)
        .workspace(&ws.0)
        .subagent(isolated("w", &[], "child"))
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), BuildErrorKind::Workspace);
    let spec = err.workspace_error().unwrap();
    assert_eq!(spec.file(), ws.0.join("child").join("tools.json"));
    assert_eq!(spec.kind(), SpecErrorKind::MalformedJson);
}

#[tokio::test]
async fn a_malformed_child_tools_json_fails_the_spawn_for_a_dynamic_declaration() {
    let ws = with_child_policy("bad-child-dyn", r#"{"deny": ["write"]}"#);
    let log = Log::default();
    let model = ScriptedModel::new([spawn("late", "t"), ScriptedTurn::text("p")]);
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![named_tool("read", &log)]))
        .workspace(&ws.0)
        .build()
        .unwrap();
    ws.write(
        "subagents/late.md",
        "---\ndescription: late\nworkspace: {mode: isolated, path: child}\n---\nbody\n",
    );
    ws.write("child/tools.json", "{\"deny\": 3}");
    agent.call(Msg::user("go")).await.unwrap();
    let r = &results_in_request(&model, 1)[0];
    assert!(r.1 && r.2.contains("tools.json"), "{r:?}");
}

#[test]
fn markdown_workspace_key_errors_name_file_line_and_key() {
    let ws = TempDir::new("md-ws");
    std::fs::create_dir_all(ws.0.join("child")).unwrap();
    let cases = [
        (
            "---\ndescription: d\nworkspace:\n  mode: private\n  path: child\n---\n",
            SpecErrorKind::InvalidValue,
            4,
            "workspace.mode",
        ),
        (
            "---\ndescription: d\nworkspace:\n  mode: isolated\n  path: nowhere\n---\n",
            SpecErrorKind::Missing,
            5,
            "workspace.path",
        ),
        (
            "---\ndescription: d\nworkspace:\n  mode: isolated\n  pth: child\n---\n",
            SpecErrorKind::UnknownKey,
            5,
            "pth",
        ),
    ];
    for (text, kind, line, key) in cases {
        let path = ws.write("subagents/x.md", text);
        let model = ScriptedModel::new([]);
        let err = builder(&model).workspace(&ws.0).build().unwrap_err();
        let spec = err.workspace_error().unwrap();
        assert_eq!(spec.file(), path);
        assert_eq!(
            (spec.kind(), spec.line(), spec.key()),
            (kind, Some(line), Some(key)),
            "{err}"
        );
    }
    // Missing path for an isolated workspace, and a path for a shared one.
    for (text, key) in [
        (
            "---\ndescription: d\nworkspace: {mode: isolated}\n---\n",
            "workspace.path",
        ),
        (
            "---\ndescription: d\nworkspace: {mode: shared, path: child}\n---\n",
            "workspace.path",
        ),
    ] {
        ws.write("subagents/x.md", text);
        let model = ScriptedModel::new([]);
        let err = builder(&model).workspace(&ws.0).build().unwrap_err();
        let spec = err.workspace_error().unwrap();
        assert_eq!((spec.line(), spec.key()), (Some(3), Some(key)), "{err}");
    }
}

#[tokio::test]
async fn an_isolated_childs_agents_md_is_its_prompt_base() {
    let ws = with_child_policy("agents-md", "{}");
    ws.write("child/AGENTS.md", "You are the ledger specialist.");
    ws.write(
        "subagents/w.md",
        &md("worker", "[]").replace(
            "tools: []\n",
            "tools: []\nworkspace: {mode: isolated, path: child}\n",
        ),
    );
    let model = spawn_once();
    let agent = builder(&model).workspace(&ws.0).build().unwrap();
    agent.call(Msg::user("go")).await.unwrap();
    let system = model.requests()[1].messages.first().unwrap().text();
    assert!(
        system.starts_with("You are the ledger specialist."),
        "{system}"
    );
    assert!(
        !system.contains("You help."),
        "AGENTS.md replaces the body: {system}"
    );
}

#[test]
fn a_relative_child_workspace_without_a_parent_workspace_fails_the_build() {
    let model = ScriptedModel::new([]);
    let err = builder(&model)
        .subagent(isolated("w", &[], "child"))
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), BuildErrorKind::InvalidDeclaration);
    assert!(err.to_string().contains("relative"), "{err}");
}
