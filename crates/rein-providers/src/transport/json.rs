//! One JSON request and its JSON answer, for a provider's side endpoints (token
//! counting): one attempt, bounded by the request timeout for the headers and the idle
//! timeout for the body, with the same typed errors as a model call.

use reqwest::header::{CONTENT_TYPE, HeaderMap};
use serde_json::Value;

use super::Transport;
use super::call::{after, send_failure, status_failure, within};
use crate::truncate;
use rein_core::model::{ModelError, ModelErrorKind};

/// Posts `body` to the transport's URL and reads the answer as JSON. A body larger than
/// `HttpConfig::max_event_bytes` is a [`ModelErrorKind::Stream`] error.
pub(super) async fn post(
    transport: Transport,
    headers: HeaderMap,
    body: Vec<u8>,
) -> Result<Value, ModelError> {
    let t = &transport;
    let send = t
        .client
        .post(t.url.clone())
        .headers(headers)
        .header(CONTENT_TYPE, "application/json")
        .body(body)
        .send();
    let response = match within(after(t.http.request_timeout), send).await {
        None => {
            return Err(ModelError::new(
                ModelErrorKind::Timeout,
                format!(
                    "no response from {} within {:?}",
                    t.url, t.http.request_timeout
                ),
            ));
        }
        Some(Err(e)) => return Err(send_failure(&t.url, e).error),
        Some(Ok(r)) => r,
    };
    let until = after(t.http.idle_timeout);
    if !response.status().is_success() {
        return Err(status_failure(t, response, until).await.error);
    }
    let limit = t.http.max_event_bytes;
    let read = async {
        let mut response = response;
        let mut out = Vec::new();
        while let Some(bytes) = response.chunk().await.transpose() {
            let bytes = bytes.map_err(|e| {
                ModelError::new(
                    ModelErrorKind::Stream,
                    format!("reading the answer of {} failed: {e}", t.url),
                )
                .with_source(e)
            })?;
            if out.len() + bytes.len() > limit {
                return Err(ModelError::new(
                    ModelErrorKind::Stream,
                    format!(
                        "the answer of {} is larger than {limit} bytes \
                         (HttpConfig::max_event_bytes)",
                        t.url
                    ),
                ));
            }
            out.extend_from_slice(&bytes);
        }
        Ok(out)
    };
    let bytes = within(until, read).await.ok_or_else(|| {
        ModelError::new(
            ModelErrorKind::Timeout,
            format!(
                "the answer of {} did not arrive within {:?}",
                t.url, t.http.idle_timeout
            ),
        )
    })??;
    serde_json::from_slice(&bytes).map_err(|e| {
        ModelError::new(
            ModelErrorKind::Stream,
            format!(
                "{} answered with something that is not JSON ({e}): {}",
                t.url,
                truncate(&String::from_utf8_lossy(&bytes), 200)
            ),
        )
    })
}
