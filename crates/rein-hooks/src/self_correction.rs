//! [`SelfCorrectionHook`]: makes the model think again when it promises a payment it
//! did not make.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::phrases::PhraseMatcher;
use super::{HOOK_KEY, add_flag};
use rein_core::Msg;
use rein_core::hook::StateKey;
use rein_core::hook::{EventKind, HookError, HookEvent, HookSite, Interest, SyncHook};

/// Flag set on a reply that still contains a payment promise after the correction
/// budget was used up (see [`FLAGS_KEY`](super::FLAGS_KEY)).
pub const FLAG_CORRECTION_EXHAUSTED: &str = "self_correction_exhausted";

/// Flag set on a model turn that was redone because of a payment promise.
pub const FLAG_CORRECTED: &str = "self_corrected";

/// The role of the correction message.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CorrectionRole {
    /// A runtime correction the conversation never keeps. Default. The withdrawn reply
    /// and the correction (a user-role turn named `system-guard`, so the re-ask request
    /// ends with it: providers hoist system messages into the system prompt, and
    /// Anthropic reads a request ending with an assistant turn as a prefill to continue)
    /// are sent after the conversation in this call's re-ask requests only
    /// ([`PostReasoningEvent::retract_and_redo`](rein_core::PostReasoningEvent::retract_and_redo)).
    /// Neither is stored: memory holds what the user finally got.
    #[default]
    System,
    /// A user message named `system-guard`, stored in the conversation after the
    /// corrected turn (the reference behaviour; works with providers that reject
    /// system messages after the first).
    User,
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// Settings of [`SelfCorrectionHook`] (the `self_correction` section of
/// [`HooksConfig`](super::HooksConfig)). Every key is optional.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SelfCorrectionConfig {
    /// Install the hook (default `false`).
    pub enabled: bool,
    /// Corrections allowed per call (default 1). Each is one `goto_reasoning`; keep it
    /// at most the agent's `max_gotos` (default 3).
    pub max_corrections: u32,
    /// Phrases that promise a payment (default `已退款`, `已打款`, `已为您退款`,
    /// `退款成功`, `已经退`, `已到账`, `款项已退`). ASCII letters match
    /// case-insensitively.
    pub payment_keywords: Vec<String>,
    /// Phrases that contain a keyword without promising anything; an occurrence
    /// inside one does not count (default `已经退货`, `已经退出`, `已经退订`).
    pub exclusion_phrases: Vec<String>,
    /// Negations; an occurrence preceded by one (within `negation_window`
    /// characters) does not count (default `尚未`, `没有`, `还没`, `不是`, `并非`,
    /// `无法`, `不能`, `不会`).
    pub negations: Vec<String>,
    /// Characters allowed between a negation and the keyword (default 2).
    pub negation_window: usize,
    /// Suffixes that make an occurrence conditional (`退款成功后…`); it does not count
    /// (default `后`, `之后`, `以后`, `的话`, `时`).
    pub conditional_suffixes: Vec<String>,
    /// The text the model is given before it reasons again.
    pub correction_message: String,
    /// The correction's role (default `system`).
    pub correction_role: CorrectionRole,
    /// Also correct a promise made in a turn that calls tools, unless one of them is
    /// in `refund_tools` (default `false`: a turn with any tool call is not checked,
    /// as in the reference). Safe in this runtime: the turn's tool calls get
    /// "not executed" results.
    pub correct_with_tool_calls: bool,
    /// Tools whose call makes a promise in the same turn legitimate, for
    /// `correct_with_tool_calls` (default none; each must be a tool of the agent,
    /// checked at `build()`).
    pub refund_tools: Vec<String>,
}

impl Default for SelfCorrectionConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            max_corrections: 1,
            payment_keywords: strings(&[
                "已退款",
                "已打款",
                "已为您退款",
                "退款成功",
                "已经退",
                "已到账",
                "款项已退",
            ]),
            exclusion_phrases: strings(&["已经退货", "已经退出", "已经退订"]),
            negations: strings(&[
                "尚未", "没有", "还没", "不是", "并非", "无法", "不能", "不会",
            ]),
            negation_window: 2,
            conditional_suffixes: strings(&["后", "之后", "以后", "的话", "时"]),
            correction_message: "[系统纠正] 你在没有调用退款工具的情况下承诺了退款或打款已经完成。\
                涉及资金的退款必须通过退款工具并经人工确认，不得声称已经打款。\
                请重新回答：要么调用退款工具，要么告知用户退款申请已提交人工审核、尚未完成。"
                .to_owned(),
            correction_role: CorrectionRole::System,
            correct_with_tool_calls: false,
            refund_tools: Vec::new(),
        }
    }
}

/// Per-call state: corrections used.
#[derive(Default)]
struct CorrectionRun {
    used: u32,
}

/// Catches a model turn that promises a payment without doing it and makes the model
/// reason again. Priority **200**; off by default in
/// [`HooksConfig`](super::HooksConfig).
///
/// On `PostReasoning`, a turn whose text contains a payment keyword (not excluded,
/// negated or conditional; see [`SelfCorrectionConfig`]) triggers
/// [`goto_reasoning`](rein_core::PostReasoningEvent::goto_reasoning) with the correction
/// message, and the turn is flagged [`FLAG_CORRECTED`]. By default only tool-free
/// turns are checked; `correct_with_tool_calls` also corrects a promise made next to
/// an unrelated tool call. Turns a hook already redid or stopped are left alone.
///
/// The budget (`max_corrections`) is per call, kept in the run context and reset on
/// every `PreCall`: a new call gets a fresh budget even if the previous one failed.
/// When the budget is used up, the promise is not passed silently: the turn is
/// flagged [`FLAG_CORRECTION_EXHAUSTED`] (the audit hook records the flag with the
/// final answer), a `warn` event is logged, [`SelfCorrectionHook::exhausted_count`]
/// is incremented, and with the `metrics` feature the counter
/// `rein.self_correction.exhausted` too.
pub struct SelfCorrectionHook {
    id: StateKey,
    config: SelfCorrectionConfig,
    matcher: PhraseMatcher,
    corrections: AtomicU64,
    exhausted: AtomicU64,
}

