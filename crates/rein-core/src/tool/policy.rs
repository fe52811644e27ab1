//! The tool bound in one place: the workspace policy file `<workspace>/tools.json`
//! ([`ToolsPolicy`], its loader), the allowlist check of a declaration, and [`Bound`],
//! the predicate every agent's tools pass (its allowlist, the workspace policy, a
//! child's own policy, and the tools its parent can call).
//!
//! Public path: `rein::subagent::spec::ToolsPolicy`.

mod servers;

use std::collections::HashSet;
use std::fmt;
use std::fs;
use std::io;
use std::path::Path;
use std::sync::Arc;

use indexmap::IndexMap;
use serde::de::{DeserializeSeed, Deserializer, MapAccess, Visitor};

use crate::error::{BuildError, BuildErrorKind};
use crate::mcp::McpServerConfig;
use crate::strict::{Check, Ctx, NamesRule, Site, SpecError, SpecErrorKind, key_check};
use crate::util::closest;

/// `${NAME}` substitution, the one rule of `tools.json` and the hooks configuration
/// files: every `${NAME}` in `text` (NAME from `[A-Za-z_][A-Za-z0-9_]*`) is replaced by
/// `env(NAME)`; a `$` not followed by `{` is kept as written.
///
/// # Errors
/// A message saying which variable is missing (`env` returned `None`) or malformed (an
/// unterminated `${`, an invalid name).
pub fn substitute_env(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    servers::substitute(text, env).map_err(|(_, why)| why)
}
use servers::Servers;

/// The delegation tool's name (`rein::SPAWN_TOOL`): a non-empty `allow` keeps it.
pub(crate) const DELEGATION_TOOL: &str = "agent_spawn";

// ---------------------------------------------------------------------------------------------
// tools.json
// ---------------------------------------------------------------------------------------------

const POLICY_KEYS: &[&str] = &["allow", "deny", "mcpServers"];

/// The workspace tool policy from `<workspace>/tools.json`:
/// `{"allow": ["name", ...], "deny": ["name", ...], "mcpServers": {...}}`, every key
/// optional.
///
/// An empty `allow` means "no allowlist"; an empty `deny` means "deny nothing". The default
/// policy permits everything. See [`ToolsPolicy::permits`].
///
/// **Every entry must name a tool.** An `allow` or `deny` entry that names no tool the
/// agent (or a subagent it declares) could have fails the build, naming the file, the
/// entry and the closest tool (`{"deny": ["Refund"]}` next to a `refund` tool is a typo,
/// not a policy). An entry that may deliberately match nothing — a tool an MCP server
/// may add later, a name denied in advance — is written with a leading `?`:
/// `{"deny": ["?files__delete"]}` denies `files__delete` if it ever exists and is never
/// an error. The `?` is not part of the name (names are compared exactly after it).
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
    /// The `allow`/`deny` names written with a leading `?` (stored without it, in
    /// `allow`/`deny` too): entries that may match no tool without failing the build.
    pub optional: Vec<String>,
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

    /// Checks that every `allow`/`deny` entry not marked optional (`?name`) names a tool
    /// in `known` (every tool the agent and its subagents could have) or the delegation
    /// tool. `file` names the policy in the error.
    ///
    /// # Errors
    /// [`BuildErrorKind::Workspace`] with [`SpecErrorKind::InvalidValue`], naming the
    /// file, the entry (`deny[0]`), the tool it names and the closest known tool.
    pub(crate) fn check_entries<'a>(
        &self,
        file: &Path,
        known: impl IntoIterator<Item = &'a str> + Clone,
    ) -> Result<(), BuildError> {
        for (list, names) in [("allow", &self.allow), ("deny", &self.deny)] {
            for (i, name) in names.iter().enumerate() {
                if name == DELEGATION_TOOL
                    || self.optional.contains(name)
                    || known.clone().into_iter().any(|k| k == name)
                {
                    continue;
                }
                let mut all: Vec<&str> = known.clone().into_iter().collect();
                all.sort_unstable();
                all.dedup();
                let hint = closest(name, &all)
                    .map(|c| format!("did you mean `{c}`? "))
                    .unwrap_or_default();
                return Err(BuildError::workspace(SpecError::new(
                    SpecErrorKind::InvalidValue,
                    file,
                    None,
                    Some(&format!("{list}[{i}]")),
                    format!(
                        "names tool `{name}`, which no agent here can have (tools: [{}]); \
                         {hint}write `?{name}` for an entry that may match no tool",
                        all.join(", ")
                    ),
                )));
            }
        }
        Ok(())
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
            let written = map.next_value_seed(Check::new(at, NamesRule { comma: false }))?;
            let mut names = Vec::with_capacity(written.len());
            for name in written {
                match name.strip_prefix('?').map(str::trim) {
                    Some("") => {
                        return Err(at.invalid("`?` must be followed by a tool name".to_owned()));
                    }
                    Some(optional) => {
                        if !policy.optional.iter().any(|n| n == optional) {
                            policy.optional.push(optional.to_owned());
                        }
                        if !names.iter().any(|n| n == optional) {
                            names.push(optional.to_owned());
                        }
                    }
                    None => {
                        if !names.contains(&name) {
                            names.push(name);
                        }
                    }
                }
            }
            if key == "deny" {
                policy.deny = names;
            } else {
                policy.allow = names;
            }
        }
        Ok(policy)
    }
}

