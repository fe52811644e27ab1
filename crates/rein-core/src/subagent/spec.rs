//! Strict parsers for the two workspace files that shape subagents:
//! `<workspace>/tools.json` ([`ToolsPolicy`]) and `<workspace>/subagents/<id>.md`
//! ([`DeclarationSpec`], [`scan_subagents_dir`]).
//!
//! Unlike the lenient reference loader, nothing here is silently ignored: an unknown key,
//! a value of the wrong type or range, malformed JSON/YAML or an unreadable file is a
//! [`SpecError`] naming the file, the 1-based file line when known, and the key when known.
//!
//! Line numbers come from the parsers themselves: both `serde_json` and `serde_yaml_ng`
//! attach the position of the node being deserialized to errors raised while visiting it,
//! so every check below runs *inside* the visitor of the offending key or value, and the
//! structured details (kind, key, message) travel beside the error in a private `Ctx`.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};

use crate::strict::{Check, Ctx, Detail, NamesRule, Number, Site, Steps, Text, key_check};
pub use crate::strict::{SpecError, SpecErrorKind};
use crate::subagent::SubagentWorkspace;
pub use crate::tool::policy::ToolsPolicy;

mod workspace;
pub(crate) use workspace::{
    check_child_policy_entries, check_child_root, child_policy, isolated_root, nested_dir,
    read_agents_md, root_stamp,
};

// ---------------------------------------------------------------------------------------------
// Markdown declarations
// ---------------------------------------------------------------------------------------------

const FRONT_MATTER_KEYS: &[&str] = &[
    "description",
    "tools",
    "model",
    "steps",
    "temperature",
    "top_p",
    "workspace",
];

/// A subagent declared by `<workspace>/subagents/<id>.md`: YAML front matter between two
/// `---` lines, then the body, which is the child's system prompt.
#[derive(Clone, Debug, PartialEq)]
pub struct DeclarationSpec {
    /// The file name without `.md`; matches `[A-Za-z0-9_.-]+`.
    pub id: String,
    /// `description` (required): non-empty, trimmed.
    pub description: String,
    /// `tools`: the allowlist over inherited tools, trimmed and deduplicated in first-seen
    /// order; empty (the default) means "inherit all".
    pub tools: Vec<String>,
    /// `model`: a non-empty model name; `None` means "use the parent's model".
    pub model: Option<String>,
    /// `steps`: the iteration cap, 1..=1000; `None` means "use the default".
    pub steps: Option<u32>,
    /// `temperature`: 0.0..=2.0; `None` means "inherit".
    pub temperature: Option<f64>,
    /// `top_p`: 0 < x <= 1; `None` means "inherit".
    pub top_p: Option<f64>,
    /// `workspace`: `{mode: isolated|shared, path: rel|abs}`; an isolated `path` is
    /// required, resolved against the workspace holding the `subagents/` folder, must
    /// be an existing directory, and is stored absolute; a shared one takes no path, and
    /// `general-purpose.md` may only be shared. `None`: no workspace of its own.
    pub workspace: Option<SubagentWorkspace>,
    /// The Markdown after the closing `---`, trimmed; may be empty.
    pub body: String,
}

impl DeclarationSpec {
    /// Parses a subagent declaration; `file` gives the id (its name without `.md`) and is
    /// used in errors.
    ///
    /// The text must start with a `---` line (a UTF-8 BOM and `\r\n` line endings are
    /// accepted), followed by a YAML mapping, a closing `---` line, and the body.
    /// Allowed keys: `description` (required, non-empty string), `tools` (a list of strings
    /// or a comma-separated string; entries are trimmed and must be non-empty), `model`
    /// (non-empty string), `steps` (integer 1..=1000), `temperature` (number 0.0..=2.0),
    /// `top_p` (number, 0 < x <= 1), `workspace` (a mapping with `mode`, `isolated` or
    /// `shared`, and for isolated `path`, an existing directory resolved against the
    /// workspace that holds the file's `subagents/` folder; see the `workspace` field).
    /// Strings must be YAML strings (quote `"42"` if needed).
    ///
    /// # Errors
    /// - [`SpecErrorKind::InvalidId`]: the file name is not a valid id.
    /// - [`SpecErrorKind::MissingFrontMatter`] (line 1): no opening or no closing `---` line.
    /// - [`SpecErrorKind::MalformedYaml`]: invalid YAML, with its file line.
    /// - [`SpecErrorKind::UnknownKey`]: any other key, with key and file line (near misses
    ///   such as `topP` or `maxIters` get a "did you mean" hint).
    /// - [`SpecErrorKind::InvalidValue`]: a wrong type or range, or a repeated key (with key
    ///   and file line), or front matter that is not a mapping.
    /// - [`SpecErrorKind::MissingKey`]: no `description` (also for empty front matter), or a
    ///   `workspace` without `mode`, or isolated without `path` (key `workspace.mode` /
    ///   `workspace.path`).
    /// - [`SpecErrorKind::Missing`]: a `workspace.path` that is not an existing directory.
    pub fn parse_markdown(file: &Path, text: &str) -> Result<DeclarationSpec, SpecError> {
        let id = id_from_file(file)?;
        let (yaml, body) = split_front_matter(file, text)?;
        let fm = parse_front_matter(file, &id, yaml)?;
        let description = fm.description.ok_or_else(|| {
            SpecError::new(
                SpecErrorKind::MissingKey,
                file,
                None,
                Some("description"),
                "required key is missing",
            )
        })?;
        Ok(DeclarationSpec {
            id,
            description,
            tools: fm.tools,
            model: fm.model,
            steps: fm.steps,
            temperature: fm.temperature,
            top_p: fm.top_p,
            workspace: fm.workspace,
            body: body.to_owned(),
        })
    }
}

