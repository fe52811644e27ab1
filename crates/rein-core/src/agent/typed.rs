//! Structured output: a call whose answer is a validated Rust value.
//!
//! The answer is asked for in one of three ways ([`OutputMode`]): natively (the
//! provider's response format), through a final-answer tool the model calls, or in the
//! prompt. Whichever way, the answer is validated against the schema and re-asked when
//! it does not fit, and every request passes the hooks as any other.

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{Agent, CallOutcome};
use crate::context::{RunContext, StopReason};
use crate::error::Error;
use crate::message::{ContentBlock, Msg};
use crate::model::{ModelCapabilities, ResponseFormat};
use crate::tool::{ToolSchema, deserialize_at, schema_violations};

/// The name of the final-answer tool a structured-output call offers in
/// [`OutputMode::Tool`]. An agent with a tool of this name cannot use that mode.
pub const OUTPUT_TOOL: &str = "final_answer";

/// How a structured-output call ([`Agent::run_typed`]) asks the model for its answer.
/// Set with [`AgentBuilder::output_mode`](super::AgentBuilder::output_mode); the
/// default is [`Auto`](Self::Auto).
///
/// The reference is Pydantic AI's native / tool / prompted output. Whatever the mode,
/// the answer is validated against the schema and re-asked (at most
/// [`OUTPUT_REASKS`] times) when it does not fit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OutputMode {
    /// Chosen per call from the model's [`ModelCapabilities`] and whether the agent
    /// offers tools: with tools, [`Native`](Self::Native) only where the capabilities
    /// declare [`native_output_with_tools`](ModelCapabilities::native_output_with_tools),
    /// else [`Tool`](Self::Tool) where the model calls tools, else
    /// [`Prompted`](Self::Prompted); without tools, `Native` where the model takes a
    /// [`native_output`](ModelCapabilities::native_output), else `Prompted`. So the
    /// default never sends a response format together with tools to a server that did
    /// not declare it (llama.cpp's server aborts on it).
    #[default]
    Auto,
    /// The schema goes into every reasoning and summary request's
    /// [`GenerateOptions::response_format`](crate::GenerateOptions::response_format)
    /// (OpenAI `response_format: json_schema`; Anthropic a forced tool), where
    /// `PreReasoning` hooks see it.
    Native,
    /// Every reasoning request offers one more tool, [`OUTPUT_TOOL`], whose parameters
    /// are the schema, and the system prompt asks the model to call it with the final
    /// answer. Its call *is* the answer: it is not a tool call (no `PreActing`, no
    /// result), the accepted turn is stored as an assistant text holding the call's
    /// arguments as JSON, and `PostCall` sees that text. A turn that calls it together
    /// with other tools runs the others and drops it (the model answers again after
    /// their results). Works on every server with tool calling. A plain-text answer
    /// is accepted too, when it fits the schema.
    Tool,
    /// No response format and no extra tool: the system prompt carries the schema and
    /// asks for a JSON object only. For servers with neither native structured output
    /// nor tool calling.
    Prompted,
}

impl OutputMode {
    /// The mode a call uses on a model with `capabilities`, on an agent that offers
    /// tools or not: [`Auto`](Self::Auto) resolved as documented there, any other mode
    /// as it is (an explicit mode is never second-guessed).
    pub fn resolve(self, capabilities: &ModelCapabilities, offers_tools: bool) -> Self {
        match self {
            Self::Auto if offers_tools => {
                if capabilities.native_output_with_tools {
                    Self::Native
                } else if capabilities.tools {
                    Self::Tool
                } else {
                    Self::Prompted
                }
            }
            Self::Auto if capabilities.native_output => Self::Native,
            Self::Auto => Self::Prompted,
            other => other,
        }
    }
}

/// What a structured-output call tells the loop: the format, the mode it resolved to,
/// and (for the tool mode) the final-answer tool's schema.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Output<'a> {
    pub(crate) format: &'a ResponseFormat,
    /// Resolved: never `Auto`.
    pub(crate) mode: OutputMode,
    /// Whether the summary step (which offers no tools) sends the format natively.
    pub(crate) native_summary: bool,
    /// [`OutputMode::Tool`]: the tool offered with every reasoning request.
    pub(crate) tool: Option<&'a ToolSchema>,
}

