//! The identity of one conversation in a store.

use std::fmt;

use super::session::StoreError;

/// Identifies one conversation of an agent.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SessionKey {
    /// The user, if calls carry one.
    pub user_id: Option<String>,
    /// The session.
    pub session_id: String,
}

impl SessionKey {
    /// A key for this user and session. Any key can be built; one that no store can hold
    /// (see [`SessionKey::try_new`]) fails every load and save with
    /// [`StoreErrorKind::InvalidKey`](crate::StoreErrorKind::InvalidKey).
    pub fn new(user_id: Option<&str>, session_id: &str) -> Self {
        Self {
            user_id: user_id.map(str::to_owned),
            session_id: session_id.to_owned(),
        }
    }

    /// A key for this user and session, checked against the key contract every store
    /// shares: no U+0000 in either id, each id at most
    /// [`MAX_KEY_BYTES`](crate::store::MAX_KEY_BYTES) bytes. Every other UTF-8 string is valid
    /// on every store.
    ///
    /// # Errors
    /// [`StoreErrorKind::InvalidKey`](crate::StoreErrorKind::InvalidKey) saying which id breaks which rule.
    pub fn try_new(user_id: Option<&str>, session_id: &str) -> Result<Self, StoreError> {
        let key = Self::new(user_id, session_id);
        super::storable::check_key(&key)?;
        Ok(key)
    }
}

impl fmt::Display for SessionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.user_id {
            Some(u) => write!(f, "{u}/{}", self.session_id),
            None => f.write_str(&self.session_id),
        }
    }
}
