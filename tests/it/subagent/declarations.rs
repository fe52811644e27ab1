//! Declared subagents: inheritance, bounds, workspace files, delegation.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use rein::*;
use serde_json::json;

use crate::support::subagents::*;
use crate::support::*;

#[test]
fn a_declaration_requires_a_description() {
    let err = SubagentDeclaration::builder("x").build().unwrap_err();
    assert_eq!(err.kind(), BuildErrorKind::InvalidDeclaration);
    assert!(
        err.to_string().contains("`description` is required"),
        "{err}"
    );
    let err = SubagentDeclaration::builder("bad id")
        .description("d")
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("[A-Za-z0-9_.-]"), "{err}");
}

#[tokio::test]
async fn a_child_runs_the_parents_hooks_and_its_events_carry_lineage() {
    let log = Log::default();
    let log2 = log.clone();
    let model = ScriptedModel::new([
        spawn("helper", "do it"),
        ScriptedTurn::tool_call("search", json!({})),
        ScriptedTurn::text("child done"),
        ScriptedTurn::text("parent done"),
    ]);
    let agent = builder(&model)
        .id("parent-1")
        .name("boss")
        .toolkit(toolkit_with(vec![named_tool("search", &log)]))
        .subagent(decl("helper", &[]))
        .hook(
            FnHook::new("gov", move |e| {
                if let HookEvent::PreActing(p) = e {
                    let a = p.agent();
                    log2.push(format!(
                        "{}|{}|{:?}|{}",
                        p.tool_use().name,
                        a.name,
                        a.parent_id,
                        a.depth
                    ));
                }
                Ok(())
            })
            .on(EventKind::PreActing),
        )
        .build()
        .unwrap();
    let reply = agent.call(Msg::user("go")).await.unwrap();
    assert_eq!(reply.text(), "parent done");
    assert_eq!(
        log.entries(),
        [
            "agent_spawn|boss|None|0",
            "search|helper|Some(\"parent-1\")|1",
            "search",
        ]
    );
    let spawn_result = &results_in_request(&model, 3)[0];
    assert!(!spawn_result.1);
    assert!(
        spawn_result
            .2
            .starts_with("status: completed\nagent_id: helper\n"),
        "{}",
        spawn_result.2
    );
    assert!(spawn_result.2.ends_with("child done"));
}

#[tokio::test]
async fn inherited_hooks_keep_their_instances_and_order_and_the_childs_own_follow() {
    let log = Log::default();
    let model = ScriptedModel::new([
        spawn("c", "t"),
        ScriptedTurn::text("c done"),
        ScriptedTurn::text("p done"),
    ]);
    let child = SubagentDeclaration::builder("c")
        .description("child")
        .hook(Recorder::new("own", 100, &log).interest(Interest::only(EventKind::PreCall)))
        .build()
        .unwrap();
    let shared =
        Arc::new(Recorder::new("shared", 100, &log).interest(Interest::only(EventKind::PreCall)));
    let agent = builder(&model)
        .hook(Recorder::new("second", 50, &log).interest(Interest::only(EventKind::PreCall)))
        .hook(Recorder::new("first", 10, &log).interest(Interest::only(EventKind::PreCall)))
        .hook(Arc::clone(&shared))
        .subagent(child)
        .build()
        .unwrap();
    agent.call(Msg::user("go")).await.unwrap();
    assert_eq!(
        log.entries(),
        [
            "first:PreCall",
            "second:PreCall",
            "shared:PreCall",
            // the child: inherited in the parent's order, then its own at equal priority
            "first:PreCall",
            "second:PreCall",
            "shared:PreCall",
            "own:PreCall",
        ]
    );
}

struct ParentOnly {
    log: Log,
}

impl Hook for ParentOnly {
    fn name(&self) -> &str {
        "parent-only"
    }
    fn propagate_to_subagents(&self) -> bool {
        false
    }
    async fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError> {
        self.log
            .push(format!("{}@{}", event.kind(), event.agent().depth));
        Ok(())
    }
}

