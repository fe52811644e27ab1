//! [`RecordingModel`]: a model whose every exchange is appended to a fixture file.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use futures::Stream;
use serde::Serialize;

use super::format::{
    ExchangeEnd, FixtureError, FixtureErrorKind, RECORDING_FORMAT, RecordedChunk, RecordedRequest,
    redact_chunks,
};
use super::redact::Redactor;
use crate::model::{Model, ModelChunk, ModelError, ModelErrorKind, ModelRequest, ModelStream};

/// The file and what was written to it, shared by the model and its streams.
struct Writer {
    path: PathBuf,
    redactor: Arc<dyn Redactor>,
    state: Mutex<WriterState>,
}

struct WriterState {
    file: File,
    /// The number the next finished exchange gets.
    next: usize,
    /// The last write that failed.
    error: Option<FixtureError>,
}

#[derive(Serialize)]
struct HeaderLine<'a> {
    format: &'a str,
    model: &'a str,
    provider: &'a str,
    redactor: &'a str,
}

#[derive(Serialize)]
struct RequestLine<'a> {
    exchange: usize,
    request: &'a RecordedRequest,
}

#[derive(Serialize)]
struct ChunkLine<'a> {
    exchange: usize,
    chunk: &'a RecordedChunk,
}

#[derive(Serialize)]
struct EndLine {
    exchange: usize,
    end: ExchangeEnd,
}

fn json_line(out: &mut Vec<u8>, value: &impl Serialize) -> Result<(), serde_json::Error> {
    serde_json::to_writer(&mut *out, value)?;
    out.push(b'\n');
    Ok(())
}

impl Writer {
    /// Redacts and appends one exchange, flushed; returns its number.
    fn append(
        &self,
        request: &ModelRequest,
        mut chunks: Vec<RecordedChunk>,
        end: ExchangeEnd,
    ) -> Result<usize, FixtureError> {
        let request = RecordedRequest::from_request(request, &*self.redactor);
        redact_chunks(&*self.redactor, &mut chunks);
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let exchange = state.next;
        let mut out = Vec::new();
        let encoded = json_line(
            &mut out,
            &RequestLine {
                exchange,
                request: &request,
            },
        )
        .and_then(|()| {
            chunks
                .iter()
                .try_for_each(|chunk| json_line(&mut out, &ChunkLine { exchange, chunk }))
        })
        .and_then(|()| json_line(&mut out, &EndLine { exchange, end }));
        let written = match encoded {
            Err(e) => Err(FixtureError::new(
                FixtureErrorKind::Syntax,
                &self.path,
                0,
                "",
                format!("cannot encode exchange {exchange}: {e}"),
            )),
            Ok(()) => state
                .file
                .write_all(&out)
                .and_then(|()| state.file.flush())
                .map_err(|e| {
                    FixtureError::io(&self.path, &format!("write exchange {exchange}"), &e)
                }),
        };
        match written {
            Ok(()) => {
                state.next += 1;
                Ok(exchange)
            }
            Err(e) => {
                state.error = Some(e.clone());
                Err(e)
            }
        }
    }
}

/// A [`Model`] that passes every request to `M` and appends the exchange — the
/// request and every streamed item — to a `rein-recording/1` fixture, redacted (see the
/// [module docs](super) for the format and what is redacted).
///
/// The items stream through unchanged and are cloned into memory on the way; when the
/// stream ends (after its last item, after an error item, or when it is dropped) the
/// exchange is redacted and written in one write, and the file flushed, so a crash
/// keeps every exchange that finished. A write that fails turns the end of that stream
/// into a [`ModelErrorKind::Other`] error naming the file (after a model error, the
/// model's error is kept and the write failure is only in
/// [`RecordingModel::last_error`]). Clones share the file.
pub struct RecordingModel<M> {
    inner: M,
    writer: Arc<Writer>,
}

impl<M: Clone> Clone for RecordingModel<M> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            writer: Arc::clone(&self.writer),
        }
    }
}

impl<M> std::fmt::Debug for RecordingModel<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordingModel")
            .field("path", &self.writer.path)
            .field("redactor", &self.writer.redactor.name())
            .field("exchanges", &self.exchanges())
            .finish_non_exhaustive()
    }
}

