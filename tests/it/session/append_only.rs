//! Append-only saves from the agent's side: every save an agent makes names an
//! unchanged prefix that is exactly what the store holds (checked against the stored
//! history on every save), through tool calls the effect journal claims and settles in
//! place, on leased and unleased stores, and a replaced history is rewritten whole.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rein::*;
use serde_json::json;

/// An in-memory store that checks, on every save, that `messages[..unchanged]` are what
/// it holds, and records each save's `unchanged`.
#[derive(Clone, Default)]
struct Checking {
    inner: InMemorySessionStore,
    saves: Arc<Mutex<Vec<(usize, usize)>>>,
}

impl Checking {
    async fn check(&self, key: &SessionKey, messages: &[Msg], unchanged: usize) {
        let stored = self.inner.load(key).await.unwrap().messages;
        assert!(
            unchanged <= stored.len() && stored[..unchanged] == messages[..unchanged],
            "the save claims {unchanged} unchanged messages; the store holds {}, and they differ",
            stored.len()
        );
        self.saves.lock().unwrap().push((unchanged, messages.len()));
    }

    fn saves(&self) -> Vec<(usize, usize)> {
        self.saves.lock().unwrap().clone()
    }
}

impl SessionStore for Checking {
    async fn load(&self, key: &SessionKey) -> Result<StoredSession, StoreError> {
        self.inner.load(key).await
    }

    async fn save(&self, key: &SessionKey, messages: &[Msg], v: u64) -> Result<u64, StoreError> {
        self.save_from(key, messages, 0, v).await
    }

    async fn save_from(
        &self,
        key: &SessionKey,
        messages: &[Msg],
        unchanged: usize,
        v: u64,
    ) -> Result<u64, StoreError> {
        self.check(key, messages, unchanged).await;
        self.inner.save_from(key, messages, unchanged, v).await
    }
}

impl SessionLeases for Checking {
    async fn acquire(
        &self,
        key: &SessionKey,
        ttl: Duration,
        wait: Duration,
    ) -> Result<Lease, StoreError> {
        self.inner.acquire(key, ttl, wait).await
    }

    async fn renew(&self, lease: &Lease) -> Result<(), StoreError> {
        self.inner.renew(lease).await
    }

    async fn release(&self, lease: &Lease) -> Result<bool, StoreError> {
        self.inner.release(lease).await
    }

    async fn save_fenced(
        &self,
        lease: &Lease,
        messages: &[Msg],
        v: u64,
    ) -> Result<u64, StoreError> {
        self.save_fenced_from(lease, messages, 0, v).await
    }

    async fn save_fenced_from(
        &self,
        lease: &Lease,
        messages: &[Msg],
        unchanged: usize,
        v: u64,
    ) -> Result<u64, StoreError> {
        self.check(lease.key(), messages, unchanged).await;
        self.inner
            .save_fenced_from(lease, messages, unchanged, v)
            .await
    }
}

/// A tool with effects (journaled: claimed before it runs, settled after).
fn refund() -> FunctionTool {
    FunctionTool::new("refund", "refunds", json!({"type": "object"}), |_| async {
        Ok("refunded".to_owned())
    })
}

fn turns(calls: usize) -> Vec<ScriptedTurn> {
    (0..calls)
        .flat_map(|i| {
            [
                ScriptedTurn::tool_call("refund", json!({})),
                ScriptedTurn::text(format!("done {i}")),
            ]
        })
        .collect()
}

async fn three_calls_with_journaled_tools(store: Checking, leased: bool) {
    let mut tools = Toolkit::new();
    tools.register(refund()).unwrap();
    let builder = Agent::builder()
        .model(ScriptedModel::new(turns(3)))
        .toolkit(tools);
    let agent = if leased {
        builder.leased_session_store(store.clone(), LeaseConfig::default())
    } else {
        builder.session_store(store.clone())
    }
    .build()
    .unwrap();
    let key = SessionKey::new(Some("u"), "s");
    for i in 0..3 {
        agent
            .call_with(
                vec![Msg::user(format!("refund {i}"))],
                RunContext::new().with_user_id("u").with_session_id("s"),
            )
            .await
            .unwrap();
    }
    let stored = store.inner.load(&key).await.unwrap().messages;
    assert_eq!(stored, agent.messages(&key).await);
    assert_eq!(stored.len(), 12, "{stored:?}");
    let saves = store.saves();
    // The journal's claim and settle rewrite the assistant message in place, so those
    // saves keep less than everything; the calls after the first append to what the
    // store holds.
    assert!(
        saves.iter().any(|(unchanged, _)| *unchanged >= 4),
        "{saves:?}"
    );
    assert!(
        saves.iter().all(|(unchanged, len)| unchanged <= len),
        "{saves:?}"
    );
}

#[tokio::test]
async fn every_save_of_an_agent_names_exactly_the_stored_prefix() {
    three_calls_with_journaled_tools(Checking::default(), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fenced_save_of_a_leased_agent_names_exactly_the_stored_prefix() {
    three_calls_with_journaled_tools(Checking::default(), true).await;
}

#[tokio::test]
async fn a_replaced_history_is_rewritten_whole() {
    let store = Checking::default();
    let agent = Agent::builder()
        .model(ScriptedModel::new([
            ScriptedTurn::text("a"),
            ScriptedTurn::text("b"),
        ]))
        .session_store(store.clone())
        .build()
        .unwrap();
    let ctx = || RunContext::new().with_session_id("s");
    let key = SessionKey::new(None, "s");
    agent
        .call_with(vec![Msg::user("one")], ctx())
        .await
        .unwrap();
    agent
        .set_messages(&key, vec![Msg::user("imported"), Msg::assistant("history")])
        .await
        .unwrap();
    agent
        .call_with(vec![Msg::user("two")], ctx())
        .await
        .unwrap();
    let saves = store.saves();
    // The replacement is saved whole before the next call runs; that call appends.
    assert!(saves.contains(&(0, 2)), "{saves:?}");
    assert_eq!(saves.last(), Some(&(2, 4)), "{saves:?}");
    assert_eq!(
        store.inner.load(&key).await.unwrap().messages,
        agent.messages(&key).await
    );
}
