//! Run with: cargo run --example record_refund --features openai -- [OUT.jsonl]
//!
//! Records one real run of the refund scenario as an offline regression test, then
//! replays it. The scenario (`tests/it/support/refund.rs`, shared with the test that
//! replays the committed fixture): a support agent with a `submitRefund` tool, a tool
//! guard capping refunds at 1000 CNY, an approval hook whose approver refuses refunds
//! above 500; the customer asks for 5000 CNY and writes a card number and an e-mail
//! address.
//!
//! - With an output path `OUT.jsonl` (and `REIN_REAL_MODEL_URL` naming an
//!   OpenAI-compatible server: `scripts/real-model start`, then
//!   `eval "$(scripts/real-model env)"`), the agent runs on the real model through a
//!   `RecordingModel`: every request and streamed chunk goes to `OUT.jsonl`, redacted by
//!   `PiiRedactor`, and the decision trail to `OUT.trail.json`; then the recording is
//!   replayed offline on a `ReplayModel` with the same agent, and the replayed decision
//!   trail must equal the recorded one. To re-record the committed fixture, pass
//!   `tests/fixtures/recordings/refund.jsonl`.
//! - Without an output path (as CI runs it) it only replays the committed fixture and
//!   checks its trail: nothing is written, no model is needed.

use std::error::Error;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rein::model::replay::{PiiRedactor, RecordingModel, ReplayModel};
use rein::testing::DecisionTrail;
use rein::*;

#[path = "../tests/it/support/refund.rs"]
mod refund;

/// The real model at `url`: generous timeouts (a small local model on 2 cores takes
/// seconds per answer).
fn real_model(url: &str) -> Result<OpenAiChatModel, BuildError> {
    OpenAiChatModel::builder()
        .base_url(url)
        .model("local")
        .http(HttpConfig {
            request_timeout: Duration::from_secs(300),
            idle_timeout: Duration::from_secs(120),
            total_timeout: Some(Duration::from_secs(600)),
            ..HttpConfig::default()
        })
        .build()
}

fn print_trail(title: &str, trail: &DecisionTrail) {
    println!("{title} ({} decisions):", trail.entries().len());
    for e in trail.entries() {
        println!("  {e}");
    }
}

/// Replays `fixture` with the scenario's agent and checks the trail against the one
/// stored next to it.
async fn replay(fixture: &Path) -> Result<(), Box<dyn Error>> {
    let model = ReplayModel::open(fixture, PiiRedactor::default())?;
    let agent = refund::agent(model.clone())?;
    let (outcome, messages) = refund::run(&agent).await?;
    let replayed =
        DecisionTrail::new(&outcome.decisions, &messages).redacted(&PiiRedactor::default());
    let recorded = DecisionTrail::load(DecisionTrail::path_next_to(fixture))?;
    print_trail("replayed decision trail", &replayed);
    recorded.compare(&replayed)?;
    if model.remaining() > 0 {
        return Err(format!("the replay left {} exchange(s) unused", model.remaining()).into());
    }
    println!(
        "replay of {}: {} exchange(s), same decision trail; reply: {}",
        fixture.display(),
        model.served(),
        outcome.reply.text()
    );
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn Error>> {
    let Some(out) = std::env::args().nth(1).map(PathBuf::from) else {
        println!("no output path given: replaying the committed fixture");
        return replay(&refund::fixture()).await;
    };
    let url = std::env::var("REIN_REAL_MODEL_URL")
        .ok()
        .filter(|u| !u.trim().is_empty())
        .ok_or("recording needs a real model: set REIN_REAL_MODEL_URL (eval \"$(scripts/real-model env)\")")?;
    let recorder = Arc::new(RecordingModel::create(
        real_model(&url)?,
        &out,
        PiiRedactor::default(),
    )?);
    let agent = refund::agent(Arc::clone(&recorder))?;
    println!(
        "recording the refund scenario on {url} to {}",
        out.display()
    );
    let started = Instant::now();
    let (outcome, messages) = refund::run(&agent).await?;
    println!(
        "recorded {} exchange(s) in {:.1}s; reply: {}",
        recorder.exchanges(),
        started.elapsed().as_secs_f64(),
        outcome.reply.text()
    );
    if let Some(e) = recorder.last_error() {
        return Err(e.into());
    }
    let trail = DecisionTrail::new(&outcome.decisions, &messages).redacted(&PiiRedactor::default());
    print_trail("recorded decision trail", &trail);
    let trail_path = DecisionTrail::path_next_to(&out);
    trail.save(&trail_path)?;
    println!("wrote {} and {}", out.display(), trail_path.display());
    replay(&out).await
}
