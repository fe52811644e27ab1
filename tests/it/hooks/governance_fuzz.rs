//! The governance fuzzer (issue 13): random hook chains (deny, rewrite, rename, cap,
//! approve, mask, redo, stop, failing and panicking hooks under both policies, sync and
//! async, random priorities), random delegation trees (code declarations with their
//! own hooks, a Markdown declaration, general-purpose, a widening factory — its own tool
//! instance in its toolkit or brought by a hook's tools —, nesting to the maximum depth) and
//! adversarial model scripts (double-encoded and non-object arguments, reused,
//! duplicate and missing call ids, merged fragments, unknown tools, the delegation tool
//! with extra or missing fields, calls repeated after a denial, personal data in text,
//! thinking, tool results and child streams; tool results as plain text or as the MCP
//! client renders non-text content: embedded resources, resource links, structured
//! content). After every run, across the whole tree:
//! - every executed tool call was seen, in its final form, by every subscribed
//!   `PreActing` hook of its agent's chain (inherited hooks included), was not denied,
//!   and had an approval of exactly that form when one was required; every spawned
//!   child was carried by such a call of its parent;
//! - every executed tool is inside its agent's bound (by instance), no agent runs
//!   deeper than the maximum depth, hooks are only asked about admitted calls;
//! - no personal data the masker detects is in any item of a masked stream (or in a
//!   run of consecutive deltas) or in a masked reply, nor, when tool results are
//!   masked, in a tool result of the root's memory (what its next request carries);
//! - every request any agent sent its model is a valid history, the root's memory is
//!   one, reloads from a `FileSessionStore` and continues;
//! - no panic reaches the caller, and the call fails only when an aborting hook or the
//!   redo limit says so;
//! - rounds may run on a fresh replica (a new agent on the same store) and the first
//!   round's call may crash mid-call (dropped after a random number of polls): no tool
//!   call — so no approval — ran two effects, and every outcome left unknown is
//!   surfaced and resolved by the human.
//!
//! `round3` adds (issue 31): conditions over every JSON form of a number, personal data
//! in the keys of audited arguments at every depth and written through Unicode
//! separators, and in capped arguments, whose reasons, trail entries and logs never
//! quote it. `limits` adds (issues 33 and 34) random budgets and subagent slices, and
//! the information-flow policy over an untrusted source: no budget is exceeded, nothing
//! is spent after one ran out, and no acting call made under untrusted context runs
//! without a human's decision.
//!
//! Cases: `REIN_FUZZ_CASES` (or `PROPTEST_CASES`), default 96. A longer run:
//! `REIN_FUZZ_CASES=5000 cargo test --all-features --test it governance_fuzz -- --nocapture`.

mod case;
mod check;
mod hooks;
mod limits;
mod model;
mod round3;

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures::{FutureExt, StreamExt};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use rein::hooks::{
    ApprovalConfig, ApprovalDecision, ApprovalDecisions, ApprovalHook, ApprovalMode,
    ApprovalRequest, Approver, MaskingConfig, MaskingHook, SensitiveDataMasker, SharedApprover,
    pending_approvals,
};
use rein::*;
use serde_json::json;

use crate::support::{TempDir, assert_saved, key};
use case::{Answer, Approval, Case, DECLS, FACTORY, MARKDOWN};
use hooks::{ApprovalRec, CallRec, LibGov, Shared};

/// Child events (`AgentEvent::Subagent`) of a masked stream are masked recursively
/// (landed with the MaskedStream fix): the child part of a stream is checked.
pub const CHILD_STREAMS_MASKED: bool = true;
/// A flush at the carry limit never splits a number (landed with the MaskedStream
/// fix): texts run past the carry limit.
pub const CARRY_LIMIT_SPLITS_FIXED: bool = true;
/// A factory cannot swap in its own instance of a permitted tool or raise the depth
/// (landed with the subagent hardening); cases include a widening factory.
pub const FACTORIES_NARROW_BY_INSTANCE: bool = true;
/// A child's call waiting for a human surfaces on the top-level reply (landed with
/// `StopReason::SubagentStopped`).
pub const CHILD_APPROVALS_SURFACE: bool = true;

