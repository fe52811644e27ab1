//! [`JsonlAuditSink`]: one JSON object per line, written by a dedicated thread, with an
//! explicit [`Durability`] policy and counts that match the file exactly.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use super::{AuditRecord, AuditSink, AuditSinkError};
use rein_core::BuildError;

/// When a [`JsonlAuditSink`] forces its records to stable storage (`fsync`, precisely
/// `fdatasync`) on its own. Whatever the policy, a record counts as written once the
/// operating system accepted all its bytes, so it survives a crash of the *process*
/// (`SIGKILL`, a panic, an abort); the policy is about surviving a crash of the
/// *machine* (power loss, kernel panic).
///
/// [`AuditSink::flush`] (and so [`AuditHook::flush`](super::AuditHook::flush)) always
/// syncs, whatever the policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Durability {
    /// Sync after every record, before acknowledging it: an acknowledged record
    /// ([`AuditStats::written`](super::AuditStats::written)) is on stable storage. Costs one
    /// `fdatasync` per record (from microseconds on tmpfs to several milliseconds on a
    /// disk), which with `on_full = wait` becomes backpressure on the calls once the
    /// queue is full. Choose it when every record must survive a power loss.
    EveryRecord,
    /// Sync at most `max_delay_ms` after the first record not yet synced (and when
    /// the sink is dropped). A power loss loses at most the last `max_delay_ms` of
    /// records; costs at most one sync per interval. The default, with 1000 ms:
    /// bounded loss for a negligible cost, where `None` would leave it to the
    /// kernel's write-back (about 30 s on Linux) and `EveryRecord` would make the
    /// disk's sync latency the audit throughput.
    Batched {
        /// The longest a written record waits for its sync, in milliseconds (0 syncs
        /// after every record, like `EveryRecord`, but without failing the record
        /// when the sync fails).
        max_delay_ms: u64,
    },
    /// Never sync on its own; only [`AuditSink::flush`] does. Records reach the disk
    /// when the kernel writes them back.
    None,
}

impl Default for Durability {
    /// `Batched { max_delay_ms: 1000 }`.
    fn default() -> Self {
        Durability::Batched { max_delay_ms: 1000 }
    }
}

/// Appends one JSON object per line to a file (or any [`Write`] target).
///
/// **Off the agent's path.** Every write, sync and flush is done by a dedicated
/// thread (`rein-audit-jsonl`) that owns the file; [`write`](AuditSink::write) hands
/// the record over and awaits the thread's answer, so a stalled pipe or a hung mount
/// blocks that thread only, never a tokio worker — not even on a `current_thread`
/// runtime. With the [`AuditHook`](super::AuditHook)'s queue in between, a stalled sink
/// costs the agent nothing until the queue (`queue_capacity`) is full; then
/// `on_full = wait` makes calls wait (asynchronously: timeouts still fire) for room,
/// and `on_full = drop` drops and counts records.
///
/// **Exact counts.** A record is acknowledged (`Ok`, counted as written) only once the
/// operating system accepted every byte of its line. A write that fails part-way is
/// taken back: on a regular file the partial bytes are truncated away, so the file
/// holds exactly the acknowledged records; where that is impossible (a pipe, a
/// device, a [`Write`] target) the next line starts with a newline, so the fragment
/// stays a line of its own and is never merged with a record. Nothing unacknowledged
/// is kept and written later (no buffering across records). Truncation assumes this
/// sink is the only writer of the file.
///
/// **Durability** per [`Durability`] (default: batched, at most 1 s).
///
/// **Crash recovery.** On open, a file whose last line has no trailing newline (torn
/// by a crash or a full disk) is detected ([`recovered_torn_tail`](Self::recovered_torn_tail),
/// and a warning on the `rein::audit` target): the torn line is kept as is, as
/// evidence, and the first record written starts with a newline, so every complete
/// line stays one record and the torn one never merges with the next.
///
/// When the sink is dropped its thread writes what was handed over, syncs (unless the
/// policy is `None`) and ends; a thread blocked on a write that never returns stays
/// blocked, and nothing else.
#[derive(Debug)]
pub struct JsonlAuditSink {
    path: PathBuf,
    durability: Durability,
    recovered_torn_tail: bool,
    jobs: mpsc::Sender<Job>,
}

/// What the writer thread is asked to do: write records (one result per record, in
/// order) or sync.
enum Job {
    Write(Vec<AuditRecord>, oneshot::Sender<Vec<std::io::Result<()>>>),
    Flush(oneshot::Sender<std::io::Result<()>>),
}

