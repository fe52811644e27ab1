//! Near a token or cost budget the runtime decides on the provider's own token count, not
//! on the byte estimate; far from every limit it never asks.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rein::budget::{BUDGET_KEY, BYTES_PER_TOKEN};
use rein::*;
use serde_json::json;

use crate::support::{builder, key, session};

type CountFn = Arc<dyn Fn(&ModelRequest) -> Option<u64> + Send + Sync>;

/// A scripted model that counts every request with `count` (`None`: the count fails),
/// and remembers how often it was asked.
struct Counting {
    inner: ScriptedModel,
    count: CountFn,
    asked: Arc<AtomicUsize>,
}

impl Model for Counting {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn stream(&self, request: ModelRequest) -> ModelStream {
        self.inner.stream(request)
    }
    fn count_tokens(&self, request: &ModelRequest) -> Option<TokenCount> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        let count = (self.count)(request);
        Some(Box::pin(async move {
            count.ok_or_else(|| ModelError::new(ModelErrorKind::Server, "the count failed"))
        }))
    }
}

/// A builder on `inner` whose model counts with `count`, and how often it was asked.
fn counting(inner: &ScriptedModel, count: CountFn) -> (AgentBuilder, Arc<AtomicUsize>) {
    let asked = Arc::new(AtomicUsize::new(0));
    let builder = builder(inner).model(Counting {
        inner: inner.clone(),
        count,
        asked: Arc::clone(&asked),
    });
    (builder, asked)
}

/// An agent on `inner` whose model counts `count` tokens per request, with `budget`.
fn agent(inner: &ScriptedModel, count: Option<u64>, budget: Budget) -> (Agent, Arc<AtomicUsize>) {
    let (builder, asked) = counting(inner, Arc::new(move |_| count));
    (builder.call_budget(budget).build().unwrap(), asked)
}

/// A question whose request the byte estimate puts at about `tokens` tokens.
fn question_of(tokens: usize) -> Msg {
    Msg::user("x".repeat(tokens * BYTES_PER_TOKEN as usize))
}

