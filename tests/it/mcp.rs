//! MCP tools against a real MCP server nobody here wrote: the reference server
//! `@modelcontextprotocol/server-everything` over stdio.
//!
//! Tests that need the server read the path of its `dist/index.js` from the environment
//! variable `REIN_MCP_EVERYTHING` (`.ci/run` installs the server and sets it) and skip,
//! saying so, when it is unset.

use std::path::Path;
use std::time::{Duration, Instant};

use rein::mcp::McpServerConfig;
use rein::*;
use serde_json::json;

use crate::subagents::{TempDir, named_tool};
use crate::support::*;

const ENV: &str = "REIN_MCP_EVERYTHING";

/// The server script, or `None` (with a message) to skip.
/// The reference server's script. Under `CI=true` a missing server fails the test (CI
/// installs it); elsewhere the test is skipped with a visible message.
fn server() -> Option<String> {
    match std::env::var(ENV) {
        Ok(path) if Path::new(&path).is_file() => Some(path),
        other => {
            let why = format!(
                "{ENV} is {other:?}: set it to @modelcontextprotocol/server-everything's \
                 dist/index.js (bash .ci/run installs it) to run the real-server MCP tests"
            );
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI=true and the MCP reference server is missing: {why}"
            );
            eprintln!("SKIPPED (not under CI): {why}");
            None
        }
    }
}

/// The server over stdio, started through `sh` so the test can see from the outside:
/// its pid goes to `<dir>/pid` (the shell `exec`s node, keeping the pid) and everything
/// the client sends is appended to `<dir>/wire`.
fn observed(script: &str, dir: &Path) -> McpServerConfig {
    let pid = dir.join("pid");
    let wire = dir.join("wire");
    McpServerConfig::stdio("bash").args([
        "-c".to_owned(),
        r#"echo $$ > "$1"; exec node "$3" stdio < <(tee -a "$2")"#.to_owned(),
        "bash".to_owned(),
        pid.display().to_string(),
        wire.display().to_string(),
        script.to_owned(),
    ])
}

fn plain(script: &str) -> McpServerConfig {
    McpServerConfig::stdio("node").args([script, "stdio"])
}

fn read_pid(dir: &Path) -> u32 {
    std::fs::read_to_string(dir.join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn wire(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("wire")).unwrap_or_default()
}

/// Whether `pid` is a live (not zombie) process.
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// An agent on `model` with the server `everything`.
async fn everything(model: &ScriptedModel, config: McpServerConfig) -> Agent {
    builder(model)
        .mcp_server("everything", config)
        .build_async()
        .await
        .unwrap()
}

fn offered(model: &ScriptedModel, n: usize) -> Vec<ToolSchema> {
    model.requests()[n].tools.clone()
}

#[tokio::test]
async fn a_real_servers_tools_are_offered_with_their_schemas_and_called_through_a_run() {
    let Some(script) = server() else { return };
    let model = ScriptedModel::new([
        ScriptedTurn::tool_calls(vec![
            ("mcp__everything__get-sum", json!({"a": 2, "b": 3})),
            ("mcp__everything__echo", json!({"message": "hi there"})),
            (
                "mcp__everything__get-structured-content",
                json!({"location": "Chicago"}),
            ),
        ]),
        ScriptedTurn::text("done"),
    ]);
    let agent = everything(&model, plain(&script)).await;
    let reply = agent.call(Msg::user("add")).await.unwrap();
    assert_eq!(reply.text(), "done");

    let tools = offered(&model, 0);
    let sum = tools
        .iter()
        .find(|t| t.name == "mcp__everything__get-sum")
        .expect("get-sum offered");
    assert_eq!(sum.parameters["properties"]["a"]["type"], "number");
    assert!(sum.description.contains("sum"), "{}", sum.description);
    assert!(
        tools
            .iter()
            .all(|t| t.name.starts_with("mcp__everything__"))
    );

    let results = results_in_request(&model, 1);
    assert_eq!(results.len(), 3);
    assert!(
        !results[0].1 && results[0].2.contains("The sum of 2 and 3 is 5"),
        "{results:?}"
    );
    assert!(
        !results[1].1 && results[1].2.contains("Echo: hi there"),
        "{results:?}"
    );
    let structured: serde_json::Value = serde_json::from_str(&results[2].2).unwrap();
    assert_eq!(
        structured["conditions"], "Light rain / drizzle",
        "{results:?}"
    );
}

#[tokio::test]
async fn arguments_that_violate_the_servers_schema_are_rejected_before_the_server_sees_them() {
    let Some(script) = server() else { return };
    let dir = TempDir::new("mcp-schema");
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("mcp__everything__get-sum", json!({"a": "two"})),
        ScriptedTurn::text("ok"),
    ]);
    let agent = everything(&model, observed(&script, &dir.0)).await;
    agent.call(Msg::user("add")).await.unwrap();
    let r = &results_in_request(&model, 1)[0];
    assert!(r.1, "{r:?}");
    assert!(!wire(&dir.0).contains("tools/call"), "{}", wire(&dir.0));
}

