//! A shared, cheap-to-clone message list for model requests.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::message::Msg;

/// The messages of a [`ModelRequest`](super::ModelRequest): an optional system message,
/// the conversation, and optional extra messages after it — in that order.
///
/// The conversation part is shared with the agent's memory, not copied: building a
/// request for a session of any length costs the same, and cloning a `Messages` is a
/// reference count. Read it like a slice (`iter`, `len`, `first`, `last`, `get`,
/// `for m in &messages`); [`Messages::to_vec`] gives an owned copy. A
/// `Vec<Msg>` converts into it with `.into()`.
#[derive(Clone, Default)]
pub struct Messages {
    system: Option<Arc<Msg>>,
    history: Arc<Vec<Msg>>,
    tail: Vec<Msg>,
}

impl Messages {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    pub(crate) fn from_parts(
        system: Option<Arc<Msg>>,
        history: Arc<Vec<Msg>>,
        tail: Vec<Msg>,
    ) -> Self {
        Self {
            system,
            history,
            tail,
        }
    }

    /// The same list with the conversation part replaced by `history` (the system
    /// message and the tail kept): the window a request is cut to.
    pub(crate) fn with_history(&self, history: Vec<Msg>) -> Self {
        Self {
            system: self.system.clone(),
            history: Arc::new(history),
            tail: self.tail.clone(),
        }
    }

    /// The conversation part (without the system message and the tail).
    pub(crate) fn history(&self) -> &[Msg] {
        &self.history
    }

    /// The messages in order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Msg> + '_ {
        self.system
            .iter()
            .map(|m| &**m)
            .chain(self.history.iter())
            .chain(self.tail.iter())
    }

    /// Number of messages.
    pub fn len(&self) -> usize {
        usize::from(self.system.is_some()) + self.history.len() + self.tail.len()
    }

    /// `true` when there are no messages.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The message at `index`.
    pub fn get(&self, index: usize) -> Option<&Msg> {
        let mut i = index;
        if let Some(s) = &self.system {
            if i == 0 {
                return Some(s);
            }
            i -= 1;
        }
        if i < self.history.len() {
            return self.history.get(i);
        }
        self.tail.get(i - self.history.len())
    }

    /// The first message.
    pub fn first(&self) -> Option<&Msg> {
        self.get(0)
    }

    /// The last message.
    pub fn last(&self) -> Option<&Msg> {
        self.tail
            .last()
            .or_else(|| self.history.last())
            .or(self.system.as_deref())
    }

    /// An owned copy of the messages.
    pub fn to_vec(&self) -> Vec<Msg> {
        self.iter().cloned().collect()
    }
}

impl<'a> IntoIterator for &'a Messages {
    type Item = &'a Msg;
    type IntoIter = Box<dyn DoubleEndedIterator<Item = &'a Msg> + 'a>;

    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

impl From<Vec<Msg>> for Messages {
    fn from(messages: Vec<Msg>) -> Self {
        Self {
            system: None,
            history: Arc::new(messages),
            tail: Vec::new(),
        }
    }
}

impl FromIterator<Msg> for Messages {
    fn from_iter<I: IntoIterator<Item = Msg>>(iter: I) -> Self {
        Self::from(iter.into_iter().collect::<Vec<_>>())
    }
}

impl PartialEq for Messages {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl PartialEq<Vec<Msg>> for Messages {
    fn eq(&self, other: &Vec<Msg>) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl fmt::Debug for Messages {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Serialize for Messages {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for Messages {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Vec::<Msg>::deserialize(d).map(Self::from)
    }
}
