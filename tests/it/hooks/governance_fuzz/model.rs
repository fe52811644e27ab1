//! The adversarial model (one script per agent, chosen from the request) and the
//! recording tools.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::StreamExt;
use rein::*;
use serde_json::{Value, json};

use super::case::{
    Args, Call, Case, Content, DECLS, FACTORY, Id, MARKDOWN, PII, TOOLS, Target, Turn,
};
use super::hooks::{CallRec, Shared};

/// The first rule of a stored conversation that `messages` breaks, if any: every tool
/// use has exactly one result, after it; no result without a use; ids are unique.
/// With `pending_tail`, uses of the last message may still lack results.
pub fn history_violation(messages: &[Msg], pending_tail: bool) -> Option<String> {
    let mut open: Vec<String> = Vec::new();
    let mut used = std::collections::HashSet::new();
    let mut answered = std::collections::HashSet::new();
    let convo: Vec<&Msg> = messages.iter().filter(|m| m.role != Role::System).collect();
    for (i, m) in convo.iter().enumerate() {
        for r in m.tool_results() {
            if !answered.insert(r.id.clone()) {
                return Some(format!("two results for {}", r.id));
            }
            match open.iter().position(|id| *id == r.id) {
                Some(p) => {
                    open.remove(p);
                }
                None => return Some(format!("result {} without a preceding use", r.id)),
            }
        }
        if m.role == Role::Assistant && !open.is_empty() {
            return Some(format!("uses {open:?} without results before message {i}"));
        }
        for u in m.tool_uses() {
            if !used.insert(u.id.clone()) {
                return Some(format!("tool use id {} repeated", u.id));
            }
            open.push(u.id.clone());
        }
    }
    (!open.is_empty() && !pending_tail).then(|| format!("tool uses without results: {open:?}"))
}

/// Plays each agent's script: the agent is named in its system prompt (children) or
/// is the root; the turn is the number of assistant messages in the request.
#[derive(Clone)]
pub struct FuzzModel {
    pub case: Arc<Case>,
    pub obs: Shared,
    next: Arc<AtomicUsize>,
}

impl FuzzModel {
    pub fn new(case: Arc<Case>, obs: Shared) -> Self {
        Self {
            case,
            obs,
            next: Arc::default(),
        }
    }

    fn pieces(&self, text: &str) -> Vec<String> {
        let chars: Vec<char> = text.chars().collect();
        let mut out = Vec::new();
        let (mut at, mut k) = (0, 0);
        while at < chars.len() {
            let n = self.case.splits[k % self.case.splits.len()];
            k += 1;
            let end = (at + n).min(chars.len());
            out.push(chars[at..end].iter().collect());
            at = end;
        }
        out
    }

    fn text_chunks(&self, turn: &Turn) -> Vec<ModelChunk> {
        let Turn::Text {
            pii,
            bad,
            thinking,
            long,
        } = turn
        else {
            return Vec::new();
        };
        let data = pii.map_or("nothing personal", |i| PII[i]);
        let mut out = Vec::new();
        if *thinking {
            let t = format!("The customer's number is {data}. ");
            out.extend(self.pieces(&t).into_iter().map(ModelChunk::Thinking));
        }
        // A long run of soft characters right before the data: the stream's carry
        // buffer overflows inside the number.
        let text = if *long {
            format!("{}{data}. Done.", "12 ".repeat(86))
        } else {
            format!(
                "{}Your contact on file: {data}. Done.",
                if *bad { "BAD " } else { "" }
            )
        };
        out.extend(self.pieces(&text).into_iter().map(ModelChunk::Text));
        out
    }

    fn call_chunks(&self, calls: &[Call], tainted: bool, out: &mut Vec<ModelChunk>) {
        self.obs.lock().unwrap().emitted += calls.len();
        let mut last_id: Option<String> = None;
        let mut index = 0usize;
        for (n, c) in calls.iter().enumerate() {
            let (name, args) = name_and_args(c);
            let id = match c.id {
                Id::Unique => Some(format!("m{}", self.next.fetch_add(1, Ordering::Relaxed))),
                Id::Call0 => Some("call_0".to_owned()),
                Id::Duplicate => last_id.clone().or(Some("dup".to_owned())),
                Id::Missing => None,
                Id::SameIndex => last_id.clone(),
            };
            if !matches!(c.id, Id::SameIndex) || n == 0 {
                index = n;
            }
            if tainted {
                self.obs.lock().unwrap().tainted_acting +=
                    usize::from(name == "refund" || name == "note");
            }
            if let Some(id) = &id {
                self.obs.lock().unwrap().model_ids.push(id.clone());
                last_id = Some(id.clone());
            }
            let half = args.len() / 2;
            let cut = (0..=half)
                .rev()
                .find(|i| args.is_char_boundary(*i))
                .unwrap_or(0);
            out.push(ModelChunk::ToolCall {
                index,
                id,
                name: Some(name),
                arguments: args[..cut].to_owned(),
            });
            out.push(ModelChunk::ToolCall {
                index,
                id: None,
                name: None,
                arguments: args[cut..].to_owned(),
            });
        }
    }
}

