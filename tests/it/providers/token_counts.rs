//! Providers count a request's prompt tokens the way the provider bills them: Anthropic's
//! `messages/count_tokens`, a llama.cpp server's `apply-template` + `tokenize` (against
//! the mock server, and against the real model, where the count must equal the
//! `prompt_tokens` the server then reports, and an input budget decides on it).

use futures::StreamExt;
use rein::budget::BUDGET_KEY;
use rein::*;
use serde_json::json;

use super::mock::{MockServer, Reply, fast_http};
use super::real_model::{attempts, check, model_builder, options, server, weather_tool};
use crate::support::{Log, toolkit_with};

fn request() -> ModelRequest {
    ModelRequest {
        messages: vec![
            Msg::system("Answer briefly."),
            Msg::user("Weather in Paris?"),
        ]
        .into(),
        tools: toolkit_with(vec![weather_tool(&Log::default())])
            .schemas()
            .into(),
        options: GenerateOptions {
            max_tokens: Some(64),
            temperature: Some(0.0),
            ..Default::default()
        },
    }
}

#[tokio::test]
async fn anthropic_counts_on_count_tokens_with_only_the_fields_it_accepts() {
    let server = MockServer::start([Reply::json(200, json!({"input_tokens": 42}))]).await;
    let model = AnthropicModel::builder()
        .base_url(&server.url)
        .api_key("sk-ant-test")
        .model("claude-test")
        .http(fast_http(1))
        .build()
        .unwrap();
    let counted = model.count_tokens(&request()).expect("counts").await;
    assert_eq!(counted.unwrap(), 42);
    let sent = &server.requests()[0];
    assert_eq!(sent.path, "/v1/messages/count_tokens");
    assert_eq!(sent.headers["x-api-key"], "sk-ant-test");
    let mut keys: Vec<&str> = sent
        .body
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        ["messages", "model", "system", "tools"],
        "{}",
        sent.body
    );
}

#[tokio::test]
async fn anthropic_counting_can_be_turned_off_and_a_refused_count_is_a_typed_error() {
    let off = AnthropicModel::builder()
        .api_key("k")
        .model("claude-test")
        .count_tokens(false)
        .build()
        .unwrap();
    assert!(off.count_tokens(&request()).is_none());
    let server = MockServer::start([Reply::json(
        404,
        json!({"error": {"message": "no such endpoint"}}),
    )])
    .await;
    let model = AnthropicModel::builder()
        .base_url(&server.url)
        .model("claude-test")
        .http(fast_http(1))
        .build()
        .unwrap();
    let err = model.count_tokens(&request()).unwrap().await.unwrap_err();
    assert_eq!(err.kind(), ModelErrorKind::BadRequest);
    assert!(err.message().contains("no such endpoint"), "{err}");
}

#[tokio::test]
async fn a_llama_server_counts_the_tokens_of_the_prompt_its_template_makes() {
    let server = MockServer::start([
        Reply::json(200, json!({"prompt": "<|im_start|>user\nWeather?"})),
        Reply::json(200, json!({"tokens": [1, 2, 3, 4, 5]})),
    ])
    .await;
    let model = OpenAiChatModel::builder()
        .base_url(format!("{}/v1", server.url))
        .model("local")
        .http(fast_http(1))
        .llama_server_token_count(format!("{}/", server.url))
        .build()
        .unwrap();
    assert_eq!(model.count_tokens(&request()).unwrap().await.unwrap(), 5);
    let sent = server.requests();
    assert_eq!(sent[0].path, "/apply-template");
    assert_eq!(sent[0].body["messages"][1]["content"], "Weather in Paris?");
    assert_eq!(sent[0].body["tools"][0]["function"]["name"], "get_weather");
    assert_eq!(sent[1].path, "/tokenize");
    assert_eq!(
        sent[1].body,
        json!({"content": "<|im_start|>user\nWeather?", "add_special": true})
    );
    // Without a llama server configured, OpenAI has nothing to count with.
    let plain = OpenAiChatModel::builder().model("gpt-4o").build().unwrap();
    assert!(plain.count_tokens(&request()).is_none());
}

#[tokio::test]
async fn a_llama_server_answer_without_tokens_is_a_typed_error_quoting_it() {
    let server = MockServer::start([Reply::json(200, json!({"template": "?"}))]).await;
    let model = OpenAiChatModel::builder()
        .base_url(format!("{}/v1", server.url))
        .model("local")
        .http(fast_http(1))
        .llama_server_token_count(&server.url)
        .build()
        .unwrap();
    let err = model.count_tokens(&request()).unwrap().await.unwrap_err();
    assert_eq!(err.kind(), ModelErrorKind::Stream);
    assert!(err.message().contains("apply-template"), "{err}");
}