#[tokio::test]
async fn a_parent_only_hook_never_sees_a_child_event_even_when_names_match() {
    let log = Log::default();
    let model = ScriptedModel::new([
        spawn("same", "t"),
        ScriptedTurn::text("c"),
        ScriptedTurn::text("p"),
    ]);
    let agent = builder(&model)
        .name("same")
        .subagent(decl("same", &[]))
        .hook(ParentOnly { log: log.clone() })
        .build()
        .unwrap();
    agent.call(Msg::user("go")).await.unwrap();
    let entries = log.entries();
    assert!(!entries.is_empty());
    assert!(entries.iter().all(|e| e.ends_with("@0")), "{entries:?}");
}

#[tokio::test]
async fn the_allowlist_narrows_the_childs_tools_and_an_unlisted_call_fails() {
    let log = Log::default();
    let model = ScriptedModel::new([
        spawn("narrow", "t"),
        ScriptedTurn::tool_call("write", json!({})),
        ScriptedTurn::text("could not write"),
        ScriptedTurn::text("p"),
    ]);
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![
            named_tool("read", &log),
            named_tool("write", &log),
        ]))
        .subagent(decl("narrow", &["read"]))
        .build()
        .unwrap();
    agent.call(Msg::user("go")).await.unwrap();
    assert_eq!(offered(&model, 0), ["read", "write", SPAWN_TOOL]);
    assert_eq!(offered(&model, 1), ["read"]);
    assert!(log.entries().is_empty(), "write never ran");
    let r = &results_in_request(&model, 2)[0];
    assert!(r.1 && r.2.contains("Unknown tool `write`"), "{r:?}");
}

#[tokio::test]
async fn children_do_not_get_the_delegation_tool_unless_their_allowlist_names_it() {
    let log = Log::default();
    let model = ScriptedModel::new([
        spawn("plain", "t"),
        ScriptedTurn::text("plain done"),
        spawn("nester", "t"),
        ScriptedTurn::text("nester done"),
        ScriptedTurn::text("p"),
    ]);
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![named_tool("read", &log)]))
        .subagent(decl("plain", &[]))
        .subagent(decl("nester", &["read", SPAWN_TOOL]))
        .build()
        .unwrap();
    agent.call(Msg::user("go")).await.unwrap();
    assert_eq!(offered(&model, 1), ["read"]);
    assert_eq!(offered(&model, 3), ["read", SPAWN_TOOL]);
}

#[tokio::test]
async fn nesting_is_bounded_by_max_depth() {
    let model = ScriptedModel::new([
        spawn("deep", "level 1"),
        spawn("deep", "level 2"),
        ScriptedTurn::text("level 2 done"),
        ScriptedTurn::text("level 1 done"),
        ScriptedTurn::text("top done"),
    ]);
    let agent = builder(&model)
        .max_depth(2)
        .subagent(decl("deep", &[SPAWN_TOOL]))
        .build()
        .unwrap();
    let reply = agent.call(Msg::user("go")).await.unwrap();
    assert_eq!(reply.text(), "top done");
    assert_eq!(offered(&model, 0), [SPAWN_TOOL]);
    assert_eq!(offered(&model, 1), [SPAWN_TOOL], "depth 1 < 2 may delegate");
    assert!(offered(&model, 2).is_empty(), "depth 2 = max_depth may not");
}

#[tokio::test]
async fn a_child_calls_gets_a_derived_session_the_parents_user_and_its_own_run() {
    let log = Log::default();
    let log2 = log.clone();
    let model = ScriptedModel::new([
        spawn("kid", "t"),
        ScriptedTurn::text("k"),
        ScriptedTurn::text("p"),
    ]);
    let agent = builder(&model)
        .subagent(decl("kid", &[]))
        .hook(
            FnHook::new("ctx", move |e| {
                let c = e.context();
                log2.push(format!(
                    "{}|{}|{:?}|{}",
                    e.agent().name,
                    c.session_id(),
                    c.user_id(),
                    c.run_id()
                ));
                Ok(())
            })
            .on(EventKind::PreCall),
        )
        .build()
        .unwrap();
    let ctx = RunContext::new()
        .with_session_id("s9")
        .with_user_id("alice")
        .with_run_id("run-p");
    agent.call_with(vec![Msg::user("go")], ctx).await.unwrap();
    let entries = log.entries();
    assert_eq!(entries[0], "agent|s9|Some(\"alice\")|run-p");
    let parts: Vec<&str> = entries[1].split('|').collect();
    assert_eq!(&parts[..3], ["kid", "kid@s9", "Some(\"alice\")"]);
    assert_ne!(parts[3], "run-p", "the child run has its own id");
}

