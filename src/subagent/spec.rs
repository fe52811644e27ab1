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

use std::cell::Cell;
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use indexmap::IndexMap;

use crate::mcp::{McpServerConfig, McpTransport, check_server_id};
use crate::subagent::SubagentWorkspace;

mod workspace;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Unexpected, Visitor};

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// What went wrong in a [`SpecError`].
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SpecErrorKind {
    /// The file or directory exists but could not be read (permissions, not a regular
    /// file, invalid UTF-8, ...).
    Io,
    /// `tools.json` is not syntactically valid JSON.
    MalformedJson,
    /// The front matter is not syntactically valid YAML.
    MalformedYaml,
    /// A Markdown declaration does not start with a `---` line, or its front matter is
    /// never closed by a second `---` line.
    MissingFrontMatter,
    /// A key that the format does not define (or a key that is not a string).
    UnknownKey,
    /// A required key is absent.
    MissingKey,
    /// A key has a value of the wrong type or out of range, is repeated, or the document
    /// as a whole has the wrong shape.
    InvalidValue,
    /// The file name does not yield a valid subagent id.
    InvalidId,
    /// A `${VAR}` in a `tools.json` string names an environment variable that is not set
    /// (or not valid Unicode); the message names the variable.
    MissingEnvVar,
    /// A path that must exist does not: a workspace directory given to
    /// [`AgentBuilder::workspace`](crate::AgentBuilder::workspace), or the target of a
    /// `tools.json` that is a symbolic link (a dangling link, e.g. a Kubernetes ConfigMap
    /// whose target is missing).
    Missing,
}

/// A strict-validation failure in a workspace file.
///
/// Its `Display` always names the file, then the 1-based file line when known, then the key
/// when known, e.g. ``subagents/reviewer.md:4: key `tools`: expected a list of tool names or
/// a comma-separated string, found integer `3` ``.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecError {
    kind: SpecErrorKind,
    file: PathBuf,
    line: Option<usize>,
    key: Option<String>,
    message: String,
}

impl SpecError {
    fn new(
        kind: SpecErrorKind,
        file: &Path,
        line: Option<usize>,
        key: Option<&str>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            kind,
            file: file.to_path_buf(),
            line,
            key: key.map(str::to_owned),
            message: message.into(),
        }
    }

    pub(crate) fn io(file: &Path, err: &io::Error) -> Self {
        Self::new(
            SpecErrorKind::Io,
            file,
            None,
            None,
            format!("cannot read: {err}"),
        )
    }

    /// A [`SpecErrorKind::Missing`] error about `file`.
    pub(crate) fn missing(file: &Path, message: impl Into<String>) -> Self {
        Self::new(SpecErrorKind::Missing, file, None, None, message)
    }

    /// The category of the failure.
    pub fn kind(&self) -> SpecErrorKind {
        self.kind
    }

    /// The file (or directory) the error is about, exactly as the caller named it.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// The 1-based line in the file (not in the YAML fragment), when known.
    pub fn line(&self) -> Option<usize> {
        self.line
    }

    /// The offending (or missing) key, when the error is about one key.
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// The bare description, without the file/line/key prefix.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        f.write_str(": ")?;
        if let Some(key) = &self.key {
            write!(f, "key `{key}`: ")?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for SpecError {}

// ---------------------------------------------------------------------------------------------
// tools.json
// ---------------------------------------------------------------------------------------------

const POLICY_KEYS: &[&str] = &["allow", "deny", "mcpServers"];

const SERVER_KEYS: &[&str] = &[
    "transport",
    "command",
    "args",
    "env",
    "url",
    "headers",
    "timeout_seconds",
    "enable_tools",
];

/// The workspace tool policy from `<workspace>/tools.json`:
/// `{"allow": ["name", ...], "deny": ["name", ...], "mcpServers": {...}}`, every key
/// optional.
///
/// An empty `allow` means "no allowlist"; an empty `deny` means "deny nothing". The default
/// policy permits everything. See [`ToolsPolicy::permits`].
///
/// `mcpServers` maps a server id to its configuration (see [`crate::mcp`]):
///
/// ```json
/// { "mcpServers": {
///     "files": { "transport": "stdio", "command": "npx", "args": ["-y", "server"],
///                "env": {"TOKEN": "${FILES_TOKEN}"}, "timeout_seconds": 30,
///                "enable_tools": ["read_file"] },
///     "search": { "transport": "http", "url": "https://example.com/mcp",
///                 "headers": {"Authorization": "Bearer ${SEARCH_KEY}"} } } }
/// ```
///
/// - `transport`: `"stdio"` or `"http"` (streamable HTTP); optional when exactly one of
///   `command` / `url` is present.
/// - stdio: `command` (required, non-empty), `args` (array of strings), `env` (object of
///   strings). HTTP: `url` (required, `http://` or `https://`), `headers` (object of
///   strings). Keys of the other transport are errors.
/// - `timeout_seconds`: a number in (0, 86400], the call timeout *and* the connect
///   timeout (defaults [`crate::mcp::DEFAULT_TIMEOUT`] and
///   [`crate::mcp::DEFAULT_CONNECT_TIMEOUT`]).
/// - `enable_tools`: a non-empty array of server tool names; absent means every tool.
/// - In `command`, `args`, `url` and the values of `env` and `headers`, `${NAME}` is
///   replaced by the environment variable `NAME` when the file is parsed; an unset variable
///   is an error naming it ([`SpecErrorKind::MissingEnvVar`]). There is no escape for a
///   literal `${`.
/// - Server ids: 1-32 characters from `[A-Za-z0-9_.-]`, no `__`, not ending in `_`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ToolsPolicy {
    /// Tool names to keep (besides the delegation tool) when non-empty; deduplicated, in
    /// first-seen order.
    pub allow: Vec<String>,
    /// Tool names to remove, always, even the delegation tool; deduplicated, in first-seen
    /// order.
    pub deny: Vec<String>,
    /// MCP servers by id, in file order, with `${VAR}` already substituted.
    pub mcp_servers: IndexMap<String, McpServerConfig>,
}

