//! The fuzz targets' properties on stable, so CI exercises them without a nightly
//! toolchain: every checked-in corpus input (`fuzz/corpus/<target>/`), then random
//! inputs — raw bytes, seeds with byte-level mutations, and inputs assembled from the
//! formats' own vocabulary. Count: `REIN_FUZZ_CASES` per strategy (default 512).

use std::path::PathBuf;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

#[path = "../../../fuzz/checks.rs"]
#[allow(dead_code)]
mod checks;

#[cfg(all(feature = "openai", feature = "anthropic"))]
#[path = "../../../fuzz/sse_checks.rs"]
mod sse_checks;

type Check = fn(&[u8]);

/// The fuzz targets whose code is compiled in (`sse_decoders` needs both providers).
fn targets() -> Vec<(&'static str, Check)> {
    vec![
        ("markdown_declaration", checks::markdown_declaration),
        ("tools_json", checks::tools_json),
        ("session_file_names", checks::session_file_names),
        ("masker", checks::masker),
        #[cfg(all(feature = "openai", feature = "anthropic"))]
        ("sse_decoders", sse_checks::sse_decoders),
    ]
}

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect()
}

fn cases() -> u32 {
    std::env::var("REIN_FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(512)
}

fn runner() -> TestRunner {
    TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    })
}

#[derive(Clone, Debug)]
enum Edit {
    Flip(usize, u8),
    Insert(usize, u8),
    Delete(usize),
    Duplicate(usize, usize),
}

fn mutate(seed: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut out = seed.to_vec();
    for e in edits {
        let at = |i: usize, len: usize| if len == 0 { 0 } else { i % len };
        match *e {
            Edit::Flip(i, b) if !out.is_empty() => {
                let i = at(i, out.len());
                out[i] ^= b;
            }
            Edit::Insert(i, b) => {
                let i = at(i, out.len() + 1);
                out.insert(i, b);
            }
            Edit::Delete(i) if !out.is_empty() => {
                let i = at(i, out.len());
                out.remove(i);
            }
            Edit::Duplicate(i, n) if !out.is_empty() => {
                let i = at(i, out.len());
                let end = (i + n % 16).min(out.len());
                let piece = out[i..end].to_vec();
                out.splice(i..i, piece);
            }
            _ => {}
        }
    }
    out
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), 1u8..).prop_map(|(i, b)| Edit::Flip(i, b)),
        (
            any::<usize>(),
            prop::sample::select(b"-:\n\r \"'[],{}#&*!|>\\0\x7f".to_vec())
        )
            .prop_map(|(i, b)| Edit::Insert(i, b)),
        any::<usize>().prop_map(Edit::Delete),
        (any::<usize>(), any::<usize>()).prop_map(|(i, n)| Edit::Duplicate(i, n)),
    ]
}

#[test]
fn every_checked_in_corpus_input_satisfies_its_fuzz_target() {
    let mut total = 0;
    for (target, check) in targets() {
        let inputs = corpus(target);
        assert!(!inputs.is_empty(), "{target} has a seed corpus");
        for input in &inputs {
            check(input);
        }
        total += inputs.len();
    }
    eprintln!("fuzz corpus: {total} inputs replayed");
}

#[test]
fn mutated_seeds_never_break_a_fuzz_target_property() {
    for (target, check) in targets() {
        let seeds = corpus(target);
        let strategy = (
            prop::sample::select(seeds),
            prop::collection::vec(edit(), 1..8),
        );
        runner()
            .run(&strategy, |(seed, edits)| {
                check(&mutate(&seed, &edits));
                Ok(())
            })
            .unwrap_or_else(|e| panic!("{target}: {e}"));
    }
}

#[test]
fn random_bytes_never_break_a_fuzz_target_property() {
    for (target, check) in targets() {
        runner()
            .run(&prop::collection::vec(any::<u8>(), 0..256), |bytes| {
                check(&bytes);
                Ok(())
            })
            .unwrap_or_else(|e| panic!("{target}: {e}"));
    }
}

/// Front matter assembled from the format's keys, plausible and hostile values.
fn markdown() -> impl Strategy<Value = String> {
    let key = prop::sample::select(vec![
        "description",
        "tools",
        "model",
        "steps",
        "temperature",
        "top_p",
        "topP",
        "Description",
        "",
        "? complex",
    ]);
    let value = prop::sample::select(vec![
        "reviews code",
        "\"quoted: text\"",
        "'single'",
        "[a, b, a]",
        "a, b ,, c",
        "[ ]",
        "- x",
        "0",
        "1000",
        "1001",
        "-1",
        "0.5",
        "2.0000001",
        ".nan",
        ".inf",
        "1e3",
        "0x10",
        "~",
        "null",
        "true",
        "|\n  block\n  text",
        "&a anchor",
        "*a",
        "!!str 5",
        "{a: 1}",
        "\"\\u0085 nel\"",
        "\u{2028}",
        "   ",
    ]);
    (
        prop::collection::vec((key, value), 0..6),
        prop::bool::ANY,
        prop::sample::select(vec!["", "body", "\n---\nmore", "  spaced  "]),
    )
        .prop_map(|(pairs, crlf, body)| {
            let nl = if crlf { "\r\n" } else { "\n" };
            let mut s = format!("---{nl}");
            for (k, v) in pairs {
                s.push_str(&format!("{k}: {v}{nl}"));
            }
            s.push_str(&format!("---{nl}{body}"));
            s
        })
}

