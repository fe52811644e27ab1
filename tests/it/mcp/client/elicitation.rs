//! A server's elicitations (it asks for input while its tool runs) reach the handler
//! declared for it, labelled as the server's untrusted content, and only that handler's
//! answer goes back; the reference server's `trigger-elicitation-request` tool, offered
//! only to a client that advertises elicitation, is the server.

use std::sync::Mutex;

use rein::mcp::{Elicitation, ElicitationDecision, ElicitationHandler, ElicitationKind};

use super::*;

const TRIGGER: &str = "mcp__everything__trigger-elicitation-request";

/// A human who answers every elicitation with `answer` and remembers what was asked.
#[derive(Clone)]
struct Human {
    answer: ElicitationDecision,
    asked: Arc<Mutex<Vec<Elicitation>>>,
}

impl ElicitationHandler for Human {
    async fn decide(&self, request: &Elicitation) -> ElicitationDecision {
        self.asked.lock().unwrap().push(request.clone());
        self.answer.clone()
    }
}

fn human(answer: ElicitationDecision) -> Human {
    Human {
        answer,
        asked: Arc::default(),
    }
}

/// Runs one call of the trigger tool through an agent whose server has `human`; returns
/// the tool's result text.
async fn elicited(server: &Server, human: &Human) -> String {
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call(TRIGGER, json!({})),
        ScriptedTurn::text("done"),
    ]);
    let agent = everything(&model, server.plain().on_elicitation(human.clone())).await;
    agent
        .run(vec![Msg::user("ask me")], session("e"))
        .await
        .unwrap();
    let names: Vec<String> = offered(&model, 0).into_iter().map(|t| t.name).collect();
    assert!(names.iter().any(|n| n == TRIGGER), "{names:?}");
    let (_, is_error, text) = results_in_request(&model, 1).pop().unwrap();
    assert!(!is_error, "{text}");
    text
}

async fn a_servers_elicitation_reaches_its_handler_untrusted_and_only_its_answer_goes_back(
    server: Server,
) {
    let accepting = human(ElicitationDecision::Accept(
        json!({"name": "Ada Lovelace", "check": true}),
    ));
    let text = elicited(&server, &accepting).await;
    assert!(text.contains("Name: Ada Lovelace"), "{text}");
    assert!(text.contains("Agreed to terms: true"), "{text}");
    let asked = accepting.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0].server, "everything");
    assert_eq!(asked[0].label, Label::UNTRUSTED);
    assert!(!asked[0].message.is_empty());
    let ElicitationKind::Form { schema } = &asked[0].kind else {
        panic!("a form: {:?}", asked[0].kind)
    };
    assert_eq!(schema["properties"]["name"]["type"], "string", "{schema}");

    // A human who declines: the server hears a decline and no values.
    let declining = human(ElicitationDecision::Decline);
    let text = elicited(&server, &declining).await;
    assert!(text.contains("declined"), "{text}");
    assert!(!text.contains("Name:"), "{text}");
    assert_eq!(declining.asked.lock().unwrap().len(), 1);

    // A human who cancels: the server hears a cancel.
    let text = elicited(&server, &human(ElicitationDecision::Cancel)).await;
    assert!(text.contains("cancelled"), "{text}");

    // An accept that is not a JSON object is sent as a decline.
    let malformed = human(ElicitationDecision::Accept(json!("Ada")));
    let text = elicited(&server, &malformed).await;
    assert!(text.contains("declined"), "{text}");
}

on_both_transports!(
    a_servers_elicitation_reaches_its_handler_untrusted_and_only_its_answer_goes_back,
);