fn id_from_file(file: &Path) -> Result<String, SpecError> {
    let name = file
        .file_name()
        .and_then(|name| name.to_str())
        .unwrap_or("");
    let id = name.strip_suffix(".md").unwrap_or(name);
    let valid = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-');
    if !id.is_empty() && id.bytes().all(valid) {
        return Ok(id.to_owned());
    }
    Err(SpecError::new(
        SpecErrorKind::InvalidId,
        file,
        None,
        None,
        format!(
            "invalid subagent id {id:?}: the file name without `.md` must be non-empty and \
             use only ASCII letters, digits, `_`, `.` and `-`"
        ),
    ))
}

/// The file line on which the front matter's first line sits.
const FRONT_MATTER_FIRST_LINE: usize = 2;

/// Splits `text` into (YAML front matter, trimmed body).
fn split_front_matter<'t>(file: &Path, text: &'t str) -> Result<(&'t str, &'t str), SpecError> {
    let missing = |message: &str| {
        SpecError::new(
            SpecErrorKind::MissingFrontMatter,
            file,
            Some(1),
            None,
            message,
        )
    };
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    let first = lines.next().unwrap_or("");
    if first.trim_end() != "---" {
        return Err(missing("expected the file to start with a `---` line"));
    }
    let start = first.len();
    let mut end = start;
    for line in lines {
        if line.trim_end() == "---" {
            return Ok((&text[start..end], text[end + line.len()..].trim()));
        }
        end += line.len();
    }
    Err(missing(
        "the front matter opened on line 1 is never closed by a `---` line",
    ))
}

#[derive(Default)]
struct FrontMatter {
    description: Option<String>,
    tools: Vec<String>,
    model: Option<String>,
    steps: Option<u32>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    workspace: Option<SubagentWorkspace>,
}

fn parse_front_matter(file: &Path, id: &str, yaml: &str) -> Result<FrontMatter, SpecError> {
    let file_line = |err: &serde_yaml_ng::Error| {
        err.location()
            .map(|loc| loc.line() + FRONT_MATTER_FIRST_LINE - 1)
    };
    // Syntax first: serde_yaml_ng visits the events before a parse error and reports the
    // error only afterwards, so a truncated value would otherwise look like a bad value.
    if let Err(err) = serde_yaml_ng::from_str::<de::IgnoredAny>(yaml) {
        let message = shift_line_numbers(&err.to_string(), FRONT_MATTER_FIRST_LINE - 1);
        return Err(SpecError::new(
            SpecErrorKind::MalformedYaml,
            file,
            file_line(&err),
            None,
            format!("invalid YAML: {message}"),
        ));
    }
    let ctx = Ctx::default();
    // `<ws>/subagents/<id>.md` → `<ws>`.
    let base = file
        .parent()
        .and_then(Path::parent)
        .unwrap_or(Path::new("."));
    FrontMatterVisitor(&ctx, base, id)
        .deserialize(serde_yaml_ng::Deserializer::from_str(yaml))
        .map_err(|err| {
            // Without a recorded detail, serde rejected a top level that is not a mapping.
            let detail = ctx.take().unwrap_or(Detail {
                kind: SpecErrorKind::InvalidValue,
                key: None,
                message: "the front matter must be a YAML mapping of keys to values".to_owned(),
            });
            detail.into_error(file, file_line(&err))
        })
}

/// Rewrites every `line N` in a YAML error message (relative to the front matter) as
/// `line N+by` (relative to the file).
fn shift_line_numbers(message: &str, by: usize) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find("line ") {
        let (head, tail) = rest.split_at(at + "line ".len());
        out.push_str(head);
        let digits = tail.len() - tail.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        match tail[..digits].parse::<usize>() {
            Ok(n) => out.push_str(&(n + by).to_string()),
            Err(_) => out.push_str(&tail[..digits]),
        }
        rest = &tail[digits..];
    }
    out.push_str(rest);
    out
}

