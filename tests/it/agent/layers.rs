//! Inside `rein-core` the module graph points one way (between the crates of the
//! workspace, Cargo enforces it). Every `crate::…` / `super::…` path in
//! `crates/rein-core/src/` (in `use` items, `use crate::{a, b::{c}}` groups and inline
//! paths; comments and `#[cfg(test)] mod tests` blocks excluded) is mapped to the layer of
//! the module it names, and a path into a higher layer — or into a different unit of the
//! same layer — fails the test naming `file:line`.
//!
//! Layers, bottom first (a unit may import only units of lower layers):
//!
//! | layer | units |
//! |---|---|
//! | 0 | `util`, `budget` (limits, prices, spend, the ledgers calls draw from), `label` (information-flow labels, tool capabilities) |
//! | 1 | `message`, `context` (AgentInfo, RunContext, Extensions, StopReason, EventKind), `strict` (SpecError, checked parsing), `mcp` (MCP server declarations: plain data) |
//! | 2 | `error` (BuildError) |
//! | 3 | `tool` (incl. `tool::policy`, the `tools.json` parser) |
//! | 4 | `model`, `store` (the session contract, key, leases, the file and in-memory stores) |
//! | 5 | `error::call` (the call `Error`: composes ModelError, a hook's error, a store error) |
//! | 6 | `hook` (incl. `Decision`, per-call hook state) |
//! | 7 | `observe` |
//! | 8 | `agent` |
//! | 9 | `subagent` |
//! | 10 | leaves: `testing` (HookHarness) — imports any lower layer; nothing imports it |
//! | 11 | `bench_support` (drives the chain for the benches) |
//! | 12 | the crate root (`lib.rs`: re-exports) |
//!
//! Paths through the crate root (`crate::AgentInfo`) are resolved through `lib.rs`'s
//! `pub use` items to the module that exports them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// `(module path prefix, unit, layer)`; the longest matching prefix wins.
const UNITS: &[(&str, &str, u32)] = &[
    ("util", "util", 0),
    ("budget", "budget", 0),
    ("label", "label", 0),
    ("message", "message", 1),
    ("context", "context", 1),
    ("strict", "strict", 1),
    ("mcp", "mcp", 1),
    ("error", "error", 2),
    ("tool", "tool", 3),
    ("model", "model", 4),
    ("store", "store", 4),
    ("error::call", "error::call", 5),
    ("error::Error", "error::call", 5),
    ("error::ErrorKind", "error::call", 5),
    ("error::HookFailure", "error::call", 5),
    ("error::HookFailureKind", "error::call", 5),
    ("hook", "hook", 6),
    ("observe", "observe", 7),
    ("agent", "agent", 8),
    ("subagent", "subagent", 9),
    ("testing", "testing", 10),
    ("bench_support", "bench_support", 11),
    ("", "crate root", 12),
];

/// An import that points up (or sideways into another unit of the same layer).
#[derive(Debug, PartialEq, Eq)]
struct Violation {
    line: usize,
    from: String,
    to: String,
}

/// The unit (longest prefix in [`UNITS`]) a module path belongs to, with its layer.
fn unit_of(path: &str) -> (&'static str, u32) {
    UNITS
        .iter()
        .filter(|(prefix, _, _)| {
            prefix.is_empty()
                || path == *prefix
                || path
                    .strip_prefix(prefix)
                    .is_some_and(|rest| rest.starts_with("::"))
        })
        .max_by_key(|(prefix, _, _)| prefix.len())
        .map(|&(_, unit, layer)| (unit, layer))
        .unwrap_or(("crate root", 12))
}

/// Drops comments (line comments; doc comments included) and `#[cfg(test)] mod …`
/// blocks, keeping line numbers.
fn strip(source: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut skip_depth: Option<i64> = None;
    let mut pending_cfg_test = false;
    for line in source.lines() {
        let code = match line.find("//") {
            // A `//` inside a string literal (a URL) is rare in paths we scan; only a
            // `//` at the start of the trimmed line or after whitespace counts.
            Some(i) if line[..i].trim().is_empty() || line[..i].ends_with(' ') => &line[..i],
            _ => line,
        };
        if let Some(depth) = skip_depth.as_mut() {
            *depth += brace_delta(code);
            out.push(String::new());
            if *depth <= 0 {
                skip_depth = None;
            }
            continue;
        }
        let trimmed = code.trim();
        if trimmed == "#[cfg(test)]" {
            pending_cfg_test = true;
            out.push(String::new());
            continue;
        }
        if pending_cfg_test && trimmed.starts_with("mod ") && trimmed.ends_with('{') {
            skip_depth = Some(brace_delta(code));
            pending_cfg_test = false;
            out.push(String::new());
            continue;
        }
        pending_cfg_test = false;
        out.push(code.to_owned());
    }
    out
}

