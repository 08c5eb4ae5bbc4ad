//! The one rule for a topic name given to ferrokafka: what Kafka and WaterDrop accept,
//! `(\w|-|\.)+` (ASCII letters, digits, `_`, `-` and `.`).
//!
//! Checked where a name comes in (a record's topic, a subscription, a daemon's topics, a
//! topic to create or delete), so that a bad one is a clear error naming it at the call. Left
//! to librdkafka, an empty name or one with a NUL byte made rdkafka panic or fail with "FFI nul
//! error", and a name the brokers refuse failed later, asynchronously, as `InvalidTopic`.

use crate::error::CoreError;

/// Checks `topic` against the rule above; `what` names the topic's role in the error.
///
/// # Examples
/// ```
/// use ferrokafka_core::topic_name::require_topic_name;
/// assert!(require_topic_name("topic", "orders.v2-eu_1").is_ok());
/// let err = require_topic_name("topic", "a b").unwrap_err();
/// assert!(err.to_string().contains(r#"topic "a b" is not a legal topic name"#));
/// ```
pub fn require_topic_name(what: &str, topic: &str) -> Result<(), CoreError> {
    if topic.is_empty() {
        return Err(CoreError::InvalidArgument(format!(
            "{what} must not be empty"
        )));
    }
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    if !topic.chars().all(legal) {
        return Err(CoreError::InvalidArgument(format!(
            "{what} {topic:?} is not a legal topic name (letters, digits, '_', '-', '.')"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn empty_names_and_nul_bytes_are_refused_with_the_role_named() {
        let empty = require_topic_name("queue_topic", "")
            .unwrap_err()
            .to_string();
        assert!(empty.contains("queue_topic must not be empty"), "{empty}");
        let nul = require_topic_name("topic", "a\0b").unwrap_err().to_string();
        assert!(
            nul.contains(r#"topic "a\0b" is not a legal topic name"#),
            "{nul}"
        );
    }

    proptest! {
        /// The rule is exactly WaterDrop's regular expression.
        #[test]
        fn the_rule_is_waterdrops_pattern(topic in "\\PC{0,12}") {
            let model = !topic.is_empty()
                && topic.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b));
            prop_assert_eq!(require_topic_name("topic", &topic).is_ok(), model);
        }
    }
}
