//! The `workspace` key of a Markdown declaration:
//! `workspace: {mode: isolated|shared, path: rel|abs}`.

use std::collections::HashSet;
use std::collections::hash_map::DefaultHasher;
use std::fs;
use std::hash::Hasher;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::de::{self, MapAccess, Unexpected};

use super::scan_subagents_dir;
use crate::error::{BuildError, BuildErrorKind};
use crate::strict::{Check, Rule, Site, SpecError, SpecErrorKind, Text, key_check};
use crate::subagent::{GENERAL_PURPOSE, SubagentWorkspace, WorkspaceMode};
use crate::tool::policy::{DELEGATION_TOOL, ToolsPolicy, load_policy};

const WORKSPACE_KEYS: &[&str] = &["mode", "path"];

/// The `workspace` mapping; a relative `path` resolves against `base` (the workspace that
/// holds the declaration's `subagents/` folder) and must name an existing directory; the
/// result is made absolute, so it never depends on how the workspace was named.
pub(super) struct WorkspaceRule<'a> {
    pub(super) base: &'a Path,
    /// The declaration's id: `general-purpose` is always shared.
    pub(super) id: &'a str,
}

struct Mode;

impl Rule for Mode {
    type Out = WorkspaceMode;

    fn expected(&self) -> &'static str {
        "`isolated` or `shared`"
    }

    fn str<E: de::Error>(self, at: Site<'_>, v: &str) -> Result<WorkspaceMode, E> {
        match v.trim() {
            "isolated" => Ok(WorkspaceMode::Isolated),
            "shared" => Ok(WorkspaceMode::Shared),
            _ => Err(at.reject(self.expected(), Unexpected::Str(v))),
        }
    }
}

/// An existing directory, resolved against `base` when relative.
struct Dir<'a>(&'a Path);

impl Rule for Dir<'_> {
    type Out = PathBuf;

    fn expected(&self) -> &'static str {
        "a directory path"
    }

    fn str<E: de::Error>(self, at: Site<'_>, v: &str) -> Result<PathBuf, E> {
        let text = Text.str::<E>(at, v)?;
        let path = self.0.join(&text);
        if !path.is_dir() {
            return Err(at.ctx.fail(
                SpecErrorKind::Missing,
                at.key,
                format!("`{}` is not an existing directory", path.display()),
            ));
        }
        Ok(std::path::absolute(&path).unwrap_or(path))
    }
}

