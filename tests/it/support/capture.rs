//! Captured tracing output: the spans and events of the test running on this thread,
//! through one process-wide subscriber (`Capture::install`).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

#[derive(Clone, Debug)]
pub struct SpanRec {
    pub id: u64,
    pub name: String,
    pub parent: Option<u64>,
    pub fields: HashMap<String, String>,
}

#[derive(Clone, Debug)]
pub struct EventRec {
    pub target: String,
    pub span: Option<u64>,
    pub fields: HashMap<String, String>,
}

/// Captures this thread's spans and events.
#[derive(Clone, Default)]
pub struct Capture {
    spans: Arc<Mutex<Vec<SpanRec>>>,
    pub events: Arc<Mutex<Vec<EventRec>>>,
}

struct Fields<'a>(&'a mut HashMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0
            .insert(field.name().to_string(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
}

impl Capture {
    fn new_span(&self, attrs: &Attributes<'_>, id: &Id, parent: Option<u64>) {
        let mut fields = HashMap::new();
        attrs.record(&mut Fields(&mut fields));
        self.spans.lock().unwrap().push(SpanRec {
            id: id.into_u64(),
            name: attrs.metadata().name().to_string(),
            parent,
            fields,
        });
    }
    fn record(&self, id: &Id, values: &Record<'_>) {
        let mut spans = self.spans.lock().unwrap();
        if let Some(s) = spans.iter_mut().rev().find(|s| s.id == id.into_u64()) {
            values.record(&mut Fields(&mut s.fields));
        }
    }
    fn event(&self, event: &Event<'_>, span: Option<u64>) {
        let mut fields = HashMap::new();
        event.record(&mut Fields(&mut fields));
        self.events.lock().unwrap().push(EventRec {
            target: event.metadata().target().to_string(),
            span,
            fields,
        });
    }
}

thread_local! {
    /// The capture of the test running on this thread, if any.
    static ACTIVE: RefCell<Option<Capture>> = const { RefCell::new(None) };
}

fn active() -> Option<Capture> {
    ACTIVE.with(|a| a.borrow().clone())
}

/// One process-wide subscriber that routes to the capture of the current thread.
///
/// Thread-local default subscribers race on tracing's global callsite-interest cache
/// when tests run in parallel; a single global subscriber whose callsites are always
/// "sometimes" interesting, filtering per thread, does not.
struct Router;

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Router {
    fn register_callsite(
        &self,
        _: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        tracing::subscriber::Interest::sometimes()
    }
    fn enabled(&self, _: &tracing::Metadata<'_>, _: Context<'_, S>) -> bool {
        ACTIVE.with(|a| a.borrow().is_some())
    }
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if let Some(c) = active() {
            let parent = ctx
                .span(id)
                .and_then(|s| s.parent())
                .map(|p| p.id().into_u64());
            c.new_span(attrs, id, parent);
        }
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, _ctx: Context<'_, S>) {
        if let Some(c) = active() {
            c.record(id, values);
        }
    }
    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        if let Some(c) = active() {
            c.event(event, ctx.event_span(event).map(|s| s.id().into_u64()));
        }
    }
}

/// Clears this thread's capture when dropped.
pub struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        ACTIVE.with(|a| *a.borrow_mut() = None);
    }
}

impl Capture {
    pub fn install(&self) -> Installed {
        static GLOBAL: std::sync::Once = std::sync::Once::new();
        GLOBAL.call_once(|| {
            let _ = tracing::subscriber::set_global_default(
                tracing_subscriber::registry().with(Router),
            );
        });
        ACTIVE.with(|a| *a.borrow_mut() = Some(self.clone()));
        tracing::callsite::rebuild_interest_cache();
        Installed
    }
    pub fn spans(&self) -> Vec<SpanRec> {
        self.spans.lock().unwrap().clone()
    }
    pub fn named(&self, otel_name: &str) -> Vec<SpanRec> {
        self.spans()
            .into_iter()
            .filter(|s| s.fields.get("otel.name").map(String::as_str) == Some(otel_name))
            .collect()
    }
    pub fn decisions(&self) -> Vec<EventRec> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.target == "rein::decision")
            .cloned()
            .collect()
    }
}
