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

fn compacting(model: &ScriptedModel, window: u32) -> AgentBuilder {
    let log = Log::default();
    builder_with_tools(model, vec![add_tool(&log)])
        .sys_prompt("You add numbers.")
        .context_window(window)
        .context_policy(ContextPolicy::Compact)
}

#[tokio::test]
async fn compact_replaces_the_oldest_turns_with_a_summary_every_replica_continues_from() {
    let store = std::sync::Arc::new(InMemorySessionStore::new());
    let model = ScriptedModel::new([
        ScriptedTurn::text("The user added numbers in turns 0 to 3."),
        ScriptedTurn::text("The user added numbers in turns 0 to 4; every result was ok."),
        ScriptedTurn::text("done"),
    ]);
    let agent = compacting(&model, 1100)
        .session_store(std::sync::Arc::clone(&store))
        .build()
        .unwrap();
    agent
        .set_messages(&key("compact"), history(8))
        .await
        .unwrap();
    agent
        .call_with(vec![Msg::user("turn 8: now")], session("compact"))
        .await
        .unwrap();
    let requests = model.requests();
    // What is kept fits half the window, so the turns summarized take two rolling calls.
    assert_eq!(requests.len(), 3, "two summary calls, one reasoning call");
    assert!(
        requests[1]
            .messages
            .iter()
            .any(|m| m.text().contains("turns 0 to 3")),
        "the second summary call starts from the first one's summary"
    );
    // The summary call: no tools, the oldest turns, an instruction.
    let summary_call = &requests[0];
    assert!(summary_call.tools.is_empty());
    let texts: Vec<String> = summary_call.messages.iter().map(Msg::text).collect();
    assert!(
        texts[0].contains("Summarize the conversation"),
        "{}",
        texts[0]
    );
    assert!(texts[1].starts_with("turn 0:"), "{}", texts[1]);
    assert!(
        texts.iter().all(|t| !t.starts_with("turn 7:")),
        "the newest turns are kept, not summarized"
    );
    assert_memory_valid(&summary_call.messages.to_vec()[1..summary_call.messages.len() - 1]);
    // The reasoning call: the summary in place of those turns.
    let sent: Vec<Msg> = requests[2].messages.to_vec();
    assert_eq!(sent[0].text(), "You add numbers.");
    assert!(
        sent[1].text().contains("turns 0 to 4"),
        "{}",
        sent[1].text()
    );
    assert_eq!(sent[2].role, Role::Assistant);
    assert_eq!(sent.last().unwrap().text(), "turn 8: now");
    assert!(rein::agent::PINNED_KEY != rein::agent::COMPACTION_KEY);
    // Stored: the compacted conversation, valid, marked.
    let stored = agent.messages(&key("compact")).await;
    assert_memory_valid(&stored);
    assert!(stored.len() < 8 * 4 + 2);
    assert!(stored[0].metadata.contains_key(rein::agent::COMPACTION_KEY));
    // Another replica on the same store continues from the same summary.
    let other_model = ScriptedModel::new([ScriptedTurn::text("again")]);
    let other = compacting(&other_model, 1100)
        .session_store(std::sync::Arc::clone(&store))
        .build()
        .unwrap();
    other
        .call_with(vec![Msg::user("turn 9: more")], session("compact"))
        .await
        .unwrap();
    let first_sent = other_model.requests()[0].messages.to_vec();
    assert!(
        first_sent[1].text().contains("turns 0 to 4"),
        "{}",
        first_sent[1].text()
    );
}

#[tokio::test]
async fn compaction_fires_its_events_before_pre_reasoning_and_a_post_compact_hook_rewrites_the_summary()
 {
    let seen = Log::default();
    let rec = seen.clone();
    let model = ScriptedModel::new([
        ScriptedTurn::text("numbers were added"),
        ScriptedTurn::text("card 4111 1111 1111 1111 was used"),
        ScriptedTurn::text("done"),
    ]);
    let agent = compacting(&model, 1100)
        .hook(
            FnHook::new("compaction", move |event| {
                rec.push(event.kind().as_str());
                if let HookEvent::PostCompact(e) = event {
                    assert!(e.compacted() > 0);
                    let text = e.message().text().replace("4111 1111 1111 1111", "[card]");
                    e.set_message(Msg::user(text));
                }
                Ok(())
            })
            // All events (the default): only these three happen before the model call.
            .priority(0),
        )
        .build()
        .unwrap();
    agent
        .set_messages(&key("events"), history(8))
        .await
        .unwrap();
    agent
        .call_with(vec![Msg::user("turn 8: now")], session("events"))
        .await
        .unwrap();
    let seen = seen.entries();
    let at = |k: &str| seen.iter().position(|s| s == k).unwrap();
    assert!(at("PreCompact") < at("PostCompact"), "{seen:?}");
    assert!(at("PostCompact") < at("PreReasoning"), "{seen:?}");
    let chunks_before: Vec<&String> = seen[..at("PreReasoning")]
        .iter()
        .filter(|s| s.ends_with("Chunk"))
        .collect();
    assert!(
        chunks_before.is_empty(),
        "the summary's chunks reach no hook: {seen:?}"
    );
    let stored = agent.messages(&key("events")).await;
    assert!(
        stored[0].text().ends_with("card [card] was used"),
        "{}",
        stored[0].text()
    );
    assert!(!stored[0].text().contains("4111"));
    assert_eq!(stored[0].role, Role::User);
}