impl ToolsPolicy {
    /// Parses the text of a `tools.json`; `file` is used only in errors.
    ///
    /// A leading UTF-8 BOM is ignored. Tool names are trimmed of surrounding whitespace.
    ///
    /// # Errors
    /// - [`SpecErrorKind::MalformedJson`]: invalid JSON (with line), including trailing data.
    /// - [`SpecErrorKind::UnknownKey`]: a top-level key other than `allow`/`deny` (with key and
    ///   line; near misses get a "did you mean" hint).
    /// - [`SpecErrorKind::InvalidValue`]: the top level is not an object, a key is repeated,
    ///   or `allow`/`deny` is not an array of non-empty strings (with key and line).
    /// - [`SpecErrorKind::MissingEnvVar`]: a `${VAR}` in an `mcpServers` string names an
    ///   unset variable (with key and line).
    ///
    /// `mcpServers` entries are checked as described on [`ToolsPolicy`]; violations are
    /// `UnknownKey` / `InvalidValue` errors whose key is the dotted path, e.g.
    /// `mcpServers.files.command`.
    pub fn parse(file: &Path, text: &str) -> Result<ToolsPolicy, SpecError> {
        Self::parse_with_env(file, text, |name| std::env::var(name).ok())
    }

    /// [`ToolsPolicy::parse`], looking `${VAR}` up with `env` instead of the process
    /// environment (`None` means unset).
    ///
    /// # Errors
    /// As [`ToolsPolicy::parse`].
    pub fn parse_with_env(
        file: &Path,
        text: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<ToolsPolicy, SpecError> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let ctx = Ctx::default();
        let mut de = serde_json::Deserializer::from_str(text);
        let parsed = PolicyVisitor(&ctx, &env)
            .deserialize(&mut de)
            .and_then(|policy| de.end().map(|()| policy));
        parsed.map_err(|err| {
            let line = Some(err.line()).filter(|&line| line > 0);
            match (err.classify(), ctx.take()) {
                (serde_json::error::Category::Data, Some(detail)) => detail.into_error(file, line),
                (serde_json::error::Category::Data, None) => SpecError::new(
                    SpecErrorKind::InvalidValue,
                    file,
                    line,
                    None,
                    "expected a JSON object with optional `allow` and `deny` arrays",
                ),
                _ => SpecError::new(
                    SpecErrorKind::MalformedJson,
                    file,
                    line,
                    None,
                    format!("invalid JSON: {err}"),
                ),
            }
        })
    }

