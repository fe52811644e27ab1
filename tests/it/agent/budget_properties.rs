//! Random budgets over random delegation trees with scripted usage: the stated bound
//! holds, and nothing is spent after a budget ran out.

use proptest::prelude::*;
use rein::*;
use serde_json::json;

use crate::support::{Log, add_tool, builder_with_tools};

/// One scripted turn of the tree: a tool call (`add`), a delegation, or an answer, with
/// the usage the model reports.
#[derive(Clone, Debug)]
enum Step {
    Add(u64),
    Spawn,
    Answer(u64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (1u64..400).prop_map(Step::Add),
        Just(Step::Spawn),
        (1u64..400).prop_map(Step::Answer),
    ]
}

fn turns(steps: &[Step]) -> Vec<ScriptedTurn> {
    steps
        .iter()
        .map(|s| match s {
            Step::Add(out) => {
                ScriptedTurn::tool_call("add", json!({"a": 1, "b": 2})).with_usage(5, *out)
            }
            Step::Spawn => {
                ScriptedTurn::tool_call(SPAWN_TOOL, json!({"agent_id": "helper", "task": "add"}))
                    .with_usage(5, 10)
            }
            Step::Answer(out) => ScriptedTurn::text("done").with_usage(5, *out),
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn no_budget_of_a_random_tree_is_exceeded_and_nothing_runs_after_it_ran_out(
        steps in proptest::collection::vec(step(), 1..24),
        model_calls in 1u64..10,
        output in 50u64..2000,
        tools in 1u64..8,
        slice in proptest::option::of(1u64..4),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let log = Log::default();
            let model = ScriptedModel::new(turns(&steps));
            let mut child = SubagentDeclaration::builder("helper").description("adds");
            if let Some(n) = slice {
                child = child.budget(Budget::new().model_calls(n));
            }
            let agent = builder_with_tools(&model, vec![add_tool(&log)])
                .subagent(child.build().unwrap())
                .call_budget(
                    Budget::new()
                        .model_calls(model_calls)
                        .output_tokens(output)
                        .tool_calls(tools),
                )
                .build()
                .unwrap();
            let result = agent.run(vec![Msg::user("go")], RunContext::new()).await;
            // A script that runs out is a model error, not a budget question.
            let Ok(outcome) = result else { return Ok(()) };
            let requests = model.requests();
            let spend = outcome.spend.clone().unwrap();
            // The bound: model calls and output tokens never exceed the budget.
            prop_assert!(requests.len() as u64 <= model_calls, "{} requests", requests.len());
            prop_assert_eq!(spend.model_calls, requests.len() as u64);
            prop_assert!(spend.output_tokens <= output, "{} output tokens", spend.output_tokens);
            // Tool calls that ran (adds and delegations) never exceed the tool budget.
            let ran = log.entries().len() as u64;
            prop_assert!(spend.tool_calls <= tools);
            prop_assert!(ran <= spend.tool_calls);
            // Every request was sent within what was left: its cap never exceeds it.
            let mut out_used = 0u64;
            for (i, r) in requests.iter().enumerate() {
                let cap = u64::from(r.options.max_tokens.unwrap_or(u32::MAX));
                prop_assert!(cap + out_used <= output, "request {} capped at {} with {} used", i, cap, out_used);
                // A request past the script's end failed (a subagent's failure is a
                // tool result to its parent); it reported nothing.
                let scripted = match steps.get(i) {
                    Some(Step::Add(o) | Step::Answer(o)) => *o,
                    Some(Step::Spawn) => 10,
                    None => 0,
                };
                out_used += scripted.min(cap);
            }
            // A stop for the budget ends the call: nothing after it was asked of the model.
            if outcome.reason == StopReason::BudgetExhausted {
                prop_assert!(outcome.reply.metadata.contains_key(rein::budget::BUDGET_KEY));
            }
            Ok(())
        })?;
    }
}
