//! The context window: a request that would not fit is never sent. `Fail` stops the
//! call with a typed error; `DropOldest` sends the newest whole turns that fit, keeping
//! the system prompt, the current turn and pinned messages, and never separating a tool
//! call from its result. The stored conversation is never cut.

use rein::agent::{PINNED_KEY, WINDOW_BYTES_PER_TOKEN};
use rein::*;
use serde_json::{Value, json};

use crate::support::*;

/// A user message of about `tokens` estimated tokens.
fn long(label: &str, tokens: usize) -> String {
    format!(
        "{label}: {}",
        "x".repeat(tokens * WINDOW_BYTES_PER_TOKEN as usize)
    )
}

/// A history of `turns` turns, each a user message of ~100 tokens, a tool call, its
/// result and an answer.
fn history(turns: usize) -> Vec<Msg> {
    let mut out = Vec::new();
    for i in 0..turns {
        out.push(Msg::user(long(&format!("turn {i}"), 100)));
        out.push(Msg::new(
            Role::Assistant,
            vec![ContentBlock::ToolUse(ToolUse::new(
                format!("c{i}"),
                "add",
                json!({"a": i, "b": 1}),
            ))],
        ));
        out.push(Msg::tool([ToolResult::new(format!("c{i}"), "add", "ok")]));
        out.push(Msg::assistant(format!("answer {i}")));
    }
    out
}

fn agent(model: &ScriptedModel, policy: ContextPolicy, window: u32) -> Agent {
    let log = Log::default();
    builder_with_tools(model, vec![add_tool(&log)])
        .sys_prompt("You add numbers.")
        .context_window(window)
        .context_policy(policy)
        .build()
        .unwrap()
}

/// The user texts of a request, in order.
fn user_texts(request: &ModelRequest) -> Vec<String> {
    request
        .messages
        .iter()
        .filter(|m| m.role == Role::User)
        .map(|m| m.text().chars().take(7).collect())
        .collect()
}