/// The writer thread is gone (it panicked, or could not be reached).
fn gone() -> AuditSinkError {
    AuditSinkError::new("the JSONL audit writer thread is gone")
}

impl JsonlAuditSink {
    /// Opens `path` for appending, creating it if needed, with the default
    /// [`Durability`] (batched, at most 1 s).
    ///
    /// # Errors
    /// The I/O error of opening the file, reading its last byte, or starting the
    /// writer thread.
    pub fn open(path: impl AsRef<Path>) -> std::io::Result<Self> {
        Self::open_with(path, Durability::default())
    }

    /// [`open_with`](Self::open_with) for a configured sink
    /// ([`AuditSinkConfig::Jsonl`](super::AuditSinkConfig::Jsonl)).
    ///
    /// # Errors
    /// [`BuildError`] at `audit.sink.path` when the file cannot be opened.
    pub(crate) fn open_configured(path: &Path, durability: Durability) -> Result<Self, BuildError> {
        Self::open_with(path, durability).map_err(|e| {
            BuildError::invalid_config(
                "audit.sink.path",
                format!("cannot open `{}`: {e}", path.display()),
            )
        })
    }

    /// Opens `path` for appending, creating it if needed, syncing per `durability`.
    /// Opening blocks the calling thread (open it at startup, not on a hot path).
    ///
    /// # Errors
    /// The I/O error of opening the file, reading its last byte, or starting the
    /// writer thread.
    pub fn open_with(path: impl AsRef<Path>, durability: Durability) -> std::io::Result<Self> {
        let path = path.as_ref().to_path_buf();
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)?;
        let regular = file.metadata()?.is_file();
        let torn = regular && torn_tail(&path)?;
        if torn {
            tracing::warn!(
                target: "rein::audit",
                path = %path.display(),
                "the audit file ends with a torn line (no trailing newline); it is kept, \
                 and the next record starts on a new line"
            );
        }
        Self::start(path, Target::File { file, regular }, durability, torn)
    }

    /// A sink appending to `writer` (standard output, a socket, a test double) on its
    /// own thread, syncing per `durability` (a sync is [`Write::flush`]). A write that
    /// fails part-way cannot be taken back here: the next line starts with a newline.
    /// [`path`](Self::path) is empty.
    ///
    /// # Errors
    /// The I/O error of starting the writer thread.
    pub fn from_writer(
        writer: impl Write + Send + 'static,
        durability: Durability,
    ) -> std::io::Result<Self> {
        Self::start(
            PathBuf::new(),
            Target::Writer(Box::new(writer)),
            durability,
            false,
        )
    }

    fn start(
        path: PathBuf,
        target: Target,
        durability: Durability,
        torn: bool,
    ) -> std::io::Result<Self> {
        let (jobs, rx) = mpsc::channel();
        let appender = Appender {
            target,
            torn,
            buf: Vec::new(),
            ends: Vec::new(),
            durability,
            unsynced_since: None,
        };
        std::thread::Builder::new()
            .name("rein-audit-jsonl".to_owned())
            .spawn(move || appender.run(&rx))?;
        Ok(Self {
            path,
            durability,
            recovered_torn_tail: torn,
            jobs,
        })
    }

    /// The file's path (empty for [`from_writer`](Self::from_writer)).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The durability policy.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// Whether the file ended with a torn line (no trailing newline) when it was opened.
    pub fn recovered_torn_tail(&self) -> bool {
        self.recovered_torn_tail
    }

    /// Hands `records` to the thread and awaits one result per record.
    async fn write_lines(
        &self,
        records: Vec<AuditRecord>,
    ) -> Result<Vec<std::io::Result<()>>, AuditSinkError> {
        let (tx, rx) = oneshot::channel();
        self.jobs
            .send(Job::Write(records, tx))
            .map_err(|_| gone())?;
        rx.await.map_err(|_| gone())
    }
}

impl AuditSink for JsonlAuditSink {
    /// Resolves once the line's bytes were all accepted by the operating system (and,
    /// with [`Durability::EveryRecord`], synced); an error means none of its bytes
    /// remain in a regular file.
    async fn write(&self, record: AuditRecord) -> Result<(), AuditSinkError> {
        let mut results = self.write_lines(vec![record]).await?;
        results
            .pop()
            .unwrap_or_else(|| Err(std::io::Error::other("no result")))?;
        Ok(())
    }