#[tokio::test]
async fn children_of_two_parent_sessions_never_share_memory() {
    let model = ScriptedModel::new([
        spawn("mem", "remember A"),
        ScriptedTurn::text("ok A"),
        ScriptedTurn::text("p1"),
        spawn("mem", "remember B"),
        ScriptedTurn::text("ok B"),
        ScriptedTurn::text("p2"),
    ]);
    let agent = builder(&model).subagent(decl("mem", &[])).build().unwrap();
    agent
        .call_with(vec![Msg::user("x")], session("one"))
        .await
        .unwrap();
    agent
        .call_with(vec![Msg::user("y")], session("two"))
        .await
        .unwrap();
    let second_child_request: Vec<String> =
        model.requests()[4].messages.iter().map(Msg::text).collect();
    assert!(second_child_request.iter().any(|t| t == "remember B"));
    assert!(
        second_child_request
            .iter()
            .all(|t| t != "remember A" && t != "ok A")
    );
}

#[tokio::test]
async fn an_unknown_subagent_id_gives_an_error_result_listing_valid_ids() {
    let model = ScriptedModel::new([spawn("nobody", "t"), ScriptedTurn::text("p")]);
    let agent = builder(&model)
        .subagent(decl("alpha", &[]))
        .subagent(decl("beta", &[]))
        .build()
        .unwrap();
    agent.call(Msg::user("go")).await.unwrap();
    let r = &results_in_request(&model, 1)[0];
    assert!(r.1);
    assert!(
        r.2.contains("unknown subagent `nobody`") && r.2.contains("[alpha, beta]"),
        "{}",
        r.2
    );
}

#[tokio::test(start_paused = true)]
async fn a_spawn_timeout_cancels_the_child_and_returns_an_error_result() {
    let slow = FunctionTool::new("slow", "slow", json!({"type": "object"}), |_| async {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        Ok("never".to_string())
    });
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call(
            SPAWN_TOOL,
            json!({"agent_id": "sloth", "task": "t", "timeout_seconds": 5}),
        ),
        ScriptedTurn::tool_call("slow", json!({})),
        ScriptedTurn::text("p"),
    ]);
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![slow]))
        .subagent(decl("sloth", &[]))
        .build()
        .unwrap();
    agent
        .run(vec![Msg::user("go")], session("t"))
        .await
        .unwrap();
    let r = &results_in_request(&model, 2)[0];
    assert!(
        r.1 && r.2.contains("status: timeout") && r.2.contains("within 5s"),
        "{}",
        r.2
    );
}

#[tokio::test]
async fn the_parent_model_sees_the_subagents_listed_in_the_delegation_tool() {
    let model = ScriptedModel::new([ScriptedTurn::text("no need")]);
    let agent = builder(&model)
        .subagent(decl("alpha", &[]))
        .general_purpose_subagent()
        .build()
        .unwrap();
    agent.call(Msg::user("go")).await.unwrap();
    let tool = model.requests()[0]
        .tools
        .iter()
        .find(|t| t.name == SPAWN_TOOL)
        .cloned()
        .unwrap();
    assert!(
        tool.description.contains("- alpha: the alpha subagent"),
        "{}",
        tool.description
    );
    assert!(
        tool.description.contains(&format!("- {GENERAL_PURPOSE}:")),
        "{}",
        tool.description
    );
    assert_eq!(tool.parameters["required"], json!(["agent_id", "task"]));
}

