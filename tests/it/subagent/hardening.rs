//! Subagent governance that fails closed: workspace paths and policy files that cannot
//! be read, content-based re-scans, forgetting that reaches the whole delegation tree,
//! and factories that can only narrow.

use std::time::Duration;

use rein::subagent::spec::SpecErrorKind;
use rein::*;
use serde_json::json;

use crate::support::subagents::{decl, md, named_tool, offered, read_write, spawn};
use crate::support::*;

// ---------------------------------------------------------------------------------------
// Item 7: policy files that fail open
// ---------------------------------------------------------------------------------------

#[test]
fn a_workspace_path_that_does_not_exist_fails_the_build_naming_it() {
    let ws = TempDir::workspace("typo-ws");
    let typo = ws.path().join("wrokspace");
    let model = ScriptedModel::new([]);
    let err = builder(&model).workspace(&typo).build().unwrap_err();
    assert_eq!(err.kind(), BuildErrorKind::Workspace);
    let spec = err.workspace_error().unwrap();
    assert_eq!(spec.kind(), SpecErrorKind::Missing);
    assert_eq!(spec.file(), typo);
    assert!(
        err.to_string().contains(&typo.display().to_string()),
        "{err}"
    );
}

#[test]
fn a_workspace_path_that_is_a_file_fails_the_build_naming_it() {
    let ws = TempDir::workspace("file-ws");
    let file = ws.write("not-a-dir", "x");
    let model = ScriptedModel::new([]);
    let err = builder(&model).workspace(&file).build().unwrap_err();
    assert_eq!(err.kind(), BuildErrorKind::Workspace);
    assert_eq!(err.workspace_error().unwrap().file(), file);
}

#[cfg(unix)]
#[test]
fn a_dangling_tools_json_symlink_fails_the_build() {
    let ws = TempDir::workspace("dangling");
    // A ConfigMap mount whose target is missing: tools.json -> ..data/tools.json.
    let link = ws.path().join("tools.json");
    std::os::unix::fs::symlink(ws.path().join("..data/tools.json"), &link).unwrap();
    let model = ScriptedModel::new([]);
    let err = builder(&model).workspace(ws.path()).build().unwrap_err();
    assert_eq!(err.kind(), BuildErrorKind::Workspace);
    let spec = err.workspace_error().unwrap();
    assert_eq!((spec.kind(), spec.file()), (SpecErrorKind::Missing, &*link));
    assert!(err.to_string().contains("symbolic link"), "{err}");

    // Only a genuinely absent file means "no policy".
    std::fs::remove_file(&link).unwrap();
    builder(&model).workspace(ws.path()).build().unwrap();
}

#[cfg(unix)]
#[test]
fn a_tools_json_symlink_to_a_readable_policy_is_applied() {
    let ws = TempDir::workspace("linked");
    std::fs::create_dir_all(ws.path().join("..data")).unwrap();
    ws.write("..data/tools.json", r#"{"deny": ["write"]}"#);
    std::os::unix::fs::symlink(
        ws.path().join("..data/tools.json"),
        ws.path().join("tools.json"),
    )
    .unwrap();
    let log = Log::default();
    let model = ScriptedModel::new([]);
    let agent = builder(&model)
        .toolkit(read_write(&log))
        .workspace(ws.path())
        .build()
        .unwrap();
    assert!(
        agent.tool_names().iter().any(|t| t == "read")
            && !agent.tool_names().iter().any(|t| t == "write"),
        "{:?}",
        agent.tool_names()
    );
}

#[tokio::test]
async fn an_edit_that_keeps_size_and_mtime_is_seen_by_the_rescan() {
    let ws = TempDir::workspace("same-mtime");
    let log = Log::default();
    let file = ws.write("subagents/w.md", &md("worker", "[read]"));
    let model = ScriptedModel::new([
        spawn("w", "t"),
        ScriptedTurn::text("w1"),
        ScriptedTurn::text("p1"),
        spawn("w", "t"),
        ScriptedTurn::text("w2"),
        ScriptedTurn::text("p2"),
    ]);
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![
            named_tool("read", &log),
            named_tool("list", &log),
        ]))
        .workspace(ws.path())
        .build()
        .unwrap();
    agent.call(Msg::user("a")).await.unwrap();
    assert_eq!(offered(&model, 1), ["read"]);

    // `cp -p` / `rsync -t`: same length, same mtime, different content.
    let before = std::fs::metadata(&file).unwrap();
    std::fs::write(&file, md("worker", "[list]")).unwrap();
    let f = std::fs::File::options().write(true).open(&file).unwrap();
    f.set_modified(before.modified().unwrap()).unwrap();
    drop(f);
    let after = std::fs::metadata(&file).unwrap();
    assert_eq!(
        (after.len(), after.modified().unwrap()),
        (before.len(), before.modified().unwrap())
    );

    agent.call(Msg::user("b")).await.unwrap();
    assert_eq!(offered(&model, 4), ["list"], "the edited allowlist applies");
}

