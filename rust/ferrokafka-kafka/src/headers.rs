//! The `ferrokafka_*` record headers ferrokafka writes, named once for every engine and, through
//! the bindings, for Python (`ferrokafka._native.REDELIVERY_COUNT_HEADER`, ...).

/// How many times a queue message was redelivered (decimal ASCII).
pub const REDELIVERY_COUNT_HEADER: &str = "ferrokafka_redelivery_count";
/// A dead letter's failure: the error's class (a Python exception's type name).
pub const ERROR_CLASS_HEADER: &str = "ferrokafka_error_class";
/// A dead letter's failure: the error's message.
pub const ERROR_MESSAGE_HEADER: &str = "ferrokafka_error_message";
/// Where a dead letter was: its topic.
pub const ORIGINAL_TOPIC_HEADER: &str = "ferrokafka_original_topic";
/// Where a dead letter was: its partition (decimal ASCII).
pub const ORIGINAL_PARTITION_HEADER: &str = "ferrokafka_original_partition";
/// Where a dead letter was: its offset (decimal ASCII).
pub const ORIGINAL_OFFSET_HEADER: &str = "ferrokafka_original_offset";

/// The headers a Consumer's dead letter carries after the record's own, in this order.
pub const DEAD_LETTER_HEADERS: [&str; 5] = [
    ERROR_CLASS_HEADER,
    ERROR_MESSAGE_HEADER,
    ORIGINAL_TOPIC_HEADER,
    ORIGINAL_PARTITION_HEADER,
    ORIGINAL_OFFSET_HEADER,
];
