//! The error every configuration check returns: the key to change and why.

use std::fmt;

/// A rejected setting: the key it concerns and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub key: String,
    pub message: String,
}

impl ConfigError {
    pub(crate) fn new(key: &str, message: impl Into<String>) -> Self {
        ConfigError {
            key: key.to_string(),
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "beaconkv: {}: {}", self.key, self.message)
    }
}

impl std::error::Error for ConfigError {}