#[tokio::test]
async fn the_general_purpose_subagent_has_the_parents_tools_and_hooks() {
    let log = Log::default();
    let model = ScriptedModel::new([
        spawn(GENERAL_PURPOSE, "t"),
        ScriptedTurn::tool_call("read", json!({})),
        ScriptedTurn::text("gp done"),
        ScriptedTurn::text("p"),
    ]);
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![
            named_tool("read", &log),
            named_tool("write", &log),
        ]))
        .general_purpose_subagent()
        .hook(Recorder::new("gov", 1, &log).interest(Interest::only(EventKind::PreActing)))
        .build()
        .unwrap();
    agent.call(Msg::user("go")).await.unwrap();
    assert_eq!(offered(&model, 1), ["read", "write"]);
    assert_eq!(log.entries(), ["gov:PreActing", "gov:PreActing", "read"]);
}

#[tokio::test]
async fn declaration_options_overlay_the_parents_and_the_model_name_is_resolved() {
    let other = ScriptedModel::new([ScriptedTurn::text("from the other model")]).with_name("other");
    let other2 = other.clone();
    let model = ScriptedModel::new([spawn("tuned", "t"), ScriptedTurn::text("p")]);
    let tuned = SubagentDeclaration::builder("tuned")
        .description("d")
        .temperature(0.1)
        .model("other")
        .build()
        .unwrap();
    let agent = builder(&model)
        .generate_options(GenerateOptions {
            temperature: Some(0.9),
            max_tokens: Some(77),
            ..Default::default()
        })
        .model_resolver(move |name| {
            (name == "other").then(|| Arc::new(other2.clone()) as Arc<dyn Model>)
        })
        .subagent(tuned)
        .build()
        .unwrap();
    agent.call(Msg::user("go")).await.unwrap();
    let child = &other.requests()[0].options;
    assert_eq!((child.temperature, child.max_tokens), (Some(0.1), Some(77)));
    assert!(
        results_in_request(&model, 1)[0]
            .2
            .ends_with("from the other model")
    );
}

#[test]
fn duplicate_subagent_ids_fail_the_build() {
    let model = ScriptedModel::new([]);
    let err = builder(&model)
        .subagent(decl("x", &[]))
        .subagent(decl("x", &[]))
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), BuildErrorKind::InvalidDeclaration);
    assert!(
        err.to_string().contains("duplicate subagent id `x`"),
        "{err}"
    );
}

#[test]
fn an_allowlist_naming_a_tool_the_parent_cannot_call_fails_the_build() {
    let log = Log::default();
    let model = ScriptedModel::new([]);
    let err = builder(&model)
        .toolkit(toolkit_with(vec![named_tool("read", &log)]))
        .subagent(decl("x", &["read", "rm_rf"]))
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), BuildErrorKind::InvalidDeclaration);
    assert!(err.to_string().contains("`rm_rf`"), "{err}");
}

// ---------------------------------------------------------------------------------------
// Workspace files
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn workspace_files_declare_subagents_and_tools_json_bounds_everyone() {
    let ws = TempDir::workspace("ws");
    ws.write(
        "tools.json",
        r#"{"allow": ["read", "write"], "deny": ["write"]}"#,
    );
    ws.write("subagents/reader.md", &md("reads things", "read, write"));
    let log = Log::default();
    let model = ScriptedModel::new([
        spawn("reader", "t"),
        ScriptedTurn::text("r"),
        ScriptedTurn::text("p"),
    ]);
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![
            named_tool("read", &log),
            named_tool("write", &log),
            named_tool("other", &log),
        ]))
        .workspace(ws.path())
        .build()
        .unwrap_err();
    // `write` is denied by tools.json, so the parent cannot call it and an allowlist
    // naming it is rejected.
    assert!(agent.to_string().contains("`write`"), "{agent}");

    ws.write("subagents/reader.md", &md("reads things", "[read]"));
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![
            named_tool("read", &log),
            named_tool("write", &log),
            named_tool("other", &log),
        ]))
        .workspace(ws.path())
        .build()
        .unwrap();
    assert_eq!(
        agent.tool_names(),
        ["read", SPAWN_TOOL],
        "allow keeps the delegation tool; deny wins"
    );
    agent.call(Msg::user("go")).await.unwrap();
    assert_eq!(offered(&model, 1), ["read"]);
}

