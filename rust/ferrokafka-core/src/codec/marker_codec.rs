//! Binary encoding of redelivery markers ([`crate::markers::Marker`]).
//!
//! Layout, format version 1 (varint = unsigned LEB128, at most 10 bytes;
//! opt-bytes = varint `n`, then `n - 1` bytes, `n = 0` meaning null):
//!
//! | field                 | encoding              | present in          |
//! |-----------------------|-----------------------|---------------------|
//! | format version (= 1)  | 1 byte                | all                 |
//! | kind                  | 1 byte: 1 START, 2 KEEPALIVE, 3 END | all   |
//! | message partition     | varint (u32)          | all                 |
//! | message offset        | varint (u64)          | all                 |
//! | deadline (ms)         | varint (u64)          | START, KEEPALIVE    |
//! | record key            | opt-bytes             | START               |
//! | record value          | opt-bytes             | START               |
//! | header count          | varint                | START               |
//! | each header: name     | varint length + UTF-8 | START               |
//! | each header: value    | opt-bytes             | START               |
//!
//! An END marker is typically 4–8 bytes, a START the message plus about 10.
//!
//! Invariants: decoding is total: an unknown version is [`CoreError::UnsupportedVersion`];
//! truncation, an unknown kind, an overlong varint, non-UTF-8 header names and trailing bytes are
//! [`CoreError::Corrupt`]. Lengths are checked against the remaining input before allocating.

use crate::CoreError;
use crate::markers::{Marker, MessageId, MessagePayload, RecordHeader};

/// The marker format version written by [`encode_marker`].
pub const MARKER_FORMAT_VERSION: u8 = 1;

const KIND_START: u8 = 1;
const KIND_KEEPALIVE: u8 = 2;
const KIND_END: u8 = 3;

/// The parts of a START marker, borrowed from wherever the message lives, so that a queue
/// consumer encodes it straight from its received record (no owned [`Marker`] per message).
#[derive(Debug, Clone, Copy)]
pub struct StartParts<'a> {
    /// The message being processed.
    pub message_id: MessageId,
    /// Redelivery deadline, milliseconds.
    pub deadline: u64,
    /// Record key.
    pub key: Option<&'a [u8]>,
    /// Record value.
    pub value: Option<&'a [u8]>,
    /// Record headers in order.
    pub headers: &'a [RecordHeader],
}

/// Appends the START marker of `start` to `out` (format version [`MARKER_FORMAT_VERSION`]; the
/// same bytes as [`encode_marker`] of the owned marker), so the markers of a whole batch can
/// share one buffer.
pub fn append_start(out: &mut Vec<u8>, start: &StartParts<'_>) {
    out.push(MARKER_FORMAT_VERSION);
    out.push(KIND_START);
    put_message_id(out, &start.message_id);
    put_varint(out, start.deadline);
    put_optional_bytes(out, start.key);
    put_optional_bytes(out, start.value);
    put_varint(out, start.headers.len() as u64);
    for (name, value) in start.headers {
        put_varint(out, name.len() as u64);
        out.extend_from_slice(name.as_bytes());
        put_optional_bytes(out, value.as_deref());
    }
}

/// Appends `marker` to `out` (format version [`MARKER_FORMAT_VERSION`]).
pub fn append_marker(out: &mut Vec<u8>, marker: &Marker) {
    match marker {
        Marker::Start {
            message_id,
            deadline,
            payload,
        } => {
            let start = StartParts {
                message_id: *message_id,
                deadline: *deadline,
                key: payload.key.as_deref(),
                value: payload.value.as_deref(),
                headers: &payload.headers,
            };
            append_start(out, &start);
        }
        Marker::KeepAlive {
            message_id,
            deadline,
        } => {
            out.push(MARKER_FORMAT_VERSION);
            out.push(KIND_KEEPALIVE);
            put_message_id(out, message_id);
            put_varint(out, *deadline);
        }
        Marker::End { message_id } => {
            out.push(MARKER_FORMAT_VERSION);
            out.push(KIND_END);
            put_message_id(out, message_id);
        }
    }
}

/// Encodes a marker in format version [`MARKER_FORMAT_VERSION`].
pub fn encode_marker(marker: &Marker) -> Vec<u8> {
    let mut out = Vec::with_capacity(32);
    append_marker(&mut out, marker);
    out
}

