//! Run with: cargo run --example production_hooks
//!
//! On a real model (what the model says and calls is then its own; the hooks hold
//! whatever it does):
//!
//! ```sh
//! OPENAI_API_KEY=sk-... cargo run --features openai --example production_hooks
//! scripts/real-model start && eval "$(scripts/real-model env)" && \
//!     cargo run --all-features --example production_hooks
//! ```
//!
//! The seed article's customer-service scenario, offline on a ScriptedModel, with the
//! production hooks of `rein::hooks` configured from one JSON document:
//!
//! 1. the user asks for a refund (dynamic options switch to the precise profile);
//! 2. the model promises "已为您退款 500 元" without calling a tool → the
//!    self-correction hook makes it think again;
//! 3. it calls the refund tool with amount 999999 → the tool guard clamps it to the
//!    cap and injects the channel;
//! 4. the approver is asked *before* the tool runs, and grants it;
//! 5. every step is written to a JSON-lines audit file;
//! 6. the final reply, which repeats the user's phone number, is masked — also while
//!    it streams;
//! 7. a latency table closes the run.

use std::error::Error;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::StreamExt;
use rein::hooks::{
    ApprovalDecision, ApprovalRequest, AuditRecord, FLAGS_KEY, HookServices, HooksConfig,
};
use rein::*;
use serde_json::json;

mod common;

/// Prints what the model said and what actually ran, after the governance hooks.
#[derive(Default)]
struct Transcript {
    model_calls: AtomicUsize,
}

impl Hook for Transcript {
    fn priority(&self) -> i32 {
        1000
    }

    fn interest(&self) -> Interest {
        Interest::of([
            EventKind::PreReasoning,
            EventKind::PostReasoning,
            EventKind::PreActing,
            EventKind::PostActing,
        ])
    }

    fn failure_policy(&self) -> FailurePolicy {
        FailurePolicy::Ignore
    }

    async fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError> {
        match event {
            HookEvent::PreReasoning(e) => {
                let o = e.generate_options();
                println!(
                    "  model call #{}: temperature {:?}, reasoning effort {:?}",
                    self.model_calls.fetch_add(1, Ordering::Relaxed) + 1,
                    o.temperature,
                    o.reasoning_effort
                );
            }
            HookEvent::PostReasoning(e) => {
                let m = e.message();
                if m.has_visible_text() {
                    println!("  model says:  {} (raw)", m.text());
                }
                for u in m.tool_uses() {
                    println!("  model calls: {}({})", u.name, u.input);
                }
                if let Some(flags) = m.metadata.get(FLAGS_KEY) {
                    println!("  hooks flagged the turn {flags}: the model must think again");
                }
            }
            HookEvent::PreActing(e) => {
                let u = e.tool_use();
                match e.denial_reason() {
                    Some(reason) => println!("  blocked:     {} ({reason})", u.name),
                    None => println!("  runs as:     {}({})", u.name, u.input),
                }
            }
            HookEvent::PostActing(e) => {
                println!("  tool result: {}", e.tool_result().content);
            }
            _ => {}
        }
        Ok(())
    }
}

/// The arguments of `submitRefund` (the tool's JSON Schema is generated from them).
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct RefundArgs {
    /// The order to refund.
    order_id: String,
    /// The amount, in CNY.
    amount: f64,
    /// How the money goes back (the tool guard injects it when missing).
    channel: Option<String>,
}

