//! Masking beyond one locale on a running agent: international phone numbers, NANP
//! numbers, IBANs and US SSNs are masked in replies and streams by default, each detector
//! is switched by name in `HooksConfig`, and everyday numbers stay untouched.

use futures::StreamExt;
use rein::hooks::{HooksConfig, MaskedStream, MaskingConfig, MaskingHook, SensitiveDataMasker};
use rein::*;

use crate::support::*;

fn masking() -> MaskingHook {
    MaskingHook::new(
        MaskingConfig {
            enabled: true,
            ..MaskingConfig::default()
        },
        SensitiveDataMasker::default(),
    )
}

async fn reply_through(hook: MaskingHook, text: &str) -> String {
    let model = ScriptedModel::new([ScriptedTurn::text(text)]);
    let agent = builder(&model).hook(hook).build().unwrap();
    agent.call(Msg::user("hi")).await.unwrap().text()
}

fn hooks_from_yaml(yaml: &str) -> Result<rein::hooks::Hooks, BuildError> {
    let config: HooksConfig = serde_yaml_ng::from_str(yaml).unwrap();
    config.build()
}

#[tokio::test]
async fn an_e164_number_is_masked_and_an_order_number_is_not() {
    let reply = reply_through(
        masking(),
        "Order ORD-2024-000123 (#100234567) ships 2024-06-13T10:15:30Z; call +1 415-555-0134.",
    )
    .await;
    assert_eq!(
        reply,
        "Order ORD-2024-000123 (#100234567) ships 2024-06-13T10:15:30Z; call ***."
    );
}

#[tokio::test]
async fn every_new_kind_is_masked_in_a_reply_by_default() {
    let reply = reply_through(
        masking(),
        "UK +44 20 7946 0958, US (415) 555-0134, IBAN DE89 3704 0044 0532 0130 00, SSN 123-45-6789.",
    )
    .await;
    assert_eq!(reply, "UK ***, US ***, IBAN ***, SSN ***.");
}

#[tokio::test]
async fn amounts_uuids_versions_and_ip_addresses_in_a_reply_are_untouched() {
    let text = "Refund $1,234,567.89 (1 234 567,00 €) for 550e8400-e29b-41d4-a716-446655440000 \
                on v1.2.3 from 192.168.1.100, tracking 1Z999AA10123456784, ref 12345678901234567890123.";
    assert_eq!(reply_through(masking(), text).await, text);
}

#[tokio::test]
async fn numbers_and_ibans_split_across_stream_chunks_are_masked() {
    let chunks = [
        "Call +1 (41",
        "5) 555-01",
        "34 or wire to GB29 NW",
        "BK 6016 1331 92",
        "68 19; SSN 123-4",
        "5-6789 done",
    ];
    let events = chunks
        .iter()
        .map(|c| AgentEvent::TextDelta((*c).to_owned()))
        .collect::<Vec<_>>();
    let out: Vec<AgentEvent> = MaskedStream::new(
        futures::stream::iter(events),
        SensitiveDataMasker::default(),
        256,
    )
    .collect()
    .await;
    let deltas: Vec<String> = out
        .into_iter()
        .filter_map(|e| match e {
            AgentEvent::TextDelta(t) => Some(t),
            _ => None,
        })
        .collect();
    for d in &deltas {
        for secret in ["415", "555", "0134", "NWBK", "6016", "6789"] {
            assert!(!d.contains(secret), "{secret} leaked in {deltas:?}");
        }
    }
    assert_eq!(deltas.concat(), "Call *** or wire to ***; SSN *** done");
}

#[test]
fn detectors_are_switched_off_by_name_in_the_hooks_config() {
    let hooks =
        hooks_from_yaml("masker:\n  disabled: [nanp_phone, us_ssn]\nmasking:\n  enabled: true\n")
            .unwrap();
    let masker = hooks.masking().unwrap().masker();
    assert_eq!(
        masker.mask("+1 415-555-0134, (415) 555-0134, 123-45-6789, DE89370400440532013000"),
        "***, (415) 555-0134, 123-45-6789, ***"
    );
}

#[test]
fn an_unknown_detector_name_in_the_hooks_config_fails_the_build_naming_the_key_and_the_closest_kind()
 {
    let err = hooks_from_yaml("masker:\n  disabled: [iban, ssn]\nmasking:\n  enabled: true\n")
        .err()
        .unwrap();
    let msg = err.to_string();
    assert!(msg.contains("masker.disabled[1]"), "{msg}");
    assert!(msg.contains("did you mean `us_ssn`?"), "{msg}");
}
