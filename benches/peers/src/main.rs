//! rein vs rig-agent 0.44: W1 / W1+10 hooks / W2, alternating in one process.
//!
//! The rig half is the peer harness from shared/peerbench/rigbench; the rein half uses
//! the same fake-model behaviour (tool call, then text after a tool result).
//!
//! (rig harness notes:) (Rig's agent runtime; rig-core 0.44).
//!
//! Fake model: rig-core's own scripted test wire (`MockScript`) driven by a
//! stateless transport of ours that answers instantly: a tool call to `add`
//! unless the last message is a tool result, then a final text.
//!
//! usage: rigbench w1 <calls> <warmup>
//!        rigbench w1hooks <calls> <warmup>
//!        rigbench w2 <agents> [mt]     (mt = multi-thread runtime, else current-thread)
//!        rigbench model <calls>        (fake model alone through rig-core's driver)
//!        rigbench w2build <agents>     (build agents only: RSS baseline for w2)
//!        rigbench w1fresh <calls>      (sequential calls, new agent per call)
use std::time::Instant;

use rig_agent::agent::{
    AgentHook, CompletionCallAction, CompletionCallEvent, DispatchAction, DispatchEvent,
    HookContext, ModelSelection, ModelSelectionAction, ModelTurnAction, ModelTurnFinished,
    ObservationAction, OutcomeAction, OutcomeEvent, RunSettled, RunStart, RunStartAction,
    TextDelta,
};
use rig_agent::prelude::*;
use rig_core::completion::{AssistantContent, CompletionRequest, CompletionResponse, Usage};
use rig_core::driver::{Exchange, Opened, Opening, Transport};
use rig_core::message::{Origin, ToolCall, ToolFunction, ToolName, UserContent};
use rig_core::test_utils::{MOCK_API, MOCK_PROVIDER, MockFrame, MockScript};
use rig_core::tool::PortableTool;
use serde::Deserialize;

// ---------- fake model ----------
#[derive(Clone)]
struct FakeTransport;

impl Transport<MockScript> for FakeTransport {
    fn send(&self, request: CompletionRequest, _exchange: Exchange) -> Opening<MockFrame> {
        let after_tool = matches!(
            request.chat_history.last(),
            Some(Message::User { content })
                if content.iter().any(|c| matches!(c, UserContent::ToolResult(_)))
        );
        let content = if after_tool {
            AssistantContent::text("1 + 2 = 3")
        } else {
            AssistantContent::ToolCall(ToolCall::from_wire(
                "call_1",
                ToolFunction::new(
                    ToolName::new("add").unwrap(),
                    serde_json::json!({"a": 1, "b": 2}),
                ),
            ))
        };
        let response = CompletionResponse::new(
            vec![content],
            Usage::default(),
            Origin::new(MOCK_API, MOCK_PROVIDER, ""),
            serde_json::Value::Null,
        );
        Opening::ready(Opened::new(futures::stream::iter([Ok(MockFrame::Response(
            Box::new(response),
        ))])))
    }
}

fn fake_model() -> Model<MockScript, FakeTransport> {
    Model::new(MockScript::default(), FakeTransport)
}

// ---------- tool ----------
#[derive(Deserialize)]
struct AddArgs {
    a: i64,
    b: i64,
}

#[derive(Debug)]
struct Never;
impl std::fmt::Display for Never {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("never")
    }
}
impl std::error::Error for Never {}

