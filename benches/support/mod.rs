//! Shared by the benches and the `bench_report` example: the instant fake model, the
//! W1/W2 workloads and no-op hooks; `scale` (sessions at scale, throughput),
//! `stores` (per-call session-store overhead) and, with features `openai` and
//! `anthropic`, `provider` (the provider path against the loopback SSE server of
//! `sse_server`).
#![allow(
    dead_code,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

#[cfg(all(feature = "openai", feature = "anthropic"))]
pub mod provider;
pub mod scale;
#[cfg(all(feature = "openai", feature = "anthropic"))]
pub mod sse_server;
pub mod stores;

use std::sync::atomic::{AtomicU64, Ordering};

use rein::*;
use serde_json::json;

/// Answers instantly: a call to `add {"a":1,"b":2}`, or after a tool result the text
/// "1 + 2 = 3".
pub struct InstantModel;

impl Model for InstantModel {
    fn name(&self) -> &str {
        "instant"
    }
    fn stream(&self, request: ModelRequest) -> ModelStream {
        let after_tool = request
            .messages
            .last()
            .is_some_and(|m| m.role == Role::Tool);
        let chunks = if after_tool {
            vec![
                Ok(ModelChunk::Text("1 + 2 = 3".to_owned())),
                Ok(ModelChunk::Finish(FinishReason::Stop)),
            ]
        } else {
            vec![
                Ok(ModelChunk::ToolCall {
                    index: 0,
                    id: Some("call_1".to_owned()),
                    name: Some("add".to_owned()),
                    arguments: r#"{"a":1,"b":2}"#.to_owned(),
                }),
                Ok(ModelChunk::Finish(FinishReason::ToolCalls)),
            ]
        };
        Box::pin(futures::stream::iter(chunks))
    }
}