impl Output<'_> {
    /// The text appended to the system prompt for this mode, if any.
    pub(crate) fn instruction(&self) -> Option<String> {
        match self.mode {
            OutputMode::Tool => Some(format!(
                "When you have the final answer, call the tool `{OUTPUT_TOOL}` with it as \
                 its arguments. Do not answer in prose."
            )),
            OutputMode::Prompted => Some(format!(
                "Answer with only a JSON object that matches this JSON Schema (no prose, no \
                 code fence):\n{}",
                self.format.schema
            )),
            _ => None,
        }
    }

    /// With [`OutputMode::Tool`]: the answer when the turn called only the final-answer
    /// tool (the call's arguments as an assistant text, thinking kept); when it called
    /// that tool along with others, the turn without that call. `None`: no call of it.
    pub(crate) fn take_answer(&self, msg: &mut Msg) -> Option<Msg> {
        if self.mode != OutputMode::Tool {
            return None;
        }
        let calls =
            |b: &ContentBlock| matches!(b, ContentBlock::ToolUse(u) if u.name == OUTPUT_TOOL);
        if !msg.content.iter().any(calls) {
            return None;
        }
        let others = msg
            .content
            .iter()
            .any(|b| matches!(b, ContentBlock::ToolUse(u) if u.name != OUTPUT_TOOL));
        if others {
            msg.content.retain(|b| !calls(b));
            return None;
        }
        let mut answer = msg.clone();
        answer.content = msg
            .content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Thinking(_) => Some(b.clone()),
                ContentBlock::ToolUse(u) => Some(ContentBlock::Text(u.input.to_string())),
                _ => None,
            })
            .collect();
        // Two calls of the tool in one turn: the first is the answer.
        let mut seen = false;
        answer.content.retain(|b| match b {
            ContentBlock::Text(_) if seen => false,
            ContentBlock::Text(_) => {
                seen = true;
                true
            }
            _ => true,
        });
        Some(answer)
    }
}

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
    /// with `schemars`, as for typed tools; see [`ResponseFormat::for_type`]) is asked
    /// for in the agent's [`OutputMode`] — by default chosen from the model's
    /// [`capabilities`](crate::Model::capabilities): natively in the options of every
    /// reasoning and summary request (`PreReasoning` hooks see it in
    /// [`GenerateOptions::response_format`](crate::GenerateOptions::response_format)),
    /// as the final-answer tool [`OUTPUT_TOOL`], or in the system prompt — and the
    /// answer is validated against the schema, then deserialized. Only this call's own
    /// requests carry the format: subagents it delegates to answer in free text, as
    /// always.
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
    /// object, when the mode is [`OutputMode::Tool`] and the agent has a tool named
    /// [`OUTPUT_TOOL`], when the answer still does not fit after the re-asks (the message holds
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
        let inner = &self.inner;
        let offers_tools = !inner.tool_schemas.is_empty();
        let capabilities = inner.model.capabilities();
        let mode = inner.output_mode.resolve(&capabilities, offers_tools);
        if mode == OutputMode::Tool && inner.tool_names.iter().any(|n| n == OUTPUT_TOOL) {
            return Err(Error::output(format!(
                "structured output `{}`: the agent has a tool named `{OUTPUT_TOOL}`, the \
                 name of the final-answer tool; choose another output mode",
                format.name
            )));
        }
        let tool = ToolSchema {
            name: OUTPUT_TOOL.to_owned(),
            description: format!(
                "Give the final answer ({}). Call this once you have everything you need; \
                 the arguments are the answer.",
                format.name
            ),
            parameters: format.schema.clone(),
        };
        let output = Output {
            format: &format,
            mode,
            native_summary: mode == OutputMode::Native
                || (mode == OutputMode::Tool && capabilities.native_output),
            tool: (mode == OutputMode::Tool).then_some(&tool),
        };
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
                .run_call(input, ctx.clone(), None, Some(output))
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
            let again = match mode {
                OutputMode::Tool => {
                    format!("Call `{OUTPUT_TOOL}` again with the corrected answer.")
                }
                _ => "Reply again with only the corrected JSON object.".to_owned(),
            };
            input = vec![
                Msg::user(format!(
                    "Your answer does not match the required JSON schema `{}`: {violation}. \
                     {again}",
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
