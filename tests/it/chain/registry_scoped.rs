//! Scoped registrations in a hook registry: removed when their guard drops.

use std::sync::Arc;

use rein::*;

use crate::support::*;

/// A hook that records `PreCall` only for agents with this id, so tests running beside
/// it (which build agents with other ids) are unaffected while it is registered.
fn probe(agent_id: &'static str, log: &Log) -> Arc<FnHook> {
    let log = log.clone();
    Arc::new(
        FnHook::new("scoped-probe", move |e| {
            if e.agent().id == agent_id {
                log.push(format!("{}:{}", e.agent().id, e.kind()));
            }
            Ok(())
        })
        .on(EventKind::PreCall)
        .policy(FailurePolicy::Ignore),
    )
}

fn agent(id: &str) -> Agent {
    Agent::builder()
        .id(id)
        .model(ScriptedModel::new([ScriptedTurn::text("ok")]))
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_scoped_global_hook_is_removed_when_its_guard_drops_even_on_panic() {
    let log = Log::default();
    let hook = probe("scoped-global-agent", &log);

    // While the guard lives, agents built from the global registry get the hook.
    let guard = HookRegistry::global().register_scoped(Arc::clone(&hook));
    let during = agent("scoped-global-agent");
    drop(guard);
    let after_drop = agent("scoped-global-agent");

    // A scope that panics after registering still removes the hook.
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _guard = HookRegistry::global().register_scoped(Arc::clone(&hook));
        panic!("test body failed");
    }));
    assert!(unwound.is_err());
    let after_panic = agent("scoped-global-agent");

    during.call(Msg::user("hi")).await.unwrap();
    after_drop.call(Msg::user("hi")).await.unwrap();
    after_panic.call(Msg::user("hi")).await.unwrap();
    assert_eq!(log.entries(), ["scoped-global-agent:PreCall"]);
    // Nothing of this hook is left behind for other tests.
    assert!(!HookRegistry::global().unregister(&hook));
}

#[tokio::test]
async fn dropping_a_scoped_guard_removes_only_its_own_registration() {
    let log = Log::default();
    let hook = probe("scoped-own-agent", &log);
    let registry = HookRegistry::new();
    registry.register(Arc::clone(&hook));
    let guard = registry.register_scoped(Arc::clone(&hook));
    assert_eq!(registry.len(), 2);
    drop(guard);
    assert_eq!(registry.len(), 1);
    let agent = Agent::builder()
        .id("scoped-own-agent")
        .model(ScriptedModel::new([ScriptedTurn::text("ok")]))
        .without_global_hooks()
        .hooks_from(&registry)
        .build()
        .unwrap();
    agent.call(Msg::user("hi")).await.unwrap();
    assert_eq!(log.entries(), ["scoped-own-agent:PreCall"]);
}
