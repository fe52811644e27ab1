//! What the fuzzer generates: hook chains, delegation trees, adversarial model scripts
//! and the human's later decisions.

use proptest::prelude::*;
use rein::hooks::FlowAction;
use rein::{EventKind, FailurePolicy, StreamRelease};

use super::{CARRY_LIMIT_SPLITS_FIXED, FACTORIES_NARROW_BY_INSTANCE};

/// The root's own tools.
pub const TOOLS: [&str; 3] = ["lookup", "refund", "note"];
/// Declared subagent ids (a case uses a prefix).
pub const DECLS: [&str; 3] = ["d0", "d1", "d2"];
/// The custom factory's subagent id.
pub const FACTORY: &str = "fx";
/// The Markdown-declared subagent's id.
pub const MARKDOWN: &str = "m0";
/// Personal data the masker detects: a mobile number, an e-mail, an 18-digit ID number.
pub const PII: [&str; 3] = ["13800138000", "li.lei@example.com", "11010519491231002X"];

/// What a generated hook does.
#[derive(Clone, Debug)]
pub enum Kind {
    /// Records agents, tasks and every `PreActing` it sees (always installed).
    Probe,
    /// Denies every call of this tool.
    DenyTool(&'static str),
    /// Denies `refund` above 100 and `lookup` of a `q` containing "secret".
    DenyArg,
    /// Rewrites `lookup`'s `q` to a fixed value (idempotent).
    Rewrite,
    /// Appends `!` to `lookup`'s `q` on every pass (never agrees).
    Flip,
    /// Renames calls of the first tool into the second, with valid arguments for it.
    Rename(&'static str, &'static str),
    /// Clamps `refund`'s amount to this maximum.
    Cap(u32),
    /// Redoes any reply containing "BAD".
    Goto,
    /// Stops the loop after a turn with tool calls (`PostReasoning`).
    StopReasoning,
    /// Stops the loop after this tool ran (`PostActing`).
    StopActing(&'static str),
    /// Fails (an error or a panic) on this event kind.
    Fail {
        on: EventKind,
        panic: bool,
        policy: FailurePolicy,
    },
}

#[derive(Clone, Debug)]
pub struct HookSpec {
    pub kind: Kind,
    pub priority: i32,
    pub sync: bool,
    pub propagate: bool,
}

/// An answer of the (await-mode) approver or of the human (stop-for-human resume).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Approve (the human: bound to id, name and arguments).
    Approve,
    /// The human approves by id only.
    ApproveId,
    Deny,
    /// Approve with `{"amount": 7}`.
    Edit,
    /// The approver panics; the human gives no decision.
    Nothing,
}

#[derive(Clone, Debug)]
pub enum Approval {
    None,
    Await(Vec<Answer>),
    StopForHuman,
}

#[derive(Clone, Debug)]
pub struct DeclSpec {
    pub allow: Vec<&'static str>,
    pub hooks: Vec<HookSpec>,
    pub steps: u32,
    /// A model-call slice of the parent's budget for each of its runs.
    pub slice: Option<u64>,
}

/// The budget of every root call (see [`super::limits`]).
#[derive(Clone, Copy, Debug)]
pub struct BudgetSpec {
    pub model_calls: u64,
    pub tool_calls: u64,
    /// A limit on `refund` calls.
    pub refunds: Option<u64>,
}

/// What the model puts in a tool call's arguments.
#[derive(Clone, Copy, Debug)]
pub enum Args {
    /// Valid arguments (variant chosen by the byte).
    Good(u8),
    /// Valid arguments, encoded twice (a JSON string holding the object).
    DoubleEncoded(u8),
    /// Not an object: array, number, string, broken JSON, null.
    NotObject(u8),
    /// An object that fails the tool's schema (missing or extra fields).
    BadShape,
}

/// The id the model gives a tool call.
#[derive(Clone, Copy, Debug)]
pub enum Id {
    Unique,
    /// `call_0` in every response.
    Call0,
    /// The previous call's id in the same response.
    Duplicate,
    Missing,
    /// The previous call's fragment index (its fragments merge with this call's).
    SameIndex,
}

#[derive(Clone, Copy, Debug)]
pub enum Target {
    Tool(usize),
    Unknown,
    /// The delegation tool, to `DECLS[i]`, `general-purpose`, the factory or a ghost.
    Spawn(usize),
}

#[derive(Clone, Debug)]
pub struct Call {
    pub target: Target,
    pub args: Args,
    pub id: Id,
}

#[derive(Clone, Debug)]
pub enum Turn {
    Text {
        pii: Option<usize>,
        bad: bool,
        thinking: bool,
        /// A long run of soft characters before the personal data (passes the
        /// stream's carry limit).
        long: bool,
    },
    Calls(Vec<Call>),
    /// The previous tool-call turn again (calls emitted after a denial).
    Repeat,
}

/// What the tools' results carry: plain text, or what the MCP client renders from
/// non-text MCP content (text blocks as they are, other blocks as JSON, structured
/// content as JSON when there is nothing else), with each personal datum after a line
/// end, which JSON escapes as `\n`.
#[derive(Clone, Copy, Debug)]
pub enum Content {
    Text,
    /// An embedded text resource.
    McpResource,
    /// A resource link whose description holds the data.
    McpResourceLink,
    /// Structured content only.
    McpStructured,
    /// A text block, a resource and a resource link together.
    McpMixed,
}

#[derive(Clone, Debug)]
pub struct Case {
    pub hooks: Vec<HookSpec>,
    pub approval: Approval,
    /// A masking hook, and whether it masks tool results.
    pub mask: Option<bool>,
    /// What the tools' results carry.
    pub content: Content,
    pub decls: Vec<DeclSpec>,
    pub general_purpose: bool,
    /// A custom factory that tries to widen (a rogue `lookup`, a larger depth).
    pub factory: bool,
    /// A workspace declaring [`MARKDOWN`] with this allowlist.
    pub markdown: Option<Vec<&'static str>>,
    pub max_depth: u32,
    pub max_calls: usize,
    /// `None`: `Agent::run`; else `Agent::stream` with this release mode.
    pub stream: Option<StreamRelease>,
    /// Scripts by agent: root, `DECLS[..]`, general-purpose, factory, Markdown.
    pub scripts: Vec<Vec<Turn>>,
    /// Chunk sizes for streamed text.
    pub splits: Vec<usize>,
    /// The human's answers to stop-for-human requests, in order.
    pub human: Vec<Answer>,
    /// Per round after the first: the round runs on a fresh replica (a new agent on the
    /// same store, nothing in memory).
    pub switches: Vec<bool>,
    /// The first round's call is dropped (a crash) after this many polls, and the next
    /// round resumes on a fresh replica.
    pub crash_polls: Option<usize>,
    /// A budget on every root call (its subagents draw from it).
    pub budget: Option<BudgetSpec>,
    /// The information-flow policy with this action for untrusted calls: `lookup`
    /// returns untrusted content, `refund` changes state, `note` communicates outside.
    pub flow: Option<FlowAction>,
}

impl Case {
    /// The script of the agent named `name`.
    pub fn script(&self, name: &str) -> &[Turn] {
        let i = match name {
            "root" => 0,
            rein::GENERAL_PURPOSE => DECLS.len() + 1,
            FACTORY => DECLS.len() + 2,
            MARKDOWN => DECLS.len() + 3,
            other => DECLS
                .iter()
                .position(|d| *d == other)
                .map_or(usize::MAX, |i| i + 1),
        };
        self.scripts.get(i).map_or(&[], Vec::as_slice)
    }
}

fn tool() -> impl Strategy<Value = &'static str> {
    prop::sample::select(TOOLS.to_vec())
}

