//! What rein's client answers when a server sends it a request (see
//! `rein_core::mcp::Elicitation`): elicitations go to the server's declared handler, or
//! are declined; nothing else is offered.

use rmcp::ClientHandler;
use rmcp::ErrorData as McpError;
use rmcp::model::{
    ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationCapability,
    FormElicitationCapability, UrlElicitationCapability,
};
use rmcp::service::{RequestContext, RoleClient};

use rein_core::label::Label;
use rein_core::mcp::{Elicitation, ElicitationDecision, ElicitationHook, ElicitationKind};

/// The client side of one server's connection: its id, the label of its content and its
/// elicitation handler. Sampling keeps rmcp's refusal (method not found) and `roots/list`
/// its empty list; neither is advertised.
pub(crate) struct Requests {
    pub(crate) server: String,
    pub(crate) label: Label,
    pub(crate) elicitation: Option<ElicitationHook>,
}

impl ClientHandler for Requests {
    fn get_info(&self) -> ClientConfig {
        let mut info = ClientConfig::default();
        if self.elicitation.is_some() {
            info.capabilities.elicitation = Some(
                ElicitationCapability::new()
                    .with_form(FormElicitationCapability::new())
                    .with_url(UrlElicitationCapability::new()),
            );
        }
        info
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        let Some(hook) = &self.elicitation else {
            tracing::info!(
                target: "rein::mcp",
                server = %self.server,
                "an elicitation from a server without an elicitation handler: declined"
            );
            return Ok(ElicitResult::new(ElicitationAction::Decline));
        };
        let (message, kind) = match request {
            ElicitRequestParams::FormElicitationParams {
                message,
                requested_schema,
                ..
            } => (
                message,
                ElicitationKind::Form {
                    schema: serde_json::to_value(&requested_schema)
                        .unwrap_or(serde_json::Value::Null),
                },
            ),
            ElicitRequestParams::UrlElicitationParams { message, url, .. } => {
                (message, ElicitationKind::Url { url })
            }
            // A mode this client version does not know: nothing to show a human.
            _ => return Ok(ElicitResult::new(ElicitationAction::Decline)),
        };
        let elicitation = Elicitation::new(self.server.clone(), message, kind, self.label);
        let decision = hook.decide(&elicitation).await;
        tracing::info!(
            target: "rein::mcp",
            server = %self.server,
            decision = decision_name(&decision),
            "elicitation decided"
        );
        Ok(match decision {
            ElicitationDecision::Accept(content) => {
                let mut result = ElicitResult::new(ElicitationAction::Accept);
                result.content = Some(content);
                result
            }
            ElicitationDecision::Cancel => ElicitResult::new(ElicitationAction::Cancel),
            _ => ElicitResult::new(ElicitationAction::Decline),
        })
    }
}

fn decision_name(d: &ElicitationDecision) -> &'static str {
    match d {
        ElicitationDecision::Accept(_) => "accept",
        ElicitationDecision::Cancel => "cancel",
        _ => "decline",
    }
}
