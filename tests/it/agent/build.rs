//! Build-time validation and hook-contributed tools.

use std::sync::Arc;

use rein::*;
use serde_json::json;

use crate::support::*;

#[test]
fn a_builder_without_a_model_fails_naming_the_problem() {
    let err = Agent::builder().name("nomodel").build().unwrap_err();
    assert_eq!(err.kind(), BuildErrorKind::MissingModel);
    assert!(err.to_string().contains("`nomodel` has no model"), "{err}");
}

#[test]
fn zero_max_iters_is_an_invalid_config() {
    let model = ScriptedModel::new([]);
    let err = builder(&model).max_iters(0).build().unwrap_err();
    assert_eq!(err.kind(), BuildErrorKind::InvalidConfig);
}

struct Configured {
    cap: i64,
}

impl Hook for Configured {
    fn validate(&self) -> Result<(), HookError> {
        if self.cap < 0 {
            return Err(HookError::new(format!(
                "cap must not be negative, got {}",
                self.cap
            )));
        }
        Ok(())
    }
    async fn on_event(&self, _e: &mut HookEvent) -> Result<(), HookError> {
        Ok(())
    }
}

#[test]
fn a_hook_with_an_invalid_configuration_fails_the_build_naming_the_hook() {
    let model = ScriptedModel::new([]);
    let err = builder(&model)
        .hook(Configured { cap: -1 })
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), BuildErrorKind::InvalidHook);
    assert!(err.to_string().contains("`Configured`"), "{err}");
    assert!(
        err.to_string().contains("cap must not be negative, got -1"),
        "{err}"
    );
    assert!(builder(&model).hook(Configured { cap: 3 }).build().is_ok());
}

struct WithTool {
    name: &'static str,
    calls: Arc<std::sync::atomic::AtomicUsize>,
}

impl Hook for WithTool {
    fn tools(&self) -> Vec<SharedTool> {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        vec![SharedTool::new(FunctionTool::new(
            self.name,
            "contributed",
            json!({"type": "object"}),
            |_| async { Ok("from hook".to_string()) },
        ))]
    }
    async fn on_event(&self, _e: &mut HookEvent) -> Result<(), HookError> {
        Ok(())
    }
}

#[tokio::test]
async fn hook_tools_are_installed_on_the_agents_copy_once_per_build() {
    let log = Log::default();
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("lookup", json!({})),
        ScriptedTurn::text("ok"),
    ]);
    let tools = toolkit_with(vec![add_tool(&log)]);
    let agent = builder(&model)
        .toolkit(tools)
        .hook(WithTool {
            name: "lookup",
            calls: calls.clone(),
        })
        .build()
        .unwrap();
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(agent.tool_names(), ["add", "lookup"]);
    agent.call(Msg::user("go")).await.unwrap();
    assert_eq!(results_in_request(&model, 1)[0].2, "from hook");
}

#[test]
fn the_builders_toolkit_is_not_changed_by_hook_tools() {
    let log = Log::default();
    let model = ScriptedModel::new([]);
    let tools = toolkit_with(vec![add_tool(&log)]);
    let b = builder(&model).toolkit(tools.copy()).hook(WithTool {
        name: "lookup",
        calls: Arc::default(),
    });
    let first = b.clone().build().unwrap();
    let second = b.build().unwrap();
    assert_eq!(first.tool_names(), ["add", "lookup"]);
    assert_eq!(second.tool_names(), ["add", "lookup"]);
    assert_eq!(tools.names(), ["add"]);
}

#[test]
fn a_hook_tool_clashing_with_an_existing_tool_fails_the_build() {
    let log = Log::default();
    let model = ScriptedModel::new([]);
    let err = builder(&model)
        .toolkit(toolkit_with(vec![add_tool(&log)]))
        .hook(WithTool {
            name: "add",
            calls: Arc::default(),
        })
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), BuildErrorKind::Tool);
    assert!(
        err.to_string()
            .contains("hook `WithTool` contributes tool `add`"),
        "{err}"
    );
    assert!(err.to_string().contains("duplicate tool name"), "{err}");
}

#[cfg(not(feature = "mcp"))]
#[test]
fn mcp_servers_in_tools_json_fail_the_build_when_the_mcp_feature_is_off() {
    let dir = TempDir::workspace("mcp-off");
    dir.write(
        "tools.json",
        r#"{"mcpServers": {"files": {"command": "server"}}}"#,
    );
    let err = Agent::builder()
        .model(ScriptedModel::new([]))
        .without_global_hooks()
        .workspace(dir.path())
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), BuildErrorKind::Mcp);
    let text = err.to_string();
    assert!(
        text.contains("`files`") && text.contains("`mcp` feature"),
        "{text}"
    );
}