/// The real model's OpenAI-compatible provider, counting on its own server.
fn counting(url: &str) -> OpenAiChatModel {
    model_builder(url)
        .llama_server_token_count(url.trim_end_matches('/').trim_end_matches("/v1"))
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_real_llama_server_counts_exactly_the_prompt_tokens_it_then_reports() {
    let Some(url) = server() else { return };
    attempts("token count", || async {
        let model = counting(&url);
        let counted = model
            .count_tokens(&request())
            .expect("configured")
            .await
            .map_err(|e| e.to_string())?;
        let mut stream = model.stream(request());
        let mut reported = 0;
        while let Some(chunk) = stream.next().await {
            if let ModelChunk::Usage(u) = chunk.map_err(|e| e.to_string())? {
                reported = u.input_tokens;
            }
        }
        check(counted == reported && counted > 0, || {
            format!("counted {counted}, the server reported {reported}")
        })
    })
    .await;
}

#[tokio::test]
async fn on_a_real_model_an_input_budget_decides_on_the_servers_count_not_the_estimate() {
    let Some(url) = server() else { return };
    attempts("budget on the count", || async {
        let question = "What is the weather in Paris right now?";
        let tools = || toolkit_with(vec![weather_tool(&Log::default())]);
        let first = ModelRequest {
            messages: vec![Msg::user(question)].into(),
            tools: tools().schemas().into(),
            options: options(),
        };
        let counted = counting(&url)
            .count_tokens(&first)
            .expect("configured")
            .await
            .map_err(|e| e.to_string())?;
        // One token short of the first request: the chat template's tokens are not in the
        // text, so the byte estimate admits it.
        let budget = Budget::new().input_tokens(counted - 1);
        let run = |model: OpenAiChatModel| {
            let agent = Agent::builder()
                .model(model)
                .generate_options(options())
                .toolkit(tools())
                .without_global_hooks()
                .call_budget(budget.clone())
                .build()
                .unwrap();
            async move {
                agent
                    .run(vec![Msg::user(question)], RunContext::new())
                    .await
            }
        };
        let estimated = run(model_builder(&url).build().unwrap())
            .await
            .map_err(|e| e.to_string())?;
        let spent = estimated.spend.clone().unwrap_or_default();
        check(spent.input_tokens >= counted, || {
            format!("on the estimate the request goes out and overspends: {spent:?}")
        })?;
        let decided = run(counting(&url)).await.map_err(|e| e.to_string())?;
        let record = decided.reply.metadata.get(BUDGET_KEY).cloned();
        check(
            decided.reason == StopReason::BudgetExhausted
                && decided.spend.as_ref().is_some_and(|s| s.model_calls == 0)
                && record.as_ref().is_some_and(|r| {
                    r["kind"] == "input_tokens" && r["used"] == json!(counted as f64)
                }),
            || format!("on the count the request is refused: {decided:?}"),
        )
    })
    .await;
}

/// `turns` stored weather questions and answers, plain text.
fn chat(turns: usize) -> Vec<Msg> {
    (0..turns)
        .flat_map(|i| {
            [
                Msg::user(format!("What is the weather in city number {i}?")),
                Msg::assistant(format!(
                    "It is sunny and {} degrees in city number {i}.",
                    20 + i
                )),
            ]
        })
        .collect()
}

#[tokio::test]
async fn on_a_real_model_the_window_keeps_every_turn_the_servers_count_fits() {
    let Some(url) = server() else { return };
    attempts("window on the count", || async {
        let question = Msg::user("And in city number 99?");
        let opts = GenerateOptions {
            max_tokens: Some(16),
            ..options()
        };
        let whole = ModelRequest {
            messages: chat(8).into_iter().chain([question.clone()]).collect(),
            tools: Default::default(),
            options: opts.clone(),
        };
        let counted = counting(&url)
            .count_tokens(&whole)
            .expect("configured")
            .await
            .map_err(|e| e.to_string())?;
        // Exactly the whole request and its reserve: the estimate (bytes / 3 plus the
        // template allowance) is well over it.
        let window = u32::try_from(counted + 16).unwrap();
        let run = |model: OpenAiChatModel, session: &'static str| {
            let agent = Agent::builder()
                .model(model)
                .generate_options(opts.clone())
                .without_global_hooks()
                .context_window(window)
                .context_policy(ContextPolicy::DropOldest)
                .build()
                .unwrap();
            let question = question.clone();
            async move {
                agent
                    .set_messages(&SessionKey::new(None, session), chat(8))
                    .await
                    .map_err(|e| e.to_string())?;
                agent
                    .run(vec![question], RunContext::new().with_session_id(session))
                    .await
                    .map_err(|e| e.to_string())
            }
        };
        let estimated = run(model_builder(&url).build().unwrap(), "estimated").await?;
        check(estimated.usage.input_tokens < counted, || {
            format!(
                "on the estimate turns are left out: {} of {counted} tokens sent",
                estimated.usage.input_tokens
            )
        })?;
        let decided = run(counting(&url), "counted").await?;
        check(decided.usage.input_tokens == counted, || {
            format!(
                "on the count every turn is sent: {} of {counted} tokens",
                decided.usage.input_tokens
            )
        })
    })
    .await;
}
