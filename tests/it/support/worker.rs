//! The one child-process mechanism: a worker is this test binary re-run on exactly one
//! test (usually an `#[ignore]`d one that does nothing unless its environment says what
//! to do), with the environment the caller adds; children are killed with SIGKILL (no
//! destructor, no flush, no unlock).
//!
//! A worker's path is its module path inside the `it` binary, e.g.
//! `session::exactly_once_crash::effect_worker`: moving the module means updating it (a
//! path that names no test runs nothing and passes, so callers check the worker's
//! output).

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

/// A command that re-runs this test binary on exactly the test `path` (ignored or not),
/// its output not captured, alone. The terse format keeps libtest's `test <name> ... `
/// off the worker's first line: every line the worker prints starts a line.
pub fn worker(path: &str) -> Command {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command.args([
        path,
        "--exact",
        "--include-ignored",
        "--nocapture",
        "--test-threads=1",
        "--format=terse",
    ]);
    command
}

/// Held by a test while it runs a storm of calls from several worker processes
/// (`session::replicas`): two storms at once on a two-core machine starve each other's
/// lease holders past the lease wait, which measures the machine, not the store. Other
/// tests still run beside a storm.
pub async fn storm() -> tokio::sync::MutexGuard<'static, ()> {
    static STORM: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    STORM.lock().await
}

/// Kills `child` with SIGKILL and waits for it.
pub fn kill(child: &mut Child) -> ExitStatus {
    child.kill().unwrap();
    child.wait().unwrap()
}

/// Kills this process with SIGKILL (the crash-point tests' workers crash themselves).
pub fn kill_self() -> ! {
    let pid = std::process::id().to_string();
    let _ = Command::new("kill").args(["-KILL", &pid]).status();
    // `kill` is in every Debian base system; abort() is the same for this purpose.
    std::process::abort();
}

/// Runs `command`, kills it with SIGKILL after `after` and returns what it printed.
pub fn run_until_killed(mut command: Command, after: Duration) -> String {
    let mut child = command
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(after);
    let status = kill(&mut child);
    assert!(!status.success(), "the child was killed");
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    out
}
