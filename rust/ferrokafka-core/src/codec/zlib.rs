//! zlib (RFC 1950) compression with bounded decompression.
//!
//! Invariants: [`inflate`] never holds more than `max_output + 1` bytes of output: it grows its
//! buffer geometrically (from 4x the input) up to that cap while streaming and stops with
//! [`CoreError::TooLarge`] as soon as the output passes the limit, so a zip bomb costs at most the
//! limit in memory ([`inflate_into`], appending to a batch's shared buffer, grows that buffer
//! geometrically, so it may reserve up to twice the limit). Corrupt, truncated or
//! trailing-garbage input is [`CoreError::Corrupt`].
//!
//! Backend: flate2 on zlib-rs (pure Rust, no C toolchain), chosen by `benches/codec.rs` against
//! miniz_oxide, libdeflate and zlib-ng (figures in `benches/RESULTS-core.md`). The output is
//! standard zlib, readable by Ruby's `Zlib::Inflate` and Python's `zlib`.

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

use crate::CoreError;

/// The compression level used when the caller has no preference (zlib's default).
pub const DEFAULT_LEVEL: u32 = 6;

/// Smallest first output allocation of [`inflate`] (it starts at 4x the input, then doubles).
const FIRST_OUTPUT: usize = 4096;

/// Compresses `data` into a zlib stream at `level` (0 = store .. 9 = smallest).
pub fn deflate(data: &[u8], level: u32) -> Result<Vec<u8>, CoreError> {
    let mut out = Vec::new();
    deflate_into(data, level, &mut out)?;
    Ok(out)
}

/// [`deflate`], appending the stream to `out` (one buffer for a whole batch of rows).
pub fn deflate_into(data: &[u8], level: u32, out: &mut Vec<u8>) -> Result<(), CoreError> {
    Deflater::new(level)?.deflate_into(data, out)
}

/// A zlib compressor reused for many streams: its state (hundreds of KiB at the default level)
/// is allocated once, not once per row.
#[derive(Debug)]
pub struct Deflater {
    encoder: Compress,
    fresh: bool,
}

impl Deflater {
    /// A compressor at `level` (0 = store .. 9 = smallest).
    pub fn new(level: u32) -> Result<Self, CoreError> {
        if level > 9 {
            return Err(CoreError::InvalidArgument(format!(
                "zlib level must be 0..=9, got {level}"
            )));
        }
        Ok(Deflater {
            encoder: Compress::new(Compression::new(level), true),
            fresh: true,
        })
    }

    /// Compresses `data` into one complete zlib stream appended to `out`.
    pub fn deflate_into(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<(), CoreError> {
        if !std::mem::replace(&mut self.fresh, false) {
            self.encoder.reset();
        }
        let encoder = &mut self.encoder;
        // zlib's compressBound: stored blocks cost 5 bytes per 16 KiB, plus header and checksum.
        out.reserve(data.len() + data.len() / 1000 + 64);
        loop {
            let consumed = stream_position(encoder.total_in());
            let input = data.get(consumed..).unwrap_or_default();
            if out.len() == out.capacity() {
                out.reserve(FIRST_OUTPUT);
            }
            let status = encoder
                .compress_vec(input, out, FlushCompress::Finish)
                .map_err(|err| CoreError::corrupt(format!("zlib compressor: {err}")))?;
            if status == Status::StreamEnd {
                return Ok(());
            }
        }
    }
}

/// Decompresses the zlib stream `data`, refusing output longer than `max_output` bytes.
pub fn inflate(data: &[u8], max_output: usize) -> Result<Vec<u8>, CoreError> {
    let mut out = Vec::new();
    inflate_into(data, max_output, &mut out)?;
    Ok(out)
}

/// [`inflate`], appending the output to `out` (one buffer for a whole batch of rows). On error
/// `out` may hold partial output past its original length; the caller truncates it.
pub fn inflate_into(data: &[u8], max_output: usize, out: &mut Vec<u8>) -> Result<(), CoreError> {
    Inflater::new().inflate_into(data, max_output, out)
}

/// A zlib decompressor reused for many streams: its state and window are allocated once, not
/// once per row.
#[derive(Debug)]
pub struct Inflater {
    decoder: Decompress,
    fresh: bool,
}

impl Default for Inflater {
    fn default() -> Self {
        Self::new()
    }
}

impl Inflater {
    /// A decompressor for zlib streams.
    pub fn new() -> Self {
        Inflater {
            decoder: Decompress::new(true),
            fresh: true,
        }
    }

