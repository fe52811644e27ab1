//! MCP servers that attack the client: an endless or oversized tool listing, a 17 MB
//! tool result, JSON nested 200 levels deep, a flood of stderr. The server is `tests/fixtures/hostile_mcp.js`
//! run with `node` over stdio (skipped, saying so, when `node` is not installed).
//! Time bounds are generous: "well under" the 30 s connect / 60 s call timeouts.

use std::time::{Duration, Instant};

use rein::hooks::{MaskingConfig, MaskingHook, SensitiveDataMasker};
use rein::mcp::{McpLimits, McpServerConfig};
use rein::*;
use serde_json::json;

use crate::support::mcp::hostile;
use crate::support::*;

/// Builds an agent with the server as `id`; returns the error and how long it took.
async fn failed_build(id: &str, config: McpServerConfig) -> (BuildError, Duration) {
    let model = ScriptedModel::new([ScriptedTurn::text("unused")]);
    let started = Instant::now();
    let result = builder(&model).mcp_server(id, config).build_async().await;
    let elapsed = started.elapsed();
    match result {
        Ok(_) => panic!("the build succeeded"),
        Err(e) => (e, elapsed),
    }
}

fn assert_names(e: &BuildError, parts: &[&str]) {
    assert_eq!(e.kind(), BuildErrorKind::Mcp, "{e}");
    let text = e.to_string();
    for part in parts {
        assert!(text.contains(part), "`{part}` missing from: {text}");
    }
}

#[tokio::test]
async fn an_endless_tools_list_fails_the_build_naming_the_server_and_the_limit() {
    let Some(config) = hostile("endless") else {
        return;
    };
    // Default limits: the first page of 2,000 tools is over `max_tools`.
    let (e, elapsed) = failed_build("endless", config.clone()).await;
    assert_names(&e, &["`endless`", "`max_tools` (1024)"]);
    assert!(elapsed < Duration::from_secs(15), "{elapsed:?}");
    // With room for the tools, the pages run out.
    let roomy = McpLimits::new()
        .max_tools(usize::MAX)
        .max_list_bytes(usize::MAX)
        .max_list_pages(3);
    let (e, elapsed) = failed_build("endless", config.clone().limits(roomy)).await;
    assert_names(
        &e,
        &["`endless`", "`max_list_pages` (3 pages)", "nextCursor"],
    );
    assert!(elapsed < Duration::from_secs(15), "{elapsed:?}");
    // And with room for the pages, the bytes do.
    let roomy = McpLimits::new().max_tools(usize::MAX).max_list_pages(1000);
    let (e, _) = failed_build("endless", config.limits(roomy)).await;
    assert_names(&e, &["`endless`", "`max_list_bytes` (8388608 bytes)"]);
}

#[tokio::test]
async fn a_listing_within_raised_limits_builds_and_offers_every_tool() {
    let Some(config) = hostile("many") else {
        return;
    };
    let (e, _) = failed_build("many", config.clone()).await;
    assert_names(&e, &["`many`", "`max_tools`"]);
    let model = ScriptedModel::new([ScriptedTurn::text("done")]);
    let agent = builder(&model)
        .mcp_server("many", config.limits(McpLimits::new().max_tools(2000)))
        .build_async()
        .await
        .unwrap();
    agent.call(Msg::user("hi")).await.unwrap();
    assert_eq!(model.requests()[0].tools.len(), 2000);
}

#[tokio::test]
async fn an_input_schema_nested_200_levels_fails_the_build_naming_the_server_and_the_tool() {
    let Some(config) = hostile("deep-schema") else {
        return;
    };
    let (e, elapsed) = failed_build("deep", config).await;
    assert_names(
        &e,
        &[
            "`deep`",
            "tool `deep`",
            "too deep",
            "64 levels",
            "`max_json_depth`",
        ],
    );
    assert!(elapsed < Duration::from_secs(15), "{elapsed:?}");
}

/// Calls `tool` on the `calls` server, then `echo`; returns the two results the model
/// saw and how long the run took.
async fn call_then_echo(tool: &str) -> Option<(Vec<(String, bool, String)>, Duration)> {
    let config = hostile("calls")?;
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call(format!("mcp__hostile__{tool}"), json!({})),
        ScriptedTurn::tool_call("mcp__hostile__echo", json!({"message": "still here"})),
        ScriptedTurn::text("done"),
    ]);
    let agent = builder(&model)
        .mcp_server("hostile", config)
        .build_async()
        .await
        .unwrap();
    let started = Instant::now();
    agent.call(Msg::user("go")).await.unwrap();
    let elapsed = started.elapsed();
    let mut results = results_in_request(&model, 1);
    results.extend(results_in_request(&model, 2).into_iter().skip(1));
    Some((results, elapsed))
}

#[tokio::test]
async fn a_17_mb_tool_result_is_an_error_result_saying_too_large_well_under_the_call_timeout() {
    let Some((results, elapsed)) = call_then_echo("huge").await else {
        return;
    };
    let (_, is_error, text) = &results[0];
    assert!(*is_error, "{text}");
    for part in [
        "`hostile`",
        "tool `huge`",
        "too large",
        "`max_message_bytes`",
    ] {
        assert!(text.contains(part), "`{part}` missing from: {text}");
    }
    assert!(
        elapsed < Duration::from_secs(20),
        "well under the 60 s call timeout: {elapsed:?}"
    );
    assert_eq!(
        results[1],
        (results[1].0.clone(), false, "echo: still here".to_owned()),
        "the connection is kept"
    );
}

