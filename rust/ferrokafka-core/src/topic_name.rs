//! The one rule for a topic name given to ferrokafka: what Kafka accepts (its
//! `Topic.validate`): 1 to [`MAX_TOPIC_NAME_LENGTH`] ASCII letters, digits, `_`, `-` and `.`,
//! but not `.` or `..`. WaterDrop's rule, `(\w|-|\.)+`, is its character part.
//!
//! Checked where a name comes in (a record's topic, a subscription, a daemon's topics, a
//! topic to create or delete), so that a bad one is a clear error naming it at the call. Left
//! to librdkafka, an empty name or one with a NUL byte made rdkafka panic or fail with "FFI nul
//! error", and a name the brokers refuse failed later, asynchronously, as `InvalidTopic`.

use crate::error::CoreError;

/// Kafka's longest topic name.
pub const MAX_TOPIC_NAME_LENGTH: usize = 249;

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
    if topic == "." || topic == ".." {
        return Err(CoreError::InvalidArgument(format!(
            "{what} {topic:?} is not a legal topic name ('.' and '..' are reserved)"
        )));
    }
    if topic.len() > MAX_TOPIC_NAME_LENGTH {
        return Err(CoreError::InvalidArgument(format!(
            "{what} is {} characters long, more than Kafka's {MAX_TOPIC_NAME_LENGTH}: {:?}...",
            topic.len(),
            &topic[..40]
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

    #[test]
    fn kafkas_reserved_names_and_length_bound_hold() {
        for reserved in [".", ".."] {
            let err = require_topic_name("topic", reserved)
                .unwrap_err()
                .to_string();
            assert!(err.contains("reserved"), "{err}");
        }
        assert!(require_topic_name("topic", "...").is_ok());
        assert!(require_topic_name("topic", &"t".repeat(MAX_TOPIC_NAME_LENGTH)).is_ok());
        let long = require_topic_name("topic", &"t".repeat(MAX_TOPIC_NAME_LENGTH + 1))
            .unwrap_err()
            .to_string();
        assert!(
            long.contains("250 characters long, more than Kafka's 249"),
            "{long}"
        );
    }

    proptest! {
        /// Below the length bound, the rule is WaterDrop's regular expression less Kafka's two
        /// reserved names.
        #[test]
        fn the_rule_is_waterdrops_pattern_less_the_reserved_names(topic in "\\PC{0,12}") {
            let model = !topic.is_empty()
                && topic.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
                && topic != "."
                && topic != "..";
            prop_assert_eq!(require_topic_name("topic", &topic).is_ok(), model);
        }
    }
}