impl Rule for WorkspaceRule<'_> {
    type Out = SubagentWorkspace;

    fn expected(&self) -> &'static str {
        "a mapping with `mode` (isolated or shared) and, for isolated, `path`"
    }

    fn map<'de, A: MapAccess<'de>>(
        self,
        at: Site<'_>,
        mut map: A,
    ) -> Result<SubagentWorkspace, A::Error> {
        let ctx = at.ctx;
        let mut seen = Vec::new();
        let (mut mode, mut path) = (None, None);
        while let Some(key) = map.next_key_seed(key_check(ctx, WORKSPACE_KEYS, &seen))? {
            seen.push(key);
            let dotted = format!("workspace.{key}");
            let site = Site::key(ctx, &dotted);
            match key {
                "mode" => mode = Some(map.next_value_seed(Check::new(site, Mode))?),
                _ => path = Some(map.next_value_seed(Check::new(site, Dir(self.base)))?),
            }
        }
        match (mode, path) {
            (None, _) => Err(ctx.fail(
                SpecErrorKind::MissingKey,
                Some("workspace.mode"),
                "required: `isolated` or `shared`".to_owned(),
            )),
            (Some(WorkspaceMode::Isolated), None) => Err(ctx.fail(
                SpecErrorKind::MissingKey,
                Some("workspace.path"),
                "required for an isolated workspace".to_owned(),
            )),
            (Some(WorkspaceMode::Shared), Some(_)) => Err(Site::key(ctx, "workspace.path")
                .invalid("not allowed for a shared workspace".to_owned())),
            (Some(WorkspaceMode::Isolated), Some(_)) if self.id == GENERAL_PURPOSE => {
                Err(Site::key(ctx, "workspace.mode").invalid(format!(
                    "`{GENERAL_PURPOSE}` always shares its parent's workspace; use `shared`"
                )))
            }
            (Some(mode), path) => Ok(SubagentWorkspace { mode, path }),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// A child's isolated root at run time
// ---------------------------------------------------------------------------------------------

/// The isolated root of the subagent `id`, a relative path resolved against the
/// delegating agent's workspace `parent_ws`; `None` for a shared or absent workspace.
///
/// # Errors
/// [`BuildErrorKind::InvalidDeclaration`] for a relative path when the delegating agent
/// has no workspace.
pub(crate) fn isolated_root(
    id: &str,
    ws: Option<&SubagentWorkspace>,
    parent_ws: Option<&Path>,
) -> Result<Option<PathBuf>, BuildError> {
    let Some(SubagentWorkspace {
        mode: WorkspaceMode::Isolated,
        path: Some(path),
    }) = ws
    else {
        return Ok(None);
    };
    if path.is_absolute() {
        return Ok(Some(path.clone()));
    }
    match parent_ws {
        Some(ws) => Ok(Some(ws.join(path))),
        None => Err(BuildError::new(
            BuildErrorKind::InvalidDeclaration,
            format!(
                "subagent `{id}`: its workspace path `{}` is relative, but its parent has no \
                 workspace to resolve it against",
                path.display()
            ),
        )),
    }
}

/// The policy of an isolated child root: fails closed like the parent's (a missing root,
/// an unreadable, dangling or malformed `tools.json` is an error naming the path; only no
/// `tools.json` entry at all is "no policy"), and may not declare MCP servers (only the
/// top-level agent connects them).
///
/// # Errors
/// [`BuildErrorKind::Workspace`] for the policy file or root, [`BuildErrorKind::InvalidConfig`]
/// for `mcpServers`.
pub(crate) fn child_policy(id: &str, root: &Path) -> Result<Option<Arc<ToolsPolicy>>, BuildError> {
    let policy = load_policy(root)?;
    if let Some(p) = &policy
        && !p.mcp_servers.is_empty()
    {
        return Err(BuildError::new(
            BuildErrorKind::InvalidConfig,
            format!(
                "subagent `{id}`: `{}` declares MCP servers; only the top-level agent can",
                root.join("tools.json").display()
            ),
        ));
    }
    Ok(policy)
}

/// Checks that every `allow`/`deny` entry of an isolated child's own `tools.json`
/// (`policy`, read from `root`) names a tool the child could have: one its parent can
/// call (`callable`), or one the parent's own policy already names (a child may repeat
/// its parent's denials). Entries written `?name` may match nothing.
///
/// # Errors
/// [`BuildErrorKind::Workspace`] naming the file, the entry and the closest tool.
pub(crate) fn check_child_policy_entries(
    root: &Path,
    policy: Option<&ToolsPolicy>,
    callable: &HashSet<String>,
    parent_policy: Option<&ToolsPolicy>,
) -> Result<(), BuildError> {
    let Some(policy) = policy else {
        return Ok(());
    };
    let inherited = parent_policy
        .into_iter()
        .flat_map(|p| p.allow.iter().chain(&p.deny));
    let known: Vec<&str> = callable
        .iter()
        .chain(inherited)
        .map(String::as_str)
        .collect();
    policy.check_entries(&root.join("tools.json"), known.iter().copied())
}

/// `<root>/AGENTS.md`, trimmed, the prompt base of an isolated child; `None` when there is
/// no entry at all or it is blank.
///
/// # Errors
/// [`BuildErrorKind::Workspace`] when an entry exists but cannot be read (a dangling link,
/// a directory, permissions, invalid UTF-8).
pub(crate) fn read_agents_md(root: &Path) -> Result<Option<String>, BuildError> {
    let path = root.join("AGENTS.md");
    match fs::read_to_string(&path) {
        Ok(text) => Ok(Some(text.trim().to_owned()).filter(|t| !t.is_empty())),
        Err(e) if e.kind() == io::ErrorKind::NotFound && fs::symlink_metadata(&path).is_err() => {
            Ok(None)
        }
        Err(e) => Err(BuildError::workspace(SpecError::io(&path, &e))),
    }
}

/// The cache version of a built child: its declaration's `version`, combined — for an
/// isolated child — with a hash of what it took from its `root` (`tools.json` and
/// `AGENTS.md`, contents or read failure). When it changes the child is rebuilt, so an
/// edited child policy applies from the next spawn and a policy broken since fails it.
pub(crate) fn root_stamp(version: u64, root: Option<&Path>) -> u64 {
    let Some(root) = root else {
        return version;
    };
    let mut h = DefaultHasher::new();
    h.write_u64(version);
    for name in ["tools.json", "AGENTS.md"] {
        match fs::read(root.join(name)) {
            Ok(bytes) => {
                h.write_u8(1);
                h.write(&bytes);
            }
            Err(e) => {
                h.write_u8(2);
                h.write(format!("{:?}", e.kind()).as_bytes());
            }
        }
        h.write_u8(0xff);
    }
    h.finish()
}

/// The `subagents/` folder an isolated child reads its nested declarations from: only a
/// child whose allowlist names the delegation tool delegates, so only its folder is read.
pub(crate) fn nested_dir(root: Option<&Path>, allow: &[String]) -> Option<PathBuf> {
    let delegates = allow.iter().any(|t| t == DELEGATION_TOOL);
    root.filter(|_| delegates).map(|r| r.join("subagents"))
}

/// Checks an isolated child root at the top-level agent's build, so a static declaration
/// with a broken child workspace fails the build rather than its first spawn: the root's
/// policy and `AGENTS.md`, and — when the child delegates (`allow` names the delegation
/// tool) and `levels` (how many delegation levels remain below it) is positive — every
/// declaration in its `subagents/` folder, recursively. `seen` skips roots already checked
/// the same way (with or without their folder).
///
/// # Errors
/// As [`child_policy`] and [`read_agents_md`]; a nested declaration file that cannot be
/// read or parsed is [`BuildErrorKind::Workspace`] naming it.
pub(crate) fn check_child_root(
    id: &str,
    root: &Path,
    allow: &[String],
    levels: u32,
    seen: &mut HashSet<(PathBuf, bool)>,
) -> Result<(), BuildError> {
    let dir = nested_dir(Some(root), allow).filter(|_| levels > 0);
    if !seen.insert((root.to_path_buf(), dir.is_some())) {
        return Ok(());
    }
    child_policy(id, root)?;
    read_agents_md(root)?;
    let Some(dir) = dir else {
        return Ok(());
    };
    for spec in scan_subagents_dir(&dir).map_err(BuildError::workspace)? {
        let spec = spec.map_err(BuildError::workspace)?;
        if let Some(nested) = isolated_root(&spec.id, spec.workspace.as_ref(), Some(root))? {
            check_child_root(&spec.id, &nested, &spec.tools, levels - 1, seen)?;
        }
    }
    Ok(())
}
