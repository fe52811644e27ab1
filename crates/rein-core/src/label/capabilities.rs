//! What a tool can do and what its results are: the declarations information-flow
//! policies decide on.

use super::{Confidentiality, Label};

/// What a tool declares about itself for information-flow control: the label of what
/// it returns, whether it changes state or communicates outside, the most confidential
/// data it may send, and whether its results are quarantined.
///
/// Declared with [`Tool::capabilities`](crate::Tool::capabilities) (default
/// [`ToolCapabilities::default`]), [`FunctionTool::capabilities`](crate::FunctionTool::capabilities),
/// per MCP server in `tools.json`, and derived for delegation tools from the subagent's
/// own tools. A policy hook reads them on the `PreActing` event
/// ([`PreActingEvent::tool_capabilities`](crate::hook::PreActingEvent::tool_capabilities)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ToolCapabilities {
    /// The label of the tool's results (a private-data reader: confidentiality
    /// [`Private`](Confidentiality::Private); a web fetch: untrusted). Default
    /// [`Label::BOTTOM`] for the application's own tools, [`Label::UNTRUSTED`] for MCP
    /// tools.
    pub result: Label,
    /// Whether a call changes state (writes, pays, deletes). `None` (the default):
    /// derived from the tool's [`EffectClass`](crate::EffectClass) when it is registered —
    /// every class but [`ReadOnly`](crate::EffectClass::ReadOnly) changes state.
    pub changes_state: Option<bool>,
    /// Whether a call sends data outside the application (e-mail, a message, an HTTP
    /// request to a third party). Default `false`.
    pub external: bool,
    /// The most confidential data an external call may carry: data above it in the
    /// call's context is what a confidentiality policy stops. Default
    /// [`Confidentiality::Public`]; ignored for tools that are not external.
    pub ceiling: Confidentiality,
    /// The tool's results are quarantined: the model sees a handle (`$doc1`) instead of
    /// the text, can pass the handle as a tool argument (the runtime substitutes the
    /// text after `PreActing`) and read a small value out of it through an extraction
    /// tool. Default `false`.
    pub quarantined: bool,
}

impl Default for ToolCapabilities {
    fn default() -> Self {
        Self {
            result: Label::BOTTOM,
            changes_state: None,
            external: false,
            ceiling: Confidentiality::Public,
            quarantined: false,
        }
    }
}

impl ToolCapabilities {
    /// The defaults ([`ToolCapabilities::default`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// What an MCP tool is unless `tools.json` says otherwise: untrusted results; it
    /// changes state and communicates outside (nothing is known about it, so the
    /// declaration fails closed).
    pub fn remote() -> Self {
        Self {
            result: Label::UNTRUSTED,
            changes_state: Some(true),
            external: true,
            ..Self::default()
        }
    }

    /// Sets the label of the results.
    #[must_use]
    pub fn result(mut self, label: Label) -> Self {
        self.result = label;
        self
    }

    /// Its results are untrusted (integrity), keeping their confidentiality.
    #[must_use]
    pub fn untrusted(mut self) -> Self {
        self.result = self.result.join(Label::UNTRUSTED);
        self
    }

    /// It reads private data: its results are at least
    /// [`Private`](Confidentiality::Private).
    #[must_use]
    pub fn reads_private(mut self) -> Self {
        self.result = self.result.join(Label::PRIVATE);
        self
    }

    /// Declares whether a call changes state (overriding the effect class).
    #[must_use]
    pub fn changes_state(mut self, yes: bool) -> Self {
        self.changes_state = Some(yes);
        self
    }

    /// It communicates outside, carrying data up to `ceiling`.
    #[must_use]
    pub fn external(mut self, ceiling: Confidentiality) -> Self {
        self.external = true;
        self.ceiling = ceiling;
        self
    }

    /// Its results are quarantined (see [`ToolCapabilities::quarantined`]).
    #[must_use]
    pub fn quarantined(mut self) -> Self {
        self.quarantined = true;
        self
    }

    /// Whether a call acts on the world: changes state or communicates outside (the
    /// third leg of the Rule of Two). An undeclared `changes_state` counts as changing
    /// state (fails closed; the runtime resolves it at registration).
    pub fn acts(&self) -> bool {
        self.external || self.changes_state != Some(false)
    }
}