#[test]
fn tools_json_deny_removes_the_delegation_tool() {
    let ws = TempDir::workspace("deny-spawn");
    ws.write("tools.json", r#"{"deny": ["agent_spawn"]}"#);
    ws.write("subagents/a.md", &md("a", "[]"));
    let model = ScriptedModel::new([]);
    let agent = builder(&model).workspace(ws.path()).build().unwrap();
    assert!(agent.tool_names().is_empty());
}

#[test]
fn a_malformed_tools_json_fails_the_build_naming_file_and_line() {
    let ws = TempDir::workspace("bad-json");
    let path = ws.write("tools.json", "{\n  \"allow\": [\"read\",\n}");
    let model = ScriptedModel::new([]);
    let err = builder(&model).workspace(ws.path()).build().unwrap_err();
    assert_eq!(err.kind(), BuildErrorKind::Workspace);
    let spec = err.workspace_error().unwrap();
    assert_eq!(spec.file(), path);
    assert_eq!(spec.line(), Some(3));
    assert!(err.to_string().contains("tools.json:3"), "{err}");
}

#[test]
fn an_unknown_key_in_tools_json_fails_the_build_naming_the_key() {
    let ws = TempDir::workspace("typo-json");
    ws.write("tools.json", "{\n  \"alow\": [\"read\"]\n}");
    let model = ScriptedModel::new([]);
    let err = builder(&model).workspace(ws.path()).build().unwrap_err();
    let spec = err.workspace_error().unwrap();
    assert_eq!((spec.line(), spec.key()), (Some(2), Some("alow")));
}

#[test]
fn an_unreadable_tools_json_fails_closed() {
    let ws = TempDir::workspace("dir-json");
    std::fs::create_dir_all(ws.path().join("tools.json")).unwrap();
    let model = ScriptedModel::new([]);
    let err = builder(&model).workspace(ws.path()).build().unwrap_err();
    assert_eq!(err.kind(), BuildErrorKind::Workspace);
}

#[test]
fn a_typo_in_front_matter_fails_the_build_naming_file_line_and_key() {
    let ws = TempDir::workspace("typo-md");
    let path = ws.write(
        "subagents/x.md",
        "---\ndescription: d\ntopP: 0.5\n---\nbody\n",
    );
    let model = ScriptedModel::new([]);
    let err = builder(&model).workspace(ws.path()).build().unwrap_err();
    let spec = err.workspace_error().unwrap();
    assert_eq!(spec.file(), path);
    assert_eq!((spec.line(), spec.key()), (Some(3), Some("topP")));
    assert!(
        err.to_string().contains("top_p"),
        "did-you-mean hint: {err}"
    );
}

#[test]
fn a_front_matter_without_description_fails_the_build() {
    let ws = TempDir::workspace("nodesc-md");
    ws.write("subagents/x.md", "---\ntools: [read]\n---\nbody\n");
    let model = ScriptedModel::new([]);
    let err = builder(&model).workspace(ws.path()).build().unwrap_err();
    assert_eq!(err.workspace_error().unwrap().key(), Some("description"));
}

#[tokio::test]
async fn a_markdown_file_added_after_build_is_spawnable() {
    let ws = TempDir::workspace("dynamic");
    let model = ScriptedModel::new([
        ScriptedTurn::text("nothing yet"),
        spawn("late", "t"),
        ScriptedTurn::text("late done"),
        ScriptedTurn::text("p"),
    ]);
    let agent = builder(&model).workspace(ws.path()).build().unwrap();
    agent.call(Msg::user("first")).await.unwrap();
    assert!(agent.subagents().is_empty());
    ws.write("subagents/late.md", &md("arrived later", "[]"));
    agent.call(Msg::user("second")).await.unwrap();
    let r = &results_in_request(&model, 3)[0];
    assert!(!r.1 && r.2.ends_with("late done"), "{r:?}");
    let tool = model.requests()[1]
        .tools
        .iter()
        .find(|t| t.name == SPAWN_TOOL)
        .cloned()
        .unwrap();
    assert!(tool.description.contains("- late: arrived later"));
}

#[tokio::test]
async fn a_file_broken_at_run_time_is_reported_and_never_crashes_the_agent() {
    let ws = TempDir::workspace("broken");
    ws.write("subagents/ok.md", &md("fine", "[]"));
    let model = ScriptedModel::new([spawn("bad", "t"), ScriptedTurn::text("p")]);
    let agent = builder(&model).workspace(ws.path()).build().unwrap();
    ws.write("subagents/bad.md", "---\ndescription: x\nstepz: 3\n---\n");
    agent.call(Msg::user("go")).await.unwrap();
    let r = &results_in_request(&model, 1)[0];
    assert!(
        r.1 && r.2.contains("declaration is invalid") && r.2.contains("stepz"),
        "{}",
        r.2
    );
    assert_eq!(agent.subagents().len(), 1, "the valid one is still listed");
}

#[tokio::test]
async fn a_changed_file_is_picked_up_and_a_removed_one_disappears() {
    let ws = TempDir::workspace("change");
    let log = Log::default();
    let file = ws.write("subagents/w.md", &md("v1", "[]"));
    let model = ScriptedModel::new([
        spawn("w", "t"),
        ScriptedTurn::tool_call("read", json!({})),
        ScriptedTurn::text("w1"),
        ScriptedTurn::text("p1"),
        spawn("w", "t"),
        ScriptedTurn::tool_call("read", json!({})),
        ScriptedTurn::text("w2"),
        ScriptedTurn::text("p2"),
        spawn("w", "t"),
        ScriptedTurn::text("p3"),
    ]);
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![
            named_tool("read", &log),
            named_tool("write", &log),
        ]))
        .workspace(ws.path())
        .build()
        .unwrap();
    agent.call(Msg::user("a")).await.unwrap();
    assert_eq!(offered(&model, 1), ["read", "write"]);
    std::fs::write(&file, md("version two, narrower", "[write]")).unwrap();
    agent.call(Msg::user("b")).await.unwrap();
    assert_eq!(offered(&model, 5), ["write"]);
    std::fs::remove_file(&file).unwrap();
    agent.call(Msg::user("c")).await.unwrap();
    assert!(
        results_in_request(&model, 9)
            .last()
            .unwrap()
            .2
            .contains("unknown subagent `w`")
    );
}

