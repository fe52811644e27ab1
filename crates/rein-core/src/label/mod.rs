//! Information-flow labels: where the content a model sees came from, and how secret it is.
//!
//! Every message carries a [`Label`]: an [`Integrity`] (could an attacker have written
//! it?) and a [`Confidentiality`] (who may see it?). The runtime sets them, and no
//! heuristic guesses which token came from where:
//!
//! - the system prompt and the application's own messages are trusted and public;
//!   user input gets the agent's input label
//!   ([`AgentBuilder::input_label`](crate::agent::AgentBuilder::input_label), default
//!   trusted and public) unless the message carries a label already
//!   ([`Msg::with_label`](crate::Msg::with_label));
//! - a tool result gets the label its tool declares
//!   ([`ToolCapabilities::result`](crate::tool::ToolCapabilities::result)) joined with
//!   the labels of the quarantined documents its arguments named; the runtime's own
//!   refusals (a denial, an invalid call) are trusted;
//! - a model turn is influenced by everything in its context, so the assistant message
//!   it produces — its text and every tool call in it — carries the join of the labels
//!   of the whole stored conversation. The join is over the session, not over the
//!   request window: a message that drops out of the window does not launder what it
//!   brought in, and a compaction summary carries the join of what it replaced;
//! - a subagent's reply carries the join of everything the child saw.
//!
//! Labels are stored in the message's metadata under [`LABEL_KEY`] (only when not the
//! bottom, so an unlabelled conversation stores nothing new), so they persist with the
//! session in every store and are the same on every replica. A label that does not
//! parse reads as the top ([`Label::TOP`]): a label that cannot be read fails closed.
//!
//! What a label *means* for a call is decided by a policy hook (the built-in
//! `InformationFlowPolicy` of `rein-hooks`), which reads the call's label and the
//! tool's declared capabilities on the `PreActing` event.

use std::fmt;
use std::str::FromStr;

use serde_json::Value;

mod capabilities;
pub use capabilities::ToolCapabilities;

/// Metadata key of a message's [`Label`] (a string such as `"untrusted/private"`);
/// absent means [`Label::BOTTOM`] (trusted, public).
pub const LABEL_KEY: &str = "rein.label";

/// Whether content could have been written by someone other than the application and
/// its user. Ordered: `Trusted < Untrusted`; the join of two is the less trusted.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Integrity {
    /// Written by the application, its user, or a tool it trusts.
    #[default]
    Trusted,
    /// Could carry an attacker's text: a web page, an e-mail, an MCP server's result.
    Untrusted,
}

/// Who may see content. Ordered `Public < Private < Secret`; the join is the higher.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Confidentiality {
    /// May be sent anywhere.
    #[default]
    Public,
    /// The user's or the organisation's own data: not for external recipients.
    Private,
    /// Credentials and the like: for no sink that does not declare it.
    Secret,
}

/// An integrity and a confidentiality: the label of a message, a tool result, a call.
///
/// Labels form a lattice under [`Label::join`]; [`Label::BOTTOM`] (trusted, public)
/// is the label of content that needs no care, [`Label::TOP`] (untrusted, secret) the
/// label of content that could be anything.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Label {
    /// Could an attacker have written it?
    pub integrity: Integrity,
    /// Who may see it?
    pub confidentiality: Confidentiality,
}

impl Label {
    /// Trusted and public: the default, stored as nothing.
    pub const BOTTOM: Label = Label {
        integrity: Integrity::Trusted,
        confidentiality: Confidentiality::Public,
    };
    /// Untrusted and secret: what an unreadable label reads as.
    pub const TOP: Label = Label {
        integrity: Integrity::Untrusted,
        confidentiality: Confidentiality::Secret,
    };
    /// Untrusted and public: the default for content fetched from outside (MCP tools).
    pub const UNTRUSTED: Label = Label {
        integrity: Integrity::Untrusted,
        confidentiality: Confidentiality::Public,
    };
    /// Trusted and private: the user's own data, read by the application's tools.
    pub const PRIVATE: Label = Label {
        integrity: Integrity::Trusted,
        confidentiality: Confidentiality::Private,
    };

    /// A label.
    pub const fn new(integrity: Integrity, confidentiality: Confidentiality) -> Self {
        Self {
            integrity,
            confidentiality,
        }
    }

    /// The least label above both: the less trusted integrity, the higher
    /// confidentiality. Content derived from both carries it.
    #[must_use]
    pub fn join(self, other: Label) -> Label {
        Label {
            integrity: self.integrity.max(other.integrity),
            confidentiality: self.confidentiality.max(other.confidentiality),
        }
    }

    /// Whether the integrity is [`Integrity::Untrusted`].
    pub fn is_untrusted(self) -> bool {
        self.integrity == Integrity::Untrusted
    }

    /// Whether this is [`Label::BOTTOM`].
    pub fn is_bottom(self) -> bool {
        self == Label::BOTTOM
    }

    /// The join of `labels` ([`Label::BOTTOM`] for none): the label of content
    /// derived from all of them, e.g. of a conversation,
    /// `Label::join_all(messages.iter().map(Msg::label))`.
    ///
    /// [`Msg::label`]: crate::Msg::label
    pub fn join_all(labels: impl IntoIterator<Item = Label>) -> Label {
        labels.into_iter().fold(Label::BOTTOM, Label::join)
    }