/// Decodes a marker written by [`encode_marker`].
pub fn decode_marker(bytes: &[u8]) -> Result<Marker, CoreError> {
    let mut reader = Reader { rest: bytes };
    let version = reader.byte("format version")?;
    if version != MARKER_FORMAT_VERSION {
        return Err(CoreError::UnsupportedVersion {
            what: "marker format",
            found: version.to_string(),
            supported: "1",
        });
    }
    let kind = reader.byte("kind")?;
    let message_id = reader.message_id()?;
    let marker = match kind {
        KIND_START => {
            let deadline = reader.varint("deadline")?;
            let key = reader.optional_bytes("key")?;
            let value = reader.optional_bytes("value")?;
            let count = reader.varint("header count")?;
            // Each header takes at least two bytes: this bounds the allocation by the input.
            let mut headers: Vec<RecordHeader> = Vec::with_capacity(
                usize::try_from(count)
                    .unwrap_or(usize::MAX)
                    .min(reader.rest.len() / 2),
            );
            for _ in 0..count {
                let name_len = reader.varint("header name length")?;
                let name = reader.take(name_len, "header name")?;
                let name = std::str::from_utf8(name)
                    .map_err(|_| CoreError::corrupt("marker: header name is not UTF-8"))?;
                headers.push((name.to_owned(), reader.optional_bytes("header value")?));
            }
            Marker::Start {
                message_id,
                deadline,
                payload: MessagePayload {
                    key,
                    value,
                    headers,
                },
            }
        }
        KIND_KEEPALIVE => Marker::KeepAlive {
            message_id,
            deadline: reader.varint("deadline")?,
        },
        KIND_END => Marker::End { message_id },
        other => return Err(CoreError::corrupt(format!("marker: unknown kind {other}"))),
    };
    if !reader.rest.is_empty() {
        return Err(CoreError::corrupt(format!(
            "marker: {} trailing bytes",
            reader.rest.len()
        )));
    }
    Ok(marker)
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn put_message_id(out: &mut Vec<u8>, id: &MessageId) {
    put_varint(out, u64::from(id.partition));
    put_varint(out, id.offset);
}

fn put_optional_bytes(out: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        None => put_varint(out, 0),
        Some(bytes) => {
            put_varint(out, bytes.len() as u64 + 1);
            out.extend_from_slice(bytes);
        }
    }
}

/// A cursor over the undecoded rest of the input.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: u64, what: &str) -> Result<&'a [u8], CoreError> {
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        if len > self.rest.len() {
            return Err(CoreError::corrupt(format!("marker: truncated {what}")));
        }
        let (taken, rest) = self.rest.split_at(len);
        self.rest = rest;
        Ok(taken)
    }

    fn byte(&mut self, what: &str) -> Result<u8, CoreError> {
        Ok(self.take(1, what)?[0])
    }

    fn varint(&mut self, what: &str) -> Result<u64, CoreError> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.byte(what)?;
            let bits = u64::from(byte & 0x7f);
            if shift == 63 && bits > 1 {
                return Err(CoreError::corrupt(format!(
                    "marker: {what} overflows 64 bits"
                )));
            }
            value |= bits << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(CoreError::corrupt(format!(
            "marker: {what} varint longer than 10 bytes"
        )))
    }

    fn message_id(&mut self) -> Result<MessageId, CoreError> {
        let partition = u32::try_from(self.varint("partition")?)
            .map_err(|_| CoreError::corrupt("marker: partition exceeds u32"))?;
        Ok(MessageId {
            partition,
            offset: self.varint("offset")?,
        })
    }

    fn optional_bytes(&mut self, what: &str) -> Result<Option<Vec<u8>>, CoreError> {
        match self.varint(what)? {
            0 => Ok(None),
            len_plus_one => Ok(Some(self.take(len_plus_one - 1, what)?.to_vec())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start() -> Marker {
        Marker::Start {
            message_id: MessageId {
                partition: 3,
                offset: 1 << 40,
            },
            deadline: 1_700_000_000_000,
            payload: MessagePayload {
                key: None,
                value: Some(b"hello".to_vec()),
                headers: vec![("a".into(), None), ("b".into(), Some(vec![]))],
            },
        }
    }

    #[test]
    fn round_trips_every_kind() {
        let id = MessageId {
            partition: 0,
            offset: 5,
        };
        for marker in [
            start(),
            Marker::KeepAlive {
                message_id: id,
                deadline: u64::MAX,
            },
            Marker::End { message_id: id },
        ] {
            assert_eq!(decode_marker(&encode_marker(&marker)), Ok(marker));
        }
        assert_eq!(
            encode_marker(&Marker::End { message_id: id }),
            vec![1, 3, 0, 5]
        );
    }

    #[test]
    fn markers_appended_to_a_buffer_are_each_the_owned_markers_bytes() {
        let marker = start();
        let Marker::Start {
            message_id,
            deadline,
            payload,
        } = &marker
        else {
            unreachable!("start() is a START");
        };
        let parts = StartParts {
            message_id: *message_id,
            deadline: *deadline,
            key: payload.key.as_deref(),
            value: payload.value.as_deref(),
            headers: &payload.headers,
        };
        let end = Marker::End {
            message_id: *message_id,
        };
        let mut buffer = vec![9];
        append_start(&mut buffer, &parts);
        let start_end = buffer.len();
        append_marker(&mut buffer, &end);
        assert_eq!(buffer[0], 9);
        assert_eq!(buffer[1..start_end], encode_marker(&marker));
        assert_eq!(decode_marker(&buffer[1..start_end]), Ok(marker));
        assert_eq!(decode_marker(&buffer[start_end..]), Ok(end));
    }

    #[test]
    fn refuses_bad_input() {
        let bytes = encode_marker(&start());
        for cut in 0..bytes.len() {
            assert!(
                matches!(decode_marker(&bytes[..cut]), Err(CoreError::Corrupt { .. })),
                "cut {cut}"
            );
        }
        let mut newer = bytes.clone();
        newer[0] = 2;
        assert!(matches!(
            decode_marker(&newer),
            Err(CoreError::UnsupportedVersion { .. })
        ));
        let mut trailing = bytes;
        trailing.push(0);
        assert!(matches!(
            decode_marker(&trailing),
            Err(CoreError::Corrupt { .. })
        ));
        assert!(decode_marker(&[1, 9, 0, 0]).is_err());
        assert!(
            decode_marker(&[
                1, 3, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f
            ])
            .is_err()
        );
    }
}
