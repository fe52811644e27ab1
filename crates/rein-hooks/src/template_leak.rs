//! [`TemplateLeakHook`]: a reply that carries leaked chat-template markup is a failed
//! turn, re-asked a bounded number of times, never shown as it is.
//!
//! Small local models sometimes write the markup of their chat template into the
//! answer (`<tool_call>{…}</tool_call>` as text instead of a real tool call, a
//! `<tool_response>` they imagine, `<|im_start|>assistant`). The text means nothing to
//! the user and may hold a fabricated tool result.

use serde::{Deserialize, Serialize};

use super::{HOOK_KEY, add_flag};
use rein_core::hook::StateKey;
use rein_core::hook::{EventKind, HookError, HookEvent, Interest, SyncHook};
use rein_core::{ContentBlock, Msg};

/// Flag (see [`super::FLAG_CORRECTED`]'s key) on a reply whose markup was stripped
/// because the redo budget was used up.
pub const FLAG_TEMPLATE_STRIPPED: &str = "template_markup_stripped";

/// Settings of [`TemplateLeakHook`] (the `template_leak` section of
/// [`HooksConfig`](super::HooksConfig)). Every key is optional.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TemplateLeakConfig {
    /// Install the hook (default `false`: opt in for small local models).
    pub enabled: bool,
    /// Markup that makes a reply a failed turn (default: the Qwen/ChatML, Llama 3 and
    /// Hermes tool-call markers, e.g. `<tool_call>`, `<tool_response>`,
    /// `<|im_start|>`, `<|eot_id|>`).
    pub markers: Vec<String>,
    /// Redos per call (default 2). When they are used up the markers are stripped from
    /// the reply, which is flagged [`FLAG_TEMPLATE_STRIPPED`].
    pub max_redos: u32,
    /// The message the model gets before it answers again (user role, so providers
    /// that require alternating turns accept it).
    pub correction_message: String,
}

impl Default for TemplateLeakConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            markers: [
                "<tool_call>",
                "</tool_call>",
                "<tool_response>",
                "</tool_response>",
                "<|im_start|>",
                "<|im_end|>",
                "<|endoftext|>",
                "<|eot_id|>",
                "<|start_header_id|>",
                "<|end_header_id|>",
                "<|python_tag|>",
            ]
            .map(str::to_owned)
            .to_vec(),
            max_redos: 2,
            correction_message: "Your previous reply contained chat-template markup instead \
                of an answer. Reply to the user in plain text; to use a tool, call it through \
                the tool interface."
                .to_owned(),
        }
    }
}

/// Treats a reply that contains leaked chat-template markup as a failed turn: the model
/// reasons again (at most `max_redos` times per call), then the markup is stripped.
/// Priority **190** (before the self-correction hook). Off by default in
/// [`HooksConfig`](super::HooksConfig).
///
/// Fires on `PostReasoning` for turns with text (a turn whose only content is real
/// tool calls is left alone) and cleans its per-run budget on `PostCall` / `Error`.
#[derive(Debug)]
pub struct TemplateLeakHook {
    config: TemplateLeakConfig,
    id: StateKey,
}

#[derive(Default)]
struct Budget {
    used: u32,
}

impl TemplateLeakHook {
    /// A hook with these settings.
    pub fn new(config: TemplateLeakConfig) -> Self {
        Self {
            config,
            id: StateKey::new(),
        }
    }

    /// The first configured marker `text` contains.
    pub fn find_marker<'a>(&'a self, text: &str) -> Option<&'a str> {
        self.config
            .markers
            .iter()
            .map(String::as_str)
            .find(|m| !m.is_empty() && text.contains(m))
    }

    fn strip(&self, msg: &Msg) -> Msg {
        let mut out = msg.clone();
        for block in &mut out.content {
            if let ContentBlock::Text(t) = block {
                for m in self.config.markers.iter().filter(|m| !m.is_empty()) {
                    if t.contains(m.as_str()) {
                        *t = t.replace(m.as_str(), "");
                    }
                }
                *t = t.trim().to_owned();
            }
        }
        add_flag(&mut out, FLAG_TEMPLATE_STRIPPED);
        out
    }
}

impl SyncHook for TemplateLeakHook {
    fn name(&self) -> &str {
        "TemplateLeakHook"
    }

    fn priority(&self) -> i32 {
        190
    }

    fn interest(&self) -> Interest {
        if !self.config.enabled {
            return Interest::NONE;
        }
        Interest::only(EventKind::PostReasoning)
            .with(EventKind::PostCall)
            .with(EventKind::Error)
    }

    fn validate(&self) -> Result<(), HookError> {
        if self.config.enabled && self.config.markers.iter().all(String::is_empty) {
            return Err(HookError::new(
                "template_leak.markers: an enabled hook needs at least one non-empty marker",
            ));
        }
        Ok(())
    }

    fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError> {
        match event {
            HookEvent::PostReasoning(e) => {
                if e.goto_requested().is_some() || e.is_stop_requested() {
                    return Ok(());
                }
                let Some(marker) = self.find_marker(&e.message().text_cow()) else {
                    return Ok(());
                };
                let max = self.config.max_redos;
                let allowed = e.state().with(self.id, Budget::default, |b| {
                    if b.used < max {
                        b.used += 1;
                        true
                    } else {
                        false
                    }
                });
                if allowed {
                    tracing::warn!(target: "rein::template_leak", agent = %e.agent().name, marker, "reply with chat-template markup: reasoning again");
                    let mut correction =
                        Msg::user(self.config.correction_message.clone()).with_name("system-guard");
                    correction.metadata.insert(
                        HOOK_KEY.to_owned(),
                        serde_json::Value::String(self.name().to_owned()),
                    );
                    e.goto_reasoning(vec![correction]);
                } else {
                    tracing::warn!(target: "rein::template_leak", agent = %e.agent().name, marker, "redo budget used up: markup stripped from the reply");
                    let stripped = self.strip(e.message());
                    e.set_message(stripped);
                }
            }
            HookEvent::PostCall(e) => {
                e.state().take::<Budget>(self.id);
            }
            HookEvent::Error(e) => {
                e.state().take::<Budget>(self.id);
            }
            _ => {}
        }
        Ok(())
    }
}
