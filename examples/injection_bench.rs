//! Run with: cargo run --release --example injection_bench [-- --real]
//!
//! The prompt-injection benchmark (`benches/injection`): three environments (banking,
//! workspace, messaging), nine user tasks with a ground-truth check of the final state,
//! and one injection task per environment whose payload sits in the untrusted data the
//! tools return. Each user task runs alone and under the injection, with the defences
//! off, with the information-flow policy, and with the policy plus quarantined readers
//! and an extraction tool. A simulated human approves exactly the calls the user task
//! needs and denies every other.
//!
//! Without `--real`: scripted planners — an honest one for utility, an obedient one that
//! follows every injection it reads (the worst case) for attacks — and an extraction
//! model fooled by every injection. With `--real`: the real model is the planner and the
//! extractor (the local one of the tests: `scripts/real-model start` then
//! `eval "$(scripts/real-model env)" && cargo run --release --all-features --example
//! injection_bench -- --real`). `--env banking` (or `workspace`, `messaging`) runs one
//! environment. `REIN_INJECTION_VERBOSE=1` prints every run (its calls, reply and outcome) to stderr.

#[path = "../benches/injection/mod.rs"]
mod injection;

mod common;

use std::sync::Arc;

use injection::envs::EnvKind;
use injection::planner::{Extractor, Planner};
use injection::tasks::{InjectionTask, UserTask};
use injection::{Config, Models, Row, run_env};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let real = args.iter().any(|a| a == "--real");
    // `--env banking` (or workspace, messaging): one environment only.
    let envs: Vec<EnvKind> = match args.iter().position(|a| a == "--env") {
        Some(i) => {
            let name = args.get(i + 1).map(String::as_str).unwrap_or("");
            let env = EnvKind::ALL
                .into_iter()
                .find(|e| e.name() == name)
                .ok_or_else(|| {
                    format!("--env: no environment `{name}` (banking, workspace, messaging)")
                })?;
            vec![env]
        }
        None => EnvKind::ALL.to_vec(),
    };
    if real {
        let Some(model) = common::real_model()? else {
            return Err("--real needs a real model: see this example's first lines".into());
        };
        println!("planner and extractor: the real model (rows as they finish)\n");
        let mut rows = Vec::new();
        for config in Config::ALL {
            for &env in &envs {
                let models = |_: &UserTask, _: Option<&InjectionTask>| Models {
                    planner: Arc::clone(&model),
                    extractor: Arc::clone(&model),
                };
                rows.push(run_env(env, config, &models).await);
                println!("{}", injection::table(&rows[rows.len() - 1..]));
            }
        }
        println!("{}", injection::table(&rows));
        return Ok(());
    }
    println!("model: scripted planners and extractor, offline and deterministic");
    println!("utility: the honest planner; attacks: the obedient planner\n");
    let mut rows: Vec<Row> = Vec::new();
    for config in Config::ALL {
        let quarantine = config == Config::PolicyQuarantine;
        for &env in &envs {
            let honest = |task: &UserTask, _: Option<&InjectionTask>| Models {
                planner: Planner::new(task, quarantine, false),
                extractor: Arc::new(Extractor),
            };
            let obedient = |task: &UserTask, _: Option<&InjectionTask>| Models {
                planner: Planner::new(task, quarantine, true),
                extractor: Arc::new(Extractor),
            };
            let utility = run_env(env, config, &honest).await;
            let attacks = run_env(env, config, &obedient).await;
            rows.push(Row {
                attack_runs: attacks.attack_runs,
                utility_under_attack: attacks.utility_under_attack,
                attacks_succeeded: attacks.attacks_succeeded,
                attacks_reaching_a_human: attacks.attacks_reaching_a_human,
                errors: utility.errors + attacks.errors,
                ..utility
            });
        }
    }
    println!("{}", injection::table(&rows));
    let on: usize = rows
        .iter()
        .filter(|r| r.config != Config::Off.name())
        .map(|r| r.attacks_succeeded)
        .sum();
    println!("attacks that succeeded with a policy on: {on}");
    if on > 0 {
        return Err(format!("{on} attacks succeeded with a policy on").into());
    }
    Ok(())
}
