//! Requests an MCP server sends *to* the client: elicitation.
//!
//! While one of its tools runs, a server may ask the client for input
//! (`elicitation/create`): a form of values matching a schema, or a URL for the user to
//! open. What a server writes there is the server's content, as untrusted as its tool
//! results, and what the client answers goes back to the server — so rein never answers
//! on its own. A server's elicitations reach the [`ElicitationHandler`] declared for it
//! with [`McpServerConfig::on_elicitation`](super::McpServerConfig::on_elicitation);
//! without one, rein's client does not advertise elicitation (a compliant server sends
//! none) and declines any that arrives. Sampling (`sampling/createMessage`, deprecated by
//! the MCP specification) is never offered and always refused; `roots/list` answers an
//! empty list.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;

use crate::label::Label;

/// What an elicitation asks for.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ElicitationKind {
    /// A form: values for the fields of `schema` (a JSON Schema object with primitive
    /// properties, as the server sent it).
    Form {
        /// The requested schema.
        schema: Value,
    },
    /// A URL the user should open (out-of-band interaction, e.g. a sign-in page).
    Url {
        /// The URL, as the server sent it (not checked: treat it as untrusted).
        url: String,
    },
}

/// One elicitation a server sent while one of its tools ran.
///
/// What a server writes here is its content, as untrusted as its tool results, and the
/// answer goes back to the server: rein never answers on its own. Elicitations reach the
/// [`ElicitationHandler`] declared for the server with
/// [`McpServerConfig::on_elicitation`](super::McpServerConfig::on_elicitation); without
/// one, rein's client does not advertise elicitation (a compliant server sends none) and
/// declines any that arrives. Sampling (`sampling/createMessage`, deprecated by the MCP
/// specification) is never offered and always refused; `roots/list` answers an empty
/// list.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Elicitation {
    /// The server's id (the `<server>` of `mcp__<server>__<tool>`).
    pub server: String,
    /// The server's message to the user.
    pub message: String,
    /// What it asks for.
    pub kind: ElicitationKind,
    /// The label of the request's content: at least
    /// [`Label::UNTRUSTED`](crate::label::Label::UNTRUSTED), joined with the server's
    /// declared result label ([`McpServerConfig::capabilities`](super::McpServerConfig::capabilities)).
    pub label: Label,
}

impl Elicitation {
    /// An elicitation from `server`; its label is at least untrusted whatever `label`
    /// says (the content is the server's).
    pub fn new(
        server: impl Into<String>,
        message: impl Into<String>,
        kind: ElicitationKind,
        label: Label,
    ) -> Self {
        Self {
            server: server.into(),
            message: message.into(),
            kind,
            label: label.join(Label::UNTRUSTED),
        }
    }
}

/// The answer to an [`Elicitation`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ElicitationDecision {
    /// The user provided these values (a JSON object; anything else is sent as
    /// [`ElicitationDecision::Decline`] and logged).
    Accept(Value),
    /// The user declined to provide them; the server's operation goes on without them.
    Decline,
    /// The user cancelled the whole operation.
    Cancel,
}

/// Decides the elicitations one server sends (see [`Elicitation`]): typically by
/// asking a human, through the application's own interface.
///
/// `decide` runs while the server's tool call waits for it, so the tool call's timeout
/// ([`McpServerConfig::timeout`](super::McpServerConfig::timeout)) bounds it: a decision
/// that comes later finds the call already failed.
pub trait ElicitationHandler: Send + Sync + 'static {
    /// The answer to `request`.
    fn decide(&self, request: &Elicitation) -> impl Future<Output = ElicitationDecision> + Send;
}

/// The boxed twin of [`ElicitationHandler`], for dynamic dispatch.
trait ErasedElicitationHandler: Send + Sync + 'static {
    fn decide<'a>(
        &'a self,
        request: &'a Elicitation,
    ) -> Pin<Box<dyn Future<Output = ElicitationDecision> + Send + 'a>>;
}

impl<H: ElicitationHandler> ErasedElicitationHandler for H {
    fn decide<'a>(
        &'a self,
        request: &'a Elicitation,
    ) -> Pin<Box<dyn Future<Output = ElicitationDecision> + Send + 'a>> {
        Box::pin(ElicitationHandler::decide(self, request))
    }
}

/// A server's [`ElicitationHandler`], boxed once where it is declared
/// ([`McpServerConfig::on_elicitation`](super::McpServerConfig::on_elicitation)); the MCP
/// client calls it through [`ElicitationHook::decide`]. Two hooks are equal when they
/// share one handler.
#[derive(Clone)]
pub struct ElicitationHook(Arc<dyn ErasedElicitationHandler>);

impl ElicitationHook {
    /// Boxes `handler`.
    pub fn new(handler: impl ElicitationHandler) -> Self {
        Self(Arc::new(handler))
    }

    /// The handler's answer to `request`; an [`ElicitationDecision::Accept`] whose value
    /// is not a JSON object becomes [`ElicitationDecision::Decline`] (logged under
    /// `rein::mcp`), since the protocol only carries objects.
    pub async fn decide(&self, request: &Elicitation) -> ElicitationDecision {
        match self.0.decide(request).await {
            ElicitationDecision::Accept(v) if !v.is_object() => {
                tracing::warn!(
                    target: "rein::mcp",
                    server = %request.server,
                    "an elicitation handler accepted with a value that is not a JSON object: declined"
                );
                ElicitationDecision::Decline
            }
            other => other,
        }
    }
}

impl PartialEq for ElicitationHook {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for ElicitationHook {}

impl fmt::Debug for ElicitationHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ElicitationHook")
    }
}
