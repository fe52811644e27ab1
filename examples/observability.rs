//! Run with: cargo run --example observability
//!
//! Prints the span tree (OpenTelemetry GenAI conventions) and the decision trail of a
//! run in which one hook rewrites a tool call, another denies one, and a third rewrites
//! the final reply. With `--features otel` and `OTEL_EXPORTER_OTLP_ENDPOINT` set (e.g.
//! `http://localhost:4318`), the same spans are also exported over OTLP/HTTP through
//! `tracing-opentelemetry` to any OpenTelemetry backend.

use std::collections::HashMap;
use std::sync::Mutex;

use rein::*;
use serde_json::json;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

/// Prints each span when it closes (with the fields recorded by then), indented by its
/// depth, and each decision event under its span.
#[derive(Default)]
struct TreePrinter {
    fields: Mutex<HashMap<u64, Vec<(String, String)>>>,
}

struct Collect<'a>(&'a mut Vec<(String, String)>);

impl Visit for Collect<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0
            .push((field.name().to_string(), format!("{value:?}")));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push((field.name().to_string(), value.to_string()));
    }
}

fn depth<S: Subscriber + for<'a> LookupSpan<'a>>(ctx: &Context<'_, S>, id: &Id) -> usize {
    ctx.span(id).map(|s| s.scope().count() - 1).unwrap_or(0)
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for TreePrinter {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Vec::new();
        attrs.record(&mut Collect(&mut fields));
        let indent = "  ".repeat(depth(&ctx, id));
        let name = fields
            .iter()
            .find(|(k, _)| k == "otel.name")
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| attrs.metadata().name().to_string());
        println!("{indent}▶ {name}");
        if let Ok(mut map) = self.fields.lock() {
            map.insert(id.into_u64(), fields);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _ctx: Context<'_, S>) {
        if let Ok(mut map) = self.fields.lock()
            && let Some(fields) = map.get_mut(&id.into_u64())
        {
            values.record(&mut Collect(fields));
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        if event.metadata().target() != "rein::decision" {
            return;
        }
        let mut fields = Vec::new();
        event.record(&mut Collect(&mut fields));
        let get = |k: &str| {
            fields
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.as_str())
                .unwrap_or("")
        };
        let indent = ctx
            .event_span(event)
            .map(|s| "  ".repeat(s.scope().count()))
            .unwrap_or_default();
        println!(
            "{indent}✎ decision: {} (priority {}) {} on {}: {} → {}{}",
            get("hook"),
            get("priority"),
            get("kind"),
            get("event"),
            get("before"),
            get("after"),
            match get("reason") {
                "" => String::new(),
                r => format!(" — {r}"),
            }
        );
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let fields = self
            .fields
            .lock()
            .ok()
            .and_then(|mut m| m.remove(&id.into_u64()));
        let indent = "  ".repeat(depth(&ctx, &id));
        let fields = fields.unwrap_or_default();
        let name = fields
            .iter()
            .rev()
            .find(|(k, _)| k == "otel.name")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        let interesting: Vec<String> = fields
            .into_iter()
            .filter(|(k, _)| k.starts_with("gen_ai.") || k.starts_with("rein."))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        println!("{indent}◀ {name}: {}", interesting.join(" "));
    }
}

/// Caps refund amounts at 100.
struct RefundCap;

impl Hook for RefundCap {
    fn priority(&self) -> i32 {
        20
    }
    fn interest(&self) -> Interest {
        Interest::only(EventKind::PreActing)
    }
    async fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError> {
        if let HookEvent::PreActing(e) = event
            && e.tool_use().name == "refund"
            && e.tool_use().input["amount"].as_f64().unwrap_or(0.0) > 100.0
        {
            let mut call = e.tool_use().clone();
            call.input["amount"] = json!(100);
            e.set_tool_use(call);
        }
        Ok(())
    }
}

/// Denies refunds to blocked accounts.
struct BlockedAccounts;