fn refund_tool() -> FunctionTool {
    FunctionTool::typed(
        "submitRefund",
        "Files a refund request; money moves only after human review.",
        |args: RefundArgs| async move {
            Ok(format!(
                "refund request R-1001 filed for order {} ({} CNY, via {}); pending review",
                args.order_id,
                args.amount,
                args.channel.as_deref().unwrap_or("?")
            ))
        },
    )
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn Error>> {
    let real = common::real_model()?;
    let audit_path = std::env::temp_dir().join("rein-production-hooks-audit.jsonl");
    // A fresh file for this run (absent on the first run).
    let _ = std::fs::remove_file(&audit_path);

    let config: HooksConfig = serde_json::from_value(json!({
        "latency": { "enabled": true },
        "masking": { "enabled": true },
        "audit": { "enabled": true, "sink": { "type": "jsonl", "path": audit_path } },
        "self_correction": { "enabled": true },
        "tool_guard": {
            "enabled": true,
            "tools": ["submitRefund"],
            "inject_params": { "channel": "online" },
            "numeric_caps": { "amount": { "min": 0, "max": 1000 } }
        },
        "dynamic_options": { "enabled": true },
        "approval": { "enabled": true, "guarded_tools": ["submitRefund"], "timeout_ms": 5000 }
    }))?;
    let approver = |req: ApprovalRequest| async move {
        println!(
            "  approver:    asked about {}({}) before it runs -> approve",
            req.tool_use.name, req.tool_use.input
        );
        ApprovalDecision::Approve
    };
    let hooks = config.build_with(HookServices::new().approver(approver))?;

    let script = ScriptedModel::new([
        ScriptedTurn::text("已为您退款 500 元，请注意查收。"),
        ScriptedTurn::tool_call(
            "submitRefund",
            json!({"order_id": "A1001", "amount": 999999}),
        )
        .with_text("抱歉，我先为您提交退款申请。"),
        ScriptedTurn::text(
            "退款申请 R-1001 已提交人工审核，审核通过后原路退回。我们会致电 13800138000 与您确认。",
        ),
        ScriptedTurn::text(
            "好的，回访电话 13800138000 已记录，邮箱 zhang.san@example.com 也已登记。",
        ),
    ]);
    let model: Arc<dyn Model> = real.unwrap_or_else(|| Arc::new(script));
    let mut tools = Toolkit::new();
    tools.register(refund_tool())?;
    let agent = hooks
        .install(
            Agent::builder()
                .name("CustomerService")
                .sys_prompt("涉及资金的退款只生成待人工确认工单，绝不承诺已直接打款。")
                .model(model)
                .toolkit(tools)
                .generate_options(GenerateOptions {
                    temperature: Some(0.3),
                    ..GenerateOptions::default()
                })
                .hook(Transcript::default()),
        )
        .build()?;
    println!("hooks, in order: {}", agent.hook_names().join(" -> "));

    let user = "我的订单 A1001 要退款 500 元，联系电话 13800138000";
    println!("\nuser: {user}");
    let ctx = RunContext::new()
        .with_session_id("session-42")
        .with_user_id("u-7");
    let reply = agent.call_with(vec![Msg::user(user)], ctx).await?;
    let stored = agent
        .messages(&SessionKey::new(Some("u-7"), "session-42"))
        .await;
    if let Some(raw) = stored.last() {
        println!("  stored in the session (unmasked): {}", raw.text());
    }
    println!("reply to the user (masked): {}", reply.text());

    println!("\nuser: 请再确认一下回访方式 (streamed)");
    let stream = agent.stream(
        vec![Msg::user("请再确认一下回访方式")],
        RunContext::new()
            .with_session_id("session-42")
            .with_user_id("u-7"),
    );
    let masking = hooks.masking().map(Arc::clone);
    let mut events = match &masking {
        Some(m) => m.mask_stream(stream).boxed(),
        None => stream.boxed(),
    };
    let mut deltas = Vec::new();
    while let Some(event) = events.next().await {
        match event {
            AgentEvent::TextDelta(t) => deltas.push(format!("[{t}]")),
            AgentEvent::Final(outcome) => {
                println!(
                    "  streamed deltas (masked as they stream): {}",
                    deltas.join(" ")
                );
                println!("reply to the user (masked): {}", outcome.reply.text());
            }
            AgentEvent::Error(e) => return Err(e.into()),
            _ => {}
        }
    }

    if let Some(audit) = hooks.audit() {
        audit.flush().await?;
        println!(
            "\naudit file {} ({} written, {} dropped):",
            audit_path.display(),
            audit.stats().written,
            audit.stats().dropped
        );
        for line in std::fs::read_to_string(&audit_path)?.lines() {
            let r: AuditRecord = serde_json::from_str(line)?;
            let detail = match (&r.tool, &r.answer) {
                (Some(tool), _) => format!(
                    "{tool} args={} status={}",
                    r.args.clone().unwrap_or_default(),
                    r.status.map(|s| json!(s)).unwrap_or_default()
                ),
                (None, Some(answer)) => format!("{answer:?} flags={:?}", r.flags),
                (None, None) => r.error.clone().unwrap_or_default(),
            };
            println!("  {:<16} {detail}", r.kind.as_str());
        }
    }

    if let Some(latency) = hooks.latency() {
        println!("\nlatency:\n{}", latency.snapshot());
    }
    Ok(())
}
