//! Information flow: labels on everything the model sees (set by the runtime, stored
//! with the session, propagated through turns, delegation and compaction), the
//! built-in policy that judges calls on them, quarantined documents, and the scripted
//! prompt-injection benchmark.

mod bench;
mod fuzz;
mod labels;
mod policy;
mod quarantine;
mod replicas;

use rein::hooks::{InformationFlowConfig, InformationFlowPolicy};
use rein::{FunctionTool, Label, ToolCapabilities};
use serde_json::json;

use crate::support::Log;

/// The policy with its defaults (untrusted action: approve; confidentiality: deny;
/// rule of two on).
pub fn policy() -> InformationFlowPolicy {
    InformationFlowPolicy::new(InformationFlowConfig::default())
}

/// `read_email()`: an inbox holding `text`; untrusted (anyone can send an e-mail).
pub fn read_email(log: &Log, text: &str) -> FunctionTool {
    let (log, text) = (log.clone(), text.to_owned());
    FunctionTool::new(
        "read_email",
        "Reads the newest e-mail.",
        json!({"type": "object", "properties": {}}),
        move |_| {
            let (log, text) = (log.clone(), text.clone());
            async move {
                log.push("read_email");
                Ok(text)
            }
        },
    )
    .read_only()
    .capabilities(ToolCapabilities::new().untrusted())
}

/// `issue_refund(amount, to)`: changes state; logs `refund:<args>`.
pub fn issue_refund(log: &Log) -> FunctionTool {
    let log = log.clone();
    FunctionTool::new(
        "issue_refund",
        "Pays a refund.",
        json!({"type": "object", "properties": {"amount": {"type": "number"}, "to": {"type": "string"}},
               "required": ["amount"]}),
        move |args| {
            let log = log.clone();
            async move {
                log.push(format!("refund:{args}"));
                Ok("refund paid".to_owned())
            }
        },
    )
}

/// `lookup_customer()`: the customer's own record; trusted and private.
pub fn lookup_customer(log: &Log) -> FunctionTool {
    let log = log.clone();
    FunctionTool::new(
        "lookup_customer",
        "Reads the customer's record.",
        json!({"type": "object", "properties": {}}),
        move |_| {
            let log = log.clone();
            async move {
                log.push("lookup");
                Ok("Ada Lovelace, IBAN GB33BUKB20201555555555".to_owned())
            }
        },
    )
    .read_only()
    .capabilities(ToolCapabilities::new().reads_private())
}

/// `send_email(to, body)`: communicates outside, public data only.
pub fn send_email(log: &Log) -> FunctionTool {
    let log = log.clone();
    FunctionTool::new(
        "send_email",
        "Sends an e-mail.",
        json!({"type": "object", "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
               "required": ["to", "body"]}),
        move |args| {
            let log = log.clone();
            async move {
                log.push(format!("send:{args}"));
                Ok("sent".to_owned())
            }
        },
    )
    .capabilities(ToolCapabilities::new().external(rein::Confidentiality::Public))
}

/// The label a message carries, by role order in `messages`.
pub fn labels(messages: &[rein::Msg]) -> Vec<Label> {
    messages.iter().map(rein::Msg::label).collect()
}