#[tokio::test]
async fn a_pre_compact_veto_fails_the_call_with_the_typed_error_and_sends_nothing() {
    let model = ScriptedModel::new([ScriptedTurn::text("never")]);
    let agent = compacting(&model, 1100)
        .hook(
            FnHook::new("no-compaction", |event| {
                if let HookEvent::PreCompact(e) = event {
                    e.veto("this session is under legal hold");
                }
                Ok(())
            })
            .on(EventKind::PreCompact),
        )
        .build()
        .unwrap();
    agent.set_messages(&key("veto"), history(8)).await.unwrap();
    let err = agent
        .call_with(vec![Msg::user("turn 8: now")], session("veto"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ContextWindow);
    assert!(err.to_string().contains("legal hold"), "{err}");
    assert!(model.requests().is_empty());
    assert_eq!(
        agent.messages(&key("veto")).await.len(),
        8 * 4 + 1,
        "nothing compacted"
    );
}

#[tokio::test]
async fn the_summary_call_counts_against_the_budget() {
    let model = ScriptedModel::new([
        ScriptedTurn::text("summary"),
        ScriptedTurn::text("never sent"),
    ]);
    let agent = compacting(&model, 1100)
        .call_budget(Budget::new().model_calls(1))
        .build()
        .unwrap();
    agent
        .set_messages(&key("budget"), history(8))
        .await
        .unwrap();
    let out = agent
        .run(vec![Msg::user("turn 8: now")], session("budget"))
        .await
        .unwrap();
    assert_eq!(out.reason, StopReason::BudgetExhausted);
    assert_eq!(model.requests().len(), 1, "only the summary call was sent");
}

/// Answers a summary call (no tools) with a rolling summary and a reasoning call with
/// "done", counting both.
struct Summarizer {
    summaries: std::sync::atomic::AtomicUsize,
    reasoning: std::sync::Mutex<Vec<ModelRequest>>,
}

impl Model for Summarizer {
    fn name(&self) -> &str {
        "summarizer"
    }
    fn stream(&self, request: ModelRequest) -> ModelStream {
        let text = if request.tools.is_empty() {
            let n = self
                .summaries
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            format!("summary {n}")
        } else {
            self.reasoning.lock().unwrap().push(request.clone());
            "done".to_owned()
        };
        ScriptedModel::new([ScriptedTurn::text(text)]).stream(request)
    }
}

#[tokio::test]
async fn turns_too_many_for_one_summary_call_are_summarized_in_rolling_calls() {
    let model = std::sync::Arc::new(Summarizer {
        summaries: Default::default(),
        reasoning: Default::default(),
    });
    let log = Log::default();
    let agent = Agent::builder()
        .model(std::sync::Arc::clone(&model))
        .without_global_hooks()
        .toolkit(toolkit_with(vec![add_tool(&log)]))
        .context_window(700)
        .context_policy(ContextPolicy::Compact)
        .build()
        .unwrap();
    agent
        .set_messages(&key("rolling"), history(12))
        .await
        .unwrap();
    agent
        .call_with(vec![Msg::user("turn 12: now")], session("rolling"))
        .await
        .unwrap();
    let summaries = model.summaries.load(std::sync::atomic::Ordering::SeqCst);
    assert!(summaries >= 2, "{summaries} summary calls");
    let sent = model.reasoning.lock().unwrap()[0].messages.to_vec();
    // The last rolling summary stands for every compacted turn.
    let last = format!("summary {}", summaries - 1);
    assert!(sent[0].text().ends_with(&last), "{}", sent[0].text());
    assert_memory_valid(&sent);
    assert_memory_valid(&agent.messages(&key("rolling")).await);
}