#[tokio::test]
async fn tools_json_declares_servers_with_env_substitution_and_enable_tools() {
    let Some(_script) = server() else { return };
    let dir = TempDir::new("mcp-ws");
    dir.write(
        "tools.json",
        &format!(
            r#"{{"mcpServers": {{"ref": {{"transport": "stdio", "command": "node",
                "args": ["${{{ENV}}}", "stdio"], "timeout_seconds": 20,
                "enable_tools": ["echo", "get-sum"]}}}}}}"#
        ),
    );
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("mcp__ref__echo", json!({"message": "from tools.json"})),
        ScriptedTurn::text("ok"),
    ]);
    let agent = builder(&model)
        .workspace(&dir.0)
        .build_async()
        .await
        .unwrap();
    agent.call(Msg::user("go")).await.unwrap();
    let names: Vec<String> = offered(&model, 0).into_iter().map(|t| t.name).collect();
    assert_eq!(names, ["mcp__ref__echo", "mcp__ref__get-sum", SPAWN_TOOL]);
    let r = &results_in_request(&model, 1)[0];
    assert!(!r.1 && r.2.contains("Echo: from tools.json"), "{r:?}");
}

#[tokio::test]
async fn enable_tools_naming_a_tool_the_server_lacks_fails_the_build_naming_it() {
    let Some(script) = server() else { return };
    let err = builder(&ScriptedModel::new([]))
        .mcp_server("everything", plain(&script).enable_tools(["nope"]))
        .build_async()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), BuildErrorKind::Mcp);
    assert!(
        err.to_string().contains("everything") && err.to_string().contains("nope"),
        "{err}"
    );
}

#[tokio::test]
async fn a_server_command_that_does_not_exist_fails_the_build_naming_the_server() {
    let err = builder(&ScriptedModel::new([]))
        .mcp_server(
            "ghost",
            McpServerConfig::stdio("rein-no-such-mcp-server-binary"),
        )
        .build_async()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), BuildErrorKind::Mcp);
    let text = err.to_string();
    assert!(
        text.contains("`ghost`") && text.contains("rein-no-such-mcp-server-binary"),
        "{text}"
    );
}

#[tokio::test]
async fn a_missing_environment_variable_in_tools_json_fails_the_build_naming_it() {
    let dir = TempDir::new("mcp-env");
    dir.write(
        "tools.json",
        r#"{"mcpServers": {"s": {"command": "x",
             "env": {"TOKEN": "${REIN_SURELY_UNSET_VARIABLE_42}"}}}}"#,
    );
    let err = builder(&ScriptedModel::new([]))
        .workspace(&dir.0)
        .build_async()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), BuildErrorKind::Workspace);
    let spec = err.workspace_error().unwrap();
    assert_eq!(
        spec.kind(),
        rein::subagent::spec::SpecErrorKind::MissingEnvVar
    );
    assert_eq!(spec.key(), Some("mcpServers.s.env.TOKEN"));
    assert_eq!(spec.line(), Some(2));
    assert!(
        err.to_string().contains("REIN_SURELY_UNSET_VARIABLE_42"),
        "{err}"
    );
}

#[test]
fn declared_servers_fail_the_synchronous_build_pointing_to_build_async() {
    let err = builder(&ScriptedModel::new([]))
        .mcp_server("s", McpServerConfig::stdio("node"))
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), BuildErrorKind::Mcp);
    assert!(err.to_string().contains("build_async"), "{err}");
}