// ---------------------------------------------------------------------------------------
// Item 8: children do not outlive their parent's session
// ---------------------------------------------------------------------------------------

fn texts(model: &ScriptedModel, n: usize) -> String {
    model.requests()[n]
        .messages
        .iter()
        .map(|m| {
            let mut s = m.text();
            for u in m.tool_uses() {
                s.push_str(&u.input.to_string());
            }
            s
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn forgetting_a_session_forgets_its_children_conversations() {
    let model = ScriptedModel::new([
        // first call: parent → helper → inner
        spawn("helper", "first task"),
        spawn("inner", "inner first"),
        ScriptedTurn::text("inner done"),
        ScriptedTurn::text("helper done"),
        ScriptedTurn::text("p1"),
        // second call, after forget_session
        spawn("helper", "second task"),
        spawn("inner", "inner second"),
        ScriptedTurn::text("inner done again"),
        ScriptedTurn::text("helper done again"),
        ScriptedTurn::text("p2"),
    ]);
    let agent = builder(&model)
        .subagent(decl("helper", &[SPAWN_TOOL]))
        .subagent(decl("inner", &[]))
        .build()
        .unwrap();
    let ctx = || RunContext::new().with_session_id("s").with_user_id("u");
    agent.call_with(vec![Msg::user("go")], ctx()).await.unwrap();
    assert!(texts(&model, 1).contains("first task"));
    assert!(texts(&model, 2).contains("inner first"));

    assert!(agent.forget_session(&SessionKey::new(Some("u"), "s")));
    agent
        .call_with(vec![Msg::user("again")], ctx())
        .await
        .unwrap();
    let (helper, inner) = (texts(&model, 6), texts(&model, 7));
    assert!(helper.contains("second task"), "{helper}");
    assert!(
        !helper.contains("first task"),
        "the child still remembers: {helper}"
    );
    assert!(inner.contains("inner second"), "{inner}");
    assert!(
        !inner.contains("inner first"),
        "the grandchild still remembers: {inner}"
    );
}

#[tokio::test]
async fn forgetting_one_session_keeps_the_children_of_another() {
    let model = ScriptedModel::new([
        spawn("helper", "task of a"),
        ScriptedTurn::text("h"),
        ScriptedTurn::text("p"),
        spawn("helper", "task of b"),
        ScriptedTurn::text("h"),
        ScriptedTurn::text("p"),
        spawn("helper", "more for a"),
        ScriptedTurn::text("h"),
        ScriptedTurn::text("p"),
    ]);
    let agent = builder(&model)
        .subagent(decl("helper", &[]))
        .build()
        .unwrap();
    agent
        .call_with(vec![Msg::user("x")], session("a"))
        .await
        .unwrap();
    agent
        .call_with(vec![Msg::user("x")], session("b"))
        .await
        .unwrap();
    assert!(agent.forget_session(&key("b")));
    agent
        .call_with(vec![Msg::user("x")], session("a"))
        .await
        .unwrap();
    let child = texts(&model, 7);
    assert!(
        child.contains("task of a") && child.contains("more for a"),
        "{child}"
    );
}

// ---------------------------------------------------------------------------------------
// Item 10: a factory can only narrow
// ---------------------------------------------------------------------------------------

/// A factory whose `configure` is a closure.
struct Factory<F> {
    decl: SubagentDeclaration,
    configure: F,
}

impl<F> SubagentFactory for Factory<F>
where
    F: Fn(AgentBuilder) -> AgentBuilder + Send + Sync + 'static,
{
    fn declaration(&self) -> &SubagentDeclaration {
        &self.decl
    }
    fn configure(&self, builder: AgentBuilder) -> AgentBuilder {
        (self.configure)(builder)
    }
}

fn factory(
    configure: impl Fn(AgentBuilder) -> AgentBuilder + Send + Sync + 'static,
) -> Factory<impl Fn(AgentBuilder) -> AgentBuilder + Send + Sync + 'static> {
    Factory {
        decl: decl("custom", &[]),
        configure,
    }
}

#[tokio::test]
async fn a_factory_cannot_swap_a_tool_instance_under_a_permitted_name() {
    let log = Log::default();
    let fake_log = Log::default();
    let fake = fake_log.clone();
    let model = ScriptedModel::new([
        spawn("custom", "refund 10"),
        ScriptedTurn::tool_call("refund", json!({})),
        ScriptedTurn::text("c"),
        ScriptedTurn::text("p"),
    ]);
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![named_tool("refund", &log)]))
        .subagent_factory(factory(move |b| {
            // Same name, another instance: no approval or cap held on the parent's
            // tool would apply to this one.
            let mut tools = Toolkit::new();
            tools.register(named_tool("refund", &fake_log)).unwrap();
            b.toolkit(tools)
        }))
        .build()
        .unwrap();
    agent.call(Msg::user("go")).await.unwrap();
    let r = &results_in_request(&model, 1)[0];
    assert!(r.1, "the spawn fails: {r:?}");
    assert!(
        r.2.contains("`refund`") && r.2.contains("instance"),
        "{}",
        r.2
    );
    // The parent then called its own refund; the child (and its tool) never ran.
    assert_eq!(log.entries(), ["refund"]);
    assert!(fake.entries().is_empty());
    assert_eq!(model.requests().len(), 3);
}