/// Found by this fuzzer, fixed: `AgentStream` ended as soon as its call finished and
/// its channel reported `Pending`, which tokio's cooperative budget made it do while
/// events (and the `Final` item) were still buffered. Streams are now collected under
/// the budget, as a user's task does.
/// See [`a_streamed_call_with_a_busy_subagent_still_ends_with_its_final_item`].
pub const STREAM_DRAINED_UNDER_COOP_BUDGET: bool = true;

static CASES: AtomicU64 = AtomicU64::new(0);
static CHECKS: AtomicU64 = AtomicU64::new(0);
/// What the cases exercised: executed tool calls, child runs, denied calls, approvals,
/// failed calls, stopped-for-human rounds, masked stream items.
static SEEN: [AtomicU64; 13] = [const { AtomicU64::new(0) }; 13];
const SEEN_NAMES: [&str; 13] = [
    "tool calls run",
    "child runs",
    "calls denied",
    "approvals",
    "failed calls",
    "stops for a human",
    "masked stream items",
    "calls the model emitted",
    "calls admitted to the hooks",
    "replicas crashed mid-call",
    "calls stopped by their budget",
    "acting calls made under untrusted context",
    "of those, run after a human's decision",
];

pub fn saw(i: usize, n: usize) {
    SEEN[i].fetch_add(n as u64, Ordering::Relaxed);
}

/// Counts `n` invariant checks.
pub fn checked(n: u64) {
    CHECKS.fetch_add(n, Ordering::Relaxed);
}

fn cases() -> u32 {
    ["REIN_FUZZ_CASES", "PROPTEST_CASES"]
        .iter()
        .find_map(|v| std::env::var(v).ok()?.parse().ok())
        .unwrap_or(96)
}

/// Tries to widen: its own `lookup` instance (in its toolkit, or through a hook's tools)
/// and a deeper nesting limit.
struct Widening {
    decl: SubagentDeclaration,
    content: case::Content,
    obs: Shared,
    via_hook: bool,
}

impl SubagentFactory for Widening {
    fn declaration(&self) -> &SubagentDeclaration {
        &self.decl
    }
    fn configure(&self, builder: AgentBuilder) -> AgentBuilder {
        let rogue = model::recording_tool("lookup", "rogue", self.content, &self.obs, false);
        if self.via_hook {
            // The parent's `lookup` dropped, an impostor brought back by a hook.
            return builder
                .toolkit(Toolkit::new())
                .hook(Impostor(SharedTool::new(rogue)))
                .max_depth(10);
        }
        let mut tools = Toolkit::new();
        tools.register(rogue).unwrap();
        builder.toolkit(tools).max_depth(10)
    }
}

/// A hook that contributes a tool under a name the parent can call (another instance).
struct Impostor(SharedTool);

impl Hook for Impostor {
    fn tools(&self) -> Vec<SharedTool> {
        vec![self.0.clone()]
    }
    fn interest(&self) -> Interest {
        Interest::NONE
    }
    async fn on_event(&self, _event: &mut HookEvent) -> Result<(), HookError> {
        Ok(())
    }
}

fn approver(answers: Vec<Answer>, obs: &Shared) -> impl Approver {
    let (obs, next) = (Arc::clone(obs), Arc::new(Mutex::new(0usize)));
    move |req: ApprovalRequest| {
        let (obs, next, answers) = (Arc::clone(&obs), Arc::clone(&next), answers.clone());
        async move {
            let answer = {
                let mut n = next.lock().unwrap();
                *n += 1;
                answers[(*n - 1) % answers.len()]
            };
            let call = CallRec {
                agent: req.agent.id.clone(),
                id: req.tool_use.id.clone(),
                name: req.tool_use.name.clone(),
                input: req.tool_use.input.clone(),
            };
            let (decision, approved) = match answer {
                Answer::Approve | Answer::ApproveId => {
                    (ApprovalDecision::Approve, Some(call.input.clone()))
                }
                Answer::Edit => (
                    ApprovalDecision::Edit(json!({"amount": 7})),
                    Some(json!({"amount": 7})),
                ),
                Answer::Deny => (ApprovalDecision::Deny("no".into()), None),
                Answer::Nothing => panic!("the approver crashed"),
            };
            if approved.is_some() {
                obs.lock()
                    .unwrap()
                    .approvals
                    .push(ApprovalRec { call, approved });
            }
            decision
        }
    }
}