/// The tool name and raw argument text of a scripted call.
fn name_and_args(c: &Call) -> (String, String) {
    let (name, good, bad) = match c.target {
        Target::Tool(0) | Target::Unknown => (
            if matches!(c.target, Target::Unknown) {
                "format_disk"
            } else {
                "lookup"
            },
            vec![json!({"q": "A1"}), json!({"q": "secret-7"})],
            json!({"query": "A1"}),
        ),
        Target::Tool(1) => (
            "refund",
            vec![
                json!({"amount": 1}),
                json!({"amount": 50}),
                json!({"amount": 5000}),
            ],
            json!({"amount": "lots", "extra": true}),
        ),
        Target::Tool(_) => ("note", vec![json!({"text": "hello"})], json!({})),
        Target::Spawn(i) => {
            let to = DECLS
                .get(i)
                .copied()
                .or_else(|| {
                    [GENERAL_PURPOSE, FACTORY, MARKDOWN, "ghost"]
                        .get(i - DECLS.len())
                        .copied()
                })
                .unwrap_or("ghost");
            (
                SPAWN_TOOL,
                vec![json!({"agent_id": to, "task": format!("work for {to}")})],
                json!({"agent_id": to, "task": "t", "priority": "high"}),
            )
        }
    };
    let pick = |b: u8| good[usize::from(b) % good.len()].clone();
    let raw = match c.args {
        Args::Good(b) => pick(b).to_string(),
        Args::DoubleEncoded(b) => Value::String(pick(b).to_string()).to_string(),
        Args::NotObject(b) => {
            ["[5000]", "42", r#""just text""#, "{not json", "null"][usize::from(b) % 5].to_owned()
        }
        Args::BadShape => bad.to_string(),
    };
    (name.to_owned(), raw)
}

impl Model for FuzzModel {
    fn name(&self) -> &str {
        "fuzz"
    }

    fn stream(&self, request: ModelRequest) -> ModelStream {
        let messages = request.messages.to_vec();
        if let Some(v) = history_violation(&messages, false) {
            self.obs
                .lock()
                .unwrap()
                .violations
                .push(format!("a model request is not a valid history: {v}"));
        }
        let name = messages
            .first()
            .filter(|m| m.role == Role::System)
            .and_then(|m| {
                let t = m.text();
                let rest = t.split("You are the subagent `").nth(1)?.to_owned();
                rest.split('`').next().map(str::to_owned)
            })
            .unwrap_or_else(|| "root".to_owned());
        // Whether the model had read what `lookup` returned (only its running writes the
        // mark) when it made each call of this history, by the runtime's call id.
        let mut tainted = false;
        {
            let mut obs = self.obs.lock().unwrap();
            obs.requests += 1;
            *obs.requests_by.entry(name.clone()).or_default() += 1;
            for m in &messages {
                for u in m.tool_uses() {
                    let set = if tainted {
                        &mut obs.emitted_tainted
                    } else {
                        &mut obs.emitted_clean
                    };
                    set.insert(u.id.clone());
                }
                tainted |= m
                    .tool_results()
                    .iter()
                    .any(|r| r.content.contains(UNTRUSTED_MARK));
            }
        }
        let turn_no = messages
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .count();
        let script = self.case.script(&name);
        let mut turn = script.get(turn_no).cloned().unwrap_or(Turn::Text {
            pii: Some(turn_no % PII.len()),
            bad: false,
            thinking: false,
            long: false,
        });
        if matches!(turn, Turn::Repeat) {
            turn = script[..turn_no.min(script.len())]
                .iter()
                .rev()
                .find(|t| matches!(t, Turn::Calls(_)))
                .cloned()
                .unwrap_or(Turn::Calls(Vec::new()));
        }
        if request.tools.is_empty() {
            // The summary step: text only.
            turn = Turn::Text {
                pii: Some(0),
                bad: false,
                thinking: false,
                long: false,
            };
        }
        let mut chunks = self.text_chunks(&turn);
        let finish = match &turn {
            Turn::Calls(calls) if !calls.is_empty() => {
                self.call_chunks(calls, tainted, &mut chunks);
                FinishReason::ToolCalls
            }
            Turn::Calls(_) => {
                chunks.push(ModelChunk::Text("nothing to do".into()));
                FinishReason::Stop
            }
            _ => FinishReason::Stop,
        };
        chunks.push(ModelChunk::Finish(finish));
        futures::stream::iter(chunks.into_iter().map(Ok)).boxed()
    }
}

/// The result of the tool `name`: personal data as plain text, or inside the MCP
/// client's rendering of non-text content (see [`Content`]).
pub fn tool_result(name: &str, content: Content) -> String {
    let lines = format!(
        "{name} done\ncustomer:\n{}\nmail:\n{}\nid:\n{}",
        PII[0], PII[1], PII[2]
    );
    let resource = || {
        json!({"type": "resource", "resource": {"uri": "file:///customer.txt",
            "mimeType": "text/plain", "text": lines}})
        .to_string()
    };
    let link = || {
        json!({"type": "resource_link", "uri": "file:///c.txt", "name": "c",
            "description": lines})
        .to_string()
    };
    match content {
        Content::Text => format!("{name} done; customer {} / {}", PII[0], PII[1]),
        Content::McpResource => resource(),
        Content::McpResourceLink => link(),
        Content::McpStructured => json!({"customer": {"notes": [lines],
            "phone": format!("\t{}", PII[0]), "id": format!("\r\n{}", PII[2])}})
        .to_string(),
        Content::McpMixed => [format!("{name} done:\n{}", PII[1]), resource(), link()].join("\n"),
    }
}

/// What the root's `lookup` appends to its results under the information-flow policy:
/// content from outside (declared untrusted).
pub const UNTRUSTED_MARK: &str = "[untrusted lookup result]";

/// A tool that records every call it runs (with the running agent and `tag`, naming
/// the instance) and returns a result holding personal data, carried as `content` says.
/// With `flow`, it declares its capabilities to the information-flow policy: `lookup`
/// returns untrusted content (and marks it), `refund` changes state, `note`
/// communicates outside.
pub fn recording_tool(
    name: &'static str,
    tag: &'static str,
    content: Content,
    obs: &Shared,
    flow: bool,
) -> FunctionTool {
    let schema = match name {
        "refund" => json!({"type": "object", "properties": {"amount": {"type": "number"}},
                           "required": ["amount"], "additionalProperties": false}),
        "note" => json!({"type": "object", "properties": {"text": {"type": "string"}},
                         "required": ["text"], "additionalProperties": false}),
        _ => json!({"type": "object", "properties": {"q": {"type": "string"}},
                    "required": ["q"], "additionalProperties": false}),
    };
    let obs = Arc::clone(obs);
    FunctionTool::with_context(
        name,
        format!("The {name} tool."),
        schema,
        move |args, ctx| {
            let obs = Arc::clone(&obs);
            async move {
                obs.lock().unwrap().executed.push((
                    CallRec {
                        agent: ctx.agent().id.clone(),
                        id: ctx.tool_use_id().to_owned(),
                        name: name.to_owned(),
                        input: args,
                    },
                    tag,
                ));
                let result = tool_result(name, content);
                Ok(if flow && name == "lookup" {
                    format!("{result} {UNTRUSTED_MARK}")
                } else {
                    result
                })
            }
        },
    )
    .capabilities(match (flow, name) {
        (false, _) => ToolCapabilities::new(),
        (true, "lookup") => ToolCapabilities::new().untrusted(),
        (true, "refund") => ToolCapabilities::new().changes_state(true),
        (true, _) => ToolCapabilities::new().external(Confidentiality::Secret),
    })
}

/// The root's toolkit: every tool in [`TOOLS`].
pub fn toolkit(content: Content, obs: &Shared, flow: bool) -> Toolkit {
    let mut t = Toolkit::new();
    for name in TOOLS {
        t.register(recording_tool(name, "root", content, obs, flow))
            .unwrap();
    }
    t
}
