//! [`PackedHeaders`]: a record's headers held in one allocation.
//!
//! The scheduler keeps the headers of every schedule due within its horizon until it dispatches
//! it, and writes them into two records (target and tombstone). As a list of owned names and
//! values that cost two allocations per header to build and as many frees to drop; packed, it is
//! one of each.

/// Header names and values in record order, packed into one buffer: per header, the name's
/// length and the value's length (`u32`, little-endian), then the name and the value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PackedHeaders {
    bytes: Vec<u8>,
    count: usize,
}

const LENGTHS: usize = 8;

impl PackedHeaders {
    /// Packs `headers` (a header longer than 4 GiB cannot occur: Kafka records are far smaller).
    pub(crate) fn pack<'a>(headers: &[(&'a str, &'a [u8])]) -> Self {
        let size = headers
            .iter()
            .map(|(name, value)| LENGTHS + name.len() + value.len())
            .sum();
        let mut bytes = Vec::with_capacity(size);
        for (name, value) in headers {
            bytes.extend_from_slice(&u32::try_from(name.len()).unwrap_or(u32::MAX).to_le_bytes());
            bytes.extend_from_slice(&u32::try_from(value.len()).unwrap_or(u32::MAX).to_le_bytes());
            bytes.extend_from_slice(name.as_bytes());
            bytes.extend_from_slice(value);
        }
        PackedHeaders {
            bytes,
            count: headers.len(),
        }
    }

    /// The headers in record order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, &[u8])> {
        let mut rest = self.bytes.as_slice();
        std::iter::from_fn(move || {
            let (lengths, tail) = rest.split_at_checked(LENGTHS)?;
            let length = |at: usize| {
                let mut four = [0; 4];
                four.copy_from_slice(&lengths[at..at + 4]);
                u32::from_le_bytes(four) as usize
            };
            let (name, tail) = tail.split_at_checked(length(0))?;
            let (value, tail) = tail.split_at_checked(length(4))?;
            rest = tail;
            // Packed from a `&str`, so always UTF-8.
            Some((std::str::from_utf8(name).unwrap_or_default(), value))
        })
    }

    /// Number of headers.
    pub(crate) fn len(&self) -> usize {
        self.count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpacks_what_was_packed_in_order_with_repeats_and_empties() {
        let headers: [(&str, &[u8]); 4] = [
            ("schedule_source_type", b"schedule"),
            ("", b""),
            ("trace", b"\x00\xff"),
            ("trace", b"second"),
        ];
        let packed = PackedHeaders::pack(&headers);
        assert_eq!(packed.iter().collect::<Vec<_>>(), headers);
        assert_eq!(packed.len(), 4);
        assert_eq!(PackedHeaders::pack(&[]).iter().count(), 0);
    }
}