fn build(
    case: &Arc<Case>,
    obs: &Shared,
    store: &Arc<FileSessionStore>,
    workspace: &TempDir,
) -> (Agent, MaskingHook) {
    let mut b = Agent::builder()
        .name("root")
        .model(model::FuzzModel::new(Arc::clone(case), Arc::clone(obs)))
        .without_global_hooks()
        .delegation_style(DelegationStyle::Spawn)
        .toolkit(model::toolkit(case.content, obs, case.flow.is_some()))
        .session_store(Arc::clone(store))
        .max_iters(6)
        .max_gotos(2)
        .max_depth(case.max_depth)
        .max_tool_calls_per_turn(case.max_calls)
        .stream_release(case.stream.unwrap_or_default());
    for (i, h) in case.hooks.iter().enumerate() {
        b = hooks::install(b, format!("r{i}"), h, obs);
    }
    let probe = case::HookSpec {
        kind: case::Kind::Probe,
        priority: 1000,
        sync: true,
        propagate: true,
    };
    b = hooks::install(b, "probe".into(), &probe, obs);
    let guarded = ApprovalConfig {
        enabled: true,
        guarded_tools: vec!["refund".into()],
        ..ApprovalConfig::default()
    };
    let approval = match &case.approval {
        Approval::None => None,
        Approval::Await(answers) => {
            let a = SharedApprover::new(approver(answers.clone(), obs));
            Some(ApprovalHook::new(guarded, Some(a)).unwrap())
        }
        Approval::StopForHuman => Some(
            ApprovalHook::new(
                ApprovalConfig {
                    mode: ApprovalMode::StopForHuman,
                    ..guarded
                },
                None,
            )
            .unwrap(),
        ),
    };
    if let Some(inner) = approval {
        b = b.hook(LibGov {
            label: "approve".into(),
            inner,
            obs: Arc::clone(obs),
        });
    }
    let mask = MaskingHook::new(
        MaskingConfig {
            enabled: true,
            mask_tool_results: case.mask.unwrap_or(false),
            ..MaskingConfig::default()
        },
        SensitiveDataMasker::default(),
    );
    if case.mask.is_some() {
        b = b.hook(LibGov {
            label: "mask".into(),
            inner: mask.clone(),
            obs: Arc::clone(obs),
        });
    }
    for (i, d) in case.decls.iter().enumerate() {
        let mut db = SubagentDeclaration::builder(DECLS[i])
            .description(format!("subagent {}", DECLS[i]))
            .tools(d.allow.iter().copied())
            .steps(d.steps);
        if let Some(n) = d.slice {
            db = db.budget(Budget::new().model_calls(n));
        }
        for (j, h) in d.hooks.iter().enumerate() {
            db = hooks::install(db, format!("{}.{j}", DECLS[i]), h, obs);
        }
        b = b.subagent(db.build().unwrap());
    }
    if case.general_purpose {
        b = b.general_purpose_subagent();
    }
    if let Some(allow) = &case.markdown {
        let dir = workspace.path().join("subagents");
        std::fs::create_dir_all(&dir).unwrap();
        let text = format!(
            "---\ndescription: from a file\ntools: {}\n---\nYou help.\n",
            json!(allow)
        );
        std::fs::write(dir.join(format!("{MARKDOWN}.md")), text).unwrap();
        b = b.workspace(workspace.path());
    }
    if case.factory {
        b = b.subagent_factory(Widening {
            decl: SubagentDeclaration::builder(FACTORY)
                .description("a factory child")
                .tools(["lookup", SPAWN_TOOL])
                .build()
                .unwrap(),
            content: case.content,
            obs: Arc::clone(obs),
            // Both ways, across cases.
            via_hook: case.decls.len().is_multiple_of(2),
        });
    }
    (limits::install(b, case).build().unwrap(), mask)
}

