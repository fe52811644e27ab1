//! Structured output: a call whose answer is a validated Rust value.

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{Agent, CallOutcome};
use crate::context::{RunContext, StopReason};
use crate::error::Error;
use crate::message::Msg;
use crate::model::ResponseFormat;
use crate::tool::{deserialize_at, schema_violations};

/// How many times a structured call re-asks the model after an answer that does not
/// fit the schema (so a call makes at most `1 + OUTPUT_REASKS` attempts).
pub const OUTPUT_REASKS: u32 = 2;

/// The answer of [`Agent::run_typed`]: the value, and the outcome of the attempt that
/// produced it.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct TypedOutcome<T> {
    /// The answer, validated against the schema and deserialized.
    pub value: T,
    /// The outcome of the accepted attempt (its reply is the answer's JSON text).
    pub outcome: CallOutcome,
    /// Re-asks it took (0 when the first answer fit).
    pub reasks: u32,
}

impl Agent {
    /// Sends one message on the default session with a fresh [`RunContext`] and
    /// returns the answer as a `T` (structured output). See [`Agent::run_typed`].
    ///
    /// ```
    /// use rein::{Agent, Msg, ScriptedModel, ScriptedTurn};
    /// use schemars::JsonSchema;
    /// use serde::Deserialize;
    ///
    /// #[derive(Debug, Deserialize, JsonSchema)]
    /// struct Triage {
    ///     category: String,
    ///     urgent: bool,
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let model = ScriptedModel::new([ScriptedTurn::text(
    ///     r#"{"category": "refund", "urgent": true}"#,
    /// )]);
    /// let agent = Agent::builder().name("triage").model(model).build()?;
    /// let triage: Triage = agent.call_typed(Msg::user("My card was charged twice!")).await?;
    /// assert_eq!(triage.category, "refund");
    /// assert!(triage.urgent);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`Agent::run_typed`].
    pub async fn call_typed<T>(&self, msg: Msg) -> Result<T, Error>
    where
        T: DeserializeOwned + JsonSchema,
    {
        self.run_typed(vec![msg], RunContext::new())
            .await
            .map(|t| t.value)
    }

    /// Runs a call whose final answer must be a `T`: the JSON Schema of `T` (generated
    /// with `schemars`, as for typed tools; see [`ResponseFormat::for_type`]) is put into
    /// the options of every reasoning and summary request of the call (providers send
    /// it natively or as a forced tool; `PreReasoning` hooks see it in
    /// [`GenerateOptions::response_format`](crate::GenerateOptions::response_format)),
    /// and the answer is validated against the schema, then deserialized. Only this
    /// call's own requests carry the format: subagents it delegates to answer in free
    /// text, as always.
    ///
    /// An answer that is not JSON, fails the schema or does not deserialize is re-asked
    /// up to [`OUTPUT_REASKS`] times, each time as a new call on the same session whose
    /// input is a runtime-authored user message naming the violation (e.g. ``at
    /// `/urgent`: "yes" is not of type "boolean"``). Hooks observe every attempt like
    /// any call, and the session's memory keeps them: the rejected answer, the
    /// correction and the accepted answer. A reply wrapped in one Markdown code fence
    /// (```` ```json … ``` ````) is read without the fence.
    ///
    /// **Masking and other `PostCall` rewrites.** The value is decoded from the answer
    /// the loop accepted (after `PostReasoning` hooks), before `PostCall` hooks change
    /// the reply's text: a schema-valid answer is never re-asked because a masking hook
    /// turned `4111111111111111` into `***`. The program receives the value as the model
    /// gave it; every text copy — [`TypedOutcome::outcome`]'s reply, a stream, the audit
    /// and the logs — shows the masked text.
    ///
    /// # Errors
    /// [`ErrorKind::Output`](crate::ErrorKind::Output) when `T`'s JSON form is not an
    /// object, when the answer still does not fit after the re-asks (the message holds
    /// the last violation), or when an attempt ends without an answer (a hook stopped
    /// it, or a call waits for a human: resume the session, then ask again); any error
    /// of [`Agent::run`] as it is.
    pub async fn run_typed<T>(
        &self,
        msgs: Vec<Msg>,
        ctx: RunContext,
    ) -> Result<TypedOutcome<T>, Error>
    where
        T: DeserializeOwned + JsonSchema,
    {
        let format = ResponseFormat::for_type::<T>()
            .map_err(|e| Error::output(format!("structured output: {e}")))?;
        let validator = jsonschema::validator_for(&format.schema).map_err(|e| {
            Error::output(format!(
                "structured output `{}`: the generated schema does not compile: {e}",
                format.name
            ))
        })?;
        let mut input = msgs;
        let mut reasks = 0;
        loop {
            let outcome = self
                .inner
                .run_call(input, ctx.clone(), None, Some(&format))
                .await?;
            if !matches!(
                outcome.reason,
                StopReason::Final | StopReason::MaxIterations
            ) {
                return Err(Error::output(format!(
                    "structured output `{}`: the call ended without an answer ({:?})",
                    format.name, outcome.reason
                )));
            }
            let answer = outcome
                .answer
                .as_deref()
                .map_or_else(|| outcome.reply.text(), Msg::text);
            let violation = match parse::<T>(&answer, &validator) {
                Ok(value) => {
                    return Ok(TypedOutcome {
                        value,
                        outcome,
                        reasks,
                    });
                }
                Err(violation) => violation,
            };
            if reasks == OUTPUT_REASKS {
                return Err(Error::output(format!(
                    "structured output `{}`: the answer did not fit after {OUTPUT_REASKS} \
                     re-asks: {violation}",
                    format.name
                )));
            }
            reasks += 1;
            input = vec![
                Msg::user(format!(
                    "Your answer does not match the required JSON schema `{}`: {violation}. \
                     Reply again with only the corrected JSON object.",
                    format.name
                ))
                .synthetic(),
            ];
        }
    }
}

/// The answer `text` as a `T`, or what is wrong with it (the schema violations with
/// their paths, or the field that did not deserialize).
fn parse<T: DeserializeOwned>(text: &str, validator: &jsonschema::Validator) -> Result<T, String> {
    let json = unfence(text.trim());
    let value: Value =
        serde_json::from_str(json).map_err(|e| format!("the answer is not a JSON value ({e})"))?;
    let errors = schema_violations(validator, &value, 3);
    if !errors.is_empty() {
        return Err(errors.join("; "));
    }
    deserialize_at(value).map_err(|e| format!("the answer does not deserialize{e}"))
}

/// `text` without one surrounding Markdown code fence (```` ```json ```` or ```` ``` ````).
fn unfence(text: &str) -> &str {
    let Some(rest) = text.strip_prefix("```") else {
        return text;
    };
    let Some(body) = rest.strip_suffix("```") else {
        return text;
    };
    // Drop the info string (`json`) up to the first line break.
    match body.find('\n') {
        Some(at) => body[at + 1..].trim(),
        None => body.trim(),
    }
}

#[cfg(test)]
mod tests {
    use super::unfence;

    #[test]
    fn a_fenced_answer_is_read_without_its_fence() {
        assert_eq!(unfence("```json\n{\"a\": 1}\n```"), "{\"a\": 1}");
        assert_eq!(unfence("```\n{\"a\": 1}```"), "{\"a\": 1}");
        assert_eq!(unfence("{\"a\": 1}"), "{\"a\": 1}");
        assert_eq!(
            unfence("```{\"a\": 1}"),
            "```{\"a\": 1}",
            "an unclosed fence stays"
        );
    }
}
