//! The declaration registry of a delegation tree: code declarations, factories, the
//! general-purpose subagent, and the Markdown files of `<workspace>/subagents/`.
//!
//! # Change detection
//! The directory is re-scanned by [`Registry::refresh`] (before every reasoning step of
//! an agent with subagents). A file is re-parsed when its *content* changed: every scan
//! reads each `.md` file and compares a 64-bit hash of its bytes (and its length) with
//! the last parse. Size and modification time are not trusted, so an edit that keeps
//! both (`cp -p`, `rsync -t`, a coarse mtime clock) is still seen. The cost is one read
//! of each declaration file per reasoning step; files are small.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashSet};
use std::hash::Hasher;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use indexmap::IndexMap;

use super::delegate::Declared;
use super::spec::{DeclarationSpec, SpecError, markdown_files};
use super::{GENERAL_PURPOSE, SubagentDeclaration, SubagentFactory};
use crate::error::{BuildError, BuildErrorKind};

/// The length and a hash of a file's bytes.
type Fingerprint = (u64, u64);

fn fingerprint(bytes: &[u8]) -> Fingerprint {
    let mut h = DefaultHasher::new();
    h.write(bytes);
    (bytes.len() as u64, h.finish())
}

/// One parsed Markdown declaration file.
struct FileEntry {
    /// `None` when the file could not be read: it is re-read on every scan.
    fingerprint: Option<Fingerprint>,
    version: u64,
    decl: Result<Arc<SubagentDeclaration>, SpecError>,
}

#[derive(Default)]
struct Files {
    /// By agent id (file name without `.md`), sorted.
    entries: BTreeMap<String, FileEntry>,
    next_version: u64,
}

impl Files {
    fn insert(&mut self, id: String, fingerprint: Option<Fingerprint>, decl: Parsed) {
        self.next_version += 1;
        let entry = FileEntry {
            fingerprint,
            version: self.next_version,
            decl: decl.map(|s| Arc::new(SubagentDeclaration::from_spec(s))),
        };
        self.entries.insert(id, entry);
    }
}

type Parsed = Result<DeclarationSpec, SpecError>;

/// One `.md` file of the directory as read now.
struct Read {
    id: String,
    path: PathBuf,
    /// The bytes' fingerprint and the bytes, or why they could not be read.
    content: Result<(Fingerprint, Vec<u8>), SpecError>,
}

/// Reads every `.md` regular file directly in `dir` (sorted by name; none if `dir` is
/// missing).
fn read_dir(dir: &Path) -> Result<Vec<Read>, SpecError> {
    Ok(markdown_files(dir)?
        .into_iter()
        .map(|(name, path, _)| {
            let content = std::fs::read(&path)
                .map(|bytes| (fingerprint(&bytes), bytes))
                .map_err(|e| SpecError::io(&path, &e));
            Read {
                id: name.trim_end_matches(".md").to_owned(),
                path,
                content,
            }
        })
        .collect())
}

fn parse(path: &Path, bytes: Vec<u8>) -> Parsed {
    let text = String::from_utf8(bytes)
        .map_err(|e| SpecError::io(path, &io::Error::new(io::ErrorKind::InvalidData, e)))?;
    DeclarationSpec::parse_markdown(path, &text)
}

/// The declarations of a delegation tree, shared by every agent in it.
pub(crate) struct Registry {
    code: IndexMap<String, Declared>,
    dir: Option<PathBuf>,
    files: Mutex<Files>,
}

impl Registry {
    /// Collects code declarations and the static workspace files. A broken static file
    /// or a duplicate code id fails the build.
    pub(crate) fn new(
        decls: &[SubagentDeclaration],
        factories: &[Arc<dyn SubagentFactory>],
        general_purpose: bool,
        dir: Option<PathBuf>,
    ) -> Result<Self, BuildError> {
        let mut code = IndexMap::new();
        let all = decls
            .iter()
            .map(|d| (d.name.clone(), Declared::Decl(Arc::new(d.clone()))))
            .chain(factories.iter().map(|f| {
                (
                    f.declaration().name.clone(),
                    Declared::Factory(Arc::clone(f)),
                )
            }))
            .chain(general_purpose.then(|| (GENERAL_PURPOSE.to_owned(), Declared::GeneralPurpose)));
        for (id, declared) in all {
            if code.insert(id.clone(), declared).is_some() {
                return Err(BuildError::new(
                    BuildErrorKind::InvalidDeclaration,
                    format!("duplicate subagent id `{id}`"),
                ));
            }
        }
        Self::with_files(code, dir)
    }