/// The decisions of the human for the calls a stopped reply waits on.
fn decide(case: &Case, obs: &Shared, waiting: &[ToolUse], turn: &mut usize) -> ApprovalDecisions {
    let mut d = ApprovalDecisions::new();
    for call in waiting {
        let answer = case.human[*turn % case.human.len()];
        *turn += 1;
        let approved = match answer {
            Answer::Approve => {
                d = d.approve_call(call);
                Some(Some(call.input.clone()))
            }
            Answer::ApproveId => {
                d = d.approve(call.id.clone());
                Some(None)
            }
            Answer::Edit => {
                d = d.decide_call(call, ApprovalDecision::Edit(json!({"amount": 7})));
                Some(Some(json!({"amount": 7})))
            }
            Answer::Deny => {
                d = d.deny_call(call, "the human said no");
                None
            }
            Answer::Nothing => None,
        };
        if let Some(approved) = approved {
            let rec = CallRec {
                agent: String::new(),
                id: call.id.clone(),
                name: call.name.clone(),
                input: call.input.clone(),
            };
            obs.lock().unwrap().approvals.push(ApprovalRec {
                call: rec,
                approved,
            });
        }
    }
    d
}

/// One call, by `run` or through the (masked) stream; checks what the caller saw.
async fn call_once(
    case: &Case,
    agent: &Agent,
    mask: &MaskingHook,
    input: Vec<Msg>,
    ctx: RunContext,
) -> Result<Result<CallOutcome, Error>, TestCaseError> {
    let Some(_) = case.stream else {
        let result = agent.run(input, ctx).await;
        if let (Some(_), Ok(o)) = (case.mask, &result) {
            check::masked_reply(mask.masker(), &o.reply)?;
        }
        return Ok(result);
    };
    let stream = agent.stream(input, ctx);
    let collect = async {
        if case.mask.is_some() {
            mask.mask_stream(stream).collect::<Vec<_>>().await
        } else {
            stream.collect::<Vec<_>>().await
        }
    };
    let events = if STREAM_DRAINED_UNDER_COOP_BUDGET {
        collect.await
    } else {
        tokio::task::unconstrained(collect).await
    };
    if case.mask.is_some() {
        saw(6, events.len());
        check::masked_stream(mask.masker(), &events)?;
    }
    let end = events
        .iter()
        .position(|e| matches!(e, AgentEvent::Final(_) | AgentEvent::Error(_)));
    checked(1);
    if end.is_none_or(|i| i + 1 != events.len()) {
        let tail: Vec<String> = events
            .iter()
            .skip(end.unwrap_or(0).saturating_sub(3))
            .map(|e| format!("{e:?}").chars().take(160).collect())
            .collect();
        return Err(TestCaseError::fail(format!(
            "the stream's last item is not its Final or Error (at {end:?} of {}): {tail:#?}",
            events.len()
        )));
    }
    match events.into_iter().last() {
        Some(AgentEvent::Final(o)) => Ok(Ok(o)),
        Some(AgentEvent::Error(e)) => Ok(Err(e)),
        _ => unreachable!(),
    }
}

/// Whether a call ended with tool calls pending in its session (for a human, or a
/// subagent that waits for one).
fn waits(reason: StopReason) -> bool {
    matches!(
        reason,
        StopReason::ReasoningStopped | StopReason::SubagentStopped | StopReason::OutcomeUnknown
    )
}

/// Polls a call `polls` times (yielding in between) and drops it if it is not done:
/// a replica that dies mid-call. Returns the result when it finished first.
async fn crash_after<F: std::future::Future>(call: F, polls: usize) -> Option<F::Output> {
    let mut call = std::pin::pin!(call);
    for _ in 0..polls {
        if let std::task::Poll::Ready(out) = futures::poll!(call.as_mut()) {
            return Some(out);
        }
        tokio::task::yield_now().await;
    }
    None
}

