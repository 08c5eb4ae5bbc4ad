//! The rule for the topics a component writes to beside its output (a dead-letter topic, a
//! scheduler's states topics): never one it reads. A record dead-lettered to a topic the
//! component reads comes back, fails again and is written again, for ever (one poison record
//! was handled 1,750 times in 15 s), and state reports written to a schedules topic are read
//! back as schedules.

use crate::error::{KafkaIoError, KafkaResult};

/// `Ok` unless `written`, the `role` topic (e.g. `dead_letter_topic`), is one of `read`: the
/// topics the component reads, each with what it is to the component (e.g. "the queue topic").
pub(crate) fn require_not_read<'a>(
    role: &str,
    written: Option<&str>,
    read: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> KafkaResult<()> {
    let Some(written) = written else {
        return Ok(());
    };
    match read.into_iter().find(|(_, topic)| *topic == written) {
        Some((what, _)) => Err(KafkaIoError::InvalidArgument(format!(
            "{role} {written:?} is {what}, which this component reads: what it writes there \
             would be read back and written again, for ever; name another topic"
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_topic_the_component_reads_is_refused_naming_both_roles() {
        let read = [
            ("the queue topic", "jobs"),
            ("the markers topic", "jobs-markers"),
        ];
        assert!(require_not_read("dead_letter_topic", None, read).is_ok());
        assert!(require_not_read("dead_letter_topic", Some("jobs-dlq"), read).is_ok());
        let refused = require_not_read("dead_letter_topic", Some("jobs-markers"), read)
            .unwrap_err()
            .to_string();
        assert!(
            refused.starts_with("dead_letter_topic \"jobs-markers\" is the markers topic,"),
            "{refused}"
        );
    }
}
