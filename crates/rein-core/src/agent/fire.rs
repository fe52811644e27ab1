//! Firing a mutable event: the payload is built in its
//! [`HookEvent`](crate::hook::HookEvent) variant, the
//! chain runs, and the fields the runtime needs — with what the hooks changed — come
//! back out ([`fire!`]; `PreActing`, which may run its hooks in several passes, takes
//! its fields out the same way in `acting.rs`). A variant that came back different is
//! a rein bug ([`ErrorKind::Internal`](crate::ErrorKind::Internal)). No allocation and
//! no dynamic dispatch beyond the chain's own.

use crate::error::Error;

/// Fires an event built in place and takes the named fields back out of it:
/// `fire!(call, Variant(Payload { ..init }) => { field, .. })` evaluates to the
/// fields (a tuple for several) as the hooks left them, or returns the aborting hook's
/// error (or [`ErrorKind::Internal`](crate::ErrorKind::Internal) for an event that
/// came back as another variant) from the enclosing function.
///
/// Built in place and taken apart by field, the payload is never moved as a whole: a
/// by-value helper would copy it and hold payload and event side by side in the call's
/// future (the cost is in `benches/README.md`).
macro_rules! fire {
    (
        $call:expr,
        $variant:ident($payload:ident { $($init:tt)* }) => { $($field:ident),+ $(,)? }
    ) => {{
        let mut event = $crate::hook::HookEvent::$variant($payload { $($init)* });
        $crate::agent::fire::dispatch!($call, &mut event)?;
        match event {
            $crate::hook::HookEvent::$variant($payload { $($field),+, .. }) => ($($field),+),
            _ => return Err($crate::agent::fire::changed(stringify!($variant))),
        }
    }};
}
pub(super) use fire;

/// Dispatches an event through a call (the decisions hooks made kept for the
/// outcome): `dispatch!(call, &mut event)` evaluates to the chain's result. When
/// every subscriber of the event's kind is a [`SyncHook`](crate::SyncHook) the hooks
/// are called right here, with no future built or polled (`Call::dispatch_now`);
/// otherwise the chain's dispatch future is awaited here, with no wrapping future of
/// the call's own. `dispatch!(call, &mut event, list)` does the same for the
/// subscribers in `list` only.
macro_rules! dispatch {
    ($call:expr, $event:expr) => {{
        let event: &mut $crate::hook::HookEvent = $event;
        match $call.dispatch_now(event, None) {
            Some(result) => result,
            None => {
                let result = $call.agent.chain.dispatch(event).await;
                $call.keep_trail(event);
                result
            }
        }
    }};
    ($call:expr, $event:expr, $list:expr) => {{
        let event: &mut $crate::hook::HookEvent = $event;
        let list: &[u16] = $list;
        match $call.dispatch_now(event, Some(list)) {
            Some(result) => result,
            None => {
                let result = $call.agent.chain.dispatch_list(event, list).await;
                $call.keep_trail(event);
                result
            }
        }
    }};
}
pub(super) use dispatch;

/// The internal error for an event that came back as another variant than `variant`.
pub(super) fn changed(variant: &str) -> Error {
    Error::internal(&format!("{variant} changed variant"))
}