#[tokio::test]
async fn a_tool_result_nested_200_levels_is_an_error_result_saying_too_deep() {
    let Some((results, elapsed)) = call_then_echo("deep").await else {
        return;
    };
    let (_, is_error, text) = &results[0];
    assert!(*is_error, "{text}");
    for part in ["`hostile`", "tool `deep`", "too deep", "`max_json_depth`"] {
        assert!(text.contains(part), "`{part}` missing from: {text}");
    }
    assert!(elapsed < Duration::from_secs(20), "{elapsed:?}");
    assert_eq!(results[1].2, "echo: still here");
}

#[tokio::test]
async fn limits_outside_their_range_fail_the_build_naming_the_limit() {
    let config = McpServerConfig::stdio("node");
    for (limits, name) in [
        (McpLimits::new().max_json_depth(500), "`max_json_depth`"),
        (McpLimits::new().max_tools(0), "`max_tools`"),
        (
            McpLimits::new().max_message_bytes(64 << 20),
            "`max_message_bytes`",
        ),
    ] {
        let (e, _) = failed_build("s", config.clone().limits(limits)).await;
        assert_names(&e, &["`s`", name]);
    }
}

/// The process's resident set size now and at its peak (`VmRSS`, `VmHWM`), in bytes.
#[cfg(target_os = "linux")]
fn rss() -> (usize, usize) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let field = |name: &str| -> usize {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
            .unwrap()
            * 1024
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Set in the process that runs the stderr flood alone.
#[cfg(target_os = "linux")]
const FLOOD_CHILD: &str = "REIN_TEST_STDERR_FLOOD_CHILD";

#[cfg(target_os = "linux")]
#[tokio::test]
async fn an_mcp_server_flooding_stderr_cannot_grow_the_agent_and_calls_still_work() {
    let Some(config) = hostile("stderr") else {
        return;
    };
    // Measured in a process of its own: tests running in parallel would move its RSS.
    if std::env::var_os(FLOOD_CHILD).is_none() {
        let name = "mcp::hostile::an_mcp_server_flooding_stderr_cannot_grow_the_agent_and_calls_still_work";
        let out = crate::support::worker::worker(name)
            .env(FLOOD_CHILD, "1")
            .output()
            .unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        eprint!("{stderr}");
        assert!(out.status.success(), "{stdout}\n{stderr}");
        assert!(stdout.contains("1 passed"), "the test ran: {stdout}");
        return;
    }
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("mcp__flood__flood", json!({})),
        ScriptedTurn::tool_call("mcp__flood__echo", json!({"message": "still here"})),
        ScriptedTurn::text("done"),
    ]);
    let agent = builder(&model)
        .mcp_server("flood", config.timeout(Duration::from_secs(30)))
        .build_async()
        .await
        .unwrap();
    let (now_before, peak_before) = rss();
    let started = Instant::now();
    agent.call(Msg::user("go")).await.unwrap();
    let elapsed = started.elapsed();
    let (now_after, peak_after) = rss();
    // The server wrote 96 MiB in one 64 MiB line and 512 lines of 64 KiB.
    let peak = peak_after.saturating_sub(peak_before);
    eprintln!("stderr flood: peak RSS grew {peak} bytes; the calls took {elapsed:?}");
    assert!(peak < 32 << 20, "peak RSS grew {peak} bytes");
    assert!(
        now_after.saturating_sub(now_before) < 32 << 20,
        "RSS grew {} bytes",
        now_after.saturating_sub(now_before)
    );
    let mut results = results_in_request(&model, 1);
    results.extend(results_in_request(&model, 2).into_iter().skip(1));
    // The pipe kept draining: the server finished writing and answered, well before
    // its call timeout.
    assert_eq!(
        results
            .iter()
            .map(|r| (r.1, r.2.as_str()))
            .collect::<Vec<_>>(),
        [(false, "flooded"), (false, "echo: still here")]
    );
    assert!(elapsed < Duration::from_secs(25), "{elapsed:?}");
}

#[tokio::test]
async fn personal_data_in_non_text_mcp_content_is_masked_before_memory_and_the_model() {
    let Some(config) = hostile("calls") else {
        return;
    };
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("mcp__hostile__pii", json!({})),
        ScriptedTurn::tool_call("mcp__hostile__pii-structured", json!({})),
        ScriptedTurn::text("done"),
    ]);
    let masker = SensitiveDataMasker::builder().build().unwrap();
    let masking = MaskingHook::new(
        MaskingConfig {
            enabled: true,
            mask_tool_results: true,
            ..MaskingConfig::default()
        },
        masker.clone(),
    );
    let agent = builder(&model)
        .mcp_server("hostile", config)
        .hook(masking)
        .build_async()
        .await
        .unwrap();
    agent.call(Msg::user("go")).await.unwrap();
    let mut results = results_in_request(&model, 1);
    results.extend(results_in_request(&model, 2).into_iter().skip(1));
    assert_eq!(results.len(), 2);
    let stored: Vec<String> = agent
        .messages(&key("default"))
        .await
        .iter()
        .flat_map(|m| m.tool_results().into_iter().map(|r| r.content.clone()))
        .collect();
    assert_eq!(stored.len(), 2);
    for text in results.iter().map(|r| &r.2).chain(&stored) {
        for secret in ["123-45-6789", "4111111111111111", "li.lei@example.com"] {
            assert!(
                !text.contains(secret),
                "`{secret}` reached the model or memory: {text}"
            );
        }
        assert!(masker.find(text).is_empty(), "{text}");
        assert!(text.contains("***"), "{text}");
    }
    // Masking works on the decoded strings: the rendered JSON stays valid JSON.
    let structured: serde_json::Value = serde_json::from_str(&results[1].2).unwrap();
    assert_eq!(structured["customer"]["notes"][0], "SSN:\n***\ncard:\n***");
    assert_eq!(structured["customer"]["contact"], "\t***");
}