#[tokio::test]
async fn a_request_over_the_window_fails_with_a_typed_error_before_it_is_sent() {
    let model = ScriptedModel::new([ScriptedTurn::text("never")]);
    let agent = agent(&model, ContextPolicy::Fail, 300);
    let err = agent
        .call_with(vec![Msg::user(long("big", 400))], session("fail"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ContextWindow);
    let text = err.to_string();
    assert!(text.contains("context window is 300 tokens"), "{text}");
    assert!(text.contains("Fail"), "{text}");
    assert!(model.requests().is_empty(), "nothing was sent");
    assert_memory_valid(&agent.messages(&key("fail")).await);
}

#[tokio::test]
async fn drop_oldest_sends_the_newest_turns_that_fit_and_stores_them_all() {
    let model = ScriptedModel::new([ScriptedTurn::text("done")]);
    let agent = agent(&model, ContextPolicy::DropOldest, 700);
    agent.set_messages(&key("drop"), history(8)).await.unwrap();
    agent
        .call_with(vec![Msg::user("turn 8: now")], session("drop"))
        .await
        .unwrap();
    let request = &model.requests()[0];
    let sent = user_texts(request);
    assert_eq!(sent.last().unwrap(), "turn 8:", "the current turn is sent");
    assert!(sent.len() < 9, "older turns were left out: {sent:?}");
    assert!(sent.len() >= 2, "as many turns as fit: {sent:?}");
    // The newest turns, contiguous.
    let first: usize = sent[0][5..6].parse().unwrap();
    let expected: Vec<String> = (first..=8).map(|i| format!("turn {i}:")).collect();
    assert_eq!(sent, expected);
    let system = request.messages.iter().next().unwrap();
    assert_eq!(
        system.role,
        Role::System,
        "the system prompt is always sent"
    );
    assert_eq!(system.text(), "You add numbers.");
    // A window, not a cut: the session keeps every turn.
    assert_eq!(agent.messages(&key("drop")).await.len(), 8 * 4 + 2);
}

#[tokio::test]
async fn drop_oldest_never_separates_a_tool_call_from_its_result() {
    let model = ScriptedModel::new([ScriptedTurn::text("done")]);
    let agent = agent(&model, ContextPolicy::DropOldest, 500);
    agent.set_messages(&key("pairs"), history(6)).await.unwrap();
    agent
        .call_with(vec![Msg::user("turn 6: now")], session("pairs"))
        .await
        .unwrap();
    let sent: Vec<Msg> = model.requests()[0].messages.to_vec();
    assert_eq!(sent[1].role, Role::User, "the window starts at a turn");
    assert_memory_valid(&sent[1..]);
}

#[tokio::test]
async fn a_pinned_message_is_sent_when_its_turn_is_left_out() {
    let model = ScriptedModel::new([ScriptedTurn::text("done")]);
    let agent = agent(&model, ContextPolicy::DropOldest, 600);
    let mut messages = history(6);
    let mut vip = Msg::user("the customer is a VIP");
    vip.metadata
        .insert(PINNED_KEY.to_owned(), Value::Bool(true));
    messages[0] = vip;
    agent.set_messages(&key("pin"), messages).await.unwrap();
    agent
        .call_with(vec![Msg::user("turn 6: now")], session("pin"))
        .await
        .unwrap();
    let request = &model.requests()[0];
    let texts: Vec<String> = request.messages.iter().map(Msg::text).collect();
    assert_eq!(
        texts[1], "the customer is a VIP",
        "pinned, in place of its turn"
    );
    assert!(
        !texts
            .iter()
            .any(|t| t.starts_with("turn 0:") || t.starts_with("turn 1:")),
        "the oldest turns are left out"
    );
}

#[tokio::test]
async fn when_the_current_turn_alone_does_not_fit_drop_oldest_fails_with_the_typed_error() {
    let model = ScriptedModel::new([ScriptedTurn::text("never")]);
    let agent = agent(&model, ContextPolicy::DropOldest, 300);
    agent.set_messages(&key("huge"), history(2)).await.unwrap();
    let err = agent
        .call_with(vec![Msg::user(long("huge", 500))], session("huge"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ContextWindow);
    assert!(err.to_string().contains("current turn alone"), "{err}");
    assert!(model.requests().is_empty());
}

#[tokio::test]
async fn the_answers_reserve_counts_against_the_window() {
    let model = ScriptedModel::new([ScriptedTurn::text("fits")]);
    let log = Log::default();
    let small = |max_tokens| {
        builder_with_tools(&model, vec![add_tool(&log)])
            .context_window(400)
            .generate_options(GenerateOptions {
                max_tokens: Some(max_tokens),
                ..Default::default()
            })
            .build()
            .unwrap()
    };
    small(10).call(Msg::user(long("q", 150))).await.unwrap();
    let err = small(300)
        .call(Msg::user(long("q", 150)))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ContextWindow);
    assert!(err.to_string().contains("300 reserved"), "{err}");
}

#[tokio::test]
async fn the_window_comes_from_the_models_capabilities_unless_the_builder_sets_one() {
    let model = ScriptedModel::new([ScriptedTurn::text("fits")])
        .with_capabilities(ModelCapabilities::PERMISSIVE.context_window(200));
    let plain = builder(&model).build().unwrap();
    let err = plain.call(Msg::user(long("q", 300))).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ContextWindow);
    let wider = builder(&model).context_window(2000).build().unwrap();
    wider.call(Msg::user(long("q", 300))).await.unwrap();
    let err = builder(&model).context_window(0).build().unwrap_err();
    assert_eq!(err.kind(), BuildErrorKind::InvalidConfig);
    assert!(err.to_string().contains("context_window"), "{err}");
}

#[tokio::test]
async fn two_replicas_send_the_same_window_for_the_same_history() {
    let store = std::sync::Arc::new(InMemorySessionStore::new());
    let mut sent = Vec::new();
    for replica in ["a", "b"] {
        let model = ScriptedModel::new([ScriptedTurn::text("done")]);
        let log = Log::default();
        let agent = builder_with_tools(&model, vec![add_tool(&log)])
            .session_store(std::sync::Arc::clone(&store))
            .context_window(600)
            .context_policy(ContextPolicy::DropOldest)
            .build()
            .unwrap();
        let session_id = format!("shared-{replica}");
        agent
            .set_messages(&key(&session_id), history(6))
            .await
            .unwrap();
        agent
            .call_with(vec![Msg::user("turn 6: now")], session(&session_id))
            .await
            .unwrap();
        let texts: Vec<String> = model.requests()[0].messages.iter().map(Msg::text).collect();
        sent.push(texts);
    }
    assert_eq!(
        sent[0], sent[1],
        "the window is a function of the history alone"
    );
    assert!(sent[0].len() < 6 * 4 + 2, "and some turns were left out");
}