    /// Reads and parses the `tools.json` at `path`.
    ///
    /// Returns `Ok(None)` only when the file is genuinely absent: there is no directory
    /// entry at `path` at all. Anything else that exists must be a readable policy.
    ///
    /// # Errors
    /// - [`SpecErrorKind::Missing`]: `path` is a symbolic link whose target does not exist
    ///   (a dangling link, e.g. a mounted ConfigMap whose target is missing).
    /// - [`SpecErrorKind::Io`]: every other read failure (a directory at that path,
    ///   permissions, a symlink loop, invalid UTF-8, ...).
    /// - Parse failures as in [`ToolsPolicy::parse`].
    ///
    /// An unreadable policy never silently means "no policy".
    pub fn load(path: &Path) -> Result<Option<ToolsPolicy>, SpecError> {
        match fs::read_to_string(path) {
            Ok(text) => Self::parse(path, &text).map(Some),
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                // NotFound also comes from a dangling symlink: only a missing entry is
                // "no policy".
                match fs::symlink_metadata(path) {
                    Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
                    Ok(meta) if meta.file_type().is_symlink() => Err(SpecError::missing(
                        path,
                        "is a symbolic link whose target does not exist; a policy that \
                         cannot be read never means \"no policy\"",
                    )),
                    _ => Err(SpecError::io(path, &err)),
                }
            }
            Err(err) => Err(SpecError::io(path, &err)),
        }
    }

    /// Whether the policy lets a child keep `tool`.
    ///
    /// `deny` wins over everything, including `delegation_tool`. Otherwise an empty `allow`
    /// permits every tool, and a non-empty `allow` permits only the listed tools plus
    /// `delegation_tool`. Names are compared exactly (case-sensitive).
    pub fn permits(&self, tool: &str, delegation_tool: &str) -> bool {
        if self.deny.iter().any(|name| name == tool) {
            return false;
        }
        self.allow.is_empty() || tool == delegation_tool || self.allow.iter().any(|n| n == tool)
    }
}

struct PolicyVisitor<'a>(&'a Ctx, &'a dyn Fn(&str) -> Option<String>);

impl<'de> DeserializeSeed<'de> for PolicyVisitor<'_> {
    type Value = ToolsPolicy;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<ToolsPolicy, D::Error> {
        de.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for PolicyVisitor<'_> {
    type Value = ToolsPolicy;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ToolsPolicy, A::Error> {
        let ctx = self.0;
        let mut policy = ToolsPolicy::default();
        let mut seen = Vec::new();
        while let Some(key) = map.next_key_seed(key_check(ctx, POLICY_KEYS, &seen))? {
            seen.push(key);
            let at = Site::key(ctx, key);
            if key == "mcpServers" {
                policy.mcp_servers = map.next_value_seed(Check::new(at, Servers(self.1)))?;
                continue;
            }
            let names = map.next_value_seed(Check::new(at, NamesRule { comma: false }))?;
            if key == "deny" {
                policy.deny = names;
            } else {
                policy.allow = names;
            }
        }
        Ok(policy)
    }
}

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
    /// required, resolved against the workspace holding the `subagents/` folder, and must
    /// be an existing directory; a shared one takes no path. `None`: no workspace of its
    /// own.
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
    /// `top_p` (number, 0 < x <= 1). Strings must be YAML strings (quote `"42"` if needed).
    ///
    /// # Errors
    /// - [`SpecErrorKind::InvalidId`]: the file name is not a valid id.
    /// - [`SpecErrorKind::MissingFrontMatter`] (line 1): no opening or no closing `---` line.
    /// - [`SpecErrorKind::MalformedYaml`]: invalid YAML, with its file line.
    /// - [`SpecErrorKind::UnknownKey`]: any other key, with key and file line (near misses
    ///   such as `topP` or `maxIters` get a "did you mean" hint).
    /// - [`SpecErrorKind::InvalidValue`]: a wrong type or range, or a repeated key (with key
    ///   and file line), or front matter that is not a mapping.
    /// - [`SpecErrorKind::MissingKey`]: no `description` (also for empty front matter).
    pub fn parse_markdown(file: &Path, text: &str) -> Result<DeclarationSpec, SpecError> {
        let id = id_from_file(file)?;
        let (yaml, body) = split_front_matter(file, text)?;
        let fm = parse_front_matter(file, yaml)?;
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

fn parse_front_matter(file: &Path, yaml: &str) -> Result<FrontMatter, SpecError> {
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
    FrontMatterVisitor(&ctx, base)
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

struct FrontMatterVisitor<'a>(&'a Ctx, &'a Path);

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
                    let rule = workspace::WorkspaceRule { base: self.1 };
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

// ---------------------------------------------------------------------------------------------
// Checked deserialization shared by both formats
// ---------------------------------------------------------------------------------------------

/// The structured part of the first failure; serde errors themselves only carry text and
/// a position.
struct Detail {
    kind: SpecErrorKind,
    key: Option<String>,
    message: String,
}

impl Detail {
    fn into_error(self, file: &Path, line: Option<usize>) -> SpecError {
        SpecError {
            kind: self.kind,
            file: file.to_path_buf(),
            line,
            key: self.key,
            message: self.message,
        }
    }
}

#[derive(Default)]
struct Ctx(Cell<Option<Detail>>);

impl Ctx {
    /// Records the failure (the first one wins) and returns a serde error for the
    /// deserializer to position.
    fn fail<E: de::Error>(&self, kind: SpecErrorKind, key: Option<&str>, message: String) -> E {
        let err = E::custom(&message);
        self.note(kind, key, message);
        err
    }

    /// Records a failure unless one is already recorded.
    fn note(&self, kind: SpecErrorKind, key: Option<&str>, message: String) {
        let first = self.0.take().unwrap_or(Detail {
            kind,
            key: key.map(str::to_owned),
            message,
        });
        self.0.set(Some(first));
    }

    fn take(&self) -> Option<Detail> {
        self.0.take()
    }
}

/// Where a value sits: the key it belongs to (`None` for keys themselves).
#[derive(Clone, Copy)]
struct Site<'a> {
    ctx: &'a Ctx,
    key: Option<&'a str>,
}

impl<'a> Site<'a> {
    fn key(ctx: &'a Ctx, key: &'a str) -> Self {
        Self {
            ctx,
            key: Some(key),
        }
    }

    fn invalid<E: de::Error>(self, message: String) -> E {
        self.ctx
            .fail(SpecErrorKind::InvalidValue, self.key, message)
    }

    fn reject<E: de::Error>(self, expected: &str, found: Unexpected<'_>) -> E {
        self.invalid(format!("expected {expected}, found {found}"))
    }
}

/// A validation rule for one node; every input type it does not override is rejected with
/// ``expected <expected()>, found <what>``.
trait Rule: Sized {
    type Out;

    fn expected(&self) -> &'static str;

    fn str<E: de::Error>(self, at: Site<'_>, v: &str) -> Result<Self::Out, E> {
        Err(at.reject(self.expected(), Unexpected::Str(v)))
    }

    fn int<E: de::Error>(self, at: Site<'_>, v: i128) -> Result<Self::Out, E> {
        Err(at.reject(
            self.expected(),
            Unexpected::Other(&format!("integer `{v}`")),
        ))
    }

    fn float<E: de::Error>(self, at: Site<'_>, v: f64) -> Result<Self::Out, E> {
        Err(at.reject(self.expected(), Unexpected::Float(v)))
    }

    fn seq<'de, A: SeqAccess<'de>>(self, at: Site<'_>, _seq: A) -> Result<Self::Out, A::Error> {
        Err(at.reject(self.expected(), Unexpected::Seq))
    }

    fn map<'de, A: MapAccess<'de>>(self, at: Site<'_>, _map: A) -> Result<Self::Out, A::Error> {
        Err(at.reject(self.expected(), Unexpected::Map))
    }
}

/// Deserializes one node with `rule`, so that failures carry that node's position.
struct Check<'a, R> {
    at: Site<'a>,
    rule: R,
}