#[tokio::test]
async fn a_factory_cannot_raise_max_depth() {
    let model = ScriptedModel::new([spawn("custom", "t"), ScriptedTurn::text("p")]);
    let agent = builder(&model)
        .max_depth(2)
        .subagent_factory(factory(|b| b.max_depth(10)))
        .build()
        .unwrap();
    agent.call(Msg::user("go")).await.unwrap();
    let r = &results_in_request(&model, 1)[0];
    assert!(r.1 && r.2.contains("`max_depth` from 2 to 10"), "{}", r.2);
}

#[tokio::test]
async fn a_factory_cannot_raise_iterations_or_timeouts() {
    let model = ScriptedModel::new([spawn("custom", "t"), ScriptedTurn::text("p")]);
    let agent = builder(&model)
        .tool_timeout(Duration::from_secs(5))
        .hook_timeout(Duration::from_secs(1))
        .subagent_factory(factory(|b| {
            b.max_iters(1000)
                .max_gotos(50)
                .tool_timeout(Duration::from_secs(3600))
                .hook_timeout(Duration::from_secs(60))
        }))
        .build()
        .unwrap();
    agent.call(Msg::user("go")).await.unwrap();
    let r = &results_in_request(&model, 1)[0];
    assert!(r.1, "{r:?}");
    for limit in ["max_iters", "max_gotos", "tool_timeout", "hook_timeout"] {
        assert!(r.2.contains(&format!("`{limit}`")), "{limit}: {}", r.2);
    }
}

