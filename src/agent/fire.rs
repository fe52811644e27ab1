//! One typed helper for firing a mutable event: the payload goes into its
//! [`HookEvent`] variant, the chain runs, and the payload — with what the hooks changed —
//! comes back out. The "unpack the variant" step exists once, here; a variant that came
//! back different is a rein bug ([`ErrorKind::Internal`](crate::ErrorKind::Internal)).
//! No allocation and no dynamic dispatch beyond the chain's own: the payload moves.

use super::run::Call;
use crate::error::Error;
use crate::hook::{
    HookEvent, PostActingEvent, PostCallEvent, PostReasoningEvent, PostSummaryEvent,
    PreActingEvent, PreCallEvent, PreReasoningEvent, PreSummaryEvent,
};

/// An event payload with its own [`HookEvent`] variant.
pub(super) trait Payload: Sized {
    /// The variant's name, for the internal error.
    const NAME: &'static str;
    /// The payload in its variant.
    fn into_event(self) -> HookEvent;
    /// The payload back out of its variant; `None` for another variant.
    fn from_event(event: HookEvent) -> Option<Self>;
    /// The payload inside its variant; `None` for another variant.
    fn get_mut(event: &mut HookEvent) -> Option<&mut Self>;
}

macro_rules! payloads {
    ($($variant:ident($ty:ty)),* $(,)?) => {$(
        impl Payload for $ty {
            const NAME: &'static str = stringify!($variant);

            fn into_event(self) -> HookEvent {
                HookEvent::$variant(self)
            }

            fn from_event(event: HookEvent) -> Option<Self> {
                match event {
                    HookEvent::$variant(e) => Some(e),
                    _ => None,
                }
            }

            fn get_mut(event: &mut HookEvent) -> Option<&mut Self> {
                match event {
                    HookEvent::$variant(e) => Some(e),
                    _ => None,
                }
            }
        }
    )*};
}

payloads!(
    PreCall(PreCallEvent),
    PreReasoning(PreReasoningEvent),
    PostReasoning(PostReasoningEvent),
    PreActing(PreActingEvent),
    PostActing(PostActingEvent),
    PreSummary(PreSummaryEvent),
    PostSummary(PostSummaryEvent),
    PostCall(PostCallEvent),
);

impl Call<'_> {
    /// Fires `payload` through the chain and returns it as the hooks left it.
    ///
    /// # Errors
    /// An aborting hook's error; [`ErrorKind::Internal`](crate::ErrorKind::Internal) if
    /// the event came back as another variant.
    pub(super) async fn fire<P: Payload>(&self, payload: P) -> Result<P, Error> {
        let mut event = payload.into_event();
        self.dispatch(&mut event).await?;
        P::from_event(event).ok_or_else(changed::<P>)
    }
}

/// The internal error for an event that came back as another variant.
pub(super) fn changed<P: Payload>() -> Error {
    Error::internal(&format!("{} changed variant", P::NAME))
}
