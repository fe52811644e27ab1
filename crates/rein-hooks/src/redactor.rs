//! [`PiiRedactor`]: the masker as the redactor of model recordings.

use std::sync::LazyLock;

use rein_core::model::replay::{Redaction, Redactor};
use rein_pii::{MaskerError, SensitiveDataMasker, SensitiveKind};

/// The secret shapes [`PiiRedactor`] finds besides personal data: `(name, regex)`.
/// Provider API keys (`sk-…`), bearer tokens, AWS access key ids, GitHub and Slack
/// tokens, PEM private keys, JSON Web Tokens, and `password=…`/`api_key: …`-style
/// assignments.
pub const SECRET_PATTERNS: [(&str, &str); 8] = [
    ("api_key", r"\bsk-[A-Za-z0-9_-]{16,}"),
    ("bearer_token", r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{12,}"),
    ("aws_access_key", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    (
        "github_token",
        r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})",
    ),
    ("slack_token", r"\bxox[abprs]-[A-Za-z0-9-]{10,}"),
    (
        "private_key",
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
    ),
    (
        "jwt",
        r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
    ),
    (
        "credential",
        r#"(?i)\b(?:api[_-]?key|secret|password|passwd|access[_-]?token|auth[_-]?token)\b["']?\s*[:=]\s*["']?[^\s"',;]{4,}"#,
    ),
];

/// A masker that finds only [`SECRET_PATTERNS`].
fn secrets_masker() -> Result<SensitiveDataMasker, MaskerError> {
    let builtins = [
        SensitiveKind::Mobile,
        SensitiveKind::IdCard,
        SensitiveKind::BankCard,
        SensitiveKind::Email,
        SensitiveKind::Phone,
        SensitiveKind::NanpPhone,
        SensitiveKind::Iban,
        SensitiveKind::UsSsn,
    ];
    let mut b = SensitiveDataMasker::builder();
    for kind in builtins {
        b = b.disable(kind);
    }
    for (name, regex) in SECRET_PATTERNS {
        b = b.extra_pattern(name, regex);
    }
    b.build()
}

static SECRETS: LazyLock<Result<SensitiveDataMasker, MaskerError>> = LazyLock::new(secrets_masker);

/// The redactor for model recordings (`rein::model::replay`): personal data as a
/// [`SensitiveDataMasker`] finds it, and secrets of the shapes in [`SECRET_PATTERNS`].
///
/// Each match is replaced by `[redacted:<kind>]` — `[redacted:email]`,
/// `[redacted:bank_card]`, `[redacted:<pattern name>]` for the masker's extra patterns,
/// `[redacted:secret]` for a secret — whatever the masker's own [`MaskStyle`]
/// (a recording must not keep the partial digits a partial mask shows). The
/// replacements hold nothing either scan finds, so redacting twice changes nothing (a
/// replay relies on it).
///
/// Fails closed: should the secret patterns not compile (they are fixed; a unit test
/// compiles them), every text is replaced whole by `[redacted:unavailable]`.
///
/// [`MaskStyle`]: rein_pii::MaskStyle
///
/// ```
/// use rein::model::replay::{PiiRedactor, redact_text};
/// let r = PiiRedactor::default();
/// let text = "mail jane.doe@example.com, key sk-abcdefghijklmnopqrstuv";
/// assert_eq!(redact_text(&r, text), "mail [redacted:email], key [redacted:secret]");
/// ```
#[derive(Clone, Debug)]
pub struct PiiRedactor {
    masker: SensitiveDataMasker,
    secrets: bool,
}

impl Default for PiiRedactor {
    /// The default masker (every built-in kind) and the secret patterns.
    fn default() -> Self {
        Self::new(SensitiveDataMasker::default())
    }
}

impl PiiRedactor {
    /// Finds what `masker` finds, and the secret patterns.
    pub fn new(masker: SensitiveDataMasker) -> Self {
        Self {
            masker,
            secrets: true,
        }
    }

    /// Without the secret patterns: only what the masker finds.
    #[must_use]
    pub fn without_secrets(mut self) -> Self {
        self.secrets = false;
        self
    }
}

impl Redactor for PiiRedactor {
    fn find(&self, text: &str) -> Vec<Redaction> {
        let mut out: Vec<Redaction> = self
            .masker
            .find(text)
            .into_iter()
            .map(|m| Redaction::new(m.range, format!("[redacted:{}]", m.kind.name())))
            .collect();
        if self.secrets {
            match &*SECRETS {
                Ok(secrets) => out.extend(
                    secrets
                        .find(text)
                        .into_iter()
                        .map(|m| Redaction::new(m.range, "[redacted:secret]")),
                ),
                Err(_) => return vec![Redaction::new(0..text.len(), "[redacted:unavailable]")],
            }
        }
        out
    }

    fn name(&self) -> &str {
        if self.secrets {
            "rein-pii+secrets"
        } else {
            "rein-pii"
        }
    }
}

#[cfg(test)]
mod tests {
    use rein_core::model::replay::redact_text;

    use super::*;

    #[test]
    fn the_secret_patterns_compile() {
        assert!(secrets_masker().is_ok());
    }

    #[test]
    fn personal_data_and_secrets_are_redacted_and_redacting_twice_changes_nothing() {
        let r = PiiRedactor::default();
        let text = "card 4111 1111 1111 1111, mail jane.doe@example.com, \
                    Authorization: Bearer abcdefghijklmnop123, AKIAABCDEFGHIJKLMNOP, \
                    password=hunter2hunter2, phone +1 415-555-0134";
        let once = redact_text(&r, text).into_owned();
        for leaked in [
            "4111",
            "jane.doe",
            "abcdefghijklmnop123",
            "AKIA",
            "hunter2",
            "415",
        ] {
            assert!(!once.contains(leaked), "{leaked} in {once}");
        }
        assert!(once.contains("[redacted:bank_card]"), "{once}");
        assert!(once.contains("[redacted:email]"), "{once}");
        assert!(once.contains("[redacted:secret]"), "{once}");
        assert_eq!(redact_text(&r, &once), once);
        assert_eq!(
            redact_text(&r, "refund order A-1001 for 5000"),
            "refund order A-1001 for 5000"
        );
    }
}
