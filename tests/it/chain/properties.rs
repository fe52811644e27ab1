//! Property: random event sequences (scripted turns with tool calls, text, model errors)
//! through random hook chains (priorities with ties, random interests, builder and
//! registry registration, the same instance registered twice, failing observers,
//! denials) keep the chain's rules:
//! - ordering: for every event, subscribed hooks run in ascending priority, ties in
//!   registration order (builder hooks, then registries); unsubscribed hooks never run;
//! - dedup: an instance registered twice runs once per event;
//! - threading: a hook sees exactly what the hooks before it wrote (`PreCall` messages,
//!   `PreActing` tool use, `PostCall` reply), and the tool and the caller see the result
//!   of all of them; a denial is seen by every later hook and is never undone (later
//!   rewrites of a denied call are ignored).

use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use rein::*;
use serde_json::json;

use crate::support::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    Builder,
    Registry,
}

#[derive(Clone, Debug)]
struct Spec {
    priority: i32,
    interest: u16,
    place: Place,
    again: Option<Place>,
    fails: bool,
    denies: bool,
}

#[derive(Clone, Debug)]
enum Turn {
    Tools(usize),
    Text,
    Error,
}

/// (hook id, event kind, what the hook observed before writing).
type Seen = Arc<Mutex<Vec<(usize, EventKind, String)>>>;

struct Probe {
    id: usize,
    spec: Spec,
    seen: Seen,
}

impl Hook for Probe {
    fn name(&self) -> &str {
        "probe"
    }
    fn priority(&self) -> i32 {
        self.spec.priority
    }
    fn interest(&self) -> Interest {
        Interest::of(
            EventKind::ALL
                .into_iter()
                .filter(|k| self.spec.interest & (1 << *k as u16) != 0),
        )
    }
    fn failure_policy(&self) -> FailurePolicy {
        FailurePolicy::Ignore
    }
    async fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError> {
        let mark = format!("|{}", self.id);
        let observed = match event {
            HookEvent::PreCall(e) => {
                let text = e.messages()[0].text();
                e.set_messages(vec![Msg::user(format!("{text}{mark}"))]);
                text
            }
            HookEvent::PreActing(e) => {
                let trail = e.tool_use().input["trail"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned();
                let observed = format!("{trail};denied={}", e.is_denied());
                // Idempotent: a hook re-checking the call's final form (which holds
                // its mark already) accepts it as it is.
                if !trail.split('|').any(|m| m == self.id.to_string()) {
                    let mut updated = e.tool_use().clone();
                    updated.input = json!({"trail": format!("{trail}{mark}")});
                    e.set_tool_use(updated);
                }
                if self.spec.denies {
                    e.deny(format!("denied by {}", self.id));
                }
                observed
            }
            HookEvent::PostCall(e) => {
                let text = e.final_message().text();
                e.set_final_message(Msg::assistant(format!("{text}{mark}")));
                text
            }
            _ => String::new(),
        };
        self.seen
            .lock()
            .unwrap()
            .push((self.id, event.kind(), observed));
        if self.spec.fails {
            return Err(HookError::new("observer failed (ignored)"));
        }
        Ok(())
    }
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        prop::sample::select(vec![-5, 0, 50, 100, 100, 100, 200]),
        0u16..(1 << 12),
        prop::bool::ANY,
        prop::option::of(prop::bool::ANY),
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.15),
    )
        .prop_map(|(priority, interest, in_registry, again, fails, denies)| {
            let place = |r: bool| if r { Place::Registry } else { Place::Builder };
            Spec {
                priority,
                interest,
                place: place(in_registry),
                again: again.map(place),
                fails,
                denies,
            }
        })
}

fn turns() -> impl Strategy<Value = Vec<Turn>> {
    (
        prop::collection::vec((1usize..=3).prop_map(Turn::Tools), 0..3),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(mut t, error)| {
            t.push(if error { Turn::Error } else { Turn::Text });
            t
        })
}

/// Registration order: builder hooks in order, then the registry's; first wins.
fn dispatch_order(specs: &[Spec], kind: EventKind) -> Vec<usize> {
    let mut order: Vec<usize> = Vec::new();
    for place in [Place::Builder, Place::Registry] {
        for (id, s) in specs.iter().enumerate() {
            let here = s.place == place || s.again == Some(place);
            if here && !order.contains(&id) {
                order.push(id);
            }
        }
    }
    order.sort_by_key(|id| specs[*id].priority);
    order.retain(|id| specs[*id].interest & (1 << kind as u16) != 0);
    order
}

/// What the hooks observed on events of `kind`, in order.
fn observed_on(seen: &[(usize, EventKind, String)], kind: EventKind) -> Vec<&String> {
    seen.iter()
        .filter(|(_, k, _)| *k == kind)
        .map(|(_, _, o)| o)
        .collect()
}

