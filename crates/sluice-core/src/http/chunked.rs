//! Strict incremental decoder for `Transfer-Encoding: chunked` (RFC 9112 §7.1).
//!
//! Rejects what smuggling attacks rely on: chunk sizes that are not plain hex or overflow 64
//! bits (bun's `0x100000005` read as 5), more than 16 hex digits, bare LF or bare CR as a line
//! end (Go CVE-2025-22871), data longer than declared, and over-long extensions or trailers.
//! Decoded data is re-encoded by the proxy, so chunk extensions and trailers never pass through.

/// Longest chunk extension accepted, per chunk.
const MAX_EXT: usize = 1024;
/// Longest trailer section accepted.
const MAX_TRAILERS: usize = 8192;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Size,
    /// Optional whitespace after the size, before `;` or CR.
    SizeWs,
    Ext,
    SizeLf,
    Data,
    DataCr,
    DataLf,
    /// At the start of a trailer line (or of the final empty line).
    TrailerStart,
    TrailerLine,
    TrailerLf,
    EndLf,
    Done,
}

/// A chunked framing error; the message is for logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid chunked body: {0}")]
pub struct ChunkError(pub &'static str);

/// What [`Decoder::decode`] found in its input.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// `consumed` input bytes; `data` (a range within them) is body payload.
    Data {
        /// Input bytes used.
        consumed: usize,
        /// Start of the payload in the input.
        start: usize,
        /// End of the payload in the input.
        end: usize,
    },
    /// All input was framing; read more.
    NeedMore {
        /// Input bytes used.
        consumed: usize,
    },
    /// The body ended after `consumed` bytes.
    Done {
        /// Input bytes used.
        consumed: usize,
    },
}

#[derive(Debug)]
/// The decoder's state between calls.
pub struct Decoder {
    state: State,
    size: u64,
    digits: u8,
    ext: usize,
    trailers: usize,
}

impl Default for Decoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Decoder {
    /// A decoder at the start of a body.
    pub fn new() -> Self {
        Decoder {
            state: State::Size,
            size: 0,
            digits: 0,
            ext: 0,
            trailers: 0,
        }
    }

    /// True once the whole body, trailers included, was decoded.
    #[cfg(test)]
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Decodes from `input` until some payload is found, the body ends, or input runs out.
    pub fn decode(&mut self, input: &[u8]) -> Result<Step, ChunkError> {
        let mut i = 0;
        while i < input.len() {
            let b = input[i];
            match self.state {
                State::Size => match hex(b) {
                    Some(d) => {
                        self.digits += 1;
                        if self.digits > 16 {
                            return Err(ChunkError("chunk size has more than 16 hex digits"));
                        }
                        self.size = (self.size << 4) | u64::from(d);
                        i += 1;
                    }
                    None if self.digits == 0 => return Err(ChunkError("chunk size is not hex")),
                    None => {
                        self.state = after_size(b)?;
                        i += 1;
                    }
                },
                State::SizeWs => {
                    self.state = after_size(b)?;
                    i += 1;
                }
                State::Ext => {
                    match b {
                        b'\r' => self.state = State::SizeLf,
                        b'\n' | 0 => return Err(ChunkError("bare LF or NUL in chunk extension")),
                        _ => {
                            self.ext += 1;
                            if self.ext > MAX_EXT {
                                return Err(ChunkError("chunk extension too long"));
                            }
                        }
                    }
                    i += 1;
                }
                State::SizeLf => {
                    if b != b'\n' {
                        return Err(ChunkError("chunk size line not ended by CRLF"));
                    }
                    i += 1;
                    self.ext = 0;
                    self.digits = 0;
                    if self.size == 0 {
                        self.state = State::TrailerStart;
                    } else {
                        self.state = State::Data;
                    }
                }
                State::Data => {
                    let avail = (input.len() - i) as u64;
                    let take = avail.min(self.size) as usize;
                    self.size -= take as u64;
                    if self.size == 0 {
                        self.state = State::DataCr;
                    }
                    return Ok(Step::Data {
                        consumed: i + take,
                        start: i,
                        end: i + take,
                    });
                }
                State::DataCr => {
                    if b != b'\r' {
                        return Err(ChunkError("chunk data longer than its size"));
                    }
                    self.state = State::DataLf;
                    i += 1;
                }
                State::DataLf => {
                    if b != b'\n' {
                        return Err(ChunkError("chunk data not ended by CRLF"));
                    }
                    self.state = State::Size;
                    i += 1;
                }
                State::TrailerStart => {
                    if b == b'\r' {
                        self.state = State::EndLf;
                    } else {
                        self.state = State::TrailerLine;
                        self.count_trailer()?;
                    }
                    i += 1;
                }
                State::TrailerLine => {
                    match b {
                        b'\r' => self.state = State::TrailerLf,
                        b'\n' | 0 => return Err(ChunkError("bare LF or NUL in trailer")),
                        _ => self.count_trailer()?,
                    }
                    i += 1;
                }
                State::TrailerLf => {
                    if b != b'\n' {
                        return Err(ChunkError("trailer line not ended by CRLF"));
                    }
                    self.state = State::TrailerStart;
                    i += 1;
                }
                State::EndLf => {
                    if b != b'\n' {
                        return Err(ChunkError("chunked body not ended by CRLF"));
                    }
                    self.state = State::Done;
                    return Ok(Step::Done { consumed: i + 1 });
                }
                State::Done => return Ok(Step::Done { consumed: i }),
            }
        }
        if self.state == State::Done {
            return Ok(Step::Done { consumed: i });
        }
        Ok(Step::NeedMore { consumed: i })
    }