fn brace_delta(code: &str) -> i64 {
    code.chars()
        .map(|c| match c {
            '{' => 1,
            '}' => -1,
            _ => 0,
        })
        .sum()
}

/// Every full path named by the path that starts at `text` (just after `crate::`):
/// `a::b::{c, d::{self, e}}` gives `a::b::c`, `a::b::d` and `a::b::d::e`. Whitespace and
/// newlines inside groups are allowed; parsing stops at the first character that cannot
/// continue the path.
fn expand(text: &str) -> Vec<String> {
    fn skip_ws(b: &[u8], mut i: usize) -> usize {
        while b.get(i).is_some_and(|c| c.is_ascii_whitespace()) {
            i += 1;
        }
        i
    }
    fn tree(text: &str, mut i: usize, prefix: &str, out: &mut Vec<String>) -> usize {
        let b = text.as_bytes();
        i = skip_ws(b, i);
        if b.get(i) == Some(&b'{') {
            i += 1;
            loop {
                i = skip_ws(b, i);
                match b.get(i) {
                    Some(b'}') => return i + 1,
                    None => return i,
                    _ => {}
                }
                let before = i;
                i = tree(text, i, prefix, out);
                i = skip_ws(b, i);
                match b.get(i) {
                    Some(b',') => i += 1,
                    Some(b'}') => return i + 1,
                    _ if i == before => return i,
                    _ => return i,
                }
            }
        }
        let len = text[i..]
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(text.len() - i);
        if len == 0 {
            return i;
        }
        let ident = &text[i..i + len];
        i += len;
        let path = match (prefix, ident) {
            ("", _) => ident.to_owned(),
            (_, "self") => prefix.to_owned(),
            _ => format!("{prefix}::{ident}"),
        };
        if text[i..].starts_with("::") {
            tree(text, i + 2, &path, out)
        } else {
            out.push(path);
            i
        }
    }
    let mut out = Vec::new();
    tree(text, 0, "", &mut out);
    out
}

/// The module path of `file` (relative to `src/`): `a/b.rs` and `a/b/mod.rs` are `a::b`.
fn module_of(file: &Path) -> String {
    let mut parts: Vec<String> = file
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if let Some(last) = parts.last_mut() {
        *last = last.trim_end_matches(".rs").to_owned();
    }
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts.join("::")
}

/// The paths one file imports, as `(line, absolute module path)`.
fn imports(module: &str, source: &str) -> Vec<(usize, String)> {
    let text = strip(source).join("\n");
    let line_of = |offset: usize| text[..offset].matches('\n').count() + 1;
    let mut found = Vec::new();
    for (start, _) in text.match_indices("crate::") {
        let before = text[..start].chars().last();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        for path in expand(&text[start + "crate::".len()..]) {
            found.push((line_of(start), path));
        }
    }
    for (start, _) in text.match_indices("super::") {
        let before = text[..start].chars().last();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        // `super::super::x` from module `a::b::c` (a file `a/b/c.rs`) is `a::x`.
        let mut base: Vec<&str> = module.split("::").filter(|s| !s.is_empty()).collect();
        let mut rest = &text[start..];
        while let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        }
        for path in expand(rest) {
            let full = if base.is_empty() {
                path
            } else {
                format!("{}::{path}", base.join("::"))
            };
            found.push((line_of(start), full));
        }
    }
    found.sort();
    found
}