struct Add;
impl PortableTool for Add {
    const NAME: &'static str = "add";
    type Args = AddArgs;
    type Output = String;
    type Error = Never;
    fn description(&self) -> String {
        "Add two integers".into()
    }
    fn parameters(&self) -> serde_json::Value {
        serde_json::json!({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"]})
    }
    async fn call(&self, args: AddArgs) -> Result<String, Never> {
        Ok((args.a + args.b).to_string())
    }
}

// ---------- no-op hook, overriding every lifecycle point ----------
static HOOK_HITS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
fn hit() {
    HOOK_HITS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

struct Noop;
impl AgentHook for Noop {
    async fn on_run_start(&self, _: &HookContext, _: RunStart<'_>) -> RunStartAction {
        hit();
        RunStartAction::Continue
    }
    async fn on_run_settled(&self, _: &HookContext, _: RunSettled<'_>) {
        hit();
    }
    fn on_model_select(&self, _: &HookContext, _: ModelSelection<'_>) -> ModelSelectionAction {
        hit();
        ModelSelectionAction::Continue
    }
    async fn on_completion_call(
        &self,
        _: &HookContext,
        _: CompletionCallEvent<'_>,
    ) -> CompletionCallAction {
        hit();
        CompletionCallAction::Continue
    }
    async fn on_model_turn_finished(
        &self,
        _: &HookContext,
        _: ModelTurnFinished<'_>,
    ) -> ModelTurnAction {
        hit();
        ModelTurnAction::Continue
    }
    async fn on_text_delta(&self, _: &HookContext, _: TextDelta<'_>) -> ObservationAction {
        hit();
        ObservationAction::Continue
    }
    async fn on_dispatch(&self, _: &HookContext, _: DispatchEvent<'_>) -> DispatchAction {
        hit();
        DispatchAction::Proceed
    }
    async fn on_outcome(&self, _: &HookContext, _: OutcomeEvent<'_>) -> OutcomeAction {
        hit();
        OutcomeAction::Proceed
    }
}

fn build_agent(hooks: usize) -> Agent {
    let mut b = AgentBuilder::new(fake_model()).preamble("You are a calculator.");
    for _ in 0..hooks {
        b = b.add_hook(Noop);
    }
    b.tool(Add).build()
}

async fn one_call(agent: &Agent) -> String {
    let resp = agent
        .prompt("What is 1 + 2?")
        .max_turns(4)
        .await
        .expect("agent call failed");
    resp.output().to_string()
}


// ---------- rein side ----------
/// The fake model, tool and production hook set shared with rein's own benches.
#[path = "../../support/mod.rs"]
mod support;

mod stream;

mod reinside {
    use rein::*;

    use super::support::w1_agent_with;

    struct Noop;
    impl Hook for Noop {
        async fn on_event(&self, _event: &mut HookEvent) -> Result<(), HookError> {
            super::hit();
            Ok(())
        }
    }

    /// The same hook as a `SyncHook` (no future per call).
    struct NoopSync;
    impl SyncHook for NoopSync {
        fn on_event(&self, _event: &mut HookEvent) -> Result<(), HookError> {
            super::hit();
            Ok(())
        }
    }

    pub fn agent(hooks: usize) -> Agent {
        w1_agent_with(hooks, || Noop)
    }

    pub fn agent_sync(hooks: usize) -> Agent {
        w1_agent_with(hooks, || NoopSync)
    }

    /// The W1 agent with the production hook set of the performance issue (latency,
    /// masking incl. tool results, audit to a bounded in-memory sink, tool guard with
    /// numeric caps, dynamic options).
    pub fn production_agent() -> Agent {
        super::support::w1_production_agent()
    }

    pub async fn one_call(agent: &Agent) -> String {
        super::support::w1_call(agent).await.text()
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok()))
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

async fn w2_child(which: &str) {
    let n = 1000;
    let t = Instant::now();
    match which {
        "rig" => {
            let agents: Vec<Agent> = (0..n).map(|_| build_agent(0)).collect();
            let hs: Vec<_> = agents.into_iter().map(|a| tokio::spawn(async move { one_call(&a).await })).collect();
            for h in hs {
                assert_eq!(h.await.unwrap(), "1 + 2 = 3");
            }
        }
        "rein-agents" => {
            let agents: Vec<rein::Agent> = (0..n).map(|_| reinside::agent(0)).collect();
            let hs: Vec<_> = agents.into_iter().map(|a| tokio::spawn(async move { reinside::one_call(&a).await })).collect();
            for h in hs {
                assert_eq!(h.await.unwrap(), "1 + 2 = 3");
            }
        }
        _ => {
            let agent = reinside::agent(0);
            let hs: Vec<_> = (0..n)
                .map(|i| {
                    let a = agent.clone();
                    tokio::spawn(async move {
                        a.call_with(vec![rein::Msg::user("What is 1 + 2?")], rein::RunContext::new().with_session_id(format!("s{i}")))
                            .await
                            .unwrap()
                            .text()
                    })
                })
                .collect();
            for h in hs {
                assert_eq!(h.await.unwrap(), "1 + 2 = 3");
            }
        }
    }
    println!("{:.4} {:.1}", t.elapsed().as_secs_f64(), peak_rss_mb());
}

fn w2_runs(which: &str, runs: usize) -> (f64, f64) {
    let exe = std::env::current_exe().unwrap();
    let (mut w, mut r) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let out = std::process::Command::new(&exe).args(["--w2", which]).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let v: Vec<f64> = text.split_whitespace().filter_map(|x| x.parse().ok()).collect();
        w.push(v[0]);
        r.push(v[1]);
    }
    (median(w), median(r))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--w2") {
        let which = args[i + 1].clone();
        tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(w2_child(&which));
        return;
    }
    if args.iter().any(|a| a == "--stream") {
        stream::run(9, 40, 1000);
        return;
    }
    let rounds: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(15);
    let calls: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(2000);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let rig0 = build_agent(0);
    let rig10 = build_agent(10);
    let rein0 = reinside::agent(0);
    let rein10 = reinside::agent(10);
    let rein10s = reinside::agent_sync(10);
    let reinprod = reinside::production_agent();
    let mut s: [Vec<f64>; 6] = Default::default();
    rt.block_on(async {
        assert_eq!(one_call(&rig0).await, "1 + 2 = 3");
        assert_eq!(reinside::one_call(&rein0).await, "1 + 2 = 3");
        for round in 0..=rounds {
            let mut m = [0.0; 6];
            let t = Instant::now();
            for _ in 0..calls { std::hint::black_box(one_call(&rig0).await); }
            m[0] = t.elapsed().as_secs_f64() * 1e6 / calls as f64;
            let t = Instant::now();
            for _ in 0..calls { std::hint::black_box(reinside::one_call(&rein0).await); }
            m[1] = t.elapsed().as_secs_f64() * 1e6 / calls as f64;
            let t = Instant::now();
            for _ in 0..calls { std::hint::black_box(one_call(&rig10).await); }
            m[2] = t.elapsed().as_secs_f64() * 1e6 / calls as f64;
            let t = Instant::now();
            for _ in 0..calls { std::hint::black_box(reinside::one_call(&rein10).await); }
            m[3] = t.elapsed().as_secs_f64() * 1e6 / calls as f64;
            let t = Instant::now();
            for _ in 0..calls { std::hint::black_box(reinside::one_call(&rein10s).await); }
            m[4] = t.elapsed().as_secs_f64() * 1e6 / calls as f64;
            let t = Instant::now();
            for _ in 0..calls { std::hint::black_box(reinside::one_call(&reinprod).await); }
            m[5] = t.elapsed().as_secs_f64() * 1e6 / calls as f64;
            if round > 0 {
                for (v, x) in s.iter_mut().zip(m) { v.push(x); }
            }
        }
    });
    let [rig_w1, rein_w1, rig_h, rein_h, rein_hs, rein_prod] = s.map(median);
    let (rig_w2, rig_rss) = w2_runs("rig", 5);
    let (reina_w2, reina_rss) = w2_runs("rein-agents", 5);
    let (reins_w2, reins_rss) = w2_runs("rein-sessions", 5);
    println!("{:<44} {:>12} {:>12} {:>10}", "workload (medians)", "rig 0.44", "rein", "rig/rein");
    println!("{:<44} {:>9.2} µs {:>9.2} µs {:>9.2}x", "W1 per call", rig_w1, rein_w1, rig_w1 / rein_w1);
    println!("{:<44} {:>9.2} µs {:>9.2} µs {:>9.2}x", "W1 + 10 no-op hooks per call", rig_h, rein_h, rig_h / rein_h);
    println!("{:<44} {:>11.2}x {:>11.2}x", "  hooks overhead (W1+10 / W1)", rig_h / rig_w1, rein_h / rein_w1);
    println!("{:<44} {:>12} {:>9.2} µs {:>9.2}x", "W1 + 10 no-op SyncHooks per call (rein)", "-", rein_hs, rig_h / rein_hs);
    println!("{:<44} {:>12} {:>11.2}x", "  SyncHooks overhead (W1+10 / W1)", "-", rein_hs / rein_w1);
    println!("{:<44} {:>12} {:>9.2} µs", "W1 + production hook set per call (rein)", "-", rein_prod);
    println!("{:<44} {:>12} {:>11.2}x", "  production set overhead (/ W1)", "-", rein_prod / rein_w1);
    println!("{:<44} {:>10.3} s {:>10.3} s {:>9.2}x", "W2 wall, 1,000 agents", rig_w2, reina_w2, rig_w2 / reina_w2);
    println!("{:<44} {:>9.1} MB {:>9.1} MB", "W2 peak RSS, 1,000 agents", rig_rss, reina_rss);
    println!("{:<44} {:>12} {:>10.3} s", "W2 wall, 1 agent x 1,000 sessions", "-", reins_w2);
    println!("{:<44} {:>12} {:>9.1} MB", "W2 peak RSS, 1 agent x 1,000 sessions", "-", reins_rss);
    println!(
        "RESULT w1_ratio={:.2} w1hooks_ratio={:.2} w1synchooks_ratio={:.2} rein_prod_overhead={:.2} w2_wall_ratio={:.2} rein_w2_rss_mb={:.1} rig_w2_rss_mb={:.1}",
        rig_w1 / rein_w1, rig_h / rein_h, rig_h / rein_hs, rein_prod / rein_w1, rig_w2 / reina_w2, reina_rss, rig_rss
    );
    stream::run(9, 40, 1000);
}