fn kind() -> impl Strategy<Value = Kind> {
    let fail = (
        prop::sample::select(vec![
            EventKind::PreCall,
            EventKind::PreReasoning,
            EventKind::PostReasoning,
            EventKind::PreActing,
            EventKind::PostActing,
            EventKind::PostCall,
        ]),
        any::<bool>(),
        prop::bool::weighted(0.7),
    )
        .prop_map(|(on, panic, ignore)| Kind::Fail {
            on,
            panic,
            policy: if ignore {
                FailurePolicy::Ignore
            } else {
                FailurePolicy::Abort
            },
        });
    prop_oneof![
        3 => tool().prop_map(Kind::DenyTool),
        2 => Just(Kind::DenyTool(rein::SPAWN_TOOL)),
        3 => Just(Kind::DenyArg),
        2 => Just(Kind::Rewrite),
        1 => Just(Kind::Flip),
        3 => (tool(), tool()).prop_map(|(a, b)| Kind::Rename(a, b)),
        2 => prop::sample::select(vec![1u32, 50, 100]).prop_map(Kind::Cap),
        2 => Just(Kind::Goto),
        1 => Just(Kind::StopReasoning),
        1 => tool().prop_map(Kind::StopActing),
        2 => fail,
    ]
}

pub fn hook() -> impl Strategy<Value = HookSpec> {
    (
        kind(),
        prop::sample::select(vec![-10, 10, 20, 50, 100, 100, 150, 300, 950]),
        any::<bool>(),
        prop::bool::weighted(0.85),
    )
        .prop_map(|(kind, priority, sync, propagate)| HookSpec {
            kind,
            priority,
            sync,
            propagate,
        })
}

fn answer() -> impl Strategy<Value = Answer> {
    prop::sample::select(vec![
        Answer::Approve,
        Answer::Approve,
        Answer::ApproveId,
        Answer::Deny,
        Answer::Edit,
        Answer::Nothing,
    ])
}

fn approval() -> impl Strategy<Value = Approval> {
    prop_oneof![
        2 => Just(Approval::None),
        2 => prop::collection::vec(answer(), 1..5).prop_map(Approval::Await),
        1 => Just(Approval::StopForHuman),
    ]
}

