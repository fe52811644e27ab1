//! Subagent helpers shared by the subagent, governance, MCP, session and chain tests:
//! declarations, the delegation call, named tools, the tools a request offered, a
//! Markdown declaration, and a hook that contributes tools.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rein::*;
use serde_json::json;

use super::*;

/// A tool named `name` that returns `"{name} ran"` and logs `"{name}"`.
pub fn named_tool(name: &str, log: &Log) -> FunctionTool {
    let (n, log) = (name.to_string(), log.clone());
    FunctionTool::new(
        name,
        format!("The {name} tool."),
        json!({"type": "object"}),
        move |_| {
            let (n, log) = (n.clone(), log.clone());
            async move {
                log.push(n.clone());
                Ok(format!("{n} ran"))
            }
        },
    )
}

pub fn decl(name: &str, tools: &[&str]) -> SubagentDeclaration {
    SubagentDeclaration::builder(name)
        .description(format!("the {name} subagent"))
        .tools(tools.iter().copied())
        .build()
        .unwrap()
}

pub fn spawn(id: &str, task: &str) -> ScriptedTurn {
    ScriptedTurn::tool_call(SPAWN_TOOL, json!({"agent_id": id, "task": task}))
}

/// The tool names offered in request `n`.
pub fn offered(model: &ScriptedModel, n: usize) -> Vec<String> {
    model.requests()[n]
        .tools
        .iter()
        .map(|t| t.name.clone())
        .collect()
}

/// A workspace file declaring a subagent.
pub fn md(description: &str, tools: &str) -> String {
    format!("---\ndescription: {description}\ntools: {tools}\n---\nYou help.\n")
}

/// A hook that contributes `tools` (name, output), counting the calls of `tools()`.
pub struct Contributes {
    pub tools: Vec<(&'static str, &'static str)>,
    pub calls: Arc<AtomicUsize>,
}

impl Hook for Contributes {
    fn name(&self) -> &str {
        "contributes"
    }
    fn interest(&self) -> Interest {
        Interest::NONE
    }
    fn tools(&self) -> Vec<SharedTool> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.tools
            .iter()
            .map(|(name, out)| {
                let out = out.to_string();
                SharedTool::new(FunctionTool::new(
                    *name,
                    "hook tool",
                    json!({"type": "object"}),
                    move |_| {
                        let out = out.clone();
                        async move { Ok(out) }
                    },
                ))
            })
            .collect()
    }
    async fn on_event(&self, _e: &mut HookEvent) -> Result<(), HookError> {
        Ok(())
    }
}

/// A toolkit with the tools `read` and `write`.
pub fn read_write(log: &Log) -> Toolkit {
    toolkit_with(vec![named_tool("read", log), named_tool("write", log)])
}