impl<M: Model> RecordingModel<M> {
    /// Records `inner`'s exchanges to a new file at `path` (replacing one that exists;
    /// missing parent directories are created), redacted with `redactor`. Writes the
    /// header line at once.
    ///
    /// # Errors
    ///
    /// A [`FixtureError`] of kind [`Io`](FixtureErrorKind::Io) when the file cannot be
    /// created or the header written.
    pub fn create(
        inner: M,
        path: impl AsRef<Path>,
        redactor: impl Redactor,
    ) -> Result<Self, FixtureError> {
        let path = path.as_ref().to_path_buf();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| FixtureError::io(&path, "create its directory", &e))?;
        }
        let mut file = File::create(&path).map_err(|e| FixtureError::io(&path, "create it", &e))?;
        let mut header = Vec::new();
        json_line(
            &mut header,
            &HeaderLine {
                format: RECORDING_FORMAT,
                model: inner.name(),
                provider: inner.provider(),
                redactor: redactor.name(),
            },
        )
        .map_err(|e| FixtureError::new(FixtureErrorKind::Syntax, &path, 1, "", e.to_string()))?;
        file.write_all(&header)
            .and_then(|()| file.flush())
            .map_err(|e| FixtureError::io(&path, "write its header", &e))?;
        Ok(Self {
            inner,
            writer: Arc::new(Writer {
                path,
                redactor: Arc::new(redactor),
                state: Mutex::new(WriterState {
                    file,
                    next: 0,
                    error: None,
                }),
            }),
        })
    }
}

impl<M> RecordingModel<M> {
    /// The fixture file.
    pub fn path(&self) -> &Path {
        &self.writer.path
    }

    /// The recorded model.
    pub fn inner(&self) -> &M {
        &self.inner
    }

    /// How many exchanges were written so far.
    pub fn exchanges(&self) -> usize {
        self.writer
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .next
    }

    /// The last write that failed, if any (the exchange it was for is not in the file).
    pub fn last_error(&self) -> Option<FixtureError> {
        self.writer
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .error
            .clone()
    }
}

impl<M: Model> Model for RecordingModel<M> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn provider(&self) -> &str {
        self.inner.provider()
    }

    fn capabilities(&self) -> crate::model::ModelCapabilities {
        self.inner.capabilities()
    }

    /// The inner model's count (counts are not recorded: a replay estimates).
    fn count_tokens(&self, request: &ModelRequest) -> Option<crate::model::TokenCount> {
        self.inner.count_tokens(request)
    }

    fn stream(&self, request: ModelRequest) -> ModelStream {
        // The conversation part of a request is shared, so the copy is cheap.
        let copy = request.clone();
        Box::pin(RecordingStream {
            inner: self.inner.stream(request),
            request: Some(copy),
            chunks: Vec::new(),
            writer: Arc::clone(&self.writer),
            done: false,
        })
    }
}

/// The stream of one recorded exchange.
struct RecordingStream {
    inner: ModelStream,
    /// `None` once the exchange is written.
    request: Option<ModelRequest>,
    chunks: Vec<RecordedChunk>,
    writer: Arc<Writer>,
    /// The inner stream ended (or failed): it is not polled again.
    done: bool,
}

impl RecordingStream {
    fn finish(&mut self, end: ExchangeEnd) -> Result<usize, FixtureError> {
        match self.request.take() {
            Some(request) => self
                .writer
                .append(&request, std::mem::take(&mut self.chunks), end),
            None => Ok(0),
        }
    }
}

impl Stream for RecordingStream {
    type Item = Result<ModelChunk, ModelError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        match self.inner.as_mut().poll_next(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(item)) => {
                self.chunks.push(RecordedChunk::from_item(&item));
                if item.is_err() {
                    self.done = true;
                    // The model's error is what the caller needs; a failed write is
                    // kept in `last_error`.
                    let _ = self.finish(ExchangeEnd::Error);
                }
                Poll::Ready(Some(item))
            }
            Poll::Ready(None) => {
                self.done = true;
                match self.finish(ExchangeEnd::Complete) {
                    Ok(_) => Poll::Ready(None),
                    Err(e) => Poll::Ready(Some(Err(ModelError::new(
                        ModelErrorKind::Other,
                        format!("the recording failed: {e}"),
                    )
                    .with_source(e)))),
                }
            }
        }
    }
}

impl Drop for RecordingStream {
    fn drop(&mut self) {
        if self.request.is_some() {
            // Nobody to tell: a failed write is kept in `last_error`.
            let _ = self.finish(ExchangeEnd::Dropped);
        }
    }
}
