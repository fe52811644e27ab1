//! The embedded durable store: one JSON file per (user, session) in a directory.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::key::SessionKey;
use super::session::{SessionStore, StoreError, StoreErrorKind, StoredSession, next_version};
use crate::message::Msg;

/// The `format` marker written in every session file.
const FORMAT: &str = "rein-session/1";

/// Longest file stem (bytes) kept as is; longer ones are cut and suffixed with a hash.
const MAX_STEM: usize = 160;

/// Where the kept part of an over-long stem ends.
const CUT_STEM: usize = 100;

/// A [`SessionStore`] that keeps one file per (user, session) in a directory.
///
/// # Files
/// A session is stored in `<dir>/<stem>.json`, where the stem encodes the key:
/// `s-<session>` without a user, `u-<user>.s-<session>` with one. In the encoded ids,
/// ASCII lowercase letters, digits, `_` and `-` stand for themselves and every other
/// byte of their UTF-8 is written `%xx` (lowercase hex) — so a name never contains a
/// path separator, a dot of its own (no `..`, no hidden file) or an upper-case letter
/// (distinct keys stay distinct on case-insensitive file systems). A stem longer than
/// 160 bytes is cut to 100 bytes and suffixed with `~` and a 64-bit hash of the full
/// stem. The file holds the full key, and a file whose key is not the requested one is
/// reported as [`StoreErrorKind::Corrupt`], never read as that session.
///
/// Beside it live `<stem>.lock` (an empty lock file, kept) and, while a save runs,
/// `<stem>.json.tmp`.
///
/// # Atomicity and durability
/// A save takes an exclusive OS file lock on `<stem>.lock` (released by the OS if the
/// process dies), reads the stored version, and fails with
/// [`StoreErrorKind::Conflict`] unless it is the expected one; otherwise it writes the
/// new content to the temporary file, `fsync`s it, renames it over `<stem>.json` and
/// `fsync`s the directory (on Unix). A file that cannot be decoded is never overwritten:
/// loads and saves of that session fail with [`StoreErrorKind::Corrupt`] until it is
/// repaired or removed. A reader therefore sees the old or the new
/// complete file, never a torn one, even if the writer is killed at any moment, and a
/// save that returned `Ok` survives a crash of the process (and, as far as the file
/// system honours `fsync`, of the machine). Two processes sharing the directory never
/// silently overwrite each other: the second saver gets a conflict.
///
/// File I/O runs on tokio's blocking pool when called inside a tokio runtime, and
/// inline otherwise.
///
/// ```
/// use rein::*;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = std::env::temp_dir().join(format!("rein-doc-{}", std::process::id()));
/// let ctx = || RunContext::new().with_user_id("alice").with_session_id("support-42");
///
/// let model = ScriptedModel::new([ScriptedTurn::text("hello"), ScriptedTurn::text("again")]);
/// let agent = Agent::builder()
///     .model(model.clone())
///     .session_store(FileSessionStore::open(&dir)?)
///     .build()?;
/// agent.call_with(vec![Msg::user("hi")], ctx()).await?;
/// drop(agent); // e.g. the process restarts
///
/// let agent = Agent::builder()
///     .model(model)
///     .session_store(FileSessionStore::open(&dir)?)
///     .build()?;
/// agent.call_with(vec![Msg::user("still there?")], ctx()).await?;
/// let history = agent.messages(&SessionKey::new(Some("alice"), "support-42")).await;
/// assert_eq!(history.len(), 4);
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct FileSessionStore {
    dir: Arc<PathBuf>,
    /// The largest session file saved or loaded, in bytes.
    max_bytes: usize,
}

impl FileSessionStore {
    /// A store in `dir`, which is created (with its parents) if it does not exist.
    ///
    /// # Errors
    /// [`StoreErrorKind::Io`] when the directory cannot be created or is not a directory.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Self, StoreError> {
        let dir = dir.into();
        fs::create_dir_all(&dir).map_err(|e| {
            StoreError::unkeyed(
                StoreErrorKind::Io,
                format!("cannot create the session directory {}: {e}", dir.display()),
            )
            .with_source(e)
        })?;
        if !dir.is_dir() {
            return Err(StoreError::unkeyed(
                StoreErrorKind::Io,
                format!("{} is not a directory", dir.display()),
            ));
        }
        Ok(Self {
            dir: Arc::new(dir),
            max_bytes: super::storable::DEFAULT_MAX_SESSION_BYTES,
        })
    }

    /// Sets the largest session this store saves or loads, in bytes of the session file
    /// (default [`DEFAULT_MAX_SESSION_BYTES`](crate::store::DEFAULT_MAX_SESSION_BYTES),
    /// 32 MiB). A larger save fails with [`StoreErrorKind::TooLarge`] and writes
    /// nothing; a larger file fails its load the same way, before it is read.
    #[must_use]
    pub fn max_session_bytes(mut self, bytes: usize) -> Self {
        self.max_bytes = bytes;
        self
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file a session is stored in (whether or not it exists yet).
    pub fn path_of(&self, key: &SessionKey) -> PathBuf {
        self.dir.join(format!("{}.json", file_stem(key)))
    }

    /// Reads a session file as [`FileSessionStore::load`] would, without a key check:
    /// the key it holds and the stored session. Useful to inspect or verify a directory.
    ///
    /// # Errors
    /// [`StoreErrorKind::Io`] when the file cannot be read, [`StoreErrorKind::Corrupt`]
    /// when it is not a complete session file.
    pub fn read_file(path: &Path) -> Result<(SessionKey, StoredSession), StoreError> {
        let bytes = fs::read(path).map_err(|e| {
            StoreError::unkeyed(
                StoreErrorKind::Io,
                format!("cannot read {}: {e}", path.display()),
            )
            .with_source(e)
        })?;
        let file = decode(&bytes).map_err(|e| {
            StoreError::unkeyed(
                StoreErrorKind::Corrupt,
                format!("{} is not a session file: {e}", path.display()),
            )
        })?;
        let key = SessionKey {
            user_id: file.user_id,
            session_id: file.session_id,
        };
        Ok((key, StoredSession::new(file.messages, file.version)))
    }

    fn paths(&self, key: &SessionKey) -> Paths {
        let stem = file_stem(key);
        Paths {
            dir: self.dir.to_path_buf(),
            data: self.dir.join(format!("{stem}.json")),
            tmp: self.dir.join(format!("{stem}.json.tmp")),
            lock: self.dir.join(format!("{stem}.lock")),
        }
    }
}

