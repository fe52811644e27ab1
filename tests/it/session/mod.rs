//! What is stored and survives: durable sessions, the session-store contract on every
//! engine (memory, file, Redis, PostgreSQL), agents on stores, the audit store, replicas
//! sharing a store (in one process and as two worker processes), crash safety of the file
//! store (SIGKILL at random moments), exactly-once tool effects (also under injected
//! crash points in worker processes), and the boundaries of what is saved.

mod append_only;
mod boundaries;
mod budget_processes;
mod budgets;
mod crash;
mod double_text;
mod double_text_processes;
mod durable;
mod exactly_once;
mod exactly_once_crash;
mod replicas;
mod sessions;
pub(crate) mod store_agents;
#[cfg(feature = "postgres")]
mod store_audit;
pub(crate) mod store_contract;
#[cfg(feature = "postgres")]
pub(crate) mod store_postgres;
#[cfg(feature = "redis")]
pub(crate) mod store_redis;
