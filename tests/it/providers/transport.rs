//! Transport behaviour every provider shares (timeouts, retries, typed errors, broken
//! streams), checked on each enabled wire format against the local server.

use std::time::{Duration, Instant};

use rein::*;
use serde_json::json;

use crate::providers::mock::*;

fn hello() -> Turn {
    Turn {
        text: vec!["Hel", "lo", "!"],
        usage: (7, 3),
        ..Turn::default()
    }
}

fn error_body(message: &str) -> serde_json::Value {
    json!({"type": "error", "error": {"type": "some_error", "message": message}})
}

#[tokio::test]
async fn a_429_is_retried_after_exactly_the_wait_the_server_asks_for() {
    for wire in wires() {
        let server = MockServer::start([
            Reply::json(429, error_body("slow down")).header("retry-after-ms", "40"),
            Reply::sse(&wire.events(&hello())),
        ])
        .await;
        let model = wire.model(&server, fast_http(3));
        let start = Instant::now();
        let (chunks, err) = collect(&*model, ask("hi")).await;
        assert!(err.is_none(), "{}: {err:?}", wire.name());
        assert_eq!(text_of(&chunks), "Hello!");
        assert!(
            start.elapsed() >= Duration::from_millis(40),
            "{}",
            wire.name()
        );
        assert_eq!(server.requests().len(), 2);
    }
}

#[tokio::test]
async fn a_retry_after_longer_than_the_cap_ends_the_call_at_once_with_a_rate_limit_error() {
    for wire in wires() {
        let server = MockServer::start([
            Reply::json(429, error_body("quota")).header("Retry-After", "3600"),
            Reply::sse(&wire.events(&hello())),
        ])
        .await;
        let (_, err) = collect(&*wire.model(&server, fast_http(3)), ask("hi")).await;
        let err = err.unwrap();
        assert_eq!(err.kind(), ModelErrorKind::RateLimit, "{}", wire.name());
        assert!(err.message().contains("quota"), "{err}");
        assert!(err.message().contains("3600s"), "{err}");
        assert_eq!(server.requests().len(), 1);
    }
}

#[tokio::test]
async fn three_500s_give_up_with_a_server_error_after_the_configured_three_attempts() {
    for wire in wires() {
        let server = MockServer::start([
            Reply::json(500, error_body("boom 1")),
            Reply::json(502, error_body("boom 2")),
            Reply::json(500, error_body("boom 3")),
            Reply::sse(&wire.events(&hello())),
        ])
        .await;
        let (chunks, err) = collect(&*wire.model(&server, fast_http(3)), ask("hi")).await;
        let err = err.unwrap();
        assert!(chunks.is_empty());
        assert_eq!(err.kind(), ModelErrorKind::Server, "{}", wire.name());
        assert!(err.message().contains("boom 3"), "{err}");
        assert_eq!(server.requests().len(), 3, "{}", wire.name());
    }
}

#[tokio::test]
async fn a_401_and_a_403_are_authentication_errors_that_are_not_retried() {
    for wire in wires() {
        for status in [401, 403] {
            let server = MockServer::start([
                Reply::json(status, error_body("invalid x-api-key")),
                Reply::sse(&wire.events(&hello())),
            ])
            .await;
            let (_, err) = collect(&*wire.model(&server, fast_http(3)), ask("hi")).await;
            let err = err.unwrap();
            assert_eq!(
                err.kind(),
                ModelErrorKind::Authentication,
                "{}",
                wire.name()
            );
            assert!(err.message().contains("invalid x-api-key"), "{err}");
            assert!(err.message().contains(&status.to_string()), "{err}");
            assert_eq!(server.requests().len(), 1);
        }
    }
}

#[tokio::test]
async fn a_400_is_a_bad_request_error_carrying_the_servers_message_and_request_id() {
    for wire in wires() {
        let server = MockServer::start([Reply::json(400, error_body("messages: field required"))
            .header("x-request-id", "req_123")])
        .await;
        let (_, err) = collect(&*wire.model(&server, fast_http(3)), ask("hi")).await;
        let err = err.unwrap();
        assert_eq!(err.kind(), ModelErrorKind::BadRequest);
        assert!(err.message().contains("messages: field required"), "{err}");
        assert!(err.message().contains("req_123"), "{err}");
        assert_eq!(server.requests().len(), 1);
    }
}

#[tokio::test]
async fn a_stream_cut_mid_way_is_a_stream_error_after_the_delivered_chunks_and_is_not_retried() {
    for wire in wires() {
        let events = wire.events(&hello());
        let server = MockServer::start([
            Reply::sse(&events[..events.len() / 2 + 1]).cut(),
            Reply::sse(&events),
        ])
        .await;
        let (chunks, err) = collect(&*wire.model(&server, fast_http(3)), ask("hi")).await;
        let err = err.unwrap();
        assert_eq!(err.kind(), ModelErrorKind::Stream, "{}: {err}", wire.name());
        assert!(text_of(&chunks).starts_with("Hel"), "{}", wire.name());
        assert_eq!(server.requests().len(), 1, "{}", wire.name());
    }
}