impl SessionStore for FileSessionStore {
    async fn load(&self, key: &SessionKey) -> Result<StoredSession, StoreError> {
        super::storable::check_key(key)?;
        let paths = self.paths(key);
        let owned = key.clone();
        let max = self.max_bytes;
        blocking(key, move || load_file(&owned, &paths.data, max)).await
    }

    async fn save(
        &self,
        key: &SessionKey,
        messages: &[Msg],
        expected_version: u64,
    ) -> Result<u64, StoreError> {
        {
            super::storable::check_key(key)?;
            super::storable::check_storable(key, messages)?;
            let version = next_version(key, expected_version)?;
            let bytes = serde_json::to_vec(&FileOut {
                format: FORMAT,
                version,
                user_id: key.user_id.as_deref(),
                session_id: &key.session_id,
                messages,
            })
            .map_err(|e| {
                StoreError::new(key, format!("cannot encode the conversation: {e}")).with_source(e)
            })?;
            super::storable::check_size(key, &bytes, self.max_bytes)?;
            let paths = self.paths(key);
            let owned = key.clone();
            blocking(key, move || {
                save_file(&owned, &paths, &bytes, expected_version, version)
            })
            .await
        }
    }
}

/// Runs blocking file I/O on tokio's blocking pool when a runtime is present, inline
/// otherwise.
async fn blocking<T: Send + 'static>(
    key: &SessionKey,
    f: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => handle.spawn_blocking(f).await.map_err(|e| {
            StoreError::with_kind(
                StoreErrorKind::Io,
                key,
                format!("the file I/O task did not complete: {e}"),
            )
        })?,
        Err(_) => f(),
    }
}

struct Paths {
    dir: PathBuf,
    data: PathBuf,
    tmp: PathBuf,
    lock: PathBuf,
}

#[derive(Serialize)]
struct FileOut<'a> {
    format: &'static str,
    version: u64,
    user_id: Option<&'a str>,
    session_id: &'a str,
    messages: &'a [Msg],
}

#[derive(Deserialize)]
struct FileIn {
    format: String,
    version: u64,
    user_id: Option<String>,
    session_id: String,
    messages: Vec<Msg>,
}

fn decode(bytes: &[u8]) -> Result<FileIn, String> {
    let file: FileIn = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    if file.format != FORMAT {
        return Err(format!(
            "unknown format `{}` (expected `{FORMAT}`)",
            file.format
        ));
    }
    if file.version == 0 {
        return Err("version 0 is never written".to_owned());
    }
    Ok(file)
}

fn io_error(key: &SessionKey, what: &str, path: &Path, e: io::Error) -> StoreError {
    StoreError::with_kind(
        StoreErrorKind::Io,
        key,
        format!("cannot {what} {}: {e}", path.display()),
    )
    .with_source(e)
}

/// The stored session at `path`, or version 0 when the file does not exist.
fn load_file(key: &SessionKey, path: &Path, max: usize) -> Result<StoredSession, StoreError> {
    match fs::metadata(path) {
        Ok(meta) if meta.len() > max as u64 => {
            return Err(super::storable::too_large(key, "loading", meta.len(), max));
        }
        _ => {}
    }
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(StoredSession::default()),
        Err(e) => return Err(io_error(key, "read", path, e)),
    };
    let file = decode(&bytes).map_err(|e| {
        StoreError::with_kind(
            StoreErrorKind::Corrupt,
            key,
            format!("{} is not a session file: {e}", path.display()),
        )
    })?;
    if file.user_id != key.user_id || file.session_id != key.session_id {
        let other = SessionKey {
            user_id: file.user_id,
            session_id: file.session_id,
        };
        return Err(StoreError::with_kind(
            StoreErrorKind::Corrupt,
            key,
            format!("{} holds another session (`{other}`)", path.display()),
        ));
    }
    Ok(StoredSession::new(file.messages, file.version))
}