    /// Writes the lines with as few system calls as the operating system allows and,
    /// with [`Durability::EveryRecord`], one sync for the batch before acknowledging
    /// it. Each record's result is as for [`write`](AuditSink::write): `Ok` once all
    /// the bytes of its line were accepted (and synced, under `EveryRecord`); a failure
    /// part-way acknowledges the complete lines before it and takes back the rest.
    async fn write_batch(&self, records: Vec<AuditRecord>) -> Vec<Result<(), AuditSinkError>> {
        let n = records.len();
        match self.write_lines(records).await {
            Ok(results) => results
                .into_iter()
                .map(|r| r.map_err(AuditSinkError::from))
                .collect(),
            Err(e) => (0..n)
                .map(|_| Err(AuditSinkError::new(e.message())))
                .collect(),
        }
    }

    /// Syncs the file (whatever the [`Durability`]): every record acknowledged before
    /// this call is on stable storage when it resolves `Ok`.
    async fn flush(&self) -> Result<(), AuditSinkError> {
        let (tx, rx) = oneshot::channel();
        self.jobs.send(Job::Flush(tx)).map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?.map_err(Into::into)
    }
}

/// Whether the file at `path` is non-empty and does not end with a newline.
fn torn_tail(path: &Path) -> std::io::Result<bool> {
    let mut file = std::fs::File::open(path)?;
    if file.metadata()?.len() == 0 {
        return Ok(false);
    }
    file.seek(SeekFrom::End(-1))?;
    let mut last = [0u8; 1];
    file.read_exact(&mut last)?;
    Ok(last[0] != b'\n')
}

/// Where the thread writes.
enum Target {
    File {
        file: std::fs::File,
        /// A regular file: can be truncated and synced (not a pipe or a device).
        regular: bool,
    },
    Writer(Box<dyn Write + Send>),
}

impl Target {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        match self {
            Target::File { file, .. } => file.write(bytes),
            Target::Writer(w) => w.write(bytes),
        }
    }

    fn sync(&mut self) -> std::io::Result<()> {
        match self {
            Target::File { file, regular } => {
                if *regular {
                    file.sync_data()
                } else {
                    Ok(())
                }
            }
            Target::Writer(w) => w.flush(),
        }
    }

    /// Removes the last `n` bytes of a regular file. `false` when that is impossible.
    fn retract(&mut self, n: usize) -> bool {
        let Target::File {
            file,
            regular: true,
        } = self
        else {
            return false;
        };
        let n = u64::try_from(n).unwrap_or(u64::MAX);
        match file.metadata() {
            Ok(meta) if meta.len() >= n => file.set_len(meta.len() - n).is_ok(),
            _ => false,
        }
    }
}

/// The writer thread's state.
struct Appender {
    target: Target,
    /// The target ends with an incomplete line: the next line starts with a newline.
    torn: bool,
    /// The bytes of the lines being written (reused; never carried to the next batch).
    buf: Vec<u8>,
    /// Where each line of `buf` ends (one past its newline).
    ends: Vec<usize>,
    durability: Durability,
    /// When the oldest written but not yet synced record was written.
    unsynced_since: Option<Instant>,
}

