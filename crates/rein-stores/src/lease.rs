//! Engine helpers for session leases (the trait and `Lease` live in `rein_core::store`).

use std::future::Future;
use std::time::Duration;

use rein_core::store::{Lease, SessionKey, StoreError};

/// A fresh 128-bit random token, as 32 hex digits.
pub(crate) fn new_token(key: &SessionKey) -> Result<String, StoreError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|e| StoreError::new(key, format!("no randomness for a lease token: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Calls `attempt` until it returns a fence or `wait` has passed, sleeping a jittered,
/// growing backoff in between; then a `Busy` error naming the session.
pub(crate) async fn acquire_polling<F, Fut>(
    key: &SessionKey,
    ttl: Duration,
    wait: Duration,
    attempt: F,
) -> Result<Lease, StoreError>
where
    F: FnMut(String, u64) -> Fut,
    Fut: Future<Output = Result<Option<u64>, StoreError>>,
{
    rein_core::store::acquire_polling(key, ttl, wait, new_token, attempt).await
}