impl Hook for BlockedAccounts {
    fn priority(&self) -> i32 {
        30
    }
    fn interest(&self) -> Interest {
        Interest::only(EventKind::PreActing)
    }
    async fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError> {
        if let HookEvent::PreActing(e) = event
            && e.tool_use().input["account"] == "acct-666"
        {
            e.deny("account acct-666 is blocked for refunds");
        }
        Ok(())
    }
}

/// Never lets the reply claim a refund was paid.
struct NoPaymentClaims;

impl Hook for NoPaymentClaims {
    fn priority(&self) -> i32 {
        900
    }
    fn interest(&self) -> Interest {
        Interest::only(EventKind::PostCall)
    }
    async fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError> {
        if let HookEvent::PostCall(e) = event
            && e.final_message().text().contains("paid")
        {
            e.set_final_message(Msg::assistant(
                "Your refunds were submitted; you will get a confirmation once they are processed.",
            ));
        }
        Ok(())
    }
}

/// The OTLP layer and the provider to shut down at exit.
#[cfg(feature = "otel")]
type Otel<S> = (
    tracing_opentelemetry::OpenTelemetryLayer<S, opentelemetry_sdk::trace::Tracer>,
    opentelemetry_sdk::trace::SdkTracerProvider,
);

#[cfg(feature = "otel")]
fn otel_layer<S>() -> Result<Option<Otel<S>>, Box<dyn std::error::Error>>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    use opentelemetry::trace::TracerProvider as _;
    if std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT").is_none() {
        println!("(feature otel is on; set OTEL_EXPORTER_OTLP_ENDPOINT to export spans over OTLP)");
        return Ok(None);
    }
    // The OTLP client is reqwest built without a TLS provider of its own (as rein's):
    // install one, unless the application already did.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()?;
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name("rein-observability-example")
                .build(),
        )
        .build();
    let tracer = provider.tracer("rein");
    Ok(Some((
        tracing_opentelemetry::layer().with_tracer(tracer),
        provider,
    )))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let registry = tracing_subscriber::registry().with(TreePrinter::default());
    #[cfg(feature = "otel")]
    let provider = match otel_layer()? {
        Some((layer, provider)) => {
            registry.with(layer).init();
            Some(provider)
        }
        None => {
            registry.init();
            None
        }
    };
    #[cfg(not(feature = "otel"))]
    registry.init();

    let mut tools = Toolkit::new();
    tools.register(FunctionTool::new(
        "refund",
        "Refunds an amount to an account.",
        json!({"type": "object",
               "properties": {"account": {"type": "string"}, "amount": {"type": "number"}},
               "required": ["account", "amount"]}),
        |args| async move {
            Ok(format!(
                "refund of {} to {} submitted",
                args["amount"], args["account"]
            ))
        },
    ))?;
    let model = ScriptedModel::new([
        ScriptedTurn::tool_calls(vec![
            ("refund", json!({"account": "acct-1", "amount": 250})),
            ("refund", json!({"account": "acct-666", "amount": 20})),
        ])
        .with_usage(120, 30),
        ScriptedTurn::text("Both refunds were paid.").with_usage(160, 8),
    ]);
    let agent = Agent::builder()
        .name("support")
        .model(model)
        .toolkit(tools)
        .generate_options(GenerateOptions {
            temperature: Some(0.3),
            ..Default::default()
        })
        .hook(RefundCap)
        .hook(BlockedAccounts)
        .hook(NoPaymentClaims)
        .build()?;

    println!("== span tree ==");
    let outcome = agent
        .run(
            vec![Msg::user("Refund 250 to acct-1 and 20 to acct-666.")],
            RunContext::new(),
        )
        .await?;

    println!("\n== decision trail (from the call's outcome) ==");
    for d in &outcome.decisions {
        println!(
            "{} @{} {} {} field={} before={} after={}{}",
            d.hook,
            d.priority,
            d.event,
            d.kind.as_str(),
            d.field,
            d.before,
            d.after,
            d.reason
                .as_deref()
                .map(|r| format!(" reason={r}"))
                .unwrap_or_default()
        );
    }
    println!("\nreply: {}", outcome.reply.text());

    #[cfg(feature = "otel")]
    if let Some(provider) = provider {
        provider.shutdown()?;
    }
    Ok(())
}