#[tokio::test]
async fn a_stream_that_ends_cleanly_before_its_terminal_event_is_a_stream_error() {
    for wire in wires() {
        let events = wire.events(&hello());
        // Everything up to the last text delta: no finish reason, no terminal event.
        let upto = events.iter().rposition(|e| e.contains("\"lo\"")).unwrap() + 1;
        let server = MockServer::start([Reply::sse(&events[..upto])]).await;
        let (chunks, err) = collect(&*wire.model(&server, fast_http(3)), ask("hi")).await;
        let err = err.unwrap();
        assert_eq!(err.kind(), ModelErrorKind::Stream);
        assert!(err.message().contains("before its terminal event"), "{err}");
        assert_eq!(text_of(&chunks), "Hello");
        assert_eq!(server.requests().len(), 1, "{}", wire.name());
    }
}

#[tokio::test]
async fn a_connection_lost_before_any_content_chunk_is_retried() {
    for wire in wires() {
        let events = wire.events(&hello());
        let server = MockServer::start([Reply::sse(&events[..1]).cut(), Reply::sse(&events)]).await;
        let (chunks, err) = collect(&*wire.model(&server, fast_http(3)), ask("hi")).await;
        assert!(err.is_none(), "{}: {err:?}", wire.name());
        assert_eq!(text_of(&chunks), "Hello!");
        assert_eq!(server.requests().len(), 2);
    }
}