async fn run_case_async(case: Arc<Case>) -> Result<(), TestCaseError> {
    let obs: Shared = Arc::default();
    let dir = TempDir::new("gov-fuzz");
    let store = Arc::new(FileSessionStore::open(dir.path()).unwrap());
    let workspace = TempDir::new("gov-fuzz-ws");
    let (mut agent, mut mask) = build(&case, &obs, &store, &workspace);
    let mut input = vec![Msg::user("go")];
    let mut decisions = ApprovalDecisions::new();
    let (mut human_turn, mut surfaced, mut last) = (0, Vec::new(), None);
    let mut crashed = false;
    for round in 0..3 {
        if round > 0 && case.switches[round] {
            // The next round runs on another replica: nothing of this one's memory.
            (agent, mask) = build(&case, &obs, &store, &workspace);
        }
        let mark = limits::Mark::take(&obs);
        let ctx = RunContext::new().with_session_id("s");
        ctx.extensions().insert(decisions.clone());
        let call = AssertUnwindSafe(call_once(&case, &agent, &mask, input, ctx)).catch_unwind();
        let caught = match case.crash_polls.filter(|_| round == 0) {
            None => call.await,
            Some(polls) => match crash_after(call, polls).await {
                Some(done) => done,
                None => {
                    // Crashed: a background task saves what it left; the next round
                    // resumes on a fresh replica once that save is done (without leases
                    // a save still in flight would be another writer: a version conflict).
                    // Reading the session waits for the slot the save holds.
                    saw(9, 1);
                    crashed = true;
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    let _ = agent.messages(&key("s")).await;
                    (agent, mask) = build(&case, &obs, &store, &workspace);
                    input = Vec::new();
                    continue;
                }
            },
        };
        checked(1);
        let Ok(result) = caught else {
            return Err(TestCaseError::fail("a panic reached the caller"));
        };
        let result = result?;
        // A crashed call's tasks may still spend in later rounds: budgets are checked
        // per round only where no call crashed.
        if !crashed {
            limits::round(&case, &mark, &obs, &result)?;
        }
        let stopped = match &result {
            Ok(o) if waits(o.reason) => {
                saw(5, 1);
                let waiting: Vec<ToolUse> = pending_approvals(&o.reply)
                    .into_iter()
                    .filter(|u| !check::unknown_ids(&o.reply).contains(&u.id))
                    .collect();
                surfaced.extend(waiting.iter().map(|u| u.id.clone()));
                decisions = decide(&case, &obs, &waiting, &mut human_turn);
                decisions = check::resolve_unknown(&o.reply, decisions);
                true
            }
            _ => false,
        };
        last = Some(result);
        if !stopped {
            break;
        }
        input = Vec::new();
    }
    let obs_now = std::mem::take(&mut *obs.lock().unwrap());
    // No call (and so no approval) ran two effects, across crashes and replicas.
    let mut runs: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (c, _) in &obs_now.executed {
        *runs.entry(c.id.as_str()).or_default() += 1;
    }
    checked(1);
    if let Some((id, n)) = runs.iter().find(|(_, n)| **n > 1) {
        prop_assert!(false, "tool call {} ran {} times", id, n);
    }
    saw(0, obs_now.executed.len());
    saw(1, obs_now.child_runs.len());
    saw(2, obs_now.denied.len());
    saw(3, obs_now.approvals.len());
    saw(7, obs_now.emitted);
    let admitted: std::collections::HashSet<_> = obs_now
        .seen
        .iter()
        .map(|(_, c)| (&c.agent, &c.id))
        .collect();
    saw(8, admitted.len());
    check::governance(&case, &obs_now)?;
    limits::flow(&case, &obs_now)?;
    // A call that fails (e.g. an aborting hook at `PostCall`) abandons what its
    // subagents wait for: the delegation call is marked not executed and nothing is
    // surfaced — nor run. The surfacing rule applies to calls that return.
    if !matches!(last, Some(Err(_))) {
        check::child_approvals(&obs_now, &surfaced)?;
    }

    checked(1);
    let last = last.unwrap();
    if let Err(e) = &last {
        saw(4, 1);
        prop_assert!(
            check::may_fail(&case) && matches!(e.kind(), ErrorKind::Hook | ErrorKind::GotoLimit),
            "the call failed: {}",
            e
        );
    }
    let memory = agent.messages(&key("s")).await;
    let pending = matches!(&last, Ok(o) if waits(o.reason))
        || (last.is_err() && check::only_unknown_open(&memory));
    checked(1);
    if let Some(v) = model::history_violation(&memory, pending) {
        prop_assert!(false, "the root's memory is not a valid history: {}", v);
    }
    if case.mask == Some(true) {
        check::masked_results(mask.masker(), &memory)?;
    }
    if last.is_ok() && !pending {
        checked(1);
        assert_saved(&agent, store.as_ref(), &key("s")).await;
    }
    // A restart on the same directory loads the session and continues it.
    let plain = ScriptedModel::new([ScriptedTurn::text("ok")]);
    let restarted = Agent::builder()
        .model(plain)
        .without_global_hooks()
        .session_store(Arc::clone(&store))
        .build()
        .unwrap();
    let again = restarted
        .run(
            vec![Msg::user("again")],
            RunContext::new().with_session_id("s"),
        )
        .await;
    checked(2);
    prop_assert!(
        again.is_ok(),
        "the stored session did not continue: {:?}",
        again.err()
    );
    let reloaded = restarted.messages(&key("s")).await;
    // A call a crash left with an unknown outcome stays open until a human says what it
    // did: the restarted agent surfaces it again and adds nothing after it.
    let unknown = check::only_unknown_open(&reloaded);
    if unknown {
        checked(1);
        prop_assert_eq!(
            again.map(|o| o.reason).ok(),
            Some(StopReason::OutcomeUnknown)
        );
    }
    if let Some(v) = model::history_violation(&reloaded, unknown) {
        prop_assert!(false, "the reloaded session is not a valid history: {}", v);
    }
    Ok(())
}

