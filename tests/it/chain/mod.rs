//! The hook chain as a mechanism: the `Hook` API and registry, sync and async hooks,
//! ordering and priorities, the decision trail, failure policies, mutators, loop control,
//! and the chain's properties under random chains.

mod async_traits;
mod decision_trail;
mod failure_policy;
mod hook_api;
mod hook_chain;
mod loop_control;
mod mutators;
mod properties;
mod registry_scoped;
mod sync_hooks;