/// The tool bound of one agent: a tool name is usable only if every present part
/// permits it. Only ever narrows down a delegation tree (see ARCHITECTURE.md §4).
pub(crate) struct Bound<'a> {
    /// The declaration's allowlist (empty: no allowlist).
    pub(crate) allow: &'a [String],
    /// The workspace policy.
    pub(crate) policy: Option<&'a ToolsPolicy>,
    /// The child's own isolated workspace policy (children only).
    pub(crate) own_policy: Option<&'a ToolsPolicy>,
    /// The parent's callable tools (children only).
    pub(crate) callable: Option<&'a HashSet<String>>,
}

impl Bound<'_> {
    /// Whether `name` is within the bound.
    pub(crate) fn permits(&self, name: &str) -> bool {
        (self.allow.is_empty() || self.allow.iter().any(|a| a == name))
            && self.policy.is_none_or(|p| p.permits(name, DELEGATION_TOOL))
            && self
                .own_policy
                .is_none_or(|p| p.permits(name, DELEGATION_TOOL))
            && self.callable.is_none_or(|c| c.contains(name))
    }
}

/// Fails when a declaration's allowlist names a tool its parent cannot call.
pub(crate) fn check_allowlist(
    id: &str,
    allow: &[String],
    callable: &HashSet<String>,
) -> Result<(), BuildError> {
    if let Some(tool) = allow.iter().find(|t| !callable.contains(t.as_str())) {
        return Err(BuildError::new(
            BuildErrorKind::InvalidDeclaration,
            format!(
                "subagent `{id}`: its allowlist names tool `{tool}`, which its parent cannot call"
            ),
        ));
    }
    Ok(())
}

/// Loads the workspace policy (fails closed) for an agent's builder.
///
/// The workspace must be an existing directory (a mistyped path never means "no policy
/// and no subagents"); inside it, only a `tools.json` with no directory entry at all
/// means "no policy" (see [`ToolsPolicy::load`]).
pub(crate) fn load_policy(workspace: &Path) -> Result<Option<Arc<ToolsPolicy>>, BuildError> {
    match std::fs::metadata(workspace) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => {
            return Err(BuildError::workspace(SpecError::missing(
                workspace,
                "the workspace is not a directory",
            )));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(BuildError::workspace(SpecError::missing(
                workspace,
                "the workspace directory does not exist",
            )));
        }
        Err(e) => return Err(BuildError::workspace(SpecError::io(workspace, &e))),
    }
    ToolsPolicy::load(&workspace.join("tools.json"))
        .map(|p| p.map(Arc::new))
        .map_err(BuildError::workspace)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> ToolsPolicy {
        ToolsPolicy::parse(Path::new("ws/tools.json"), text).unwrap()
    }

    #[test]
    fn an_entry_naming_no_known_tool_fails_naming_file_entry_and_closest_tool() {
        let p = parsed(r#"{"allow": ["lookup"], "deny": ["Refund"]}"#);
        let e = p
            .check_entries(Path::new("ws/tools.json"), ["lookup", "refund"])
            .unwrap_err();
        assert_eq!(e.kind(), BuildErrorKind::Workspace);
        let text = e.to_string();
        for part in [
            "ws/tools.json",
            "deny[0]",
            "`Refund`",
            "did you mean `refund`",
        ] {
            assert!(text.contains(part), "{part}: {text}");
        }
    }

    #[test]
    fn optional_entries_and_the_delegation_tool_need_no_tool_and_still_apply() {
        let p = parsed(r#"{"deny": ["?files__delete", "agent_spawn", " ? later "]}"#);
        assert_eq!(p.deny, ["files__delete", "agent_spawn", "later"]);
        assert_eq!(p.optional, ["files__delete", "later"]);
        p.check_entries(Path::new("tools.json"), ["lookup"])
            .unwrap();
        assert!(!p.permits("files__delete", DELEGATION_TOOL));
        assert!(p.permits("lookup", DELEGATION_TOOL));
    }
}