impl<'a, R> Check<'a, R> {
    fn new(at: Site<'a>, rule: R) -> Self {
        Self { at, rule }
    }
}

impl<'de, R: Rule> DeserializeSeed<'de> for Check<'_, R> {
    type Value = R::Out;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<R::Out, D::Error> {
        let (at, expected) = (self.at, self.rule.expected());
        de.deserialize_any(self).inspect_err(|_| {
            // Inputs the visitor does not handle (tags, bytes, ...) fail inside serde
            // without a detail; name the key anyway. An earlier detail wins.
            let message = format!("expected {expected}");
            at.ctx.note(SpecErrorKind::InvalidValue, at.key, message);
        })
    }
}

impl<'de, R: Rule> Visitor<'de> for Check<'_, R> {
    type Value = R::Out;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.rule.expected())
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<R::Out, E> {
        Err(self.at.reject(self.rule.expected(), Unexpected::Bool(v)))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<R::Out, E> {
        self.rule.int(self.at, v.into())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<R::Out, E> {
        self.rule.int(self.at, v.into())
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<R::Out, E> {
        self.rule.int(self.at, v)
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<R::Out, E> {
        match i128::try_from(v) {
            Ok(v) => self.rule.int(self.at, v),
            Err(_) => Err(self
                .at
                .reject(self.rule.expected(), Unexpected::Other("integer"))),
        }
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<R::Out, E> {
        self.rule.float(self.at, v)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<R::Out, E> {
        self.rule.str(self.at, v)
    }

    fn visit_unit<E: de::Error>(self) -> Result<R::Out, E> {
        Err(self
            .at
            .reject(self.rule.expected(), Unexpected::Other("null")))
    }

    fn visit_none<E: de::Error>(self) -> Result<R::Out, E> {
        self.visit_unit()
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<R::Out, A::Error> {
        self.rule.seq(self.at, seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<R::Out, A::Error> {
        self.rule.map(self.at, map)
    }
}

/// A mapping key: must be one of `known` and not in `seen`.
struct KeyRule<'s> {
    known: &'static [&'static str],
    seen: &'s [&'static str],
}

fn key_check<'a>(
    ctx: &'a Ctx,
    known: &'static [&'static str],
    seen: &'a [&'static str],
) -> Check<'a, KeyRule<'a>> {
    Check::new(Site { ctx, key: None }, KeyRule { known, seen })
}

impl Rule for KeyRule<'_> {
    type Out = &'static str;

    fn expected(&self) -> &'static str {
        "a key name"
    }

    fn str<E: de::Error>(self, at: Site<'_>, v: &str) -> Result<&'static str, E> {
        if let Some(&key) = self.known.iter().find(|&&key| key == v) {
            if self.seen.contains(&key) {
                return Err(Site {
                    key: Some(key),
                    ..at
                }
                .invalid("duplicate key".to_owned()));
            }
            return Ok(key);
        }
        let message = match (v, suggest(v, self.known)) {
            ("name" | "id", _) => {
                "unknown key; the subagent id is the file name, not a key".to_owned()
            }
            (_, Some(key)) => format!("unknown key; did you mean `{key}`?"),
            (_, None) => {
                let known: Vec<String> = self.known.iter().map(|k| format!("`{k}`")).collect();
                format!("unknown key; expected one of {}", known.join(", "))
            }
        };
        Err(at.ctx.fail(SpecErrorKind::UnknownKey, Some(v), message))
    }
}

/// The known key that `key` most likely meant: same letters ignoring case, `_` and `-`, or a
/// common alias from other agent frameworks.
fn suggest(key: &str, known: &[&'static str]) -> Option<&'static str> {
    const ALIASES: &[(&str, &str)] = &[
        ("maxiters", "steps"),
        ("maxiterations", "steps"),
        ("maxsteps", "steps"),
        ("iterations", "steps"),
        ("temp", "temperature"),
        ("desc", "description"),
        ("tool", "tools"),
        ("allowedtools", "tools"),
        ("allowed", "allow"),
        ("allowlist", "allow"),
        ("denied", "deny"),
        ("denylist", "deny"),
        ("blocklist", "deny"),
    ];
    let fold = |s: &str| -> String {
        s.chars()
            .filter(|c| !matches!(c, '_' | '-'))
            .flat_map(char::to_lowercase)
            .collect()
    };
    let folded = fold(key);
    known
        .iter()
        .copied()
        .find(|k| fold(k) == folded)
        .or_else(|| {
            ALIASES
                .iter()
                .find(|(alias, _)| *alias == folded)
                .and_then(|(_, target)| known.iter().copied().find(|k| k == target))
        })
}

/// A non-empty string, trimmed.
struct Text;

impl Rule for Text {
    type Out = String;

    fn expected(&self) -> &'static str {
        "a non-empty string"
    }

    fn str<E: de::Error>(self, at: Site<'_>, v: &str) -> Result<String, E> {
        match v.trim() {
            "" => Err(at.invalid("must not be empty".to_owned())),
            v => Ok(v.to_owned()),
        }
    }
}

/// One tool name in a list: a non-empty string, trimmed.
struct Name;

impl Rule for Name {
    type Out = String;

    fn expected(&self) -> &'static str {
        "a tool name (a non-empty string)"
    }

    fn str<E: de::Error>(self, at: Site<'_>, v: &str) -> Result<String, E> {
        match v.trim() {
            "" => Err(at.invalid("tool names must not be empty".to_owned())),
            v => Ok(v.to_owned()),
        }
    }
}

/// A list of tool names (deduplicated, first order kept); with `comma`, a comma-separated
/// string is accepted too.
struct NamesRule {
    comma: bool,
}

impl Rule for NamesRule {
    type Out = Vec<String>;

    fn expected(&self) -> &'static str {
        if self.comma {
            "a list of tool names or a comma-separated string"
        } else {
            "an array of tool names"
        }
    }

    fn str<E: de::Error>(self, at: Site<'_>, v: &str) -> Result<Vec<String>, E> {
        if !self.comma {
            return Err(at.reject(self.expected(), Unexpected::Str(v)));
        }
        let mut names = Vec::new();
        for name in v.split(',').map(str::trim) {
            if name.is_empty() {
                return Err(at.invalid(format!(
                    "empty entry in the comma-separated tool list {v:?}"
                )));
            }
            push_unique(&mut names, name.to_owned());
        }
        Ok(names)
    }

    fn seq<'de, A: SeqAccess<'de>>(
        self,
        at: Site<'_>,
        mut seq: A,
    ) -> Result<Vec<String>, A::Error> {
        let mut names = Vec::new();
        while let Some(name) = seq.next_element_seed(Check::new(at, Name))? {
            push_unique(&mut names, name);
        }
        Ok(names)
    }
}