#[tokio::test]
async fn a_server_killed_mid_call_gives_an_error_result_and_the_next_call_reconnects() {
    let Some(script) = server() else { return };
    let dir = TempDir::new("mcp-kill");
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call(
            "mcp__everything__trigger-long-running-operation",
            json!({"duration": 30, "steps": 30}),
        ),
        ScriptedTurn::tool_call("mcp__everything__echo", json!({"message": "back"})),
        ScriptedTurn::text("survived"),
    ]);
    let agent = everything(&model, observed(&script, &dir.0)).await;
    let first = read_pid(&dir.0);
    let killer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        std::process::Command::new("kill")
            .args(["-9", &first.to_string()])
            .status()
            .unwrap();
    });
    let started = Instant::now();
    let reply = agent
        .call_with(vec![Msg::user("go")], session("kill"))
        .await
        .unwrap();
    killer.await.unwrap();
    assert_eq!(reply.text(), "survived");
    assert!(started.elapsed() < Duration::from_secs(20));
    let killed = &results_in_request(&model, 1)[0];
    assert!(killed.1, "{killed:?}");
    assert!(
        killed.2.contains("`everything`") && killed.2.contains("trigger-long-running-operation"),
        "{killed:?}"
    );
    let again = &results_in_request(&model, 2)[1];
    assert!(!again.1 && again.2.contains("Echo: back"), "{again:?}");
    assert_ne!(read_pid(&dir.0), first, "a new server process was started");
    assert_memory_valid(&agent.messages(&key("kill")).await);
}

#[tokio::test]
async fn a_call_over_the_servers_timeout_is_an_error_result_and_the_agent_keeps_working() {
    let Some(script) = server() else { return };
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call(
            "mcp__everything__trigger-long-running-operation",
            json!({"duration": 5, "steps": 5}),
        ),
        ScriptedTurn::tool_call("mcp__everything__echo", json!({"message": "still here"})),
        ScriptedTurn::text("done"),
    ]);
    let agent = everything(&model, plain(&script).timeout(Duration::from_secs(1))).await;
    agent.call(Msg::user("go")).await.unwrap();
    let slow = &results_in_request(&model, 1)[0];
    assert!(slow.1 && slow.2.contains("timed out"), "{slow:?}");
    assert!(slow.2.contains("`everything`"), "{slow:?}");
    let next = &results_in_request(&model, 2)[1];
    assert!(!next.1 && next.2.contains("Echo: still here"), "{next:?}");
}

#[tokio::test]
async fn a_server_that_cannot_restart_gives_an_error_result_and_the_agent_keeps_working() {
    let Some(script) = server() else { return };
    let dir = TempDir::new("mcp-restart");
    let flag = dir.0.join("broken");
    // Starts the server the first time; once `broken` exists, exits at once.
    let config = McpServerConfig::stdio("sh").args([
        "-c".to_owned(),
        r#"[ -e "$1" ] && exit 3; echo $$ > "$2"; exec node "$3" stdio"#.to_owned(),
        "sh".to_owned(),
        flag.display().to_string(),
        dir.0.join("pid").display().to_string(),
        script.clone(),
    ]);
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("mcp__everything__echo", json!({"message": "one"})),
        ScriptedTurn::tool_call("mcp__everything__echo", json!({"message": "two"})),
        ScriptedTurn::text("carried on"),
    ]);
    let agent = everything(&model, config.connect_timeout(Duration::from_secs(5))).await;
    std::fs::write(&flag, "").unwrap();
    std::process::Command::new("kill")
        .args(["-9", &read_pid(&dir.0).to_string()])
        .status()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let reply = agent.call(Msg::user("go")).await.unwrap();
    assert_eq!(reply.text(), "carried on");
    for n in [1, 2] {
        let r = results_in_request(&model, n).pop().unwrap();
        assert!(r.1, "{r:?}");
        assert!(
            r.2.contains("`everything`") && r.2.contains("`echo`"),
            "{r:?}"
        );
    }
}

