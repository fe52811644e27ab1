use std::fs;
use std::path::{Path, PathBuf};

use super::spec::{
    DeclarationSpec, SpecError, SpecErrorKind, ToolsPolicy, dir_fingerprint, scan_subagents_dir,
};

/// A scratch directory (`tempfile`): its path, and the guard that removes it on drop.
struct TempDir(PathBuf, #[allow(dead_code)] tempfile::TempDir);

impl TempDir {
    fn new(label: &str) -> Self {
        let guard = tempfile::Builder::new()
            .prefix(&format!("rein-spec-{label}-"))
            .tempdir()
            .expect("create temp dir");
        TempDir(guard.path().to_path_buf(), guard)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        fs::write(&path, text).expect("write temp file");
        path
    }
}

fn md(name: &str, text: &str) -> Result<DeclarationSpec, SpecError> {
    DeclarationSpec::parse_markdown(&Path::new("subagents").join(name), text)
}

fn md_err(text: &str) -> SpecError {
    md("reviewer.md", text).expect_err("expected a parse error")
}

fn json_err(text: &str) -> SpecError {
    ToolsPolicy::parse(Path::new("tools.json"), text).expect_err("expected a parse error")
}

fn assert_err(err: &SpecError, kind: SpecErrorKind, line: Option<usize>, key: Option<&str>) {
    assert_eq!(
        (err.kind(), err.line(), err.key()),
        (kind, line, key),
        "unexpected error: {err}"
    );
}

// ---------------------------------------------------------------------------------------------
// Markdown declarations
// ---------------------------------------------------------------------------------------------

#[test]
fn valid_file_with_list_tools_parses_every_field() {
    let text = "---\n\
                description: Reviews pull requests\n\
                tools:\n  - read_file\n  - ' grep '\n  - read_file\n\
                model: small-model\n\
                steps: 12\n\
                temperature: 0.2\n\
                top_p: 1\n\
                ---\n\
                \n  You review code.\n\nBe terse.\n\n";
    let spec = md("reviewer.md", text).expect("valid declaration");
    assert_eq!(
        spec,
        DeclarationSpec {
            id: "reviewer".into(),
            description: "Reviews pull requests".into(),
            tools: vec!["read_file".into(), "grep".into()],
            model: Some("small-model".into()),
            steps: Some(12),
            temperature: Some(0.2),
            top_p: Some(1.0),
            workspace: None,
            body: "You review code.\n\nBe terse.".into(),
        }
    );
}

#[test]
fn comma_separated_tools_string_is_split_and_trimmed() {
    let spec = md(
        "a.md",
        "---\ndescription: d\ntools: read_file,  grep ,write_file\n---\nbody",
    )
    .expect("valid declaration");
    assert_eq!(spec.tools, ["read_file", "grep", "write_file"]);
}

#[test]
fn optional_keys_default_to_none_and_no_tools() {
    let spec = md("a.md", "---\ndescription: d\n---\nbody").expect("valid declaration");
    assert_eq!(
        (
            spec.tools.len(),
            spec.model,
            spec.steps,
            spec.temperature,
            spec.top_p
        ),
        (0, None, None, None, None)
    );
}

#[test]
fn missing_description_is_a_missing_key_error_naming_description() {
    let err = md_err("---\nmodel: m\n---\nbody");
    assert_err(&err, SpecErrorKind::MissingKey, None, Some("description"));
}

#[test]
fn empty_description_is_an_invalid_value() {
    let err = md_err("---\ndescription: '  '\n---\n");
    assert_err(
        &err,
        SpecErrorKind::InvalidValue,
        Some(2),
        Some("description"),
    );
}

#[test]
fn unknown_front_matter_key_is_an_error_naming_file_line_and_key() {
    let err = md_err("---\ndescription: d\nsteps: 3\n\ncolour: blue\n---\nbody");
    assert_err(&err, SpecErrorKind::UnknownKey, Some(5), Some("colour"));
    assert_eq!(err.file(), Path::new("subagents/reviewer.md"));
    assert!(err.message().contains("`top_p`"), "lists known keys: {err}");
}

#[test]
fn near_miss_keys_suggest_the_real_key() {
    for (key, meant) in [
        ("topP", "top_p"),
        ("maxIters", "steps"),
        ("max_iters", "steps"),
        ("Description", "description"),
    ] {
        let err = md_err(&format!("---\ndescription: d\n{key}: 1\n---\n"));
        assert_err(&err, SpecErrorKind::UnknownKey, Some(3), Some(key));
        assert!(
            err.message().contains(&format!("did you mean `{meant}`?")),
            "{err}"
        );
    }
}

#[test]
fn name_key_is_rejected_because_the_id_is_the_file_name() {
    let err = md_err("---\nname: other\ndescription: d\n---\n");
    assert_err(&err, SpecErrorKind::UnknownKey, Some(2), Some("name"));
    assert!(err.message().contains("file name"), "{err}");
}

#[test]
fn steps_given_as_a_string_is_an_invalid_value_naming_key_and_line() {
    let err = md_err("---\ndescription: d\nsteps: ten\n---\n");
    assert_err(&err, SpecErrorKind::InvalidValue, Some(3), Some("steps"));
    assert_eq!(
        err.to_string(),
        "subagents/reviewer.md:3: key `steps`: expected an integer from 1 to 1000, \
         found string \"ten\""
    );
}

#[test]
fn steps_outside_one_to_a_thousand_is_an_invalid_value() {
    for steps in ["0", "1001", "-3", "2.5"] {
        let err = md_err(&format!("---\ndescription: d\nsteps: {steps}\n---\n"));
        assert_err(&err, SpecErrorKind::InvalidValue, Some(3), Some("steps"));
    }
}

#[test]
fn temperature_out_of_range_is_an_invalid_value_naming_key_and_line() {
    let err = md_err("---\ndescription: d\n\ntemperature: 2.5\n---\n");
    assert_err(
        &err,
        SpecErrorKind::InvalidValue,
        Some(4),
        Some("temperature"),
    );
    assert!(err.message().contains("2.5"), "{err}");
}

#[test]
fn top_p_must_be_above_zero_and_at_most_one() {
    for top_p in ["0", "1.5", "'0.5'"] {
        let err = md_err(&format!("---\ndescription: d\ntop_p: {top_p}\n---\n"));
        assert_err(&err, SpecErrorKind::InvalidValue, Some(3), Some("top_p"));
    }
}

#[test]
fn tools_of_the_wrong_type_names_the_key_with_the_expected_shape() {
    let err = md_err("---\ndescription: d\ntools: 3\n---\n");
    assert_err(&err, SpecErrorKind::InvalidValue, Some(3), Some("tools"));
    assert_eq!(
        err.to_string(),
        "subagents/reviewer.md:3: key `tools`: expected a list of tool names or a \
         comma-separated string, found integer `3`"
    );
}

#[test]
fn empty_tool_entries_are_errors_at_their_own_line() {
    let err = md_err("---\ndescription: d\ntools:\n  - a\n  - ''\n---\n");
    assert_err(&err, SpecErrorKind::InvalidValue, Some(5), Some("tools"));
    let err = md_err("---\ndescription: d\ntools: a,,b\n---\n");
    assert_err(&err, SpecErrorKind::InvalidValue, Some(3), Some("tools"));
}

#[test]
fn null_values_are_invalid_values() {
    let err = md_err("---\ndescription: d\nmodel:\n---\n");
    assert_err(&err, SpecErrorKind::InvalidValue, Some(3), Some("model"));
    assert!(err.message().ends_with("found null"), "{err}");
}

#[test]
fn repeated_key_is_an_error_at_the_repetition() {
    let err = md_err("---\ndescription: d\nsteps: 2\nsteps: 3\n---\n");
    assert_err(&err, SpecErrorKind::InvalidValue, Some(4), Some("steps"));
}

#[test]
fn malformed_yaml_is_reported_at_its_file_line() {
    let err = md_err("---\ndescription: d\ntools: [a, b\n---\n");
    assert_eq!(err.kind(), SpecErrorKind::MalformedYaml, "{err}");
    assert!(matches!(err.line(), Some(3..=5)), "{err}");
    let err = md_err("---\ndescription: d\n  bad: indent: here\n---\n");
    assert_err(&err, SpecErrorKind::MalformedYaml, Some(3), None);
    assert!(
        err.message().contains("at line 3 column"),
        "file lines in message: {err}"
    );
}

#[test]
fn tagged_yaml_values_are_invalid_values_naming_the_key() {
    let err = md_err("---\ndescription: d\ntools: !custom a\n---\n");
    assert_err(&err, SpecErrorKind::InvalidValue, Some(3), Some("tools"));
}

#[test]
fn empty_or_non_mapping_front_matter_is_an_error() {
    assert_eq!(md_err("---\n---\nbody").kind(), SpecErrorKind::MissingKey);
    assert_eq!(
        md_err("---\n# only a comment\n---\n").kind(),
        SpecErrorKind::MissingKey
    );
    let err = md_err("---\n- description\n---\nbody");
    assert_err(&err, SpecErrorKind::InvalidValue, Some(2), None);
    assert_eq!(
        md_err("---\njust text\n---\n").kind(),
        SpecErrorKind::InvalidValue
    );
}

#[test]
fn missing_closing_fence_is_missing_front_matter_on_line_one() {
    let err = md_err("---\ndescription: d\n\nbody without a fence\n");
    assert_err(&err, SpecErrorKind::MissingFrontMatter, Some(1), None);
}

#[test]
fn missing_opening_fence_is_missing_front_matter_on_line_one() {
    let err = md_err("description: d\n---\nbody\n");
    assert_err(&err, SpecErrorKind::MissingFrontMatter, Some(1), None);
    assert_eq!(md_err("").kind(), SpecErrorKind::MissingFrontMatter);
}

#[test]
fn empty_body_is_allowed() {
    let spec = md("a.md", "---\ndescription: d\n---").expect("valid declaration");
    assert_eq!(spec.body, "");
    let spec = md("a.md", "---\ndescription: d\n---\n\n  \n").expect("valid declaration");
    assert_eq!(spec.body, "");
}

#[test]
fn crlf_line_endings_and_a_bom_are_accepted() {
    let text = "\u{feff}---\r\ndescription: d\r\ntools: [a, b]\r\n---\r\nline one\r\nline two\r\n";
    let spec = md("a.md", text).expect("valid declaration");
    assert_eq!(spec.description, "d");
    assert_eq!(spec.tools, ["a", "b"]);
    assert_eq!(spec.body, "line one\r\nline two");
}

#[test]
fn crlf_and_bom_files_still_report_file_lines() {
    let err = md_err("\u{feff}---\r\ndescription: d\r\n\r\nsteps: x\r\n---\r\n");
    assert_err(&err, SpecErrorKind::InvalidValue, Some(4), Some("steps"));
}

#[test]
fn invalid_file_names_are_invalid_id_errors() {
    for name in ["bad id.md", ".md", "ünï.md", "a/b:c.md"] {
        let err = md(name, "---\ndescription: d\n---\n").expect_err("invalid id");
        assert_eq!(err.kind(), SpecErrorKind::InvalidId, "{name}: {err}");
    }
    let spec = md("code-review_v1.2.md", "---\ndescription: d\n---\n").expect("valid id");
    assert_eq!(spec.id, "code-review_v1.2");
}

#[test]
fn display_names_file_line_and_key_when_known() {
    let err = md_err("---\ndescription: d\ntopP: 0.5\n---\n");
    assert_eq!(
        err.to_string(),
        "subagents/reviewer.md:3: key `topP`: unknown key; did you mean `top_p`?"
    );
    let err = md_err("---\nsteps: 1\n---\n");
    assert_eq!(
        err.to_string(),
        "subagents/reviewer.md: key `description`: required key is missing"
    );
    let err = md_err("no fence");
    assert!(
        err.to_string()
            .starts_with("subagents/reviewer.md:1: expected"),
        "{err}"
    );
    let boxed: Box<dyn std::error::Error> = Box::new(err);
    assert!(!boxed.to_string().is_empty());
}

// ---------------------------------------------------------------------------------------------
// tools.json
// ---------------------------------------------------------------------------------------------

#[test]
fn valid_tools_json_parses_and_dedupes_keeping_first_order() {
    let policy = ToolsPolicy::parse(
        Path::new("tools.json"),
        r#"{"allow": ["b", "a", "b"], "deny": ["x", "x"]}"#,
    )
    .expect("valid policy");
    assert_eq!(policy.allow, ["b", "a"]);
    assert_eq!(policy.deny, ["x"]);
}

#[test]
fn empty_tools_json_object_is_the_default_policy() {
    let policy = ToolsPolicy::parse(Path::new("tools.json"), "\u{feff} { } ").expect("valid");
    assert_eq!(policy, ToolsPolicy::default());
}

#[test]
fn unknown_tools_json_key_is_an_error_naming_key_and_line() {
    let err = json_err("{\n  \"allow\": [\"a\"],\n  \"skills\": {}\n}");
    assert_err(&err, SpecErrorKind::UnknownKey, Some(3), Some("skills"));
    let err = json_err("{\n\n\"denylist\": []}");
    assert_err(&err, SpecErrorKind::UnknownKey, Some(3), Some("denylist"));
    assert!(err.message().contains("did you mean `deny`?"), "{err}");
}

#[test]
fn malformed_tools_json_is_an_error_with_its_line() {
    let err = json_err("{\n  \"allow\": [\"a\",]\n}");
    assert_err(&err, SpecErrorKind::MalformedJson, Some(2), None);
    let err = json_err("{\"allow\": []}\n{}");
    assert_err(&err, SpecErrorKind::MalformedJson, Some(2), None);
    assert_eq!(json_err("").kind(), SpecErrorKind::MalformedJson);
}

#[test]
fn non_string_tools_json_entry_is_an_invalid_value_naming_key_and_line() {
    let err = json_err("{\n  \"deny\": [\n    \"a\",\n    7\n  ]\n}");
    assert_err(&err, SpecErrorKind::InvalidValue, Some(4), Some("deny"));
    let err = json_err("{\"allow\": [\"\"]}");
    assert_err(&err, SpecErrorKind::InvalidValue, Some(1), Some("allow"));
    let err = json_err("{\"allow\": \"a,b\"}");
    assert_err(&err, SpecErrorKind::InvalidValue, Some(1), Some("allow"));
    let err = json_err("{\"allow\": null}");
    assert_err(&err, SpecErrorKind::InvalidValue, Some(1), Some("allow"));
    let err = json_err("{\"allow\": [], \"allow\": []}");
    assert_err(&err, SpecErrorKind::InvalidValue, Some(1), Some("allow"));
}

#[test]
fn tools_json_top_level_must_be_an_object() {
    for text in ["[\"a\"]", "null", "\"allow\""] {
        let err = json_err(text);
        assert_err(&err, SpecErrorKind::InvalidValue, Some(1), None);
    }
}

#[test]
fn loading_a_missing_tools_json_is_none() {
    let dir = TempDir::new("tools-missing");
    assert_eq!(ToolsPolicy::load(&dir.0.join("tools.json")), Ok(None));
}

#[test]
fn loading_an_existing_tools_json_parses_it_and_names_the_path_in_errors() {
    let dir = TempDir::new("tools-load");
    let path = dir.write("tools.json", r#"{"deny": ["shell"]}"#);
    let policy = ToolsPolicy::load(&path).expect("loads").expect("exists");
    assert_eq!(policy.deny, ["shell"]);
    let path = dir.write("tools.json", "{\"nope\": 1}");
    let err = ToolsPolicy::load(&path).expect_err("unknown key");
    assert_eq!(err.file(), path);
}

#[test]
fn unreadable_tools_json_is_an_io_error_not_no_policy() {
    let dir = TempDir::new("tools-unreadable");
    let path = dir.0.join("tools.json");
    fs::create_dir(&path).expect("create dir");
    let err = ToolsPolicy::load(&path).expect_err("a directory is not a policy");
    assert_err(&err, SpecErrorKind::Io, None, None);
    assert_eq!(err.file(), path);
}

// ---------------------------------------------------------------------------------------------
// ToolsPolicy::permits
// ---------------------------------------------------------------------------------------------

fn policy(allow: &[&str], deny: &[&str]) -> ToolsPolicy {
    ToolsPolicy {
        allow: allow.iter().map(|s| s.to_string()).collect(),
        deny: deny.iter().map(|s| s.to_string()).collect(),
        ..ToolsPolicy::default()
    }
}

#[test]
fn deny_beats_allow_and_the_delegation_tool() {
    let p = policy(&["shell", "agent_spawn"], &["shell", "agent_spawn"]);
    assert!(!p.permits("shell", "agent_spawn"));
    assert!(!p.permits("agent_spawn", "agent_spawn"));
}

#[test]
fn non_empty_allow_keeps_listed_tools_and_the_delegation_tool_only() {
    let p = policy(&["read_file"], &[]);
    assert!(p.permits("read_file", "agent_spawn"));
    assert!(p.permits("agent_spawn", "agent_spawn"));
    assert!(!p.permits("shell", "agent_spawn"));
}

#[test]
fn empty_allow_permits_everything_not_denied() {
    let p = policy(&[], &["shell"]);
    assert!(p.permits("read_file", "agent_spawn"));
    assert!(p.permits("agent_spawn", "agent_spawn"));
    assert!(!p.permits("shell", "agent_spawn"));
    assert!(ToolsPolicy::default().permits("anything", "agent_spawn"));
}

// ---------------------------------------------------------------------------------------------
// Directory scan
// ---------------------------------------------------------------------------------------------

#[test]
fn scan_reads_only_md_files_sorted_by_name() {
    let dir = TempDir::new("scan-sorted");
    dir.write("zeta.md", "---\ndescription: z\n---\n");
    dir.write("alpha.md", "---\ndescription: a\n---\n");
    dir.write("notes.txt", "not a declaration");
    dir.write("README.markdown", "not a declaration");
    fs::create_dir(dir.0.join("nested.md")).expect("create dir");
    fs::create_dir(dir.0.join("sub")).expect("create dir");
    fs::write(dir.0.join("sub/inner.md"), "---\ndescription: i\n---\n").expect("write");
    let ids: Vec<String> = scan_subagents_dir(&dir.0)
        .expect("scan")
        .into_iter()
        .map(|r| r.expect("valid").id)
        .collect();
    assert_eq!(ids, ["alpha", "zeta"]);
}

#[test]
fn scan_isolates_per_file_errors() {
    let dir = TempDir::new("scan-errors");
    dir.write("a.md", "---\ndescription: a\n---\n");
    let bad = dir.write("b.md", "---\ndescription: b\nbogus: 1\n---\n");
    dir.write("c.md", "---\ndescription: c\n---\n");
    let results = scan_subagents_dir(&dir.0).expect("scan");
    assert_eq!(results.len(), 3);
    assert_eq!(results[0].as_ref().map(|s| s.id.as_str()), Ok("a"));
    let err = results[1].as_ref().expect_err("b is invalid");
    assert_err(err, SpecErrorKind::UnknownKey, Some(3), Some("bogus"));
    assert_eq!(err.file(), bad);
    assert_eq!(results[2].as_ref().map(|s| s.id.as_str()), Ok("c"));
}

#[test]
fn scanning_a_nonexistent_dir_yields_nothing() {
    let dir = TempDir::new("scan-missing");
    let missing = dir.0.join("subagents");
    assert_eq!(scan_subagents_dir(&missing), Ok(Vec::new()));
    assert_eq!(dir_fingerprint(&missing), Ok(Vec::new()));
}

#[test]
fn scanning_a_path_that_is_not_a_directory_is_an_io_error() {
    let dir = TempDir::new("scan-file");
    let file = dir.write("subagents", "");
    let err = scan_subagents_dir(&file).expect_err("not a directory");
    assert_err(&err, SpecErrorKind::Io, None, None);
    assert_eq!(
        dir_fingerprint(&file).map_err(|e| e.kind()),
        Err(SpecErrorKind::Io)
    );
}

#[test]
fn fingerprint_lists_md_files_sorted_and_changes_with_their_content() {
    let dir = TempDir::new("fingerprint");
    dir.write("b.md", "---\ndescription: b\n---\n");
    dir.write("a.md", "---\ndescription: a\n---\n");
    dir.write("c.txt", "ignored");
    let before = dir_fingerprint(&dir.0).expect("fingerprint");
    let names: Vec<&str> = before.iter().map(|(name, _, _)| name.as_str()).collect();
    assert_eq!(names, ["a.md", "b.md"]);
    assert_eq!(before[0].2, 23);
    dir.write("a.md", "---\ndescription: a longer one\n---\n");
    assert_ne!(dir_fingerprint(&dir.0).expect("fingerprint"), before);
}

mod mcp_servers {
    use std::path::Path;
    use std::time::Duration;

    use super::super::spec::{SpecErrorKind, ToolsPolicy};
    use crate::mcp::{McpServerConfig, McpTransport};

    fn env(name: &str) -> Option<String> {
        (name == "TOKEN").then(|| "s3cret".to_owned())
    }

    fn parse(text: &str) -> Result<ToolsPolicy, super::super::spec::SpecError> {
        ToolsPolicy::parse_with_env(Path::new("ws/tools.json"), text, env)
    }

    #[test]
    fn stdio_and_http_servers_parse_with_substitution_and_defaults() {
        let p = parse(
            r#"{"allow": ["a"], "mcpServers": {
                "files": {"transport": "stdio", "command": "npx", "args": ["-y", "${TOKEN}"],
                          "env": {"T": "x-${TOKEN}-y"}, "timeout_seconds": 2.5,
                          "enable_tools": ["read"]},
                "web": {"url": "https://h/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}}
            }}"#,
        )
        .unwrap();
        let ids: Vec<&String> = p.mcp_servers.keys().collect();
        assert_eq!(ids, ["files", "web"]);
        let files = &p.mcp_servers["files"];
        assert_eq!(
            files.transport(),
            &McpTransport::Stdio {
                command: "npx".into(),
                args: vec!["-y".into(), "s3cret".into()],
                env: vec![("T".into(), "x-s3cret-y".into())],
            }
        );
        assert_eq!(files.call_timeout(), Duration::from_millis(2500));
        assert_eq!(files.enabled_tools(), Some(&["read".to_owned()][..]));
        let web = &p.mcp_servers["web"];
        assert_eq!(
            *web,
            McpServerConfig::http("https://h/mcp").header("Authorization", "Bearer s3cret")
        );
        assert!(!format!("{web:?}").contains("s3cret"), "Debug hides values");
    }

    #[test]
    fn mistakes_are_errors_naming_line_and_dotted_key() {
        let cases: &[(&str, SpecErrorKind, &str, usize)] = &[
            (
                "{\"mcpServers\": {\"s\": {\n\"command\": \"x\", \"timeout\": 3}}}",
                SpecErrorKind::UnknownKey,
                "timeout",
                2,
            ),
            (
                "{\"mcpServers\": {\"s\": {\n\"command\": 3}}}",
                SpecErrorKind::InvalidValue,
                "mcpServers.s.command",
                2,
            ),
            (
                "{\"mcpServers\": {\"s\": {\"command\": \"x\",\n\"env\": {\"A\": \"${NOPE}\"}}}}",
                SpecErrorKind::MissingEnvVar,
                "mcpServers.s.env.A",
                2,
            ),
            (
                "{\"mcpServers\": {\"s\": {\"transport\": \"http\",\n\"command\": \"x\"}}}",
                SpecErrorKind::InvalidValue,
                "mcpServers.s.command",
                2,
            ),
            (
                "{\"mcpServers\": {\"s\": {\"transport\": \"sse\"}}}",
                SpecErrorKind::InvalidValue,
                "mcpServers.s.transport",
                1,
            ),
            (
                "{\"mcpServers\": {\"s\": {\"command\": \"x\", \"enable_tools\": []}}}",
                SpecErrorKind::InvalidValue,
                "mcpServers.s.enable_tools",
                1,
            ),
            (
                "{\"mcpServers\": {\"a__b\": {\"command\": \"x\"}}}",
                SpecErrorKind::InvalidValue,
                "mcpServers",
                1,
            ),
        ];
        for (text, kind, key, line) in cases {
            let err = parse(text).unwrap_err();
            assert_eq!(err.kind(), *kind, "{err}");
            assert_eq!(err.key(), Some(*key), "{err}");
            assert_eq!(err.line(), Some(*line), "{err}");
            assert!(err.to_string().starts_with("ws/tools.json:"), "{err}");
        }
        let missing = parse(r#"{"mcpServers": {"s": {"env": {"X": "${NOPE}"}}}}"#).unwrap_err();
        assert!(missing.to_string().contains("`NOPE`"), "{missing}");
    }
}