/// The checks' context, the workspace relative paths resolve against, the id.
struct FrontMatterVisitor<'a>(&'a Ctx, &'a Path, &'a str);

impl<'de> DeserializeSeed<'de> for FrontMatterVisitor<'_> {
    type Value = FrontMatter;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<FrontMatter, D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for FrontMatterVisitor<'_> {
    type Value = FrontMatter;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML mapping")
    }

    fn visit_unit<E: de::Error>(self) -> Result<FrontMatter, E> {
        Err(self.0.fail(
            SpecErrorKind::MissingKey,
            Some("description"),
            "the front matter is empty; `description` is required".to_owned(),
        ))
    }

    fn visit_none<E: de::Error>(self) -> Result<FrontMatter, E> {
        self.visit_unit()
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<FrontMatter, A::Error> {
        let ctx = self.0;
        let mut fm = FrontMatter::default();
        let mut seen = Vec::new();
        while let Some(key) = map.next_key_seed(key_check(ctx, FRONT_MATTER_KEYS, &seen))? {
            seen.push(key);
            let at = Site::key(ctx, key);
            match key {
                "description" => fm.description = Some(map.next_value_seed(Check::new(at, Text))?),
                "tools" => {
                    fm.tools = map.next_value_seed(Check::new(at, NamesRule { comma: true }))?
                }
                "model" => fm.model = Some(map.next_value_seed(Check::new(at, Text))?),
                "steps" => fm.steps = Some(map.next_value_seed(Check::new(at, Steps))?),
                "temperature" => {
                    fm.temperature =
                        Some(map.next_value_seed(Check::new(at, Number::Temperature))?);
                }
                "top_p" => fm.top_p = Some(map.next_value_seed(Check::new(at, Number::TopP))?),
                "workspace" => {
                    let rule = workspace::WorkspaceRule {
                        base: self.1,
                        id: self.2,
                    };
                    fm.workspace = Some(map.next_value_seed(Check::new(at, rule))?);
                }
                // Unreachable: the key check only yields FRONT_MATTER_KEYS.
                _ => {
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
        }
        Ok(fm)
    }
}

// ---------------------------------------------------------------------------------------------
// Directory scan
// ---------------------------------------------------------------------------------------------

/// Parses every declaration in a `subagents/` directory.
///
/// Non-recursive: only entries whose name ends in `.md` and that are regular files (symlinks
/// are followed; directories and dangling links are skipped), sorted by file name. Each
/// file's outcome is returned separately (unreadable file: [`SpecErrorKind::Io`]; otherwise
/// as [`DeclarationSpec::parse_markdown`], with the path `dir/<name>` in errors), so the
/// caller decides whether one bad file fails everything.
///
/// # Errors
/// `Ok(vec![])` when `dir` does not exist; [`SpecErrorKind::Io`] when it exists but cannot
/// be listed (including when it is not a directory).
pub fn scan_subagents_dir(
    dir: &Path,
) -> Result<Vec<Result<DeclarationSpec, SpecError>>, SpecError> {
    Ok(markdown_files(dir)?
        .into_iter()
        .map(|(_, path, _)| {
            let text = fs::read_to_string(&path).map_err(|err| SpecError::io(&path, &err))?;
            DeclarationSpec::parse_markdown(&path, &text)
        })
        .collect())
}

/// A cheap change detector for [`scan_subagents_dir`]: `(file name, mtime, length)` of the
/// same `.md` files it would parse, in the same order. Compare two fingerprints to decide
/// whether a re-scan is needed.
///
/// It misses an edit that keeps both size and mtime (`cp -p`, `rsync -t`, coarse mtime
/// granularity); the runtime's own re-scan therefore compares file *contents*, not this.
///
/// # Errors
/// As [`scan_subagents_dir`] (`Ok(vec![])` for a missing directory), plus
/// [`SpecErrorKind::Io`] if the platform cannot report a file's modification time.
pub fn dir_fingerprint(dir: &Path) -> Result<Vec<(String, SystemTime, u64)>, SpecError> {
    markdown_files(dir)?
        .into_iter()
        .map(|(name, path, meta)| {
            let mtime = meta.modified().map_err(|err| SpecError::io(&path, &err))?;
            Ok((name, mtime, meta.len()))
        })
        .collect()
}

/// The `.md` regular files directly in `dir`, sorted by name; empty if `dir` is missing.
pub(crate) fn markdown_files(
    dir: &Path,
) -> Result<Vec<(String, PathBuf, fs::Metadata)>, SpecError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(SpecError::io(dir, &err)),
    };
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|err| SpecError::io(dir, &err))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".md") {
            continue;
        }
        let path = entry.path();
        // Follows symlinks; a dangling link is not a regular file.
        if let Ok(meta) = fs::metadata(&path)
            && meta.is_file()
        {
            files.push((name, path, meta));
        }
    }
    files.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(files)
}