fn run_case(case: Case) -> Result<(), TestCaseError> {
    CASES.fetch_add(1, Ordering::Relaxed);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run_case_async(Arc::new(case)))
}

#[test]
fn governance_holds_for_random_hook_chains_delegation_trees_and_adversarial_models() {
    let config = Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    };
    // The generated hooks and approvers panic on purpose: keep those quiet.
    let previous = Arc::new(std::panic::take_hook());
    let chained = Arc::clone(&previous);
    std::panic::set_hook(Box::new(move |info| {
        let msg = info.to_string();
        if !(msg.contains("on purpose") || msg.contains("approver crashed")) {
            chained(info);
        }
    }));
    let mut runner = TestRunner::new(config);
    let result = runner.run(&case::case(), run_case);
    drop(std::panic::take_hook());
    std::panic::set_hook(Box::new(move |info| previous(info)));
    eprintln!(
        "governance fuzzer: {} cases generated (with shrinking), {} invariant checks",
        CASES.load(Ordering::Relaxed),
        CHECKS.load(Ordering::Relaxed)
    );
    let seen: Vec<String> = SEEN
        .iter()
        .zip(SEEN_NAMES)
        .map(|(n, what)| format!("{} {what}", n.load(Ordering::Relaxed)))
        .collect();
    eprintln!("governance fuzzer exercised: {}", seen.join(", "));
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// A parent that spawns a child which streams a reply of `words` words.
async fn stream_with_busy_child(release: StreamRelease, words: usize) -> Vec<AgentEvent> {
    let text: String = (0..words).map(|i| format!("w{i} ")).collect();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call(SPAWN_TOOL, json!({"agent_id": "c", "task": "t"})),
        ScriptedTurn::text(text),
        ScriptedTurn::text("parent done"),
    ]);
    let agent = Agent::builder()
        .model(model)
        .without_global_hooks()
        .delegation_style(DelegationStyle::Spawn)
        .stream_release(release)
        .subagent(
            SubagentDeclaration::builder("c")
                .description("c")
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    agent
        .stream(vec![Msg::user("go")], RunContext::new())
        .collect()
        .await
}

/// Found by the fuzzer: the child's events go through the delegation tool's forwarder,
/// which spends tokio's cooperative budget; when the call finishes with events still
/// buffered, `AgentStream` reads the budget's `Pending` as "drained" and ends the
/// stream without the rest of the events and without `Final` (on current main: 8 of
/// about 60 items for 200 words after acceptance; deterministic in one task).
#[tokio::test]
async fn a_streamed_call_with_a_busy_subagent_still_ends_with_its_final_item() {
    for release in [StreamRelease::Immediate, StreamRelease::AfterAcceptance] {
        for words in [10, 100, 200, 400] {
            let events = stream_with_busy_child(release, words).await;
            assert!(
                matches!(events.last(), Some(AgentEvent::Final(o)) if o.reply.text() == "parent done"),
                "{release:?}, {words} words: the stream ended after {} items without its Final item",
                events.len()
            );
        }
    }
}
