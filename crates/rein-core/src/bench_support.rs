//! Internals exposed for the crate's benchmarks and allocation tests only. Not part of
//! the public API: no stability promise, hidden from the docs.

use std::sync::Arc;

use crate::context::{AgentInfo, RunContext};
use crate::error::{BuildError, Error};
use crate::hook::TrailMode;
use crate::hook::{EventKind, EventMeta, HookChain, HookEvent, IntoHook, PreActingEvent};
use crate::message::ToolUse;

/// A built hook chain with a ready event header, dispatching the way the loop does.
pub struct DispatchProbe {
    chain: HookChain,
    meta: EventMeta,
}

impl std::fmt::Debug for DispatchProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DispatchProbe").finish_non_exhaustive()
    }
}

impl DispatchProbe {
    /// A chain of these hooks (deduplicated and sorted as an agent would).
    ///
    /// # Errors
    /// As `AgentBuilder::build` for invalid hooks.
    pub fn new<M, H: IntoHook<M>>(hooks: impl IntoIterator<Item = H>) -> Result<Self, BuildError> {
        let chain = HookChain::build(hooks.into_iter().map(|h| h.into_registered().0), None)?;
        let info = Arc::new(AgentInfo {
            id: "bench".to_owned(),
            name: "bench".to_owned(),
            parent_id: None,
            depth: 0,
        });
        let meta = EventMeta::new(
            &info,
            &RunContext::new(),
            Arc::clone(chain.labels()),
            TrailMode::default(),
        );
        Ok(Self { chain, meta })
    }

    /// Whether any hook subscribed to `kind` (what the loop checks before building an
    /// event).
    #[inline]
    pub fn wants(&self, kind: EventKind) -> bool {
        self.chain.wants(kind)
    }

    /// The loop's `PreActing` step for one call: skipped when nobody subscribed,
    /// otherwise the event is built, dispatched and unpacked.
    ///
    /// # Errors
    /// The first failure of an abort-policy hook.
    pub async fn pre_acting(&self, tool_use: ToolUse) -> Result<ToolUse, Error> {
        if !self.chain.wants(EventKind::PreActing) {
            return Ok(tool_use);
        }
        let mut ev = HookEvent::PreActing(PreActingEvent::new(self.meta.clone(), tool_use));
        if self.chain.is_sync(EventKind::PreActing) {
            self.chain.dispatch_sync(&mut ev)?;
        } else {
            self.chain.dispatch(&mut ev).await?;
        }
        match ev {
            HookEvent::PreActing(e) => Ok(e.tool_use),
            _ => Err(Error::invalid_input("internal: PreActing changed variant")),
        }
    }
}