/// The imports of one file of module `module` that point up the layers, or sideways
/// into another unit of the same layer.
fn check_file(module: &str, source: &str, root: &HashMap<String, String>) -> Vec<Violation> {
    let (from_unit, from_layer) = unit_of(module);
    let mut out = Vec::new();
    for (line, path) in imports(module, source) {
        let first = path.split("::").next().unwrap_or_default();
        let resolved = match root.get(first) {
            Some(target) if !UNITS.iter().any(|(p, _, _)| *p == first) => {
                format!("{target}{}", &path[first.len()..])
            }
            _ => path.clone(),
        };
        let (to_unit, to_layer) = unit_of(&resolved);
        if to_layer > from_layer || (to_layer == from_layer && to_unit != from_unit) {
            out.push(Violation {
                line,
                from: from_unit.to_owned(),
                to: resolved,
            });
        }
    }
    out
}

/// Root re-exports: `pub use agent::{Agent, …}` in `lib.rs` maps `Agent` to `agent::Agent`.
fn root_exports(lib: &str) -> HashMap<String, String> {
    let mut map = HashMap::new();
    let joined: String = strip(lib).join("\n");
    for item in joined.split(';') {
        let Some(at) = item.find("pub use ") else {
            continue;
        };
        for path in expand(&item[at + "pub use ".len()..]) {
            if let Some(name) = path.rsplit("::").next() {
                map.insert(name.to_owned(), path.clone());
            }
        }
    }
    map
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src/ is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_module_imports_a_higher_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/rein-core/src");
    let root = root_exports(&std::fs::read_to_string(src.join("lib.rs")).expect("lib.rs"));
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut violations = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&src).expect("under src/");
        // `*_tests.rs` files are `#[cfg(test)]` modules declared elsewhere.
        if rel.to_string_lossy().ends_with("_tests.rs") {
            continue;
        }
        let module = module_of(rel);
        let source = std::fs::read_to_string(file).expect("readable source");
        for v in check_file(&module, &source, &root) {
            violations.push(format!(
                "src/{}:{}: `{}` imports `crate::{}` (a higher layer)",
                rel.display(),
                v.line,
                v.from,
                v.to
            ));
        }
    }
    assert!(
        violations.is_empty(),
        "imports that point up the layers:\n{}",
        violations.join("\n")
    );
}

#[test]
fn the_checker_reports_a_planted_upward_import_with_its_line() {
    let root = HashMap::from([("Agent".to_owned(), "agent::Agent".to_owned())]);
    let source = "\
//! use crate::agent::Agent; (a comment, ignored)
use crate::message::Msg;
use crate::{util::truncate, agent::{self, AgentBuilder}};
fn f() { let _ = crate::Agent::builder(); }
#[cfg(test)]
mod tests {
    use crate::subagent::SubagentDeclaration;
}
";
    let found = check_file("tool", source, &root);
    assert_eq!(
        found,
        vec![
            Violation {
                line: 3,
                from: "tool".into(),
                to: "agent".into()
            },
            Violation {
                line: 3,
                from: "tool".into(),
                to: "agent::AgentBuilder".into()
            },
            Violation {
                line: 4,
                from: "tool".into(),
                to: "agent::Agent::builder".into()
            },
        ]
    );
}

#[test]
fn super_chains_that_leave_a_module_are_resolved_and_checked() {
    let root = HashMap::new();
    // From `model::transport::call`, `super::super::super::hook` is `crate::hook`: upward.
    let found = check_file(
        "model::transport::call",
        "use super::super::super::hook::HookEvent;\nuse super::ModelChunk;\n",
        &root,
    );
    assert_eq!(
        found,
        vec![Violation {
            line: 1,
            from: "model".into(),
            to: "hook::HookEvent".into()
        }]
    );
    // Staying inside the module is fine, and a downward import is fine.
    assert!(check_file("agent::run", "use super::super::tool::Toolkit;", &root).is_empty());
}

#[test]
fn the_layer_table_places_the_call_error_above_the_build_error() {
    assert_eq!(unit_of("error::BuildError"), ("error", 2));
    assert_eq!(unit_of("error::Error"), ("error::call", 5));
    assert_eq!(unit_of("error::call::HookFailure"), ("error::call", 5));
    assert_eq!(unit_of("tool::policy::Bound"), ("tool", 3));
    assert_eq!(unit_of("store::FileSessionStore"), ("store", 4));
    assert_eq!(unit_of("mcp::McpServerConfig"), ("mcp", 1));
}