fn push_unique(names: &mut Vec<String>, name: String) {
    if !names.contains(&name) {
        names.push(name);
    }
}

/// `steps`: an integer in 1..=1000.
struct Steps;

impl Rule for Steps {
    type Out = u32;

    fn expected(&self) -> &'static str {
        "an integer from 1 to 1000"
    }

    fn int<E: de::Error>(self, at: Site<'_>, v: i128) -> Result<u32, E> {
        u32::try_from(v)
            .ok()
            .filter(|n| (1..=1000).contains(n))
            .ok_or_else(|| at.invalid(format!("expected {}, found {v}", self.expected())))
    }
}

/// A bounded sampling parameter; integers are accepted as numbers.
#[derive(Clone, Copy)]
enum Number {
    Temperature,
    TopP,
}

impl Rule for Number {
    type Out = f64;

    fn expected(&self) -> &'static str {
        match self {
            Number::Temperature => "a number from 0.0 to 2.0",
            Number::TopP => "a number greater than 0 and at most 1",
        }
    }

    fn int<E: de::Error>(self, at: Site<'_>, v: i128) -> Result<f64, E> {
        // Exact for every in-range value; large values stay out of range.
        self.float(at, v as f64)
    }

    fn float<E: de::Error>(self, at: Site<'_>, v: f64) -> Result<f64, E> {
        let ok = match self {
            Number::Temperature => (0.0..=2.0).contains(&v),
            Number::TopP => v > 0.0 && v <= 1.0,
        };
        if ok {
            Ok(v)
        } else {
            Err(at.invalid(format!("expected {}, found {v}", self.expected())))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// tools.json `mcpServers`
// ---------------------------------------------------------------------------------------------

type EnvLookup<'e> = &'e dyn Fn(&str) -> Option<String>;

/// Replaces every `${NAME}` in `text` with the variable's value.
fn substitute(text: &str, env: EnvLookup<'_>) -> Result<String, (SpecErrorKind, String)> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err((
                SpecErrorKind::InvalidValue,
                format!("unterminated `${{` in {text:?}"),
            ));
        };
        let name = &after[..end];
        let valid = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err((
                SpecErrorKind::InvalidValue,
                format!(
                    "invalid variable reference `${{{name}}}`: use `${{NAME}}` with NAME from [A-Za-z_][A-Za-z0-9_]*"
                ),
            ));
        }
        match env(name) {
            Some(value) => out.push_str(&value),
            None => {
                return Err((
                    SpecErrorKind::MissingEnvVar,
                    format!("environment variable `{name}` is not set"),
                ));
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// A string with `${VAR}` substituted; with `required`, non-empty after trimming.
struct EnvText<'e> {
    env: EnvLookup<'e>,
    required: bool,
}

impl Rule for EnvText<'_> {
    type Out = String;

    fn expected(&self) -> &'static str {
        if self.required {
            "a non-empty string"
        } else {
            "a string"
        }
    }

    fn str<E: de::Error>(self, at: Site<'_>, v: &str) -> Result<String, E> {
        let value = substitute(v, self.env)
            .map_err(|(kind, message)| at.ctx.fail::<E>(kind, at.key, message))?;
        if self.required && value.trim().is_empty() {
            return Err(at.invalid("must not be empty".to_owned()));
        }
        Ok(value)
    }
}

