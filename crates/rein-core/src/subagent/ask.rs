//! [`DelegationStyle::ToolPerSubagent`](crate::agent::DelegationStyle::ToolPerSubagent): one `ask_<id>` tool per declared subagent, each
//! delegating through the same body as `agent_spawn`.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::delegate::{Delegation, delegate};
use crate::error::{BuildError, BuildErrorKind};
use crate::tool::{
    EffectClass, SharedTool, Tool, ToolCapabilities, ToolContext, ToolError, expects,
};

/// The tool name of the subagent `id` in [`DelegationStyle::ToolPerSubagent`](crate::agent::DelegationStyle::ToolPerSubagent):
/// `ask_<id>` with every character other than ASCII letters and digits as `_`.
pub(crate) fn ask_tool_name(id: &str) -> String {
    let safe: String = id
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("ask_{safe}")
}

/// The longest tool name the chat APIs accept.
const MAX_TOOL_NAME: usize = 64;

/// One subagent offered as its own tool ([`DelegationStyle::ToolPerSubagent`](crate::agent::DelegationStyle::ToolPerSubagent)).
pub(crate) struct AskTool {
    delegation: Arc<Delegation>,
    id: String,
    name: String,
    description: String,
}

impl AskTool {
    /// The tools for every subagent known now, in the registry's order.
    ///
    /// # Errors
    /// Two subagent ids with the same tool name, or a tool name longer than the chat
    /// APIs accept.
    pub(crate) fn for_all(delegation: &Arc<Delegation>) -> Result<Vec<SharedTool>, BuildError> {
        delegation.registry.refresh();
        let mut tools = Vec::new();
        let mut names: HashMap<String, String> = HashMap::new();
        for (id, description) in delegation.registry.listing() {
            let name = ask_tool_name(&id);
            if name.len() > MAX_TOOL_NAME {
                return Err(BuildError::new(
                    BuildErrorKind::Tool,
                    format!(
                        "subagent `{id}`: its tool name `{name}` is longer than \
                         {MAX_TOOL_NAME} characters; shorten the id or use DelegationStyle::Spawn"
                    ),
                ));
            }
            if let Some(other) = names.insert(name.clone(), id.clone()) {
                return Err(BuildError::new(
                    BuildErrorKind::Tool,
                    format!(
                        "subagents `{other}` and `{id}` both get the tool name `{name}`; \
                         rename one or use DelegationStyle::Spawn"
                    ),
                ));
            }
            let description = format!(
                "Ask the subagent `{id}` to do a task and wait for its reply. {description} \
                 Give `task`: everything it needs to know (it does not see this \
                 conversation)."
            );
            tools.push(SharedTool::new(AskTool {
                delegation: Arc::clone(delegation),
                id,
                name,
                description,
            }));
        }
        Ok(tools)
    }
}

/// The declared arguments of an `ask_<id>` tool (unknown properties ignored, as for
/// `agent_spawn`).
fn ask_parameters() -> Value {
    json!({
        "type": "object",
        "properties": {
            "task": {"type": "string", "description": "The task, self-contained."},
            "timeout_seconds": {"type": "integer", "minimum": 1, "maximum": 3600,
                                "description": "Cancel the subagent after this many seconds."}
        },
        "required": ["task"]
    })
}

impl Tool for AskTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        ask_parameters()
    }

    /// Journaled like `agent_spawn` (see [`SpawnTool`]'s effect class).
    /// Neither changes state nor sends anything out itself: the subagent's own calls
    /// are judged inside it, where its context starts from this call's label (its
    /// task carries it) and the inherited policy hooks run. Its result carries the
    /// label of everything the subagent saw.
    fn capabilities(&self) -> ToolCapabilities {
        ToolCapabilities::new().changes_state(false)
    }

    fn effect_class(&self) -> EffectClass {
        EffectClass::AtMostOnce
    }

    async fn call(&self, input: Value, ctx: ToolContext) -> Result<String, ToolError> {
        let expects = || expects(&self.name, &ask_parameters());
        delegate(&self.delegation, &self.id, &input, ctx, expects).await
    }
}