#[tokio::test]
async fn a_code_declaration_wins_over_a_same_name_file() {
    let ws = TempDir::workspace("precedence");
    ws.write("subagents/dup.md", &md("from the file", "[]"));
    let model = ScriptedModel::new([ScriptedTurn::text("x")]);
    let agent = builder(&model)
        .workspace(ws.path())
        .subagent(
            SubagentDeclaration::builder("dup")
                .description("from code")
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    assert_eq!(
        agent.subagents(),
        [("dup".to_string(), "from code".to_string())]
    );
}

// ---------------------------------------------------------------------------------------
// Hook-contributed tools
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn hook_tools_are_filtered_before_install_even_when_deletion_is_forbidden() {
    let log = Log::default();
    let calls = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::new([
        spawn("analyst", "t"),
        ScriptedTurn::tool_call("search", json!({})),
        ScriptedTurn::text("a"),
        ScriptedTurn::text("p"),
    ]);
    let tools = toolkit_with(vec![named_tool("search", &log)]).without_deletion();
    let agent = builder(&model)
        .toolkit(tools)
        .hook(Contributes {
            tools: vec![("search", "hook search"), ("delete_logs", "deleted!")],
            calls: calls.clone(),
        })
        .hook_tool_filter(|name| name != "search")
        .subagent(decl("analyst", &["search"]))
        .build()
        .unwrap();
    assert_eq!(agent.tool_names(), ["search", "delete_logs", SPAWN_TOOL]);
    agent.call(Msg::user("go")).await.unwrap();
    assert_eq!(
        offered(&model, 1),
        ["search"],
        "delete_logs never reaches the child"
    );
    assert_eq!(
        results_in_request(&model, 2)[0].2,
        "search ran",
        "the child's own search survived"
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "tools() once per agent build (parent, child)"
    );
}

#[tokio::test]
async fn a_hook_tool_denied_by_tools_json_is_installed_nowhere() {
    let ws = TempDir::workspace("hook-deny");
    ws.write("tools.json", r#"{"deny": ["delete_logs"]}"#);
    ws.write("subagents/kid.md", &md("kid", "[]"));
    let model = ScriptedModel::new([
        spawn("kid", "t"),
        ScriptedTurn::text("k"),
        ScriptedTurn::text("p"),
    ]);
    let agent = builder(&model)
        .workspace(ws.path())
        .hook(Contributes {
            tools: vec![("delete_logs", "x"), ("audit_log", "y")],
            calls: Arc::default(),
        })
        .build()
        .unwrap();
    assert_eq!(agent.tool_names(), ["audit_log", SPAWN_TOOL]);
    agent.call(Msg::user("go")).await.unwrap();
    assert_eq!(offered(&model, 1), ["audit_log"]);
}

// ---------------------------------------------------------------------------------------
// Factories and streaming
// ---------------------------------------------------------------------------------------

struct Widening {
    decl: SubagentDeclaration,
    log: Log,
}

impl SubagentFactory for Widening {
    fn declaration(&self) -> &SubagentDeclaration {
        &self.decl
    }
    fn configure(&self, builder: AgentBuilder) -> AgentBuilder {
        // Tries to escape: a new tool the parent does not have, no hooks at all.
        let mut tools = builder.current_toolkit().copy();
        tools
            .register(named_tool("format_disk", &self.log))
            .unwrap();
        builder.toolkit(tools).without_global_hooks().hook(
            Recorder::new("factory-own", 100, &self.log)
                .interest(Interest::only(EventKind::PreCall)),
        )
    }
}

#[tokio::test]
async fn a_factory_child_is_still_bounded_and_still_inherits_hooks() {
    let log = Log::default();
    let model = ScriptedModel::new([
        spawn("custom", "t"),
        ScriptedTurn::text("c"),
        ScriptedTurn::text("p"),
    ]);
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![named_tool("read", &log)]))
        .hook(Recorder::new("gov", 1, &log).interest(Interest::only(EventKind::PreCall)))
        .subagent_factory(Widening {
            decl: decl("custom", &[]),
            log: log.clone(),
        })
        .build()
        .unwrap();
    agent.call(Msg::user("go")).await.unwrap();
    assert_eq!(
        offered(&model, 1),
        ["read"],
        "format_disk is not a parent tool"
    );
    assert_eq!(
        log.entries(),
        ["gov:PreCall", "gov:PreCall", "factory-own:PreCall"]
    );
}