impl Appender {
    fn run(mut self, jobs: &mpsc::Receiver<Job>) {
        loop {
            let deadline = match (self.durability, self.unsynced_since) {
                (Durability::Batched { max_delay_ms }, Some(since)) => {
                    Some(since + Duration::from_millis(max_delay_ms))
                }
                _ => None,
            };
            let job = match deadline {
                Some(deadline) => {
                    match jobs.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                        Ok(job) => job,
                        Err(RecvTimeoutError::Timeout) => {
                            self.background_sync();
                            continue;
                        }
                        Err(RecvTimeoutError::Disconnected) => break,
                    }
                }
                None => match jobs.recv() {
                    Ok(job) => job,
                    Err(_) => break,
                },
            };
            match job {
                Job::Write(records, ack) => {
                    let results = self.append(&records);
                    drop(records);
                    // The waiting side may be gone (a cancelled write): nothing to tell.
                    let _ = ack.send(results);
                }
                Job::Flush(ack) => {
                    let _ = ack.send(self.sync());
                }
            }
        }
        if self.unsynced_since.is_some() && self.durability != Durability::None {
            self.background_sync();
        }
    }

    fn sync(&mut self) -> std::io::Result<()> {
        self.target.sync()?;
        self.unsynced_since = None;
        Ok(())
    }

    /// A sync nobody waits for: a failure is logged.
    fn background_sync(&mut self) {
        if let Err(e) = self.sync() {
            self.unsynced_since = None;
            tracing::error!(target: "rein::audit", error = %e, "syncing the audit file failed");
        }
    }

    /// Writes the records as one line each, with one write (as far as the operating
    /// system takes it) and at most one sync. Returns one result per record: the
    /// complete lines before a failed write are acknowledged, the partly written line
    /// after them is taken back (or, where that is impossible, the target is marked
    /// torn) and it and the rest fail. A failed `EveryRecord` sync takes back and fails
    /// every line of the batch.
    fn append(&mut self, records: &[AuditRecord]) -> Vec<std::io::Result<()>> {
        if records.is_empty() {
            return Vec::new();
        }
        self.buf.clear();
        self.ends.clear();
        if self.torn {
            self.buf.push(b'\n');
        }
        for record in records {
            let start = self.buf.len();
            if serde_json::to_writer(&mut self.buf, record).is_err() {
                self.buf.truncate(start);
                self.buf.extend_from_slice(record.to_json_line().as_bytes());
            }
            self.buf.push(b'\n');
            self.ends.push(self.buf.len());
        }
        let mut done = 0;
        let mut failure = None;
        while done < self.buf.len() {
            match self.target.write(&self.buf[done..]) {
                Ok(0) => {
                    failure = Some(std::io::Error::from(std::io::ErrorKind::WriteZero));
                    break;
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        // The complete lines, and the bytes they span.
        let complete = self.ends.iter().take_while(|&&end| end <= done).count();
        let kept = complete.checked_sub(1).map_or(0, |last| self.ends[last]);
        let mut stuck = false;
        if done > kept {
            stuck = !self.take_back(done, done - kept);
        }
        let synced = if kept == 0 {
            Ok(())
        } else {
            match self.durability {
                Durability::EveryRecord => self.sync(),
                Durability::Batched { max_delay_ms: 0 } => {
                    self.background_sync();
                    Ok(())
                }
                _ => {
                    self.unsynced_since.get_or_insert_with(Instant::now);
                    Ok(())
                }
            }
        };
        let ok_lines = match synced {
            Ok(()) => {
                if kept > 0 && !stuck {
                    self.torn = false;
                }
                complete
            }
            Err(e) => {
                // Not acknowledged: take every line of the batch back.
                if !stuck {
                    self.take_back(kept, kept);
                }
                failure = Some(e);
                0
            }
        };
        let failure = failure.unwrap_or_else(|| std::io::Error::other("not written"));
        (0..records.len())
            .map(|i| {
                if i < ok_lines {
                    Ok(())
                } else {
                    Err(std::io::Error::new(failure.kind(), failure.to_string()))
                }
            })
            .collect()
    }

    /// Takes back the last `n` of the `written` bytes of `buf`. When that is
    /// impossible the bytes stay, and the target is torn unless they ended a line.
    fn take_back(&mut self, written: usize, n: usize) -> bool {
        if self.target.retract(n) {
            return true;
        }
        self.torn = self.buf[written - 1] != b'\n';
        tracing::error!(
            target: "rein::audit",
            bytes = n,
            "could not take back a partly written audit batch"
        );
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AuditSinkConfig, HooksConfig};

    /// The sink a configuration's `audit.sink` opens, as the hooks' build opens it.
    fn opened(config: &HooksConfig) -> JsonlAuditSink {
        match &config.audit.sink {
            AuditSinkConfig::Jsonl { path, durability } => {
                JsonlAuditSink::open_configured(path, *durability).unwrap()
            }
            other => panic!("not a jsonl sink: {other:?}"),
        }
    }

    #[test]
    fn a_configured_durability_is_the_policy_the_jsonl_sink_is_opened_with() {
        let dir = std::env::temp_dir().join(format!("rein-durability-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("audit.jsonl");
        let yaml = format!(
            "audit:\n  enabled: true\n  sink:\n    type: jsonl\n    path: {}\n    durability: every_record\n",
            path.display()
        );
        let from_yaml: HooksConfig = serde_yaml_ng::from_str(&yaml).unwrap();
        assert_eq!(opened(&from_yaml).durability(), Durability::EveryRecord);
        let json = serde_json::json!({"audit": {"enabled": true, "sink": {
            "type": "jsonl", "path": path, "durability": {"batched": {"max_delay_ms": 250}}}}});
        let from_json: HooksConfig = serde_json::from_value(json).unwrap();
        assert_eq!(
            opened(&from_json).durability(),
            Durability::Batched { max_delay_ms: 250 }
        );
        let plain = serde_json::json!({"audit": {"sink": {"type": "jsonl", "path": path}}});
        let plain: HooksConfig = serde_json::from_value(plain).unwrap();
        assert_eq!(opened(&plain).durability(), Durability::default());
        assert!(from_yaml.build().unwrap().audit().is_some());
        let typo = yaml.replace("every_record", "every_recrod");
        assert!(serde_yaml_ng::from_str::<HooksConfig>(&typo).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