    /// The registry of an isolated child's subtree: the tree's code declarations, and
    /// the Markdown files of the child's own `subagents/` folder `dir` instead of its
    /// parent's (static files now, later changes on refresh). A broken file there fails
    /// the child's build.
    pub(crate) fn nested(&self, dir: PathBuf) -> Result<Self, BuildError> {
        Self::with_files(self.code.clone(), Some(dir))
    }

    fn with_files(
        code: IndexMap<String, Declared>,
        dir: Option<PathBuf>,
    ) -> Result<Self, BuildError> {
        let mut files = Files::default();
        if let Some(dir) = &dir {
            for read in read_dir(dir).map_err(BuildError::workspace)? {
                let (fp, bytes) = read.content.map_err(BuildError::workspace)?;
                let spec = parse(&read.path, bytes).map_err(BuildError::workspace)?;
                files.insert(read.id, Some(fp), Ok(spec));
            }
        }
        Ok(Self {
            code,
            dir,
            files: Mutex::new(files),
        })
    }

    fn files(&self) -> MutexGuard<'_, Files> {
        self.files.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Re-scans the declarations directory, re-parsing only files whose content changed
    /// (see the module docs). Broken files are reported with `tracing::error!` and kept
    /// as errors.
    /// Whether declarations can appear while the agent runs (a workspace folder).
    pub(crate) fn dynamic(&self) -> bool {
        self.dir.is_some()
    }

    pub(crate) fn refresh(&self) {
        let Some(dir) = &self.dir else { return };
        let current = match read_dir(dir) {
            Ok(current) => current,
            Err(e) => {
                tracing::error!(error = %e, "cannot re-scan the subagents directory; keeping the last known declarations");
                return;
            }
        };
        let mut files = self.files();
        let ids: HashSet<&str> = current.iter().map(|r| r.id.as_str()).collect();
        files.entries.retain(|id, _| ids.contains(id.as_str()));
        for read in current {
            let (fp, decl) = match read.content {
                Ok((fp, bytes)) => {
                    let unchanged = files
                        .entries
                        .get(&read.id)
                        .is_some_and(|e| e.fingerprint == Some(fp));
                    if unchanged {
                        continue;
                    }
                    (Some(fp), parse(&read.path, bytes))
                }
                Err(e) => (None, Err(e)),
            };
            if let Err(e) = &decl {
                tracing::error!(file = %read.path.display(), error = %e, "invalid subagent declaration");
            }
            files.insert(read.id, fp, decl);
        }
    }

    /// The declaration with this id (code first), with its version.
    pub(crate) fn lookup(&self, id: &str) -> Option<Result<(Declared, u64), SpecError>> {
        if let Some(d) = self.code.get(id) {
            return Some(Ok((d.clone(), 0)));
        }
        let files = self.files();
        let entry = files.entries.get(id)?;
        Some(
            entry
                .decl
                .clone()
                .map(|d| (Declared::Decl(d), entry.version)),
        )
    }

    /// Spawnable ids with descriptions: code declarations in order, then valid files.
    pub(crate) fn listing(&self) -> Vec<(String, String)> {
        self.all()
            .into_iter()
            .map(|(id, d)| {
                let description = d.description();
                (id, description)
            })
            .collect()
    }

    /// Every declaration known now: code declarations in order, then valid files.
    pub(crate) fn all(&self) -> Vec<(String, Declared)> {
        let mut out: Vec<(String, Declared)> = self
            .code
            .iter()
            .map(|(id, d)| (id.clone(), d.clone()))
            .collect();
        for (id, entry) in &self.files().entries {
            if let (false, Ok(d)) = (self.code.contains_key(id), &entry.decl) {
                out.push((id.clone(), Declared::Decl(Arc::clone(d))));
            }
        }
        out
    }
}
