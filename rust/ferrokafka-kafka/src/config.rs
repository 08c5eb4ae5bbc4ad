//! librdkafka-style configuration, validated before any client exists.
//!
//! Users pass the same `{"bootstrap.servers": ...}` dicts they give confluent-kafka. Keys are
//! checked by librdkafka itself when a client is created, so an unknown key is reported with
//! librdkafka's own wording and the key's name.

use rdkafka::ClientConfig;

use crate::error::{KafkaIoError, KafkaResult};

/// Whether the value of the configuration key `key` is a secret that no error or log may show.
///
/// This is the one place that decides: a name containing `pass` (password, passphrase and their
/// misspellings), `secret`, `token` or `key`, in any case, or librdkafka's other sensitive
/// property `sasl.oauthbearer.config`.
pub fn is_sensitive_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    ["pass", "secret", "token", "key"]
        .iter()
        .any(|word| key.contains(word))
        || key == "sasl.oauthbearer.config"
}

/// What errors and logs show in place of a hidden value.
pub const REDACTED: &str = "[redacted]";

/// An ordered list of librdkafka properties. Its `Debug` form hides sensitive values.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ClientSettings {
    entries: Vec<(String, String)>,
}

impl std::fmt::Debug for ClientSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.entries.iter().map(|(key, value)| {
                (
                    key,
                    if is_sensitive_key(key) {
                        REDACTED
                    } else {
                        value
                    },
                )
            }))
            .finish()
    }
}

impl ClientSettings {
    /// Builds settings from key/value pairs; a later duplicate key wins.
    pub fn new(entries: impl IntoIterator<Item = (String, String)>) -> KafkaResult<Self> {
        let mut settings = ClientSettings::default();
        for (key, value) in entries {
            if key.trim().is_empty() {
                return Err(KafkaIoError::Config("empty configuration key".to_owned()));
            }
            settings.set(key, value);
        }
        Ok(settings)
    }

    /// Sets `key` to `value`, replacing an earlier value.
    pub fn set(&mut self, key: impl Into<String>, value: impl Into<String>) {
        let (key, value) = (key.into(), value.into());
        match self.entries.iter_mut().find(|(k, _)| *k == key) {
            Some(entry) => entry.1 = value,
            None => self.entries.push((key, value)),
        }
    }

    /// Removes `key`, e.g. a producer-only setting before creating a consumer.
    pub fn remove(&mut self, key: &str) {
        self.entries.retain(|(k, _)| k != key);
    }

    /// Sets `key` only when the user did not.
    pub fn set_default(&mut self, key: &str, value: &str) {
        if self.get(key).is_none() {
            self.entries.push((key.to_owned(), value.to_owned()));
        }
    }

    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// `bootstrap.servers`, which every client needs.
    pub fn bootstrap(&self) -> KafkaResult<&str> {
        self.get("bootstrap.servers")
            .or_else(|| self.get("metadata.broker.list"))
            .filter(|servers| !servers.trim().is_empty())
            .ok_or_else(|| {
                KafkaIoError::Config("missing required key 'bootstrap.servers'".to_owned())
            })
    }

    /// The rdkafka configuration holding these settings.
    pub fn to_client_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        for (key, value) in &self.entries {
            config.set(key, value);
        }
        config
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_names_are_sensitive_in_any_case() {
        for key in [
            "sasl.password",
            "SSL.Key.Password",
            "sasl.passwrd",
            "ssl.keystore.password",
            "sasl.oauthbearer.client.secret",
            "sasl.oauthbearer.token.endpoint.url",
            "ssl.key.pem",
            "sasl.oauthbearer.config",
        ] {
            assert!(is_sensitive_key(key), "{key}");
        }
        for key in ["bootstrap.servers", "sasl.username", "enable.idempotence"] {
            assert!(!is_sensitive_key(key), "{key}");
        }
    }

    #[test]
    fn debug_form_hides_sensitive_values_only() {
        let settings = ClientSettings::new([
            ("bootstrap.servers".to_owned(), "127.0.0.1:1".to_owned()),
            ("sasl.password".to_owned(), "hunter2".to_owned()),
        ])
        .unwrap();
        let shown = format!("{settings:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(
            shown.contains("sasl.password") && shown.contains("127.0.0.1:1"),
            "{shown}"
        );
    }
}