pub fn add_tool() -> FunctionTool {
    FunctionTool::new(
        "add",
        "Add two integers",
        json!({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"]}),
        |args| async move {
            let a = args["a"].as_i64().unwrap_or(0);
            let b = args["b"].as_i64().unwrap_or(0);
            Ok((a + b).to_string())
        },
    )
}

pub static HOOK_HITS: AtomicU64 = AtomicU64::new(0);

/// A hook that does nothing (observing) or rewrites the tool input to itself plus a
/// field (intervening). Written the default way: an `async fn`.
pub struct Noop {
    pub interest: Interest,
    pub intervene: bool,
}

impl Hook for Noop {
    fn interest(&self) -> Interest {
        self.interest
    }
    async fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError> {
        intervene(self.intervene, event);
        Ok(())
    }
}

/// [`Noop`] as a [`SyncHook`]: the same work, called without a future.
pub struct NoopSync {
    pub interest: Interest,
    pub intervene: bool,
}

impl SyncHook for NoopSync {
    fn interest(&self) -> Interest {
        self.interest
    }
    fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError> {
        intervene(self.intervene, event);
        Ok(())
    }
}

fn intervene(on: bool, event: &mut HookEvent) {
    if on && let HookEvent::PreActing(e) = event {
        let mut u = e.tool_use().clone();
        u.input["b"] = json!(2);
        e.set_tool_use(u);
    }
}

/// Counts its invocations in [`HOOK_HITS`] (an atomic add per call, as the peers'
/// harness does): proves how many hook calls a workload makes.
pub struct Counting;

impl Hook for Counting {
    async fn on_event(&self, _event: &mut HookEvent) -> Result<(), HookError> {
        HOOK_HITS.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// Hook invocations per W1 call with `hooks` counting hooks on every event.
pub fn hook_calls_per_w1(rt: &tokio::runtime::Runtime, hooks: usize, calls: u64) -> f64 {
    let agent = w1_agent_with(hooks, || Counting);
    let before = HOOK_HITS.load(Ordering::Relaxed);
    for _ in 0..calls {
        rt.block_on(w1_call(&agent));
    }
    (HOOK_HITS.load(Ordering::Relaxed) - before) as f64 / calls as f64
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

pub fn multi_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

pub fn base_builder() -> AgentBuilder {
    let mut tools = Toolkit::new();
    tools.register(add_tool()).unwrap();
    Agent::builder()
        .name("calc")
        .sys_prompt("You are a calculator.")
        .model(InstantModel)
        .toolkit(tools)
        .without_global_hooks()
}

/// The W1 agent with `hooks` hooks made by `make`.
pub fn w1_agent_with<M, H: IntoHook<M>>(hooks: usize, make: impl Fn() -> H) -> Agent {
    (0..hooks)
        .fold(base_builder(), |b, _| b.hook(make()))
        .build()
        .unwrap()
}

/// The W1 agent with a call budget on tokens and calls (never reached by W1): what the
/// budget checks and charges add to a call.
pub fn w1_budget_agent() -> Agent {
    base_builder()
        .call_budget(
            Budget::new()
                .model_calls(1_000)
                .tool_calls(1_000)
                .output_tokens(1_000_000),
        )
        .build()
        .unwrap()
}

/// The W1 agent with labels in play: `add` declares untrusted results (so the answer
/// is stamped with the session's join) and the information-flow policy judges the call
/// (trusted context: it runs). What label tracking and the policy add to a call.
pub fn w1_labels_agent() -> Agent {
    let mut tools = Toolkit::new();
    tools
        .register(add_tool().capabilities(ToolCapabilities::new().untrusted()))
        .unwrap();
    base_builder()
        .toolkit(tools)
        .hook(rein::hooks::InformationFlowPolicy::new(
            rein::hooks::InformationFlowConfig::default(),
        ))
        .build()
        .unwrap()
}

/// The W1 agent with `hooks` no-op hooks ([`Noop`]) subscribed to every event.
pub fn w1_agent(hooks: usize) -> Agent {
    w1_agent_with(hooks, || Noop {
        interest: Interest::ALL,
        intervene: false,
    })
}

/// The W1 agent with `hooks` sync no-op hooks ([`NoopSync`]) subscribed to every event.
pub fn w1_sync_agent(hooks: usize) -> Agent {
    w1_agent_with(hooks, || NoopSync {
        interest: Interest::ALL,
        intervene: false,
    })
}

/// One W1 call on a fresh session (forgotten afterwards, as a stateless call would be).
pub async fn w1_call(agent: &Agent) -> Msg {
    let ctx = RunContext::new().with_session_id("w1");
    let reply = agent
        .call_with(vec![Msg::user("What is 1 + 2?")], ctx)
        .await
        .unwrap();
    agent.forget_session(&SessionKey::new(None, "w1"));
    reply
}

/// `n` prior messages: user/assistant text pairs.
pub fn history_of(n: usize) -> Vec<Msg> {
    (0..n)
        .map(|i| {
            if i % 2 == 0 {
                Msg::user(format!("question number {i}, with some words in it"))
            } else {
                Msg::assistant(format!("answer number {i}, also with a few words"))
            }
        })
        .collect()
}

/// A W1 call on session "h" (keeps the history).
pub async fn history_call(agent: &Agent) -> Msg {
    agent
        .call_with(
            vec![Msg::user("What is 1 + 2?")],
            RunContext::new().with_session_id("h"),
        )
        .await
        .unwrap()
}

/// W2 on `n` agents: one call each, all concurrent.
pub async fn w2_agents(n: usize) -> usize {
    let agents: Vec<Agent> = (0..n).map(|_| w1_agent(0)).collect();
    let handles: Vec<_> = agents
        .into_iter()
        .map(|a| tokio::spawn(async move { w1_call(&a).await }))
        .collect();
    let mut ok = 0;
    for h in handles {
        if h.await.unwrap().text() == "1 + 2 = 3" {
            ok += 1;
        }
    }
    assert_eq!(ok, n);
    ok
}

/// W2 on one agent: `n` sessions, one call each, all concurrent.
pub async fn w2_sessions(n: usize) -> usize {
    let agent = w1_agent(0);
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let a = agent.clone();
            tokio::spawn(async move {
                let ctx = RunContext::new().with_session_id(format!("s{i}"));
                a.call_with(vec![Msg::user("What is 1 + 2?")], ctx)
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut ok = 0;
    for h in handles {
        if h.await.unwrap().text() == "1 + 2 = 3" {
            ok += 1;
        }
    }
    assert_eq!(ok, n);
    ok
}

/// The production hook set the performance issue names: latency, masking, audit to an
/// in-memory sink, tool guard, dynamic options (self-correction and approval off).
pub fn production_hooks() -> rein::hooks::Hooks {
    let config: rein::hooks::HooksConfig = serde_json::from_value(json!({
        "latency": {"enabled": true},
        "masking": {"enabled": true, "mask_tool_results": true},
        "audit": {"enabled": true},
        "tool_guard": {"enabled": true, "numeric_caps": {"a": 1000, "b": 1000}},
        "dynamic_options": {"enabled": true}
    }))
    .unwrap();
    config
        .build_with(
            rein::hooks::HookServices::new()
                .audit_sink(rein::hooks::MemoryAuditSink::bounded(1024)),
        )
        .unwrap()
}

/// The W1 agent with only one of the production hooks (`latency`, `masking`, `audit`,
/// `tool_guard`, `dynamic_options`), to attribute the set's cost.
pub fn w1_single_hook_agent(which: &str) -> Agent {
    let mut section = json!({"enabled": true});
    if which == "tool_guard" {
        section["numeric_caps"] = json!({"a": 1000, "b": 1000});
    }
    if which == "masking" {
        section["mask_tool_results"] = json!(true);
    }
    let mut cfg = json!({"latency": {"enabled": false}});
    cfg[which] = section;
    let config: rein::hooks::HooksConfig = serde_json::from_value(cfg).unwrap();
    config
        .build_with(
            rein::hooks::HookServices::new()
                .audit_sink(rein::hooks::MemoryAuditSink::bounded(1024)),
        )
        .unwrap()
        .install(base_builder())
        .build()
        .unwrap()
}

/// The W1 agent with the production hook set.
pub fn w1_production_agent() -> Agent {
    production_hooks().install(base_builder()).build().unwrap()
}

/// About `bytes` of mixed Chinese/English customer-service text, with personal data
/// (mobile numbers, ID numbers, cards, e-mails) in roughly 1% of the characters.
pub fn masking_corpus(bytes: usize) -> String {
    let clean = [
        "您好，我想查询一下我的订单状态，昨天下的单还没有发货。",
        "Hello, I would like to check the status of my refund request from last week. ",
        "客服您好，请问退款一般需要几个工作日才能到账？谢谢。",
        "The package arrived damaged; please advise how to return it for a replacement. ",
        "订单号 ORD20261130 的商品颜色发错了，麻烦帮我换一下。",
        "Thanks for the quick reply, the issue is resolved now. ",
    ];
    let personal = [
        "请联系13812345678",
        " mail me at li.wei@example.com ",
        "身份证号11010519491231002X",
        " card 4111111111111111 ",
    ];
    let mut out = String::with_capacity(bytes + 128);
    let (mut i, mut pii) = (0usize, 0usize);
    while out.len() < bytes {
        // One personal item per ~2.5 KB of clean text keeps it near 1% of the bytes.
        if out.len() / 2500 > pii {
            out.push_str(personal[pii % personal.len()]);
            pii += 1;
        }
        out.push_str(clean[i % clean.len()]);
        i += 1;
    }
    out
}

/// About `bytes` of adversarial masking input: `"1 1 1 …"` (`"digits"`: every digit
/// starts a candidate and a possible digit group) or `"a@a@a@…"` (`"email"`: every `@`
/// starts an e-mail candidate). No personal data; the masker's worst cases.
pub fn masking_worst_case(kind: &str, bytes: usize) -> String {
    let unit = if kind == "digits" { "1 " } else { "a@" };
    unit.repeat(bytes / unit.len())
}
