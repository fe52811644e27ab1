//! The production hooks and their governance: approval (stop for a human, on the final
//! form of a call), audit (sinks, batching, the trail, the JSONL sink under crashes),
//! configuration, dynamic options, fail-closed behaviour, latency, masking (whole text,
//! international, streaming), self-correction, the tool guard, and the governance
//! scenarios and fuzzer across delegation trees.

mod approval;
mod approval_on_final_call;
mod audit;
mod audit_batching;
mod audit_jsonl;
mod audit_trail;
mod config;
mod dynamic_options;
mod fail_closed;
mod governance;
mod governance_fuzz;
mod governance_round3;
mod latency;
mod latency_agents;
mod masking;
mod masking_intl;
mod masking_stream;
mod self_correction;
mod tool_guard;

use rein::hooks::{ApprovalConfig, ApprovalHook, ApprovalMode};

/// An approval hook guarding `submitRefund` that stops for a human (shared by
/// `approval` and `governance`).
pub fn stop_for_human() -> ApprovalHook {
    ApprovalHook::new(
        ApprovalConfig {
            enabled: true,
            guarded_tools: vec!["submitRefund".into()],
            mode: ApprovalMode::StopForHuman,
            ..ApprovalConfig::default()
        },
        None,
    )
    .unwrap()
}