#[tokio::test]
async fn an_mcp_tool_denied_by_a_hook_never_reaches_the_server() {
    let Some(script) = server() else { return };
    let dir = TempDir::new("mcp-hook");
    let guard = FnHook::new("guard", |event| {
        if let HookEvent::PreActing(e) = event
            && e.tool_use().name.starts_with("mcp__")
        {
            e.deny("MCP tools need approval");
        }
        Ok(())
    })
    .on(EventKind::PreActing);
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("mcp__everything__echo", json!({"message": "secret"})),
        ScriptedTurn::text("denied"),
    ]);
    let agent = builder(&model)
        .hook(guard)
        .mcp_server("everything", observed(&script, &dir.0))
        .build_async()
        .await
        .unwrap();
    agent.call(Msg::user("go")).await.unwrap();
    let r = &results_in_request(&model, 1)[0];
    assert!(r.1 && r.2.contains("approval"), "{r:?}");
    let sent = wire(&dir.0);
    assert!(sent.contains("tools/list"), "{sent}");
    assert!(!sent.contains("tools/call"), "{sent}");
}

#[tokio::test]
async fn an_mcp_tool_denied_by_tools_json_is_not_offered_and_never_reaches_the_server() {
    let Some(script) = server() else { return };
    let dir = TempDir::new("mcp-deny");
    dir.write("tools.json", r#"{"deny": ["mcp__everything__echo"]}"#);
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("mcp__everything__echo", json!({"message": "x"})),
        ScriptedTurn::text("ok"),
    ]);
    let agent = builder(&model)
        .workspace(&dir.0)
        .mcp_server("everything", observed(&script, &dir.0))
        .build_async()
        .await
        .unwrap();
    agent.call(Msg::user("go")).await.unwrap();
    let names: Vec<String> = offered(&model, 0).into_iter().map(|t| t.name).collect();
    assert!(
        !names.contains(&"mcp__everything__echo".to_owned()),
        "{names:?}"
    );
    assert!(
        names.contains(&"mcp__everything__get-sum".to_owned()),
        "{names:?}"
    );
    assert!(results_in_request(&model, 1)[0].1);
    assert!(!wire(&dir.0).contains("tools/call"));
}

#[tokio::test]
async fn a_subagent_whose_allowlist_omits_an_mcp_tool_cannot_call_it() {
    let Some(script) = server() else { return };
    let dir = TempDir::new("mcp-child");
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call(SPAWN_TOOL, json!({"agent_id": "narrow", "task": "t"})),
        ScriptedTurn::tool_call("mcp__everything__echo", json!({"message": "x"})),
        ScriptedTurn::text("child could not"),
        ScriptedTurn::tool_call(SPAWN_TOOL, json!({"agent_id": "wide", "task": "t"})),
        ScriptedTurn::tool_call("mcp__everything__echo", json!({"message": "via child"})),
        ScriptedTurn::text("child did"),
        ScriptedTurn::text("parent done"),
    ]);
    let agent = builder(&model)
        .toolkit(toolkit_with(vec![named_tool("read", &log)]))
        .subagent(
            SubagentDeclaration::builder("narrow")
                .description("no MCP")
                .tools(["read"])
                .build()
                .unwrap(),
        )
        .subagent(
            SubagentDeclaration::builder("wide")
                .description("echo only")
                .tools(["mcp__everything__echo"])
                .build()
                .unwrap(),
        )
        .mcp_server("everything", observed(&script, &dir.0))
        .build_async()
        .await
        .unwrap();
    agent.call(Msg::user("go")).await.unwrap();
    let narrow: Vec<String> = offered(&model, 1).into_iter().map(|t| t.name).collect();
    assert_eq!(narrow, ["read"]);
    let r = &results_in_request(&model, 2)[0];
    assert!(r.1 && r.2.contains("Unknown tool"), "{r:?}");
    let wide: Vec<String> = offered(&model, 4).into_iter().map(|t| t.name).collect();
    assert_eq!(wide, ["mcp__everything__echo"]);
    let r = &results_in_request(&model, 5)[0];
    assert!(!r.1 && r.2.contains("Echo: via child"), "{r:?}");
    assert_eq!(wire(&dir.0).matches("tools/call").count(), 1);
}

#[tokio::test]
async fn dropping_the_last_agent_stops_the_stdio_servers_process() {
    let Some(script) = server() else { return };
    let dir = TempDir::new("mcp-drop");
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("mcp__everything__echo", json!({"message": "x"})),
        ScriptedTurn::text("ok"),
    ]);
    let agent = everything(&model, observed(&script, &dir.0)).await;
    let clone = agent.clone();
    agent.call(Msg::user("go")).await.unwrap();
    let pid = read_pid(&dir.0);
    drop(agent);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(alive(pid), "a clone still uses the server");
    drop(clone);
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pid) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!alive(pid), "server process {pid} still running");
}