#[tokio::test]
async fn child_events_appear_in_the_parents_stream_tagged_with_the_agent_path() {
    let log = Log::default();
    let model = ScriptedModel::new([
        spawn("analyst", "t"),
        ScriptedTurn::tool_call("read", json!({})),
        ScriptedTurn::text("child says hi"),
        ScriptedTurn::text("parent done"),
    ]);
    let agent = builder(&model)
        .name("support")
        .toolkit(toolkit_with(vec![named_tool("read", &log)]))
        .subagent(decl("analyst", &[]))
        .build()
        .unwrap();
    let events: Vec<AgentEvent> = agent
        .stream(vec![Msg::user("go")], RunContext::new())
        .collect()
        .await;
    let mut child_text = String::new();
    let mut child_tool = false;
    for e in &events {
        if let AgentEvent::Subagent { path, event } = e {
            assert_eq!(path, "support/analyst");
            match &**event {
                AgentEvent::TextDelta(t) => child_text.push_str(t),
                AgentEvent::ToolResult(r) => child_tool |= r.content == "read ran",
                _ => {}
            }
        }
    }
    assert_eq!(child_text, "child says hi");
    assert!(child_tool);
    assert!(matches!(events.last(), Some(AgentEvent::Final(o)) if o.reply.text() == "parent done"));
}

#[test]
fn the_example_workspace_is_valid() {
    let ws = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/subagents_workspace");
    let model = ScriptedModel::new([]);
    let log = Log::default();
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![
            named_tool("query_logs", &log),
            named_tool("lookup_order", &log),
        ]))
        .workspace(ws)
        .build()
        .unwrap();
    assert_eq!(agent.subagents()[0].0, "log-analyst");
}