#[tokio::test]
async fn a_malformed_json_chunk_is_a_stream_error_quoting_the_payload() {
    for wire in wires() {
        let mut events = wire.events(&hello());
        let bad = wire.malformed_event();
        let pos = events.iter().position(|e| e.contains("Hel")).unwrap() + 1;
        events.insert(pos, bad);
        let server = MockServer::start([Reply::sse(&events), Reply::sse(&events)]).await;
        let (chunks, err) = collect(&*wire.model(&server, fast_http(3)), ask("hi")).await;
        let err = err.unwrap();
        assert_eq!(err.kind(), ModelErrorKind::Stream, "{}", wire.name());
        assert!(err.message().contains("malformed JSON"), "{err}");
        assert!(
            err.message().contains(r#"{"type": "content_block_delta""#)
                || err.message().contains(r#"{"choices": [{"index": 0"#),
            "{err}"
        );
        assert_eq!(text_of(&chunks), "Hel");
        assert_eq!(server.requests().len(), 1);
    }
}

#[tokio::test]
async fn a_long_malformed_payload_is_quoted_truncated() {
    for wire in wires() {
        let long = format!("data: {{\"junk\": \"{}\n\n", "x".repeat(5000));
        let server = MockServer::start([Reply::sse(&[long])]).await;
        let (_, err) = collect(&*wire.model(&server, fast_http(1)), ask("hi")).await;
        let err = err.unwrap();
        assert_eq!(err.kind(), ModelErrorKind::Stream);
        assert!(err.message().len() < 600, "{}", err.message().len());
        assert!(err.message().contains("xxxx…"), "{err}");
    }
}

#[tokio::test]
async fn invalid_utf8_in_the_event_stream_is_a_stream_error_not_a_panic() {
    for wire in wires() {
        let server =
            MockServer::start([Reply::sse::<&str>(&[]).raw(b"data: \xff\xfe oops\n\n")]).await;
        let (_, err) = collect(&*wire.model(&server, fast_http(1)), ask("hi")).await;
        let err = err.unwrap();
        assert_eq!(err.kind(), ModelErrorKind::Stream, "{}", wire.name());
        assert!(err.message().contains("UTF-8"), "{err}");
        assert!(err.message().contains("oops"), "{err}");
    }
}

#[tokio::test]
async fn events_split_across_network_chunks_are_reassembled() {
    for wire in wires() {
        let turn = Turn {
            text: vec!["Let me ", "add."],
            calls: vec![("call_1", "add", vec!["{\"a\": ", "1, \"b\": 2}"])],
            usage: (11, 4),
            ..Turn::default()
        };
        let server = MockServer::start([Reply::sse(&wire.events(&turn)).in_pieces_of(7)]).await;
        let (chunks, err) = collect(&*wire.model(&server, fast_http(1)), ask("hi")).await;
        assert!(err.is_none(), "{err:?}");
        assert_eq!(text_of(&chunks), "Let me add.");
        let args: String = chunks
            .iter()
            .filter_map(|c| match c {
                ModelChunk::ToolCall { arguments, .. } => Some(arguments.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(args, "{\"a\": 1, \"b\": 2}");
        assert!(chunks.contains(&ModelChunk::Finish(FinishReason::ToolCalls)));
    }
}

#[tokio::test]
async fn a_silent_stream_is_a_timeout_error_after_the_idle_timeout() {
    for wire in wires() {
        let events = wire.events(&hello());
        let server =
            MockServer::start([Reply::sse(&events).stall_after(3, Duration::from_millis(500))])
                .await;
        let http = HttpConfig {
            idle_timeout: Duration::from_millis(30),
            ..fast_http(1)
        };
        let start = Instant::now();
        let (_, err) = collect(&*wire.model(&server, http), ask("hi")).await;
        let err = err.unwrap();
        assert_eq!(err.kind(), ModelErrorKind::Timeout, "{}", wire.name());
        assert!(start.elapsed() < Duration::from_millis(400));
    }
}

#[tokio::test]
async fn headers_that_do_not_arrive_within_the_request_timeout_are_retried_then_a_timeout_error() {
    for wire in wires() {
        let slow = Reply::sse(&wire.events(&hello())).delay(Duration::from_secs(5));
        let server = MockServer::start([slow.clone(), slow]).await;
        let http = HttpConfig {
            request_timeout: Duration::from_millis(100),
            ..fast_http(2)
        };
        let (_, err) = collect(&*wire.model(&server, http), ask("hi")).await;
        let err = err.unwrap();
        assert_eq!(err.kind(), ModelErrorKind::Timeout, "{}", wire.name());
        assert_eq!(server.requests().len(), 2);
    }
}

#[tokio::test]
async fn an_unreachable_server_is_retried_then_reported_as_a_connection_failure() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    for wire in wires() {
        let server = MockServer::start([]).await.with_url(&url);
        let (_, err) = collect(&*wire.model(&server, fast_http(2)), ask("hi")).await;
        let err = err.unwrap();
        assert_eq!(err.kind(), ModelErrorKind::Other, "{}", wire.name());
        assert!(err.message().contains("could not connect"), "{err}");
    }
}

#[tokio::test]
async fn a_json_answer_instead_of_an_event_stream_is_a_stream_error_naming_the_body() {
    for wire in wires() {
        let server = MockServer::start([Reply::json(200, json!({"answer": "not streamed"}))]).await;
        let (_, err) = collect(&*wire.model(&server, fast_http(3)), ask("hi")).await;
        let err = err.unwrap();
        assert_eq!(err.kind(), ModelErrorKind::Stream);
        assert!(err.message().contains("not streamed"), "{err}");
        assert!(err.message().contains("application/json"), "{err}");
    }
}

#[tokio::test]
async fn requests_go_to_the_providers_path_as_a_json_post() {
    for wire in wires() {
        let server = MockServer::start([Reply::sse(&wire.events(&hello()))]).await;
        let _ = collect(&*wire.model(&server, fast_http(1)), ask("hi")).await;
        let req = &server.requests()[0];
        assert_eq!(req.method, "POST");
        assert_eq!(req.path, wire.path());
        assert_eq!(req.headers["content-type"], "application/json");
        assert_eq!(req.body["stream"], true);
    }
}

#[tokio::test]
async fn per_call_extra_headers_are_sent_and_an_invalid_one_is_a_bad_request() {
    for wire in wires() {
        let server = MockServer::start([Reply::sse(&wire.events(&hello()))]).await;
        let model = wire.model(&server, fast_http(1));
        let mut request = ask("hi");
        request
            .options
            .extra_headers
            .insert("x-trace".into(), "t-1".into());
        let (_, err) = collect(&*model, request.clone()).await;
        assert!(err.is_none());
        assert_eq!(server.requests()[0].headers["x-trace"], "t-1");

        request
            .options
            .extra_headers
            .insert("bad header".into(), "v".into());
        let (_, err) = collect(&*model, request).await;
        let err = err.unwrap();
        assert_eq!(err.kind(), ModelErrorKind::BadRequest);
        assert!(err.message().contains("bad header"), "{err}");
        assert_eq!(server.requests().len(), 1);
    }
}

/// reqwest is built without a crypto provider of its own (rein installs rustls's `ring`
/// before building a client): an `https` request must run a TLS handshake — here against
/// a server that answers in plain HTTP, so the handshake fails as a typed error carrying
/// rustls's message, not a panic.
#[tokio::test]
async fn an_https_request_runs_a_rustls_handshake_and_a_plain_http_answer_fails_it_typed() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        while let Ok((mut socket, _)) = listener.accept().await {
            let _ = socket
                .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                .await;
        }
    });
    for wire in wires() {
        let server = MockServer::start([]).await.with_url(&url);
        let (_, err) = collect(&*wire.model(&server, fast_http(1)), ask("hi")).await;
        let err = err.expect("a plain-HTTP answer cannot complete a TLS handshake");
        assert_eq!(err.kind(), ModelErrorKind::Other, "{}: {err}", wire.name());
        // rustls's own error: the answer is not a TLS record.
        assert!(
            err.message().contains("could not connect")
                && err.message().contains("received corrupt message"),
            "{}: {err}",
            wire.name()
        );
        let provider = rustls::crypto::CryptoProvider::get_default()
            .expect("rein installed a process-wide provider");
        assert!(!provider.cipher_suites.is_empty());
    }
}