/// An array of strings with `${VAR}` substituted.
struct EnvTexts<'e>(EnvLookup<'e>);

impl Rule for EnvTexts<'_> {
    type Out = Vec<String>;

    fn expected(&self) -> &'static str {
        "an array of strings"
    }

    fn seq<'de, A: SeqAccess<'de>>(
        self,
        at: Site<'_>,
        mut seq: A,
    ) -> Result<Vec<String>, A::Error> {
        let mut out = Vec::new();
        let rule = || EnvText {
            env: self.0,
            required: false,
        };
        while let Some(v) = seq.next_element_seed(Check::new(at, rule()))? {
            out.push(v);
        }
        Ok(out)
    }
}

/// An object of non-empty names to strings (with `${VAR}` substituted in the values).
struct EnvMap<'e>(EnvLookup<'e>);

/// A name in an [`EnvMap`].
struct MapName;

impl Rule for MapName {
    type Out = String;

    fn expected(&self) -> &'static str {
        "a name"
    }

    fn str<E: de::Error>(self, at: Site<'_>, v: &str) -> Result<String, E> {
        if v.trim().is_empty() {
            return Err(at.invalid("names must not be empty".to_owned()));
        }
        Ok(v.to_owned())
    }
}

impl Rule for EnvMap<'_> {
    type Out = Vec<(String, String)>;

    fn expected(&self) -> &'static str {
        "an object of names to strings"
    }

    fn map<'de, A: MapAccess<'de>>(
        self,
        at: Site<'_>,
        mut map: A,
    ) -> Result<Vec<(String, String)>, A::Error> {
        let mut out: Vec<(String, String)> = Vec::new();
        while let Some(name) = map.next_key_seed(Check::new(at, MapName))? {
            if out.iter().any(|(n, _)| *n == name) {
                return Err(at.invalid(format!("duplicate name `{name}`")));
            }
            let path = at.key.map(|k| format!("{k}.{name}"));
            let value_at = Site {
                ctx: at.ctx,
                key: path.as_deref().or(at.key),
            };
            let value = map.next_value_seed(Check::new(
                value_at,
                EnvText {
                    env: self.0,
                    required: false,
                },
            ))?;
            out.push((name, value));
        }
        Ok(out)
    }
}

