//! Property tests: for random delegation trees (code and Markdown declarations, random
//! allowlists, random `tools.json`, random child workspaces with their own `tools.json`,
//! random hook-contributed tools, toolkits with deletion allowed or forbidden), the
//! subagent invariants hold.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use rein::*;
use serde_json::json;

use crate::support::TempDir;

const BASE: [&str; 5] = ["t0", "t1", "t2", "t3", "t4"];
const HOOKED: [&str; 3] = ["h0", "h1", "h2"];

/// Every name a policy or allowlist may mention.
fn universe() -> Vec<&'static str> {
    BASE.iter()
        .chain(HOOKED.iter())
        .copied()
        .chain([SPAWN_TOOL])
        .collect()
}

/// The text of a `tools.json` with these entries, each written `?name`: the random
/// universe names tools a case may not have, and this property is about narrowing (an
/// optional entry narrows exactly like a plain one; the check that plain entries name a
/// tool is tested in `subagent_workspaces`).
fn policy_text(allow: &[String], deny: &[String]) -> String {
    let optional = |names: &[String]| names.iter().map(|n| format!("?{n}")).collect::<Vec<_>>();
    json!({"allow": optional(allow), "deny": optional(deny)}).to_string()
}

/// A random `tools.json`: (allow mask, deny mask) over the universe.
type PolicyMasks = (Vec<bool>, Vec<bool>);

/// A `tools.json` as (allow, deny) names.
type Policy = (Vec<String>, Vec<String>);

/// Whether the policy (`None`: no file) permits `name`, as documented on `ToolsPolicy`.
fn permits(policy: Option<&Policy>, name: &str) -> bool {
    match policy {
        None => true,
        Some((allow, deny)) => {
            !deny.iter().any(|d| d == name)
                && (allow.is_empty() || name == SPAWN_TOOL || allow.iter().any(|a| a == name))
        }
    }
}

