//! The properties the fuzz targets check, shared by the cargo-fuzz targets
//! (`fuzz/fuzz_targets/*.rs`) and the stable test `tests/it/agent/fuzz_inputs.rs`.
//!
//! Each function takes arbitrary bytes and panics when a property fails:
//! - `markdown_declaration`: `DeclarationSpec::parse_markdown` never panics, is
//!   deterministic, names the file in every error, returns only values within the
//!   documented bounds, and what it accepts round-trips (rendered back to front matter,
//!   it parses to the same declaration).
//! - `tools_json`: `ToolsPolicy::parse` likewise (bounds: trimmed, non-empty,
//!   deduplicated names; round trip through JSON).
//! - `masker`: `SensitiveDataMasker` (default and `Partial` style) never panics; `find`
//!   returns sorted, non-overlapping, non-empty ranges on char boundaries; `mask` replaces
//!   exactly those ranges and borrows when there are none; and the documented streaming
//!   property holds: with `n = stable_prefix_len(text)`,
//!   `mask(text[..n]) + mask(text[n..] + more) == mask(text + more)`.
//! - `session_file_names`: `FileSessionStore::path_of` keeps every key inside the store
//!   directory, in a name with no separator and no leading dot, and distinct keys get
//!   distinct files.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use rein::hooks::{MaskStyle, SensitiveDataMasker};
use rein::subagent::spec::{DeclarationSpec, ToolsPolicy};
use rein::{FileSessionStore, SessionKey};

const MD_FILE: &str = "subagents/fuzz-agent.md";
const JSON_FILE: &str = "workspace/tools.json";

fn text(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}

/// Writes `s` as a YAML double-quoted scalar that every YAML parser reads back as `s`:
/// only printable ASCII is written as is; everything else is escaped.
fn yaml_quoted(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            ' '..='~' => out.push(c),
            c if u32::from(c) <= 0xFFFF => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push_str(&format!("\\U{:08X}", u32::from(c))),
        }
    }
    out.push('"');
    out
}

/// A float as a plain YAML decimal (no exponent, always a dot); reads back exactly.
fn decimal(x: f64) -> String {
    let s = x.to_string();
    if s.contains('.') { s } else { format!("{s}.0") }
}

fn check_names(names: &[String], what: &str) {
    for (i, n) in names.iter().enumerate() {
        assert!(!n.is_empty(), "{what}: empty name");
        assert_eq!(n.trim(), n, "{what}: untrimmed name");
        assert!(!names[..i].contains(n), "{what}: duplicate name {n:?}");
    }
}

/// Renders a declaration back to a Markdown file.
pub fn render_markdown(spec: &DeclarationSpec) -> String {
    let mut out = String::from("---\n");
    out.push_str(&format!(
        "description: {}\n",
        yaml_quoted(&spec.description)
    ));
    if !spec.tools.is_empty() {
        let tools: Vec<String> = spec.tools.iter().map(|t| yaml_quoted(t)).collect();
        out.push_str(&format!("tools: [{}]\n", tools.join(", ")));
    }
    if let Some(m) = &spec.model {
        out.push_str(&format!("model: {}\n", yaml_quoted(m)));
    }
    if let Some(s) = spec.steps {
        out.push_str(&format!("steps: {s}\n"));
    }
    if let Some(t) = spec.temperature {
        out.push_str(&format!("temperature: {}\n", decimal(t)));
    }
    if let Some(p) = spec.top_p {
        out.push_str(&format!("top_p: {}\n", decimal(p)));
    }
    out.push_str("---\n");
    out.push_str(&spec.body);
    out
}

pub fn markdown_declaration(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let file = Path::new(MD_FILE);
    let first = DeclarationSpec::parse_markdown(file, text);
    let again = DeclarationSpec::parse_markdown(file, text);
    assert_eq!(first, again, "parsing is deterministic");
    let spec = match first {
        Ok(spec) => spec,
        Err(e) => {
            assert!(
                e.to_string().contains(MD_FILE),
                "the error names the file: {e}"
            );
            return;
        }
    };
    assert_eq!(spec.id, "fuzz-agent");
    assert!(!spec.description.is_empty());
    assert_eq!(spec.description.trim(), spec.description);
    check_names(&spec.tools, "tools");
    if let Some(m) = &spec.model {
        assert!(!m.trim().is_empty(), "empty model");
    }
    if let Some(s) = spec.steps {
        assert!((1..=1000).contains(&s), "steps {s}");
    }
    if let Some(t) = spec.temperature {
        assert!((0.0..=2.0).contains(&t), "temperature {t}");
    }
    if let Some(p) = spec.top_p {
        assert!(p > 0.0 && p <= 1.0, "top_p {p}");
    }
    assert_eq!(spec.body.trim(), spec.body);
    let rendered = render_markdown(&spec);
    let reparsed = DeclarationSpec::parse_markdown(file, &rendered).unwrap_or_else(|e| {
        panic!("an accepted declaration re-renders to an invalid one: {e}\n{rendered}")
    });
    assert_eq!(reparsed, spec, "round trip through\n{rendered}");
}