    /// [`inflate_into`] with this decompressor.
    pub fn inflate_into(
        &mut self,
        data: &[u8],
        max_output: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), CoreError> {
        if !std::mem::replace(&mut self.fresh, false) {
            self.decoder.reset(true);
        }
        inflate_with(&mut self.decoder, data, max_output, out)
    }
}

fn inflate_with(
    decoder: &mut Decompress,
    data: &[u8],
    max_output: usize,
    out: &mut Vec<u8>,
) -> Result<(), CoreError> {
    let base = out.len();
    let cap = max_output.saturating_add(1);
    let first = cap.min(data.len().saturating_mul(4).max(FIRST_OUTPUT));
    // Alone, grow exactly (memory stays within the limit); appending to a shared batch buffer,
    // grow geometrically so that many rows do not each copy the whole buffer.
    let grow = |out: &mut Vec<u8>, additional: usize| {
        if base == 0 {
            out.reserve_exact(additional);
        } else {
            out.reserve(additional);
        }
    };
    if out.capacity() - base < first {
        grow(out, first);
    }
    loop {
        if out.len() == out.capacity() {
            let written = out.len() - base;
            let target = cap.min(written.saturating_mul(2).max(first));
            grow(out, target.saturating_sub(written));
        }
        let consumed = stream_position(decoder.total_in());
        let input = data.get(consumed..).unwrap_or_default();
        let produced_before = out.len();
        let status = decoder
            .decompress_vec(input, out, FlushDecompress::None)
            .map_err(|err| CoreError::corrupt(format!("zlib stream: {err}")))?;
        if out.len() - base > max_output {
            return Err(CoreError::TooLarge {
                what: "inflated output (bytes)",
                limit: max_output as u64,
            });
        }
        let consumed_now = stream_position(decoder.total_in());
        match status {
            Status::StreamEnd if consumed_now == data.len() => return Ok(()),
            Status::StreamEnd => {
                return Err(CoreError::corrupt(format!(
                    "zlib stream: {} trailing bytes after the end",
                    data.len() - consumed_now
                )));
            }
            Status::Ok | Status::BufError => {
                let stalled = consumed_now == consumed && out.len() == produced_before;
                if stalled && out.len() < out.capacity() {
                    return Err(CoreError::corrupt("zlib stream: truncated"));
                }
            }
        }
    }
}

/// A stream counter as a slice index (the counters never exceed the slice length).
fn stream_position(total: u64) -> usize {
    usize::try_from(total).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reused_inflater_and_deflater_match_fresh_ones_after_errors() {
        let rows: Vec<Vec<u8>> = (0..20u8).map(|n| vec![n; 100 * usize::from(n)]).collect();
        let mut deflater = Deflater::new(6).expect("valid level");
        let mut inflater = Inflater::new();
        for row in &rows {
            let mut reused = Vec::new();
            deflater.deflate_into(row, &mut reused).expect("deflate");
            assert_eq!(reused, deflate(row, 6).expect("deflate"));
            let mut corrupt = reused.clone();
            corrupt.truncate(reused.len() / 2);
            assert!(
                inflater
                    .inflate_into(&corrupt, 1 << 20, &mut Vec::new())
                    .is_err()
            );
            if !row.is_empty() {
                let too_small = row.len() - 1;
                assert!(
                    inflater
                        .inflate_into(&reused, too_small, &mut Vec::new())
                        .is_err()
                );
            }
            let mut back = Vec::new();
            inflater
                .inflate_into(&reused, 1 << 20, &mut back)
                .expect("inflate");
            assert_eq!(&back, row);
        }
    }

    #[test]
    fn round_trip_at_every_level() {
        let data: Vec<u8> = (0..50_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        for level in 0..=9 {
            let packed = deflate(&data, level).unwrap();
            assert_eq!(inflate(&packed, data.len()).unwrap(), data, "level {level}");
        }
        assert!(deflate(b"x", 10).is_err());
    }

    #[test]
    fn into_variants_append_after_existing_bytes() {
        let mut out = b"prefix".to_vec();
        deflate_into(b"hello", DEFAULT_LEVEL, &mut out).unwrap();
        let packed = out.split_off(6);
        assert_eq!(out, b"prefix");
        inflate_into(&packed, 5, &mut out).unwrap();
        assert_eq!(out, b"prefixhello");
        assert!(inflate_into(&packed, 4, &mut out).is_err());
    }

    #[test]
    fn empty_input_round_trips() {
        let packed = deflate(b"", DEFAULT_LEVEL).unwrap();
        assert_eq!(inflate(&packed, 0).unwrap(), b"");
    }

    #[test]
    fn limit_is_enforced_while_streaming() {
        let bomb = deflate(&vec![0u8; 10 << 20], 9).unwrap();
        assert!(bomb.len() < 20_000);
        assert_eq!(
            inflate(&bomb, 1 << 20),
            Err(CoreError::TooLarge {
                what: "inflated output (bytes)",
                limit: 1 << 20
            })
        );
        assert_eq!(inflate(&bomb, 10 << 20).map(|out| out.len()), Ok(10 << 20));
    }

    #[test]
    fn corrupt_truncated_and_trailing_input_are_refused() {
        let packed = deflate(b"hello hello hello", DEFAULT_LEVEL).unwrap();
        let truncated = &packed[..packed.len() - 3];
        assert!(matches!(
            inflate(truncated, 100),
            Err(CoreError::Corrupt { .. })
        ));
        let mut trailing = packed.clone();
        trailing.push(0);
        assert!(matches!(
            inflate(&trailing, 100),
            Err(CoreError::Corrupt { .. })
        ));
        assert!(matches!(
            inflate(b"not zlib", 100),
            Err(CoreError::Corrupt { .. })
        ));
        assert!(matches!(inflate(b"", 100), Err(CoreError::Corrupt { .. })));
    }
}