impl fmt::Debug for SelfCorrectionHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SelfCorrectionHook")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Default for SelfCorrectionHook {
    fn default() -> Self {
        Self::new(SelfCorrectionConfig::default())
    }
}

impl SelfCorrectionHook {
    /// A hook with these settings.
    pub fn new(config: SelfCorrectionConfig) -> Self {
        let matcher = PhraseMatcher::new(
            &config.payment_keywords,
            &config.exclusion_phrases,
            &config.negations,
            config.negation_window,
            &config.conditional_suffixes,
        );
        Self {
            id: StateKey::new(),
            config,
            matcher,
            corrections: AtomicU64::new(0),
            exhausted: AtomicU64::new(0),
        }
    }

    /// The settings.
    pub fn config(&self) -> &SelfCorrectionConfig {
        &self.config
    }

    /// The payment keyword `text` contains, per the matching rules, if any.
    pub fn find_promise<'a>(&'a self, text: &str) -> Option<&'a str> {
        self.matcher.find(text)
    }

    /// Corrections requested so far, over all calls.
    pub fn corrections_count(&self) -> u64 {
        self.corrections.load(Ordering::Relaxed)
    }

    /// Promises let through with a flag because the budget was used up, over all
    /// calls.
    pub fn exhausted_count(&self) -> u64 {
        self.exhausted.load(Ordering::Relaxed)
    }

    fn correction(&self) -> Msg {
        let mut msg = Msg::user(self.config.correction_message.clone()).with_name("system-guard");
        msg.metadata
            .insert(HOOK_KEY.to_owned(), Value::String(self.name().to_owned()));
        msg
    }

    fn post_reasoning(&self, e: &mut rein_core::PostReasoningEvent) {
        if e.goto_requested().is_some() || e.is_stop_requested() {
            return;
        }
        let msg = e.message();
        let uses = msg.tool_uses();
        if !uses.is_empty()
            && (!self.config.correct_with_tool_calls
                || uses
                    .iter()
                    .any(|u| self.config.refund_tools.contains(&u.name)))
        {
            return;
        }
        let text = msg.text_cow();
        let Some(keyword) = self.matcher.find(&text) else {
            return;
        };
        let max = self.config.max_corrections;
        let allowed = e.state().with(self.id, CorrectionRun::default, |run| {
            if run.used < max {
                run.used += 1;
                true
            } else {
                false
            }
        });
        let mut flagged = e.message().clone();
        if !allowed {
            self.exhausted.fetch_add(1, Ordering::Relaxed);
            #[cfg(feature = "metrics")]
            metrics::counter!("rein.self_correction.exhausted").increment(1);
            tracing::warn!(
                target: "rein::self_correction",
                agent = %e.agent().name,
                run_id = e.context().run_id(),
                keyword,
                max_corrections = max,
                "payment promise let through: correction budget used up; reply flagged"
            );
            add_flag(&mut flagged, FLAG_CORRECTION_EXHAUSTED);
            e.set_message(flagged);
            return;
        }
        self.corrections.fetch_add(1, Ordering::Relaxed);
        #[cfg(feature = "metrics")]
        metrics::counter!("rein.self_correction.corrections").increment(1);
        tracing::warn!(
            target: "rein::self_correction",
            agent = %e.agent().name,
            run_id = e.context().run_id(),
            keyword,
            "payment promise without a refund: reasoning again"
        );
        add_flag(&mut flagged, FLAG_CORRECTED);
        e.set_message(flagged);
        let correction = vec![self.correction()];
        match self.config.correction_role {
            CorrectionRole::User => e.goto_reasoning(correction),
            CorrectionRole::System => e.retract_and_redo(correction),
        }
    }
}

impl SyncHook for SelfCorrectionHook {
    fn name(&self) -> &str {
        "SelfCorrectionHook"
    }

    fn priority(&self) -> i32 {
        200
    }

    /// Every `refund_tools` entry must be a tool of the agent: a misspelt refund tool
    /// would make every legitimate refund look like a promise without one.
    fn validate_on(&self, site: &HookSite<'_>) -> Result<(), HookError> {
        if !self.config.enabled {
            return Ok(());
        }
        for (i, tool) in self.config.refund_tools.iter().enumerate() {
            site.expect_tool(&format!("self_correction.refund_tools[{i}]"), tool)?;
        }
        Ok(())
    }

    fn interest(&self) -> Interest {
        if !self.config.enabled {
            return Interest::NONE;
        }
        Interest::of([
            EventKind::PreCall,
            EventKind::PostReasoning,
            EventKind::PostCall,
            EventKind::Error,
        ])
    }

    fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError> {
        match event {
            HookEvent::PreCall(e) => {
                let fresh = CorrectionRun::default();
                // The previous run's state (if any) is discarded.
                let _ = e.state().replace(self.id, fresh);
            }
            HookEvent::PostReasoning(e) => self.post_reasoning(e),
            HookEvent::PostCall(e) => {
                let _ = e.state().take::<CorrectionRun>(self.id);
            }
            HookEvent::Error(e) => {
                let _ = e.state().take::<CorrectionRun>(self.id);
            }
            _ => {}
        }
        Ok(())
    }
}
