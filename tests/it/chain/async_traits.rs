//! One async style for the traits a user implements: `Tool`, `SessionStore` and
//! `Approver` are written with `async fn` (no `Box::pin`), awaiting inside.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use rein::hooks::{ApprovalDecision, ApprovalHook, ApprovalRequest, Approver};
use rein::*;
use serde_json::{Value, json};

use crate::support::*;

/// A stateful tool that awaits before answering.
struct Counter(AtomicU64);

impl Tool for Counter {
    fn name(&self) -> &str {
        "count"
    }
    fn description(&self) -> &str {
        "Counts its calls."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object"})
    }
    async fn call(&self, _input: Value, ctx: ToolContext) -> Result<String, ToolError> {
        tokio::task::yield_now().await;
        let n = self.0.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(format!("{n} in {}", ctx.run().session_id()))
    }
}

#[tokio::test]
async fn a_tool_written_with_async_fn_keeps_state_across_calls() {
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("count", json!({})),
        ScriptedTurn::tool_call("count", json!({})),
        ScriptedTurn::text("done"),
    ]);
    let mut tools = Toolkit::new();
    tools.register(Counter(AtomicU64::new(0))).unwrap();
    let agent = builder(&model).toolkit(tools).build().unwrap();
    agent
        .call_with(vec![Msg::user("go")], session("s1"))
        .await
        .unwrap();
    let results = results_in_request(&model, 2);
    assert_eq!(results[1].2, "2 in s1", "{results:?}");
}

/// A store written with `async fn` that awaits inside both methods.
#[derive(Default)]
struct AwaitingStore(Mutex<HashMap<SessionKey, StoredSession>>);

impl SessionStore for AwaitingStore {
    async fn load(&self, key: &SessionKey) -> Result<StoredSession, StoreError> {
        tokio::task::yield_now().await;
        Ok(self.0.lock().unwrap().get(key).cloned().unwrap_or_default())
    }
    async fn save(
        &self,
        key: &SessionKey,
        messages: &[Msg],
        expected: u64,
    ) -> Result<u64, StoreError> {
        tokio::task::yield_now().await;
        let mut map = self.0.lock().unwrap();
        let found = map.get(key).map_or(0, |s| s.version);
        if found != expected {
            return Err(StoreError::conflict(key, expected, found));
        }
        map.insert(
            key.clone(),
            StoredSession::new(messages.to_vec(), expected + 1),
        );
        Ok(expected + 1)
    }
}

#[tokio::test]
async fn a_session_store_written_with_async_fn_persists_between_agents() {
    let store = std::sync::Arc::new(AwaitingStore::default());
    let model = ScriptedModel::new([ScriptedTurn::text("one"), ScriptedTurn::text("two")]);
    for text in ["first", "second"] {
        let agent = builder(&model)
            .session_store(std::sync::Arc::clone(&store))
            .build()
            .unwrap();
        agent
            .call_with(vec![Msg::user(text)], session("s1"))
            .await
            .unwrap();
    }
    let stored = store.0.lock().unwrap().get(&key("s1")).cloned().unwrap();
    assert_eq!(stored.version, 2);
    assert_eq!(stored.messages.len(), 4);
}

/// An approver written with `async fn`, borrowing its own state across an await.
struct Limit(f64);

impl Approver for Limit {
    async fn decide(&self, request: ApprovalRequest) -> ApprovalDecision {
        tokio::task::yield_now().await;
        match request.tool_use.input["amount"].as_f64() {
            Some(a) if a <= self.0 => ApprovalDecision::Approve,
            _ => ApprovalDecision::Deny(format!("above {}", self.0)),
        }
    }
}

#[tokio::test]
async fn an_approver_written_with_async_fn_decides_before_the_tool_runs() {
    let log = Log::default();
    let model = tool_then_text("submitRefund", json!({"amount": 500}), "ok");
    let agent = builder_with_tools(&model, vec![refund_tool(&log)])
        .hook(ApprovalHook::with_approver(Limit(100.0), ["submitRefund"]))
        .build()
        .unwrap();
    agent.call(Msg::user("refund")).await.unwrap();
    assert!(
        log.entries().is_empty(),
        "the tool ran: {:?}",
        log.entries()
    );
    let results = results_in_request(&model, 1);
    assert!(
        results[0].1 && results[0].2.contains("above 100"),
        "{results:?}"
    );
}
