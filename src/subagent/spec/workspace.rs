//! The `workspace` key of a Markdown declaration:
//! `workspace: {mode: isolated|shared, path: rel|abs}`.

use std::path::{Path, PathBuf};

use serde::de::{self, MapAccess, Unexpected};

use crate::strict::{Check, Rule, Site, SpecErrorKind, Text, key_check};
use crate::subagent::{SubagentWorkspace, WorkspaceMode};

const WORKSPACE_KEYS: &[&str] = &["mode", "path"];

/// The `workspace` mapping; a relative `path` resolves against `base` (the workspace that
/// holds the declaration's `subagents/` folder) and must name an existing directory.
pub(super) struct WorkspaceRule<'a> {
    pub(super) base: &'a Path,
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
        Ok(path)
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
            (Some(mode), path) => Ok(SubagentWorkspace { mode, path }),
        }
    }
}