/// The header of a session file (the messages are skipped, not decoded).
#[derive(Deserialize)]
struct Header {
    format: String,
    version: u64,
    user_id: Option<String>,
    session_id: String,
}

/// The version stored at `path` (0 when there is no file), checking the format and key.
fn stored_version(key: &SessionKey, path: &Path) -> Result<u64, StoreError> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(io_error(key, "read", path, e)),
    };
    let corrupt = |what: String| {
        StoreError::with_kind(
            StoreErrorKind::Corrupt,
            key,
            format!(
                "{} is not a session file ({what}); it is never overwritten",
                path.display()
            ),
        )
    };
    let header: Header = serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
    if header.format != FORMAT || header.version == 0 {
        return Err(corrupt(format!(
            "format `{}`, version {}",
            header.format, header.version
        )));
    }
    if header.user_id != key.user_id || header.session_id != key.session_id {
        return Err(corrupt("it holds another session".to_owned()));
    }
    Ok(header.version)
}

/// Lock, compare versions, write the temp file, fsync, rename, fsync the directory.
fn save_file(
    key: &SessionKey,
    paths: &Paths,
    bytes: &[u8],
    expected: u64,
    version: u64,
) -> Result<u64, StoreError> {
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&paths.lock)
        .map_err(|e| io_error(key, "open the lock file", &paths.lock, e))?;
    // Released when `lock` is closed (or the process dies).
    lock.lock()
        .map_err(|e| io_error(key, "lock", &paths.lock, e))?;
    let found = stored_version(key, &paths.data)?;
    if found != expected {
        return Err(StoreError::conflict(key, expected, found));
    }
    let written = write_synced(&paths.tmp, bytes)
        .map_err(|e| io_error(key, "write", &paths.tmp, e))
        .and_then(|()| {
            fs::rename(&paths.tmp, &paths.data)
                .map_err(|e| io_error(key, "rename into place", &paths.data, e))
        });
    if let Err(e) = written {
        // Best effort: the temp file is rewritten by the next save anyway.
        let _ = fs::remove_file(&paths.tmp);
        return Err(e);
    }
    sync_dir(&paths.dir).map_err(|e| io_error(key, "sync the directory", &paths.dir, e))?;
    drop(lock);
    Ok(version)
}

fn write_synced(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file = File::create(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

#[cfg(unix)]
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> io::Result<()> {
    // Directory handles cannot be synced portably elsewhere; the rename is still atomic.
    Ok(())
}

/// The file stem of a key (see [`FileSessionStore`]).
pub(crate) fn file_stem(key: &SessionKey) -> String {
    let mut stem = String::new();
    if let Some(user) = &key.user_id {
        stem.push_str("u-");
        encode_id(&mut stem, user);
        stem.push('.');
    }
    stem.push_str("s-");
    encode_id(&mut stem, &key.session_id);
    if stem.len() > MAX_STEM {
        let hash = fnv1a(stem.as_bytes());
        // The stem is ASCII, so any byte index is a char boundary.
        stem.truncate(CUT_STEM);
        stem.push_str(&format!("~{hash:016x}"));
    }
    stem
}

fn encode_id(out: &mut String, id: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for b in id.bytes() {
        match b {
            b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' => out.push(char::from(b)),
            _ => {
                out.push('%');
                out.push(char::from(HEX[usize::from(b >> 4)]));
                out.push(char::from(HEX[usize::from(b & 0xf)]));
            }
        }
    }
}

/// 64-bit FNV-1a.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stem(user: Option<&str>, session: &str) -> String {
        file_stem(&SessionKey::new(user, session))
    }

    #[test]
    fn file_names_never_contain_separators_dots_or_upper_case() {
        for s in [
            "../../etc/passwd",
            "a/b",
            "a\\b",
            ".hidden",
            "..",
            "CON",
            "Ab",
            "é",
            "",
        ] {
            let name = stem(Some(s), s);
            assert!(
                name.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-%.~".contains(&b)),
                "{name}"
            );
            assert!(!name.contains(".."), "{name}");
            assert!(!name.starts_with('.'), "{name}");
            assert_eq!(name.matches('.').count(), 1, "{name}");
        }
    }

    #[test]
    fn distinct_keys_get_distinct_file_names() {
        let keys = [
            stem(None, "a"),
            stem(Some(""), "a"),
            stem(Some("a"), ""),
            stem(None, "A"),
            stem(None, "%41"),
            stem(Some("a.s-b"), "c"),
            stem(Some("a"), "b.s-c"),
        ];
        let unique: std::collections::HashSet<_> = keys.iter().collect();
        assert_eq!(unique.len(), keys.len(), "{keys:?}");
    }

    #[test]
    fn over_long_ids_get_bounded_hashed_names() {
        let long = "x".repeat(1000);
        let a = stem(None, &long);
        let b = stem(None, &format!("{long}y"));
        assert!(a.len() <= CUT_STEM + 17, "{}", a.len());
        assert_ne!(a, b);
    }
}
