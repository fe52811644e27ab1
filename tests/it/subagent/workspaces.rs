//! Child workspaces (issue 21): an isolated child's own `tools.json` only narrows its
//! tools, its `AGENTS.md` is its prompt base, and a bad child workspace fails closed.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use rein::subagent::spec::SpecErrorKind;
use rein::*;

use crate::support::subagents::{Contributes, md, named_tool, offered, read_write, spawn};
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

/// A parent with the tools `read` and `write`, the workspace `ws` and the subagent `decl`.
fn read_write_parent(
    model: &ScriptedModel,
    log: &Log,
    ws: &TempDir,
    decl: SubagentDeclaration,
) -> Agent {
    builder(model)
        .toolkit(read_write(log))
        .workspace(ws.path())
        .subagent(decl)
        .build()
        .unwrap()
}

/// A workspace with a child root `child/` whose tools.json is `policy`.
fn with_child_policy(label: &str, policy: &str) -> TempDir {
    let ws = TempDir::workspace(label);
    std::fs::create_dir_all(ws.path().join("child")).unwrap();
    ws.write("child/tools.json", policy);
    ws
}

#[tokio::test]
async fn an_empty_allowlist_still_applies_the_child_workspace_policy() {
    let ws = with_child_policy("empty-allow", r#"{"deny": ["write"]}"#);
    let log = Log::default();
    let model = spawn_once();
    let agent = read_write_parent(&model, &log, &ws, isolated("w", &[], "child"));
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
        .workspace(ws.path())
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
    let agent = read_write_parent(&model, &log, &ws, isolated("w", &[], "child"));
    agent.call(Msg::user("go")).await.unwrap();
    assert_eq!(offered(&model, 1), ["read"]);
}

#[test]
fn a_malformed_child_tools_json_fails_the_build_for_a_static_declaration() {
    let ws = with_child_policy("bad-child", r#"{"deny": ["write"],}"#);
    let model = ScriptedModel::new([]);
    let err = builder(&model)
        .workspace(ws.path())
        .subagent(isolated("w", &[], "child"))
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), BuildErrorKind::Workspace);
    let spec = err.workspace_error().unwrap();
    assert_eq!(spec.file(), ws.path().join("child").join("tools.json"));
    assert_eq!(spec.kind(), SpecErrorKind::MalformedJson);
}

#[tokio::test]
async fn a_malformed_child_tools_json_fails_the_spawn_for_a_dynamic_declaration() {
    let ws = with_child_policy("bad-child-dyn", r#"{"deny": ["write"]}"#);
    let log = Log::default();
    let model = ScriptedModel::new([spawn("late", "t"), ScriptedTurn::text("p")]);
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![named_tool("read", &log)]))
        .workspace(ws.path())
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

/// Writes the declaration `rel` and asserts the build fails naming it with `expected`
/// (kind, line, key).
fn assert_md_error(
    ws: &TempDir,
    rel: &str,
    text: &str,
    expected: (SpecErrorKind, Option<usize>, Option<&str>),
) {
    let path = ws.write(rel, text);
    let model = ScriptedModel::new([]);
    let err = builder(&model).workspace(ws.path()).build().unwrap_err();
    let spec = err.workspace_error().unwrap();
    assert_eq!(spec.file(), path);
    assert_eq!((spec.kind(), spec.line(), spec.key()), expected, "{err}");
}