/// `transport`: `"stdio"` or `"http"`.
struct TransportKind;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Stdio,
    Http,
}

impl Rule for TransportKind {
    type Out = Kind;

    fn expected(&self) -> &'static str {
        "\"stdio\" or \"http\""
    }

    fn str<E: de::Error>(self, at: Site<'_>, v: &str) -> Result<Kind, E> {
        match v {
            "stdio" => Ok(Kind::Stdio),
            "http" => Ok(Kind::Http),
            "streamableHttp" | "streamable_http" | "streamable-http" => Err(at.invalid(format!(
                "expected \"stdio\" or \"http\", found {v:?}; did you mean \"http\"?"
            ))),
            "sse" => Err(at.invalid(
                "the legacy SSE transport is not supported; use \"http\" (streamable HTTP)"
                    .to_owned(),
            )),
            _ => Err(at.reject(self.expected(), Unexpected::Str(v))),
        }
    }
}

/// `timeout_seconds`: a number in (0, 86400].
struct Seconds;

impl Rule for Seconds {
    type Out = Duration;

    fn expected(&self) -> &'static str {
        "a number of seconds greater than 0 and at most 86400"
    }

    fn int<E: de::Error>(self, at: Site<'_>, v: i128) -> Result<Duration, E> {
        self.float(at, v as f64)
    }

    fn float<E: de::Error>(self, at: Site<'_>, v: f64) -> Result<Duration, E> {
        if v > 0.0 && v <= 86_400.0 {
            Ok(Duration::from_secs_f64(v))
        } else {
            Err(at.invalid(format!("expected {}, found {v}", self.expected())))
        }
    }
}

/// `enable_tools`: a non-empty array of tool names.
struct EnabledTools;

impl Rule for EnabledTools {
    type Out = Vec<String>;

    fn expected(&self) -> &'static str {
        "a non-empty array of tool names"
    }

    fn seq<'de, A: SeqAccess<'de>>(self, at: Site<'_>, seq: A) -> Result<Vec<String>, A::Error> {
        let names = NamesRule { comma: false }.seq(at, seq)?;
        if names.is_empty() {
            return Err(at.invalid(
                "must list at least one tool; omit the key to enable every tool".to_owned(),
            ));
        }
        Ok(names)
    }
}

/// `mcpServers`: an object of server ids to server objects.
struct Servers<'e>(EnvLookup<'e>);

/// A server id (a key of `mcpServers`).
struct ServerId;

impl Rule for ServerId {
    type Out = String;

    fn expected(&self) -> &'static str {
        "a server id"
    }

    fn str<E: de::Error>(self, at: Site<'_>, v: &str) -> Result<String, E> {
        check_server_id(v).map_err(|message| at.invalid::<E>(message))?;
        Ok(v.to_owned())
    }
}