fn run_case(specs: Vec<Spec>, turns: Vec<Turn>) -> Result<(), TestCaseError> {
    let seen: Seen = Arc::default();
    let registry = HookRegistry::new();
    let script: Vec<ScriptedTurn> = turns
        .iter()
        .map(|t| match t {
            Turn::Tools(n) => {
                ScriptedTurn::tool_calls((0..*n).map(|_| ("echo", json!({"trail": ""}))).collect())
            }
            Turn::Text => ScriptedTurn::text("final"),
            Turn::Error => ScriptedTurn::error(ModelError::new(ModelErrorKind::Server, "503")),
        })
        .collect();
    let model = ScriptedModel::new(script);
    let echo = FunctionTool::new(
        "echo",
        "echoes its trail",
        json!({"type": "object", "properties": {"trail": {"type": "string"}}}),
        |args| async move { Ok(format!("trail:{}", args["trail"].as_str().unwrap_or(""))) },
    );
    let mut b = builder(&model)
        .max_iters(10)
        .toolkit(toolkit_with(vec![echo]));
    for (id, s) in specs.iter().enumerate() {
        let hook = Arc::new(Probe {
            id,
            spec: s.clone(),
            seen: seen.clone(),
        });
        for place in [Some(s.place), s.again].into_iter().flatten() {
            match place {
                Place::Builder => b = b.hook(Arc::clone(&hook)),
                Place::Registry => registry.register(Arc::clone(&hook)),
            }
        }
    }
    let agent = b.hooks_from(&registry).build().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let result = rt.block_on(agent.call(Msg::user("go")));
    let seen = seen.lock().unwrap().clone();

    // Ordering and dedup: per kind, the log is the dispatch order repeated.
    for kind in EventKind::ALL {
        let order = dispatch_order(&specs, kind);
        let got: Vec<usize> = seen
            .iter()
            .filter(|(_, k, _)| *k == kind)
            .map(|(id, _, _)| *id)
            .collect();
        if order.is_empty() {
            prop_assert!(got.is_empty(), "{kind}: unsubscribed hooks ran: {got:?}");
            continue;
        }
        prop_assert_eq!(
            got.len() % order.len(),
            0,
            "{}: {:?} vs {:?}",
            kind,
            got,
            order
        );
        for chunk in got.chunks(order.len()) {
            prop_assert_eq!(chunk, order.as_slice(), "{}", kind);
        }
    }

    // Threading: each hook saw the marks of the hooks before it.
    let marks = |ids: &[usize]| ids.iter().map(|id| format!("|{id}")).collect::<String>();
    let pre_call = dispatch_order(&specs, EventKind::PreCall);
    let observed = observed_on(&seen, EventKind::PreCall);
    for (i, o) in observed.iter().enumerate() {
        prop_assert_eq!(o.as_str(), format!("go{}", marks(&pre_call[..i])));
    }
    let pre_acting = dispatch_order(&specs, EventKind::PreActing);
    let acting = observed_on(&seen, EventKind::PreActing);
    // The tool got every rewrite, unless a hook denied it.
    let any_denies = pre_acting.iter().any(|id| specs[*id].denies);
    // Per call: a first pass in which each hook adds its mark; unless a hook denied,
    // the last hook's rewrite sends every hook through a second pass over the final
    // form (all marks), which changes nothing.
    let mut recheck = false;
    for call in acting.chunks(pre_acting.len().max(1)) {
        if recheck {
            let all = marks(&pre_acting);
            for o in call {
                prop_assert_eq!(o.as_str(), format!("{all};denied=false"));
            }
            recheck = false;
            continue;
        }
        // A rewrite after the denial is ignored (documented): the trail stops growing.
        let mut denied = false;
        let mut trail = String::new();
        for (i, o) in call.iter().enumerate() {
            prop_assert_eq!(o.as_str(), format!("{trail};denied={denied}"));
            if !denied {
                trail.push_str(&marks(&pre_acting[i..=i]));
            }
            denied |= specs[pre_acting[i]].denies;
        }
        recheck = !any_denies;
    }
    prop_assert!(!recheck, "a call's second PreActing pass is missing");
    let memory = rt.block_on(agent.messages(&key("default")));
    assert_memory_valid(&memory);
    for r in memory.iter().flat_map(|m| m.tool_results()) {
        if any_denies {
            prop_assert!(r.is_error && r.content.contains("denied"), "{:?}", r);
        } else {
            prop_assert_eq!(r.content.clone(), format!("trail:{}", marks(&pre_acting)));
        }
    }
    let post_call = dispatch_order(&specs, EventKind::PostCall);
    match (turns.last(), result) {
        (Some(Turn::Error), Err(e)) => prop_assert_eq!(e.kind(), ErrorKind::Model),
        (Some(Turn::Text), Ok(reply)) => {
            prop_assert_eq!(reply.text(), format!("final{}", marks(&post_call)));
            let observed = observed_on(&seen, EventKind::PostCall);
            for (i, o) in observed.iter().enumerate() {
                prop_assert_eq!(o.as_str(), format!("final{}", marks(&post_call[..i])));
            }
        }
        (last, result) => prop_assert!(false, "{last:?} gave {result:?}"),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_event_sequences_through_random_hook_chains_keep_order_dedup_and_threading(
        specs in prop::collection::vec(spec(), 1..8),
        turns in turns(),
    ) {
        run_case(specs, turns)?;
    }
}