#[tokio::test]
async fn a_factory_may_narrow_tools_and_lower_limits() {
    let log = Log::default();
    let model = ScriptedModel::new([
        spawn("custom", "t"),
        ScriptedTurn::tool_call("read", json!({})),
        ScriptedTurn::text("c"),
        ScriptedTurn::text("p"),
    ]);
    let agent = builder(&model)
        .toolkit(read_write(&log))
        .hook_timeout(Duration::from_secs(10))
        .subagent_factory(factory(|b| {
            let tools = b.current_toolkit().filtered(|name| name == "read");
            b.toolkit(tools)
                .max_depth(1)
                .max_iters(3)
                .hook_timeout(Duration::from_secs(5))
        }))
        .build()
        .unwrap();
    agent.call(Msg::user("go")).await.unwrap();
    assert_eq!(offered(&model, 1), ["read"]);
    assert_eq!(log.entries(), ["read"]);
    let r = &results_in_request(&model, 3)[0];
    assert!(!r.1 && r.2.ends_with('c'), "{r:?}");
}

/// The error result of a spawn whose factory does `configure`.
async fn spawn_error(
    configure: impl Fn(AgentBuilder) -> AgentBuilder + Send + Sync + 'static,
) -> String {
    let model = ScriptedModel::new([spawn("custom", "t"), ScriptedTurn::text("p")]);
    let agent = builder(&model)
        .subagent_factory(factory(configure))
        .build()
        .unwrap();
    agent.call(Msg::user("go")).await.unwrap();
    let r = &results_in_request(&model, 1)[0];
    assert!(r.1, "the spawn fails: {r:?}");
    assert_eq!(model.requests().len(), 2, "the child never ran");
    r.2.clone()
}

#[tokio::test]
async fn a_factory_cannot_rename_its_child() {
    let e = spawn_error(|b| b.name("root")).await;
    assert!(
        e.contains("subagent `custom`") && e.contains("renamed it to `root`"),
        "{e}"
    );
}

#[tokio::test]
async fn a_factory_cannot_give_its_child_a_workspace_or_subagents() {
    let dir = TempDir::workspace("factory-ws");
    let path = dir.path().to_path_buf();
    let e = spawn_error(move |b| b.workspace(&path)).await;
    assert!(e.contains("gave it a workspace"), "{e}");
    let e = spawn_error(|b| b.general_purpose_subagent()).await;
    assert!(e.contains("declared subagents on it"), "{e}");
}

#[tokio::test]
async fn a_factory_sees_the_inherited_config_and_its_own_hooks_run_after_the_inherited_ones_of_equal_priority()
 {
    let log = Log::default();
    let model = ScriptedModel::new([
        spawn("custom", "t"),
        ScriptedTurn::text("c"),
        ScriptedTurn::text("p"),
    ]);
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen_in = std::sync::Arc::clone(&seen);
    let factory_log = log.clone();
    let agent = builder(&model)
        .toolkit(read_write(&log))
        .hook(Recorder::new("inherited", 0, &log).interest(Interest::only(EventKind::PreCall)))
        .subagent_factory(factory(move |b| {
            seen_in.lock().unwrap().extend(b.current_toolkit().names());
            // Same priority: registered after the inherited hook, so it runs after it.
            b.hook(
                Recorder::new("own", 0, &factory_log).interest(Interest::only(EventKind::PreCall)),
            )
        }))
        .build()
        .unwrap();
    agent.call(Msg::user("go")).await.unwrap();
    assert_eq!(*seen.lock().unwrap(), ["read", "write"]);
    let calls: Vec<String> = log
        .entries()
        .into_iter()
        .filter(|e| e.contains("PreCall"))
        .collect();
    // The parent's call, then the child's: inherited first, then the factory's own.
    assert_eq!(
        calls,
        ["inherited:PreCall", "inherited:PreCall", "own:PreCall"]
    );
}
