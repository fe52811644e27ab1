//! Errors keep their causes: `source()` chains reach the original error, as itself.

use std::error::Error as _;

use rein::*;

#[derive(Debug, thiserror::Error)]
#[error("connection reset by peer")]
struct Transport;

#[tokio::test]
async fn a_model_errors_cause_reaches_the_caller_through_the_call_errors_source_chain() {
    let model = ScriptedModel::new([ScriptedTurn::error(
        ModelError::new(ModelErrorKind::Other, "the request failed").with_source(Transport),
    )]);
    let agent = Agent::builder().model(model).build().unwrap();
    let err = agent.call(Msg::user("hi")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Model);
    let model_err = err
        .source()
        .and_then(|s| s.downcast_ref::<ModelError>())
        .expect("the call error's source is the model error");
    let cause = model_err.source().expect("the model error keeps its cause");
    assert!(cause.downcast_ref::<Transport>().is_some(), "{cause}");
    // Clones share the cause; equality is kind and message.
    let copy = model_err.clone();
    assert!(copy.source().is_some());
    assert_eq!(
        copy,
        ModelError::new(ModelErrorKind::Other, "the request failed")
    );
}

#[tokio::test]
async fn a_hooks_error_is_the_call_errors_source_as_itself() {
    struct Refuses;
    impl Hook for Refuses {
        fn interest(&self) -> Interest {
            Interest::only(EventKind::PreCall)
        }
        async fn on_event(&self, _: &mut HookEvent) -> Result<(), HookError> {
            Err(HookError::new("refused"))
        }
    }
    let agent = Agent::builder()
        .model(ScriptedModel::new([ScriptedTurn::text("unused")]))
        .hook(Refuses)
        .build()
        .unwrap();
    let err = agent.call(Msg::user("hi")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Hook);
    let source = err.source().expect("the hook's error is kept");
    assert_eq!(
        source.downcast_ref::<HookError>().map(HookError::message),
        Some("refused")
    );
}

#[cfg(feature = "openai")]
#[tokio::test]
async fn a_refused_connection_keeps_the_http_clients_error_as_the_model_errors_source() {
    // A port nothing listens on: bind, read the port, close.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let model = OpenAiChatModel::builder()
        .base_url(format!("http://127.0.0.1:{port}/v1"))
        .model("m")
        .http(HttpConfig {
            retry: RetryPolicy {
                max_attempts: 1,
                ..RetryPolicy::default()
            },
            ..HttpConfig::default()
        })
        .build()
        .unwrap();
    let agent = Agent::builder().model(model).build().unwrap();
    let err = agent.call(Msg::user("hi")).await.unwrap_err();
    let model_err = err.model_error().expect("a model error");
    let cause = model_err
        .source()
        .expect("the transport keeps the HTTP client's error");
    assert!(
        !cause.to_string().is_empty() && model_err.message().contains("127.0.0.1"),
        "{model_err}: {cause}"
    );
}