impl Rule for Servers<'_> {
    type Out = IndexMap<String, McpServerConfig>;

    fn expected(&self) -> &'static str {
        "an object of MCP server ids to server objects"
    }

    fn map<'de, A: MapAccess<'de>>(
        self,
        at: Site<'_>,
        mut map: A,
    ) -> Result<IndexMap<String, McpServerConfig>, A::Error> {
        let mut servers = IndexMap::new();
        while let Some(id) = map.next_key_seed(Check::new(at, ServerId))? {
            let path = format!("mcpServers.{id}");
            if servers.contains_key(&id) {
                return Err(Site::key(at.ctx, &path).invalid("duplicate server id".to_owned()));
            }
            let server =
                map.next_value_seed(Check::new(Site::key(at.ctx, &path), Server(self.0)))?;
            servers.insert(id, server);
        }
        Ok(servers)
    }
}

/// One server object.
struct Server<'e>(EnvLookup<'e>);

impl Rule for Server<'_> {
    type Out = McpServerConfig;

    fn expected(&self) -> &'static str {
        "an MCP server object"
    }

    fn map<'de, A: MapAccess<'de>>(
        self,
        at: Site<'_>,
        mut map: A,
    ) -> Result<McpServerConfig, A::Error> {
        let ctx = at.ctx;
        let base = at.key.unwrap_or("mcpServers");
        let env = self.0;
        let mut seen = Vec::new();
        let (mut kind, mut command, mut args, mut vars) = (None, None, None, None);
        let (mut url, mut headers, mut timeout, mut enable) = (None, None, None, None);
        while let Some(key) = map.next_key_seed(key_check(ctx, SERVER_KEYS, &seen))? {
            seen.push(key);
            let path = format!("{base}.{key}");
            let site = Site::key(ctx, &path);
            let text = |required| EnvText { env, required };
            match key {
                "transport" => kind = Some(map.next_value_seed(Check::new(site, TransportKind))?),
                "command" => command = Some(map.next_value_seed(Check::new(site, text(true)))?),
                "args" => args = Some(map.next_value_seed(Check::new(site, EnvTexts(env)))?),
                "env" => vars = Some(map.next_value_seed(Check::new(site, EnvMap(env)))?),
                "url" => url = Some(map.next_value_seed(Check::new(site, text(true)))?),
                "headers" => headers = Some(map.next_value_seed(Check::new(site, EnvMap(env)))?),
                "timeout_seconds" => {
                    timeout = Some(map.next_value_seed(Check::new(site, Seconds))?)
                }
                _ => enable = Some(map.next_value_seed(Check::new(site, EnabledTools))?),
            }
        }
        let kind = match (kind, command.is_some(), url.is_some()) {
            (Some(kind), _, _) => kind,
            (None, true, false) => Kind::Stdio,
            (None, false, true) => Kind::Http,
            (None, _, _) => {
                return Err(at.invalid(
                    "set `transport` to \"stdio\" (with `command`) or \"http\" (with `url`)"
                        .to_owned(),
                ));
            }
        };
        let misplaced = match kind {
            Kind::Stdio => [("url", url.is_some()), ("headers", headers.is_some())],
            Kind::Http => [("command", command.is_some()), ("args", args.is_some())],
        };
        if let Some((key, _)) = misplaced.iter().find(|(_, set)| *set) {
            let path = format!("{base}.{key}");
            return Err(
                Site::key(ctx, &path).invalid("not allowed with this `transport`".to_owned())
            );
        }
        if kind == Kind::Http && vars.is_some() {
            let path = format!("{base}.env");
            return Err(Site::key(ctx, &path)
                .invalid("not allowed with `transport` \"http\"; use `headers`".to_owned()));
        }
        let transport = match kind {
            Kind::Stdio => McpTransport::Stdio {
                command: command.ok_or_else(|| {
                    let path = format!("{base}.command");
                    ctx.fail::<A::Error>(
                        SpecErrorKind::MissingKey,
                        Some(&path),
                        "required for `transport` \"stdio\"".to_owned(),
                    )
                })?,
                args: args.unwrap_or_default(),
                env: vars.unwrap_or_default(),
            },
            Kind::Http => {
                let url = url.ok_or_else(|| {
                    let path = format!("{base}.url");
                    ctx.fail::<A::Error>(
                        SpecErrorKind::MissingKey,
                        Some(&path),
                        "required for `transport` \"http\"".to_owned(),
                    )
                })?;
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    let path = format!("{base}.url");
                    return Err(Site::key(ctx, &path).invalid(format!(
                        "expected an http:// or https:// URL, found {url:?}"
                    )));
                }
                McpTransport::Http {
                    url,
                    headers: headers.unwrap_or_default(),
                }
            }
        };
        let mut config = McpServerConfig::with_transport(transport);
        if let Some(t) = timeout {
            config = config.timeout(t).connect_timeout(t);
        }
        if let Some(names) = enable {
            config = config.enable_tools(names);
        }
        Ok(config)
    }
}
