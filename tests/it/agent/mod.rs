//! The agent's public surface outside hooks and sessions: building an agent (validation,
//! hook-contributed tools), messages and the scripted model, tools and typed tools, error
//! sources, observability (spans, the decision trail, metrics), fault injection at every
//! step of a call, the fuzz targets' properties on stable, and the one-way module graph of
//! `src/`.

mod budget_outcome;
mod budget_properties;
mod budgets;
mod build;
mod context_window;
mod error_sources;
mod faults;
mod fuzz_inputs;
mod layers;
mod messages;
mod observability;
mod token_counts;
mod tools;
mod typed_tools;
mod user_budgets;