pub fn tools_json(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let file = Path::new(JSON_FILE);
    let first = ToolsPolicy::parse(file, text);
    assert_eq!(
        first,
        ToolsPolicy::parse(file, text),
        "parsing is deterministic"
    );
    let policy = match first {
        Ok(p) => p,
        Err(e) => {
            assert!(
                e.to_string().contains(JSON_FILE),
                "the error names the file: {e}"
            );
            return;
        }
    };
    check_names(&policy.allow, "allow");
    check_names(&policy.deny, "deny");
    for name in &policy.deny {
        assert!(!policy.permits(name, "agent_spawn"), "deny wins");
    }
    // Entries written `?name` (may match no tool) keep their marker.
    let marked = |names: &[String]| -> Vec<String> {
        names
            .iter()
            .map(|n| {
                if policy.optional.contains(n) {
                    format!("?{n}")
                } else {
                    n.clone()
                }
            })
            .collect()
    };
    let rendered =
        serde_json::json!({"allow": marked(&policy.allow), "deny": marked(&policy.deny)})
            .to_string();
    let reparsed = ToolsPolicy::parse(file, &rendered)
        .unwrap_or_else(|e| panic!("an accepted policy re-renders to an invalid one: {e}"));
    assert_eq!(reparsed, policy);
}

fn store() -> &'static (PathBuf, Option<FileSessionStore>) {
    static STORE: OnceLock<(PathBuf, Option<FileSessionStore>)> = OnceLock::new();
    STORE.get_or_init(|| {
        let dir = std::env::temp_dir().join("rein-fuzz-names");
        let store = FileSessionStore::open(&dir).ok();
        (dir, store)
    })
}

/// Up to two keys from the input: fields separated by NUL; a field starting with `!`
/// means "no user".
fn keys(text: &str) -> Vec<SessionKey> {
    let fields: Vec<&str> = text.split('\0').collect();
    fields
        .chunks(2)
        .take(2)
        .map(|pair| {
            let user = pair[0];
            let session = pair.get(1).copied().unwrap_or("");
            let user = (!user.starts_with('!')).then_some(user);
            SessionKey::new(user, session)
        })
        .collect()
}

pub fn session_file_names(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (dir, Some(store)) = store() else { return };
    let keys = keys(&text);
    let paths: Vec<PathBuf> = keys.iter().map(|k| store.path_of(k)).collect();
    for (k, p) in keys.iter().zip(&paths) {
        assert_eq!(
            p.parent(),
            Some(dir.as_path()),
            "{k:?} escapes the directory: {p:?}"
        );
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        assert!(!name.is_empty() && !name.starts_with('.'), "{name:?}");
        assert!(!name.contains('/') && !name.contains('\\'), "{name:?}");
        assert!(name.len() <= 255, "file name too long: {}", name.len());
        assert!(name.ends_with(".json"));
    }
    if keys.len() == 2 && keys[0] != keys[1] {
        assert_ne!(
            paths[0], paths[1],
            "{:?} and {:?} share a file",
            keys[0], keys[1]
        );
    }
}

fn maskers() -> &'static [SensitiveDataMasker] {
    static MASKERS: OnceLock<Vec<SensitiveDataMasker>> = OnceLock::new();
    MASKERS.get_or_init(|| {
        let mut all = vec![SensitiveDataMasker::default()];
        all.extend(
            SensitiveDataMasker::builder()
                .style(MaskStyle::Partial)
                .build()
                .ok(),
        );
        all
    })
}

/// The input is `text`, then optionally a 0xFF byte and `more` (streamed later).
pub fn masker(data: &[u8]) {
    let (head, tail) = match data.iter().position(|&b| b == 0xFF) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let text = String::from_utf8_lossy(head);
    let more = String::from_utf8_lossy(tail);
    for (i, m) in maskers().iter().enumerate() {
        let found = m.find(&text);
        let mut last = 0;
        for f in &found {
            assert!(
                f.range.start >= last,
                "masker {i}: overlapping or unsorted: {found:?}"
            );
            assert!(f.range.start < f.range.end, "masker {i}: empty match");
            assert!(text.is_char_boundary(f.range.start) && text.is_char_boundary(f.range.end));
            last = f.range.end;
        }
        let masked = m.mask(&text);
        assert_eq!(
            matches!(masked, std::borrow::Cow::Borrowed(_)),
            found.is_empty(),
            "masker {i}: borrows exactly when nothing matched"
        );
        if i == 0 {
            let mut expected = String::new();
            let mut at = 0;
            for f in &found {
                expected.push_str(&text[at..f.range.start]);
                expected.push_str("***");
                at = f.range.end;
            }
            expected.push_str(&text[at..]);
            assert_eq!(masked, expected, "mask replaces exactly what find reports");
        }
        let n = m.stable_prefix_len(&text);
        assert!(
            n <= text.len() && text.is_char_boundary(n),
            "stable prefix {n}"
        );
        let whole = format!("{text}{more}");
        let streamed = format!(
            "{}{}",
            m.mask(&text[..n]),
            m.mask(&format!("{}{more}", &text[n..]))
        );
        assert_eq!(
            streamed,
            m.mask(&whole),
            "masker {i}: streaming split at {n} of {text:?} + {more:?}"
        );
    }
}