#[test]
fn markdown_workspace_key_errors_name_file_line_and_key() {
    let ws = TempDir::workspace("md-ws");
    std::fs::create_dir_all(ws.path().join("child")).unwrap();
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
        assert_md_error(&ws, "subagents/x.md", text, (kind, Some(line), Some(key)));
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
        let err = builder(&model).workspace(ws.path()).build().unwrap_err();
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
    let agent = builder(&model).workspace(ws.path()).build().unwrap();
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

/// A parent script for two calls, each spawning `w` once.
fn spawn_twice() -> ScriptedModel {
    ScriptedModel::new([
        spawn("w", "t"),
        ScriptedTurn::text("c"),
        ScriptedTurn::text("p"),
        spawn("w", "t"),
        ScriptedTurn::text("c"),
        ScriptedTurn::text("p"),
    ])
}

#[tokio::test]
async fn an_edited_child_policy_applies_from_the_next_spawn() {
    let ws = with_child_policy("edit-child", "{}");
    let log = Log::default();
    let model = spawn_twice();
    let agent = read_write_parent(&model, &log, &ws, isolated("w", &[], "child"));
    agent.call(Msg::user("go")).await.unwrap();
    assert_eq!(offered(&model, 1), ["read", "write"]);
    ws.write("child/tools.json", r#"{"deny": ["write"]}"#);
    agent.call(Msg::user("again")).await.unwrap();
    assert_eq!(offered(&model, 4), ["read"], "the cached child was rebuilt");
}

#[tokio::test]
async fn a_child_tools_json_broken_after_a_spawn_fails_the_next_spawn() {
    let ws = with_child_policy("break-child", r#"{"deny": ["write"]}"#);
    let log = Log::default();
    let model = ScriptedModel::new([
        spawn("w", "t"),
        ScriptedTurn::text("c"),
        ScriptedTurn::text("p"),
        spawn("w", "t"),
        ScriptedTurn::text("p"),
    ]);
    let agent = read_write_parent(&model, &log, &ws, isolated("w", &[], "child"));
    agent.call(Msg::user("go")).await.unwrap();
    assert_eq!(offered(&model, 1), ["read"]);
    ws.write("child/tools.json", r#"{"deny": ["write"],}"#);
    agent.call(Msg::user("again")).await.unwrap();
    let r = results_in_request(&model, 4).pop().unwrap();
    assert!(r.1, "the spawn failed closed: {r:?}");
    assert!(r.2.contains("child/tools.json"), "{r:?}");
}

/// A parent that spawns `w`, whose child spawns `inner`; everyone then answers.
fn spawn_nested() -> ScriptedModel {
    ScriptedModel::new([
        spawn("w", "t"),
        spawn("inner", "t"),
        ScriptedTurn::text("i"),
        ScriptedTurn::text("c"),
        ScriptedTurn::text("p"),
    ])
}

/// The subagent ids listed in the delegation tool of request `n`.
fn listed(model: &ScriptedModel, n: usize) -> Vec<String> {
    let request = &model.requests()[n];
    let Some(spawn) = request.tools.iter().find(|t| t.name == SPAWN_TOOL) else {
        return Vec::new();
    };
    spawn
        .description
        .lines()
        .filter_map(|l| l.strip_prefix("- ")?.split_once(':'))
        .map(|(id, _)| id.to_owned())
        .collect()
}

#[tokio::test]
async fn an_isolated_childs_own_subagents_folder_declares_its_nested_subagents() {
    let ws = with_child_policy("nested", "{}");
    ws.write("subagents/outer.md", &md("the parent's own", "[read]"));
    std::fs::create_dir_all(ws.path().join("child/subagents")).unwrap();
    std::fs::create_dir_all(ws.path().join("child/inner-ws")).unwrap();
    // A relative path in the child's file resolves against the child's root.
    ws.write(
        "child/subagents/inner.md",
        "---\ndescription: inner\nworkspace: {mode: isolated, path: inner-ws}\n---\nYou dig.\n",
    );
    ws.write("child/inner-ws/tools.json", r#"{"deny": ["write"]}"#);
    let log = Log::default();
    let model = spawn_nested();
    let decl = isolated("w", &["read", "write", SPAWN_TOOL], "child");
    let agent = read_write_parent(&model, &log, &ws, decl);
    agent.call(Msg::user("go")).await.unwrap();
    assert_eq!(listed(&model, 0), ["w", "outer"]);
    assert_eq!(
        listed(&model, 1),
        ["w", "inner"],
        "its own folder, not its parent's"
    );
    // The empty allowlist inherits the child's tools (not the delegation tool), minus
    // the nested workspace's deny.
    assert_eq!(offered(&model, 2), ["read"]);
    let r = &results_in_request(&model, 3)[0];
    assert!(!r.1 && r.2.contains("status: completed"), "{r:?}");
}

#[test]
fn a_broken_nested_declaration_fails_the_top_level_build_only_if_the_child_delegates() {
    let ws = with_child_policy("nested-bad", "{}");
    std::fs::create_dir_all(ws.path().join("child/subagents")).unwrap();
    let bad = ws.write("child/subagents/bad.md", "---\ndescripton: typo\n---\n");
    let log = Log::default();
    let model = ScriptedModel::new([]);
    let err = builder(&model)
        .toolkit(read_write(&log))
        .workspace(ws.path())
        .subagent(isolated("w", &["read", SPAWN_TOOL], "child"))
        .build()
        .unwrap_err();
    let spec = err.workspace_error().unwrap();
    assert_eq!(
        (spec.file(), spec.line()),
        (bad.as_path(), Some(2)),
        "{err}"
    );
    // A child that cannot delegate never reads the folder.
    builder(&model)
        .toolkit(read_write(&log))
        .workspace(ws.path())
        .subagent(isolated("w", &["read"], "child"))
        .build()
        .unwrap();
    // Nor does one at the maximum depth.
    builder(&model)
        .toolkit(read_write(&log))
        .workspace(ws.path())
        .max_depth(1)
        .subagent(isolated("w", &["read", SPAWN_TOOL], "child"))
        .build()
        .unwrap();
}

#[test]
fn general_purpose_always_shares_its_parents_workspace() {
    let err = SubagentDeclaration::builder(GENERAL_PURPOSE)
        .description("d")
        .workspace(SubagentWorkspace::isolated("child"))
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), BuildErrorKind::InvalidDeclaration);
    assert!(err.to_string().contains("always shares"), "{err}");
    let ws = with_child_policy("gp-md", "{}");
    assert_md_error(
        &ws,
        "subagents/general-purpose.md",
        "---\ndescription: d\nworkspace: {mode: isolated, path: child}\n---\n",
        (SpecErrorKind::InvalidValue, Some(3), Some("workspace.mode")),
    );
}

#[tokio::test]
async fn a_relative_parent_workspace_resolves_a_markdown_child_root_once() {
    let ws = with_child_policy("relative", r#"{"deny": ["write"]}"#);
    ws.write(
        "subagents/w.md",
        "---\ndescription: w\nworkspace: {mode: isolated, path: child}\n---\n",
    );
    // The workspace as a path relative to the current directory.
    let cwd = std::env::current_dir().unwrap();
    let mut relative = std::path::PathBuf::new();
    for _ in cwd.components().skip(1) {
        relative.push("..");
    }
    relative.push(ws.path().strip_prefix("/").unwrap());
    let log = Log::default();
    let model = spawn_once();
    let agent = builder(&model)
        .toolkit(read_write(&log))
        .workspace(&relative)
        .build()
        .unwrap();
    agent.call(Msg::user("go")).await.unwrap();
    assert_eq!(offered(&model, 1), ["read"]);
}

#[cfg(feature = "mcp")]
#[tokio::test]
async fn a_child_workspace_deny_removes_an_mcp_tool() {
    let Some(server) = crate::support::mcp::hostile("calls") else {
        return;
    };
    let ws = with_child_policy("mcp-child", r#"{"deny": ["mcp__h__echo"]}"#);
    let log = Log::default();
    let model = spawn_once();
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![named_tool("read", &log)]))
        .mcp_server("h", server.enable_tools(["echo", "deep"]))
        .workspace(ws.path())
        .subagent(isolated("w", &[], "child"))
        .build_async()
        .await
        .unwrap();
    assert!(agent.tool_names().iter().any(|t| t == "mcp__h__echo"));
    agent.call(Msg::user("go")).await.unwrap();
    assert_eq!(offered(&model, 1), ["read", "mcp__h__deep"]);
}

#[test]
fn a_child_tools_json_entry_that_names_no_tool_fails_the_build_naming_file_entry_and_closest_tool()
{
    let ws = with_child_policy("typo-deny", r#"{"deny": ["Write"]}"#);
    let log = Log::default();
    let model = spawn_once();
    let err = builder(&model)
        .toolkit(read_write(&log))
        .workspace(ws.path())
        .subagent(isolated("w", &[], "child"))
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), BuildErrorKind::Workspace, "{err}");
    let text = err.to_string();
    for part in [
        "child/tools.json",
        "deny[0]",
        "`Write`",
        "did you mean `write`",
        "?Write",
    ] {
        assert!(text.contains(part), "{part}: {text}");
    }
    assert_eq!(
        err.workspace_error().map(|s| s.kind()),
        Some(SpecErrorKind::InvalidValue)
    );
}

#[tokio::test]
async fn a_tools_json_entry_written_optional_may_match_no_tool_and_still_narrows() {
    let ws = with_child_policy("optional-deny", r#"{"deny": ["?files__delete", "?write"]}"#);
    let log = Log::default();
    let model = spawn_once();
    let agent = read_write_parent(&model, &log, &ws, isolated("w", &[], "child"));
    agent.call(Msg::user("go")).await.unwrap();
    assert_eq!(offered(&model, 1), ["read"]);
}

#[tokio::test]
async fn a_child_tools_json_may_repeat_a_denial_of_its_parents_policy() {
    let ws = with_child_policy("repeat-deny", r#"{"deny": ["write"]}"#);
    ws.write("tools.json", r#"{"deny": ["write"]}"#);
    let log = Log::default();
    let model = spawn_once();
    let agent = read_write_parent(&model, &log, &ws, isolated("w", &[], "child"));
    agent.call(Msg::user("go")).await.unwrap();
    assert_eq!(offered(&model, 1), ["read"]);
}

#[test]
fn a_bare_question_mark_in_tools_json_is_an_error_naming_the_key() {
    let err = rein::subagent::spec::ToolsPolicy::parse(
        std::path::Path::new("tools.json"),
        r#"{"deny": ["?"]}"#,
    )
    .unwrap_err();
    assert_eq!(err.kind(), SpecErrorKind::InvalidValue);
    assert!(err.to_string().contains("deny"), "{err}");
}