fn allow() -> impl Strategy<Value = Vec<&'static str>> {
    prop::sample::subsequence(vec!["lookup", "refund", "note", rein::SPAWN_TOOL], 0..=4)
}

fn decl() -> impl Strategy<Value = DeclSpec> {
    (
        allow(),
        prop::collection::vec(hook(), 0..3),
        2u32..5,
        prop::option::weighted(0.3, 1u64..4),
    )
        .prop_map(|(allow, hooks, steps, slice)| DeclSpec {
            allow,
            hooks,
            steps,
            slice,
        })
}

fn budget() -> impl Strategy<Value = BudgetSpec> {
    (1u64..8, 1u64..6, prop::option::weighted(0.4, 1u64..3)).prop_map(
        |(model_calls, tool_calls, refunds)| BudgetSpec {
            model_calls,
            tool_calls,
            refunds,
        },
    )
}

fn call() -> impl Strategy<Value = Call> {
    let target = prop_oneof![
        8 => (0..TOOLS.len()).prop_map(Target::Tool),
        1 => Just(Target::Unknown),
        3 => (0..DECLS.len()).prop_map(Target::Spawn),
        2 => (DECLS.len()..DECLS.len() + 4).prop_map(Target::Spawn),
    ];
    let args = prop_oneof![
        12 => any::<u8>().prop_map(Args::Good),
        2 => any::<u8>().prop_map(Args::DoubleEncoded),
        1 => any::<u8>().prop_map(Args::NotObject),
        1 => Just(Args::BadShape),
    ];
    let id = prop_oneof![
        8 => Just(Id::Unique),
        2 => Just(Id::Call0),
        1 => Just(Id::Duplicate),
        1 => Just(Id::Missing),
        1 => Just(Id::SameIndex),
    ];
    (target, args, id).prop_map(|(target, args, id)| Call { target, args, id })
}

fn turn() -> impl Strategy<Value = Turn> {
    let text = (
        prop::option::of(0..PII.len()),
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.2),
        prop::bool::weighted(if CARRY_LIMIT_SPLITS_FIXED { 0.2 } else { 0.0 }),
    )
        .prop_map(|(pii, bad, thinking, long)| Turn::Text {
            pii,
            bad,
            thinking,
            long,
        });
    prop_oneof![
        2 => text,
        5 => prop::collection::vec(call(), 1..4).prop_map(Turn::Calls),
        1 => Just(Turn::Repeat),
    ]
}

pub fn case() -> impl Strategy<Value = Case> {
    let tree = (
        prop::collection::vec(decl(), 1..=DECLS.len()),
        prop::bool::weighted(0.3),
        prop::bool::weighted(if FACTORIES_NARROW_BY_INSTANCE {
            0.3
        } else {
            0.0
        }),
        1u32..=3,
        prop::option::weighted(0.3, allow()),
    );
    let chain = (
        prop::collection::vec(hook(), 0..6),
        approval(),
        prop::option::of(any::<bool>()),
        prop_oneof![
            4 => Just(Content::Text),
            1 => Just(Content::McpResource),
            1 => Just(Content::McpResourceLink),
            1 => Just(Content::McpStructured),
            1 => Just(Content::McpMixed),
        ],
    );
    let run = (
        prop::sample::select(vec![1usize, 2, 3, 8, 8]),
        prop_oneof![
            Just(None),
            Just(Some(StreamRelease::Immediate)),
            Just(Some(StreamRelease::AfterAcceptance)),
        ],
        prop::collection::vec(prop::collection::vec(turn(), 0..5), DECLS.len() + 4),
        prop::collection::vec(1usize..9, 1..6),
        prop::collection::vec(answer(), 1..6),
    );
    let replicas = (
        prop::collection::vec(prop::bool::weighted(0.4), 3),
        prop::option::weighted(0.3, 1usize..80),
    );
    let limits = (
        prop::option::weighted(0.4, budget()),
        prop::option::weighted(
            0.4,
            prop::sample::select(vec![FlowAction::Approve, FlowAction::Deny]),
        ),
    );
    (tree, chain, run, replicas, limits).prop_map(
        |(
            (decls, general_purpose, factory, max_depth, markdown),
            (hooks, approval, mask, content),
            (max_calls, stream, scripts, splits, human),
            (switches, crash_polls),
            (budget, flow),
        )| {
            let mut scripts = scripts;
            if flow.is_some() {
                // The root reads the untrusted source first: its later calls are made
                // under untrusted context.
                let lookup = Call {
                    target: Target::Tool(0),
                    args: Args::Good(0),
                    id: Id::Unique,
                };
                scripts[0].insert(0, Turn::Calls(vec![lookup]));
            }
            Case {
                hooks,
                approval,
                mask,
                content,
                decls,
                general_purpose,
                factory,
                markdown,
                max_depth,
                max_calls,
                stream,
                scripts,
                splits,
                human,
                switches,
                crash_polls,
                budget,
                flow,
            }
        },
    )
}