    fn count_trailer(&mut self) -> Result<(), ChunkError> {
        self.trailers += 1;
        if self.trailers > MAX_TRAILERS {
            return Err(ChunkError("trailer section too long"));
        }
        Ok(())
    }
}

/// The state after a byte that follows the chunk size: optional whitespace, then `;` (an
/// extension) or CR.
fn after_size(b: u8) -> Result<State, ChunkError> {
    match b {
        b' ' | b'\t' => Ok(State::SizeWs),
        b';' => Ok(State::Ext),
        b'\r' => Ok(State::SizeLf),
        _ => Err(ChunkError("unexpected byte after chunk size")),
    }
}

#[inline]
fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes `input` fed in pieces of `split` bytes; returns the payload.
    fn decode_all(input: &[u8], split: usize) -> Result<Vec<u8>, ChunkError> {
        let mut d = Decoder::new();
        let mut out = Vec::new();
        let mut pending: Vec<u8> = Vec::new();
        let mut fed = 0;
        loop {
            if pending.is_empty() || matches!(d.state, State::Done) {
                if fed >= input.len() {
                    break;
                }
                let end = (fed + split).min(input.len());
                pending.extend_from_slice(&input[fed..end]);
                fed = end;
            }
            match d.decode(&pending)? {
                Step::Data {
                    consumed,
                    start,
                    end,
                } => {
                    out.extend_from_slice(&pending[start..end]);
                    pending.drain(..consumed);
                }
                Step::NeedMore { consumed } => {
                    pending.drain(..consumed);
                    if fed >= input.len() {
                        break;
                    }
                    let end = (fed + split).min(input.len());
                    pending.extend_from_slice(&input[fed..end]);
                    fed = end;
                }
                Step::Done { consumed } => {
                    pending.drain(..consumed);
                    assert!(
                        pending.is_empty() && fed == input.len(),
                        "bytes after the body"
                    );
                    return Ok(out);
                }
            }
        }
        Err(ChunkError("incomplete"))
    }

    #[test]
    fn valid_bodies_decode_whatever_the_split() {
        let body =
            b"5\r\nhello\r\n6;name=val\r\n world\r\nA \r\n0123456789\r\n0\r\nX-Trailer: 1\r\n\r\n";
        for split in [1, 2, 3, 7, 1000] {
            assert_eq!(
                decode_all(body, split).unwrap(),
                b"hello world0123456789",
                "split {split}"
            );
        }
        assert_eq!(decode_all(b"0\r\n\r\n", 1).unwrap(), b"");
    }

    #[test]
    fn invalid_chunk_framing_is_rejected() {
        let bad: &[&[u8]] = &[
            b"0x5\r\nhello\r\n0\r\n\r\n",
            b"+5\r\nhello\r\n0\r\n\r\n",
            b"5_\r\nhello\r\n0\r\n\r\n",
            b" 5\r\nhello\r\n0\r\n\r\n",
            b"100000005\r\nhello\r\n0\r\n\r\n",
            b"11111111111111111\r\n",
            b"5\nhello\r\n0\r\n\r\n",
            b"5\r\nhello\n0\r\n\r\n",
            b"5\r\nhelloXX\r\n0\r\n\r\n",
            b"5;a\nb\r\nhello\r\n0\r\n\r\n",
            b"5\r\nhello\r\n0\r\n\n",
            b"5\rhello\r\n0\r\n\r\n",
            b"g\r\n",
        ];
        for b in bad {
            assert!(
                decode_all(b, 1).is_err(),
                "{:?}",
                String::from_utf8_lossy(b)
            );
            assert!(
                decode_all(b, 1000).is_err(),
                "{:?}",
                String::from_utf8_lossy(b)
            );
        }
    }

    #[test]
    fn sizes_that_overflow_32_bits_are_not_truncated() {
        // 0x100000005 bytes announced: every one of the 12 bytes that follow is data (a
        // decoder that truncated the size to 32 bits would read 5 and see a second request).
        let mut d = Decoder::new();
        match d.decode(b"100000005\r\nhello\r\n0\r\n\r\n").unwrap() {
            Step::Data { start, end, .. } => assert_eq!(end - start, 12),
            other => panic!("{other:?}"),
        }
        assert!(!d.is_done());
    }
}