fn pick(mask: &[bool], names: &[&'static str]) -> Vec<String> {
    names
        .iter()
        .zip(mask)
        .filter(|(_, m)| **m)
        .map(|(n, _)| n.to_string())
        .collect()
}

#[derive(Default)]
struct Observed {
    /// agent id → (name, parent id, tools offered)
    agents: HashMap<String, (String, Option<String>, Vec<String>)>,
    /// (hook label, agent id, call id) for every PreActing a recorder saw
    seen: HashSet<(String, String, String)>,
    /// (agent id, tool name, call id) for every tool that actually ran
    executed: Vec<(String, String, String)>,
    /// depths the parent-only hook saw
    parent_only_depths: Vec<u32>,
}

type Shared = Arc<Mutex<Observed>>;

/// Records what it sees; `inherit` decides propagation.
struct Probe {
    label: String,
    inherit: bool,
    obs: Shared,
}

impl Hook for Probe {
    fn name(&self) -> &str {
        &self.label
    }
    fn propagate_to_subagents(&self) -> bool {
        self.inherit
    }
    async fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError> {
        let mut obs = self.obs.lock().unwrap();
        if !self.inherit {
            obs.parent_only_depths.push(event.agent().depth);
            return Ok(());
        }
        let agent = event.agent().clone();
        match event {
            HookEvent::PreReasoning(e) => {
                obs.agents.insert(
                    agent.id.clone(),
                    (
                        agent.name.clone(),
                        agent.parent_id.clone(),
                        e.tool_names().to_vec(),
                    ),
                );
            }
            HookEvent::PreActing(e) => {
                obs.seen.insert((
                    self.label.clone(),
                    agent.id.clone(),
                    e.tool_use().id.clone(),
                ));
            }
            _ => {}
        }
        Ok(())
    }
}

/// Contributes the hook tools `names`.
struct Contributor {
    names: Vec<String>,
    obs: Shared,
}

impl Hook for Contributor {
    fn interest(&self) -> Interest {
        Interest::NONE
    }
    fn tools(&self) -> Vec<SharedTool> {
        self.names
            .iter()
            .map(|n| recording_tool(n, &self.obs))
            .collect()
    }
    async fn on_event(&self, _e: &mut HookEvent) -> Result<(), HookError> {
        Ok(())
    }
}

fn recording_tool(name: &str, obs: &Shared) -> SharedTool {
    let (n, obs) = (name.to_string(), obs.clone());
    SharedTool::new(FunctionTool::with_context(
        name,
        "t",
        json!({"type": "object"}),
        move |_, ctx| {
            let (n, obs) = (n.clone(), obs.clone());
            async move {
                obs.lock().unwrap().executed.push((
                    ctx.agent().id.clone(),
                    n,
                    ctx.tool_use_id().to_string(),
                ));
                Ok("ok".to_string())
            }
        },
    ))
}

/// A model that reacts to the request: on a fresh task it calls every tool name in the
/// universe (offered or not) and spawns every subagent listed in the delegation tool;
/// after tool results it answers.
struct ReactiveModel {
    next_id: AtomicUsize,
}

impl Model for ReactiveModel {
    fn name(&self) -> &str {
        "reactive"
    }
    fn stream(&self, request: ModelRequest) -> ModelStream {
        let last = request.messages.last();
        let fresh = last.is_some_and(|m| m.role == Role::User);
        let mut chunks = Vec::new();
        if fresh {
            let mut calls: Vec<(String, serde_json::Value)> = BASE
                .iter()
                .chain(HOOKED.iter())
                .map(|n| (n.to_string(), json!({})))
                .collect();
            if let Some(spawn) = request.tools.iter().find(|t| t.name == SPAWN_TOOL) {
                for line in spawn.description.lines() {
                    if let Some(rest) = line.strip_prefix("- ")
                        && let Some((id, _)) = rest.split_once(':')
                    {
                        calls.push((
                            SPAWN_TOOL.to_string(),
                            json!({"agent_id": id, "task": "work"}),
                        ));
                    }
                }
            }
            for (index, (name, args)) in calls.into_iter().enumerate() {
                let id = format!("c{}", self.next_id.fetch_add(1, Ordering::Relaxed));
                chunks.push(Ok(ModelChunk::ToolCall {
                    index,
                    id: Some(id),
                    name: Some(name),
                    arguments: args.to_string(),
                }));
            }
        } else {
            chunks.push(Ok(ModelChunk::Text("done".into())));
        }
        Box::pin(futures::stream::iter(chunks))
    }
}

#[derive(Clone, Debug)]
struct Case {
    base: Vec<bool>,
    hook_tools: Vec<bool>,
    hook_filter: Vec<bool>,
    policy: Option<PolicyMasks>,
    no_deletion: bool,
    decls: Vec<DeclCase>,
}

/// (Markdown?, allowlist mask, the policy of an isolated child workspace if any, the
/// policy of the workspace of a subagent declared in that child workspace if any)
type DeclCase = (bool, Vec<bool>, Option<PolicyMasks>, Option<PolicyMasks>);

fn case() -> impl Strategy<Value = Case> {
    let n = universe().len();
    let masks = move |allow: f64, deny: f64| {
        (
            prop::collection::vec(prop::bool::weighted(allow), n),
            prop::collection::vec(prop::bool::weighted(deny), n),
        )
    };
    (
        prop::collection::vec(any::<bool>(), BASE.len()),
        prop::collection::vec(any::<bool>(), HOOKED.len()),
        prop::collection::vec(any::<bool>(), HOOKED.len()),
        prop::option::of(masks(0.4, 0.15)),
        any::<bool>(),
        prop::collection::vec(
            (
                any::<bool>(),
                prop::collection::vec(prop::bool::weighted(0.5), n),
                prop::option::weighted(0.6, masks(0.5, 0.25)),
                prop::option::weighted(0.5, masks(0.5, 0.25)),
            ),
            1..=3,
        ),
    )
        .prop_map(
            |(base, hook_tools, hook_filter, policy, no_deletion, decls)| Case {
                base,
                hook_tools,
                hook_filter,
                policy,
                no_deletion,
                decls,
            },
        )
}

fn run_case(case: Case) -> Result<(), TestCaseError> {
    let obs: Shared = Arc::default();
    let ws = TempDir::workspace("prop");
    let all = universe();
    let policy = case
        .policy
        .as_ref()
        .map(|(allow, deny)| (pick(allow, &all), pick(deny, &all)));
    if let Some((allow, deny)) = &policy {
        ws.write("tools.json", &policy_text(allow, deny));
    }
    let permitted_by_policy = |name: &str| permits(policy.as_ref(), name);
    let mut tools = Toolkit::new();
    for name in pick(&case.base, &BASE) {
        tools.register(recording_tool(&name, &obs)).unwrap();
    }
    if case.no_deletion {
        tools.disable_deletion();
    }
    let hook_names = pick(&case.hook_tools, &HOOKED);
    let accepted: HashSet<String> = pick(&case.hook_filter, &HOOKED).into_iter().collect();
    let root = |b: AgentBuilder| {
        let accepted = accepted.clone();
        b.model(ReactiveModel {
            next_id: AtomicUsize::new(0),
        })
        .name("root")
        .without_global_hooks()
        .delegation_style(DelegationStyle::Spawn)
        .toolkit(tools.copy())
        .workspace(ws.path())
        .hook(Probe {
            label: "gov-early".into(),
            inherit: true,
            obs: obs.clone(),
        })
        .hook(Probe {
            label: "parent-only".into(),
            inherit: false,
            obs: obs.clone(),
        })
        .hook(Probe {
            label: "gov-late".into(),
            inherit: true,
            obs: obs.clone(),
        })
        .hook(Contributor {
            names: hook_names.clone(),
            obs: obs.clone(),
        })
        .hook_tool_filter(move |n| accepted.contains(n))
    };

    // The root's tools, exactly: base ∪ accepted hook tools, bounded by the policy.
    let probe = root(Agent::builder()).build().unwrap();
    let mut expected_root: Vec<String> = pick(&case.base, &BASE)
        .into_iter()
        .chain(hook_names.iter().filter(|n| accepted.contains(*n)).cloned())
        .filter(|n| permitted_by_policy(n))
        .collect();
    // The workspace has a subagents folder, so the root may delegate (files can appear
    // at any time) unless the policy denies the delegation tool.
    if permitted_by_policy(SPAWN_TOOL) {
        expected_root.push(SPAWN_TOOL.to_string());
    }
    prop_assert_eq!(probe.tool_names().to_vec(), expected_root.clone());

    // Declarations: allowlists drawn from what the root can call.
    let mut b = root(Agent::builder());
    let mut allowlists: HashMap<String, Vec<String>> = HashMap::new();
    let mut own_hooked: HashSet<String> = HashSet::new();
    let mut child_policies: HashMap<String, Policy> = HashMap::new();
    for (i, (markdown, mask, child_policy, nested_policy)) in case.decls.iter().enumerate() {
        let id = format!("d{i}");
        let allow: Vec<String> = pick(mask, &all)
            .into_iter()
            .filter(|n| expected_root.contains(n))
            .collect();
        allowlists.insert(id.clone(), allow.clone());
        // An isolated child workspace `c<i>/` with its own tools.json.
        let root = child_policy.as_ref().map(|(allow_mask, deny_mask)| {
            let p = (pick(allow_mask, &all), pick(deny_mask, &all));
            let root = ws.path().join(format!("c{i}"));
            std::fs::create_dir_all(&root).unwrap();
            let text = policy_text(&p.0, &p.1);
            std::fs::write(root.join("tools.json"), text).unwrap();
            child_policies.insert(id.clone(), p);
            // Its own `subagents/` declares `n<i>` (empty allowlist), spawned when the
            // child may delegate, optionally in a nested isolated workspace `nest/`.
            let nested = format!("n{i}");
            std::fs::create_dir_all(root.join("subagents")).unwrap();
            let mut front = format!("description: {nested}\n");
            if let Some((allow_mask, deny_mask)) = nested_policy {
                let p = (pick(allow_mask, &all), pick(deny_mask, &all));
                std::fs::create_dir_all(root.join("nest")).unwrap();
                let text = policy_text(&p.0, &p.1);
                std::fs::write(root.join("nest/tools.json"), text).unwrap();
                child_policies.insert(nested.clone(), p);
                front.push_str("workspace: {mode: isolated, path: nest}\n");
            }
            let file = root.join(format!("subagents/{nested}.md"));
            std::fs::write(file, format!("---\n{front}---\n")).unwrap();
            allowlists.insert(nested, Vec::new());
            root
        });
        if *markdown {
            let workspace = match &root {
                Some(_) => format!("workspace: {{mode: isolated, path: c{i}}}\n"),
                None => String::new(),
            };
            ws.write(
                &format!("subagents/{id}.md"),
                &format!(
                    "---\ndescription: {id}\ntools: {}\n{workspace}---\n",
                    json!(allow)
                ),
            );
        } else {
            own_hooked.insert(id.clone());
            let mut decl = SubagentDeclaration::builder(&id)
                .description(&id)
                .tools(allow)
                .hook(Probe {
                    label: id.clone(),
                    inherit: true,
                    obs: obs.clone(),
                });
            if let Some(root) = root {
                decl = decl.workspace(SubagentWorkspace::isolated(root));
            }
            b = b.subagent(decl.build().unwrap());
        }
    }
    let agent = b.build().unwrap();
    prop_assert_eq!(agent.tool_names().to_vec(), expected_root.clone());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let reply = rt.block_on(agent.call(Msg::user("go"))).unwrap();
    prop_assert_eq!(reply.text(), "done");

    let obs = obs.lock().unwrap();
    // 1. Tools only narrow down the tree: a child's tools are within its parent's ∩ its
    //    allowlist ∩ the workspace policy ∩ its own workspace policy, and — the delegation
    //    tool aside — are exactly that intersection.
    for (id, (name, parent, offered)) in &obs.agents {
        let Some(parent) = parent else {
            prop_assert_eq!(offered, &expected_root);
            continue;
        };
        let parent_tools = &obs.agents[parent].2;
        let allow = &allowlists[name];
        let own = child_policies.get(name);
        let within = |tool: &str| {
            parent_tools.iter().any(|t| t == tool)
                && (allow.is_empty() || allow.iter().any(|a| a == tool))
                && permitted_by_policy(tool)
                && permits(own, tool)
        };
        let expected: HashSet<&String> = parent_tools
            .iter()
            .filter(|t| *t != SPAWN_TOOL && within(t))
            .collect();
        let got: HashSet<&String> = offered.iter().filter(|t| *t != SPAWN_TOOL).collect();
        prop_assert_eq!(got, expected, "{} ({}) tools", id, name);
        for tool in offered {
            prop_assert!(
                permits(own, tool),
                "{name} has {tool} against its own workspace's tools.json"
            );
            prop_assert!(
                parent_tools.contains(tool),
                "{id} ({name}) has {tool}, its parent does not"
            );
            prop_assert!(
                allow.is_empty() || allow.contains(tool),
                "{name} has {tool} outside its allowlist"
            );
            prop_assert!(
                permitted_by_policy(tool),
                "{name} has {tool} against tools.json"
            );
            prop_assert!(
                tool != SPAWN_TOOL || allow.contains(tool),
                "{name} got the delegation tool implicitly"
            );
        }
    }
    // 2. Every executed call, anywhere, passed through every inherited hook of every
    //    ancestor (the root's governance hooks and each code declaration's own hook).
    for (agent_id, tool, call_id) in &obs.executed {
        let offered = &obs.agents[agent_id].2;
        prop_assert!(
            offered.contains(tool),
            "{tool} ran in {agent_id} without being offered"
        );
        let mut expected_hooks = vec!["gov-early".to_string(), "gov-late".to_string()];
        let mut cursor = Some(agent_id.clone());
        while let Some(a) = cursor {
            let (name, parent, _) = &obs.agents[&a];
            if parent.is_some() && own_hooked.contains(name) {
                expected_hooks.push(name.clone());
            }
            cursor = parent.clone();
        }
        for hook in expected_hooks {
            prop_assert!(
                obs.seen
                    .contains(&(hook.clone(), agent_id.clone(), call_id.clone())),
                "{hook} did not see {tool} ({call_id}) in {agent_id}"
            );
        }
    }
    // 3. An isolated child that may delegate spawns the subagent its own `subagents/`
    //    declares (the model spawns every listed subagent).
    for (id, (name, _, offered)) in &obs.agents {
        let Some(i) = name.strip_prefix('d') else {
            continue;
        };
        if child_policies.contains_key(name) && offered.iter().any(|t| t == SPAWN_TOOL) {
            let nested = format!("n{i}");
            prop_assert!(
                obs.agents
                    .values()
                    .any(|(n, p, _)| *n == nested && p.as_deref() == Some(id.as_str())),
                "{name} ({id}) did not spawn {nested} from its own folder"
            );
        }
    }
    // 4. The parent-only hook never saw a child event.
    prop_assert!(!obs.parent_only_depths.is_empty());
    prop_assert!(obs.parent_only_depths.iter().all(|d| *d == 0));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn subagent_bounds_and_hook_inheritance_hold_for_random_trees(case in case()) {
        run_case(case)?;
    }
}
