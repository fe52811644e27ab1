//! Run with: cargo run --example budgets
//!
//! Budgets hold before the spending. Two scenes, offline on a ScriptedModel:
//!
//! 1. A coordinator with a call budget of four model calls delegates to a researcher
//!    that would like to search forever: the researcher draws from what its parent has
//!    *left*, is stopped when the budget runs out, and no model call happens after.
//! 2. Two replicas of one agent share a session through one store (here in memory; the
//!    same holds on Redis and PostgreSQL) with a session budget of three model calls:
//!    what one replica spent, the other cannot spend again.
//! 3. A user budget of four model calls, on the same two replicas: whatever session
//!    the user calls in, on whichever replica, the fifth request is never sent; another
//!    user has a budget of its own.

use std::sync::Arc;

use rein::budget::BUDGET_KEY;
use rein::*;
use serde_json::json;

fn search_tool() -> FunctionTool {
    FunctionTool::new(
        "search",
        "Searches the web.",
        json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}),
        |args| async move { Ok(format!("3 results for {}", args["q"])) },
    )
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Scene 1: the tree. Parent turn, then the child searches and searches.
    let mut turns = vec![ScriptedTurn::tool_call(
        SPAWN_TOOL,
        json!({"agent_id": "researcher", "task": "find everything about budgets"}),
    )];
    for i in 0..10 {
        turns.push(ScriptedTurn::tool_call(
            "search",
            json!({"q": format!("budgets {i}")}),
        ));
    }
    let model = ScriptedModel::new(turns);
    let mut tools = Toolkit::new();
    tools.register(search_tool())?;
    let coordinator = Agent::builder()
        .name("coordinator")
        .model(model.clone())
        .toolkit(tools)
        .subagent(
            SubagentDeclaration::builder("researcher")
                .description("Researches a topic on the web.")
                .build()?,
        )
        .call_budget(Budget::new().model_calls(4))
        .build()?;
    let outcome = coordinator
        .run(vec![Msg::user("Research budgets.")], RunContext::new())
        .await?;
    let spend = outcome.spend.clone().unwrap_or_default();
    println!(
        "scene 1: {:?} after {} model calls in the whole tree ({} by the model's count); reply: {}",
        outcome.reason,
        spend.model_calls,
        model.requests().len(),
        outcome.reply.text()
    );
    assert_eq!(outcome.reason, StopReason::BudgetExhausted);
    assert_eq!(model.requests().len(), 4);

    // Scene 2: two replicas, one session budget.
    let store = Arc::new(InMemorySessionStore::new());
    let replica = |answers: &[&str]| -> Result<(Agent, ScriptedModel), BuildError> {
        let model = ScriptedModel::new(answers.iter().map(|a| ScriptedTurn::text(*a)));
        let agent = Agent::builder()
            .model(model.clone())
            .leased_session_store(Arc::clone(&store), LeaseConfig::default())
            .session_budget(Budget::new().model_calls(3))
            .build()?;
        Ok((agent, model))
    };
    let (a, _) = replica(&["a1", "a2"])?;
    let (b, _) = replica(&["b1", "b2", "b3"])?;
    let ctx = || RunContext::new().with_session_id("shared");
    for (name, agent) in [("a", &a), ("b", &b), ("a", &a), ("b", &b)] {
        let out = agent.run(vec![Msg::user("hello")], ctx()).await?;
        println!(
            "scene 2: replica {name}: {:?}: {}",
            out.reason,
            out.reply.text()
        );
    }
    let stored = store.load(&SessionKey::new(None, "shared")).await?;
    let record = stored
        .messages
        .iter()
        .rev()
        .find_map(|m| {
            m.metadata
                .get(BUDGET_KEY)
                .filter(|r| r.get("spent").is_some())
        })
        .cloned()
        .unwrap_or_default();
    println!(
        "scene 2: the session spent {} model calls of 3",
        record["spent"]["model_calls"]
    );
    assert_eq!(record["spent"]["model_calls"], 3);

    // Scene 3: one user's budget, across sessions and replicas.
    let store = Arc::new(InMemorySessionStore::new());
    let replica = |model: &ScriptedModel| {
        Agent::builder()
            .model(model.clone())
            .session_store(Arc::clone(&store))
            .user_budget(Budget::new().model_calls(4))
            .build()
    };
    let answers = || ScriptedModel::new((1..=4).map(|i| ScriptedTurn::text(format!("answer {i}"))));
    let (ma, mb) = (answers(), answers());
    let (a, b) = (replica(&ma)?, replica(&mb)?);
    let mut stops = 0;
    for (i, agent) in [&a, &b, &a, &b, &a].into_iter().enumerate() {
        let ctx = RunContext::new()
            .with_user_id("ann")
            .with_session_id(format!("ticket-{i}"));
        let out = agent.run(vec![Msg::user("hello")], ctx).await?;
        println!("scene 3: ann, session ticket-{i}: {:?}", out.reason);
        stops += usize::from(out.reason == StopReason::BudgetExhausted);
    }
    let bob = RunContext::new()
        .with_user_id("bob")
        .with_session_id("ticket-0");
    let out = b.run(vec![Msg::user("hello")], bob).await?;
    println!("scene 3: bob, session ticket-0: {:?}", out.reason);
    assert_eq!(stops, 1);
    assert_eq!(
        ma.requests().len() + mb.requests().len(),
        5,
        "four for ann, one for bob"
    );
    Ok(())
}