    /// Four bits: integrity in bit 0, confidentiality in bits 1–2.
    pub(crate) fn bits(self) -> u8 {
        (self.integrity as u8) | ((self.confidentiality as u8) << 1)
    }

    /// The label of [`Label::bits`] (unknown bits read as the top).
    pub(crate) fn from_bits(bits: u8) -> Label {
        let integrity = match bits & 1 {
            0 => Integrity::Trusted,
            _ => Integrity::Untrusted,
        };
        let confidentiality = match (bits >> 1) & 3 {
            0 => Confidentiality::Public,
            1 => Confidentiality::Private,
            _ => Confidentiality::Secret,
        };
        Label::new(integrity, confidentiality)
    }

    /// The label as stored under [`LABEL_KEY`]: `None` for the bottom, else
    /// `"integrity/confidentiality"`.
    pub fn stored(self) -> Option<Value> {
        (!self.is_bottom()).then(|| Value::String(self.name().to_owned()))
    }

    /// The canonical name, `"integrity/confidentiality"` (what [`fmt::Display`] writes).
    pub fn name(self) -> &'static str {
        NAMES[usize::from(self.bits())]
    }
}

impl Integrity {
    /// The name used in configuration and metadata: `trusted`, `untrusted`.
    pub fn as_str(self) -> &'static str {
        match self {
            Integrity::Trusted => "trusted",
            Integrity::Untrusted => "untrusted",
        }
    }
}

impl Confidentiality {
    /// The name used in configuration and metadata: `public`, `private`, `secret`.
    pub fn as_str(self) -> &'static str {
        match self {
            Confidentiality::Public => "public",
            Confidentiality::Private => "private",
            Confidentiality::Secret => "secret",
        }
    }
}

/// Every label's canonical name, by [`Label::bits`] (bits 1–2 at 3 are unused and name
/// the top).
const NAMES: [&str; 8] = [
    "trusted/public",
    "untrusted/public",
    "trusted/private",
    "untrusted/private",
    "trusted/secret",
    "untrusted/secret",
    "trusted/secret",
    "untrusted/secret",
];

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A string that is not a label, integrity or confidentiality; says what it was.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}` is not a label: expected `trusted` or `untrusted`, and/or `public`, `private` or `secret` (e.g. `untrusted/private`)"
)]
pub struct LabelParseError(pub String);

impl FromStr for Integrity {
    type Err = LabelParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "trusted" => Ok(Integrity::Trusted),
            "untrusted" => Ok(Integrity::Untrusted),
            _ => Err(LabelParseError(s.to_owned())),
        }
    }
}

impl FromStr for Confidentiality {
    type Err = LabelParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "public" => Ok(Confidentiality::Public),
            "private" => Ok(Confidentiality::Private),
            "secret" => Ok(Confidentiality::Secret),
            _ => Err(LabelParseError(s.to_owned())),
        }
    }
}

impl FromStr for Label {
    type Err = LabelParseError;
    /// `"untrusted/private"`, or one part alone (`"untrusted"`: public; `"private"`:
    /// trusted).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        // The stored form is always a canonical name: read it without parsing.
        if let Some(bits) = NAMES.iter().position(|n| *n == s) {
            return Ok(Label::from_bits(u8::try_from(bits).unwrap_or(u8::MAX)));
        }
        let bad = || LabelParseError(s.to_owned());
        match s.split_once('/') {
            Some((i, c)) => Ok(Label::new(
                i.trim().parse().map_err(|_| bad())?,
                c.trim().parse().map_err(|_| bad())?,
            )),
            None => {
                let s = s.trim();
                if let Ok(i) = s.parse::<Integrity>() {
                    Ok(Label::new(i, Confidentiality::Public))
                } else {
                    s.parse::<Confidentiality>()
                        .map(|c| Label::new(Integrity::Trusted, c))
                        .map_err(|_| bad())
                }
            }
        }
    }
}

impl serde::Serialize for Label {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Label {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Msg;

    #[test]
    fn the_join_is_the_less_trusted_and_the_more_secret() {
        let a = Label::new(Integrity::Untrusted, Confidentiality::Public);
        let b = Label::new(Integrity::Trusted, Confidentiality::Secret);
        assert_eq!(a.join(b), Label::TOP);
        assert_eq!(Label::BOTTOM.join(a), a);
    }

    #[test]
    fn labels_round_trip_through_their_stored_form_and_unreadable_ones_read_as_top() {
        for l in [Label::UNTRUSTED, Label::PRIVATE, Label::TOP] {
            let m = Msg::user("x").with_label(l);
            assert_eq!(m.label(), l);
        }
        assert!(Msg::user("x").with_label(Label::BOTTOM).metadata.is_empty());
        let mut m = Msg::user("x");
        m.metadata.insert(LABEL_KEY.into(), "trusted/ish".into());
        assert_eq!(m.label(), Label::TOP);
        assert_eq!("untrusted".parse::<Label>(), Ok(Label::UNTRUSTED));
        assert_eq!("private".parse::<Label>(), Ok(Label::PRIVATE));
        assert!("nope".parse::<Label>().is_err());
    }
}