/// `tools.json` documents assembled from keys and values.
fn tools_json() -> impl Strategy<Value = String> {
    let key = prop::sample::select(vec!["allow", "deny", "alow", "Allow", ""]);
    let value = prop::sample::select(vec![
        "[]",
        "[\"a\"]",
        "[\" a \", \"a\"]",
        "[\"\"]",
        "[1]",
        "null",
        "\"a\"",
        "[\"\\u0000\"]",
        "[\"\\ud83e\\udd80\"]",
        "{}",
    ]);
    prop::collection::vec((key, value), 0..4).prop_map(|pairs| {
        let body: Vec<String> = pairs
            .into_iter()
            .map(|(k, v)| format!("\"{k}\": {v}"))
            .collect();
        format!("{{{}}}", body.join(", "))
    })
}

/// Text made of the pieces sensitive numbers and addresses are made of, with an
/// optional streaming split (a 0xFF byte).
fn masker_input() -> impl Strategy<Value = Vec<u8>> {
    let token = prop::sample::select(vec![
        "1", "3", "8", "0", "9", "5", "X", "x", "138", "0013", "8000", "6222", "110105",
        "19491231", "+86", "+", " ", "-", ".", "@", "_", "%", "a", "Z", "com", "mail", "\u{ff11}",
        "\u{ff13}", "\u{ff10}", "，", "\n", "（", "é",
    ]);
    (
        prop::collection::vec(token, 0..40),
        prop::option::of(0usize..40),
    )
        .prop_map(|(tokens, split)| {
            let mut out = Vec::new();
            for (i, t) in tokens.iter().enumerate() {
                if split == Some(i) {
                    out.push(0xFF);
                }
                out.extend_from_slice(t.as_bytes());
            }
            out
        })
}

#[test]
fn structured_inputs_never_break_the_parser_properties() {
    runner()
        .run(&masker_input(), |bytes| {
            checks::masker(&bytes);
            Ok(())
        })
        .unwrap_or_else(|e| panic!("masker: {e}"));
    runner()
        .run(&markdown(), |text| {
            checks::markdown_declaration(text.as_bytes());
            Ok(())
        })
        .unwrap_or_else(|e| panic!("markdown_declaration: {e}"));
    runner()
        .run(&tools_json(), |text| {
            checks::tools_json(text.as_bytes());
            Ok(())
        })
        .unwrap_or_else(|e| panic!("tools_json: {e}"));
}

/// Event streams assembled from the providers' field names, event types, payload
/// fragments and line ends (hostile numbers included).
#[cfg(all(feature = "openai", feature = "anthropic"))]
fn sse_stream() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop::sample::select(vec![
        "data: ",
        "data:",
        "event: ",
        ": ping",
        "id: 1",
        "retry: x",
        "\n",
        "\r\n",
        "\r",
        "\n\n",
        "\u{feff}",
        "[DONE]",
        "message_start",
        "content_block_delta",
        "message_stop",
        "ping",
        "error",
        r#"{"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":18446744073709551615,"id":"c","function":{"name":"add","arguments":"{"}}]}}]}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":18446744073709551615,"completion_tokens":-1}}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
        r#"{"type":"message_start","message":{"usage":{"input_tokens":18446744073709551615,"cache_read_input_tokens":9}}}"#,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"add","input":{"a":1}}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}}"#,
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":1e300}}"#,
        r#"{"type":"error","error":{"type":"overloaded_error","message":"busy"}}"#,
        r#"{"error":{"message":"no","code":429}}"#,
        "{\"",
        "}",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    ]);
    prop::collection::vec(piece, 0..24).prop_map(|p| p.concat().into_bytes())
}

#[cfg(all(feature = "openai", feature = "anthropic"))]
#[test]
fn structured_event_streams_never_break_the_sse_decoder_properties() {
    runner()
        .run(&sse_stream(), |bytes| {
            sse_checks::sse_decoders(&bytes);
            Ok(())
        })
        .unwrap_or_else(|e| panic!("sse_decoders: {e}"));
}