#[tokio::test]
async fn a_request_the_estimate_would_admit_is_refused_on_the_providers_larger_count() {
    // The estimate (~70) fits the budget of 100, twice it does not: the provider is
    // asked, counts 150 (a chat template adds what the text does not show), and the
    // request is never sent.
    let model = ScriptedModel::new([ScriptedTurn::text("never")]);
    let (agent, asked) = agent(&model, Some(150), Budget::new().input_tokens(100));
    let outcome = agent
        .run(vec![question_of(70)], RunContext::new())
        .await
        .unwrap();
    assert_eq!(outcome.reason, StopReason::BudgetExhausted, "{outcome:?}");
    let record = &outcome.reply.metadata[BUDGET_KEY];
    assert_eq!(record["kind"], "input_tokens", "{record}");
    assert_eq!(record["used"], json!(150.0), "the count decided: {record}");
    assert!(model.requests().is_empty(), "the request went out");
    assert_eq!(asked.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_request_the_estimate_would_refuse_is_sent_on_the_providers_smaller_count() {
    let model = ScriptedModel::new([ScriptedTurn::text("fits").with_usage(40, 3)]);
    let (agent, asked) = agent(&model, Some(40), Budget::new().input_tokens(100));
    let outcome = agent
        .run(vec![question_of(130)], RunContext::new())
        .await
        .unwrap();
    assert_eq!(outcome.reason, StopReason::Final, "{outcome:?}");
    assert_eq!(outcome.reply.text(), "fits");
    assert_eq!(outcome.spend.unwrap().input_tokens, 40);
    assert_eq!(asked.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn max_tokens_is_lowered_to_what_the_total_budget_leaves_after_the_counted_input() {
    let model = ScriptedModel::new([ScriptedTurn::text("ok").with_usage(100, 2)]);
    let (agent, _) = agent(&model, Some(100), Budget::new().total_tokens(300));
    // Estimated at ~160 (twice that is past 300), counted at 100: 200 are left to write.
    let outcome = agent
        .run(vec![question_of(160)], RunContext::new())
        .await
        .unwrap();
    assert_eq!(outcome.reason, StopReason::Final, "{outcome:?}");
    assert_eq!(model.requests()[0].options.max_tokens, Some(200));
}

#[tokio::test]
async fn far_from_every_limit_the_provider_is_never_asked_to_count() {
    let model = ScriptedModel::new([ScriptedTurn::text("a"), ScriptedTurn::text("b")]);
    let (far, asked_far) = agent(&model, Some(10), Budget::new().input_tokens(1_000_000));
    far.run(vec![question_of(70)], RunContext::new())
        .await
        .unwrap();
    // A model-call budget is not about tokens: nothing to count either.
    let (calls, asked_calls) = agent(&model, Some(10), Budget::new().model_calls(1));
    calls
        .run(vec![question_of(70)], RunContext::new())
        .await
        .unwrap();
    assert_eq!(asked_far.load(Ordering::SeqCst), 0);
    assert_eq!(asked_calls.load(Ordering::SeqCst), 0);
    assert_eq!(model.requests().len(), 2);
}

#[tokio::test]
async fn a_count_that_fails_leaves_the_decision_to_the_estimate() {
    let model = ScriptedModel::new([ScriptedTurn::text("sent")]);
    let (agent, asked) = agent(&model, None, Budget::new().input_tokens(100));
    let outcome = agent
        .run(vec![question_of(70)], RunContext::new())
        .await
        .unwrap();
    assert_eq!(outcome.reason, StopReason::Final, "{outcome:?}");
    assert_eq!(model.requests().len(), 1);
    assert_eq!(asked.load(Ordering::SeqCst), 1);
}

/// A count of twice the estimate's tokens: the text's bytes / 2 (what a template-heavy or
/// non-English prompt can cost), plus 100 for the template.
fn text_bytes_over_two(request: &ModelRequest) -> Option<u64> {
    let bytes: usize = request.messages.iter().map(|m| m.text().len()).sum();
    Some(bytes as u64 / 2 + 100)
}

/// `turns` stored user/assistant turns of about 600 bytes each.
fn history(turns: usize) -> Vec<Msg> {
    (0..turns)
        .flat_map(|i| {
            [
                Msg::user(format!("question {i} {}", "q".repeat(300))),
                Msg::assistant(format!("answer {i} {}", "a".repeat(300))),
            ]
        })
        .collect()
}

/// `turns` stored turns on session `w`, then the question "and now?" on it.
async fn after_history(agent: &Agent, turns: usize) -> Result<CallOutcome, Error> {
    agent.set_messages(&key("w"), history(turns)).await.unwrap();
    agent.run(vec![Msg::user("and now?")], session("w")).await
}

#[tokio::test]
async fn a_request_the_window_estimate_rejects_is_sent_whole_when_the_models_count_fits() {
    let model = ScriptedModel::new([ScriptedTurn::text("whole")]);
    let (builder, asked) = counting(&model, Arc::new(|_| Some(400)));
    let agent = builder
        .context_window(1_000)
        .context_policy(ContextPolicy::DropOldest)
        .build()
        .unwrap();
    // Six turns of ~600 bytes: ~1,300 tokens by the estimate, 400 by the count.
    let reply = after_history(&agent, 6).await.unwrap().reply;
    assert_eq!(reply.text(), "whole");
    assert_eq!(model.requests()[0].messages.len(), 13, "nothing left out");
    assert_eq!(asked.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_request_the_window_estimate_admits_is_cut_until_the_models_count_fits() {
    let model = ScriptedModel::new([ScriptedTurn::text("cut")]);
    let count: CountFn = Arc::new(text_bytes_over_two);
    let (builder, _) = counting(&model, Arc::clone(&count));
    let agent = builder
        .context_window(1_200)
        .context_policy(ContextPolicy::DropOldest)
        .build()
        .unwrap();
    // Four turns: ~900 tokens by the estimate (it fits), ~1,350 by the count (it does not).
    after_history(&agent, 4).await.unwrap();
    let sent = &model.requests()[0];
    assert!(sent.messages.len() < 9, "not cut: {}", sent.messages.len());
    assert!(count(sent).unwrap() <= 1_200, "{:?}", count(sent));
    assert_eq!(sent.messages.last().unwrap().text(), "and now?");
}

#[tokio::test]
async fn over_the_window_by_the_models_count_fails_typed_before_anything_is_sent() {
    let model = ScriptedModel::new([ScriptedTurn::text("never")]);
    let (builder, _) = counting(&model, Arc::new(text_bytes_over_two));
    let agent = builder.context_window(1_200).build().unwrap();
    let err = after_history(&agent, 4).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ContextWindow);
    assert!(
        err.to_string().contains("by the model's own count"),
        "{err}"
    );
    assert!(model.requests().is_empty());
}

#[tokio::test]
async fn a_request_counted_for_the_window_is_not_counted_again_for_the_budget() {
    let model = ScriptedModel::new([ScriptedTurn::text("once").with_usage(400, 2)]);
    let (builder, asked) = counting(&model, Arc::new(|_| Some(400)));
    let agent = builder
        .context_window(1_000)
        .call_budget(Budget::new().input_tokens(500))
        .build()
        .unwrap();
    let out = after_history(&agent, 6).await.unwrap();
    assert_eq!(out.reason, StopReason::Final, "{out:?}");
    assert_eq!(asked.load(Ordering::SeqCst), 1, "one count for both checks");
}
