//! The chunked decoder: never panics, never consumes more than it is given, and decodes the
//! same payload (or the same refusal) however the input is split.

use sluice_core::http::chunked::{Decoder, Step};

/// Decodes `input` fed in pieces of `split` bytes (0: whole): the payload, whether the body
/// ended, whether it was refused.
fn run(input: &[u8], split: usize) -> (Vec<u8>, bool, bool) {
    let mut d = Decoder::new();
    let mut payload = Vec::new();
    let pieces: Vec<&[u8]> = if split == 0 {
        vec![input]
    } else {
        input.chunks(split).collect()
    };
    for piece in pieces {
        let mut at = 0;
        while at < piece.len() {
            match d.decode(&piece[at..]) {
                Err(_) => return (payload, false, true),
                Ok(step) => {
                    let (used, done) = match step {
                        Step::Data {
                            consumed,
                            start,
                            end,
                        } => {
                            assert!(
                                start <= end && end <= consumed,
                                "data past what was consumed"
                            );
                            payload.extend_from_slice(&piece[at + start..at + end]);
                            (consumed, false)
                        }
                        Step::Done { consumed } => (consumed, true),
                        Step::NeedMore { consumed } => (consumed, false),
                    };
                    assert!(used <= piece.len() - at, "consumed more than given");
                    at += used;
                    if done {
                        return (payload, true, false);
                    }
                    if used == 0 {
                        break;
                    }
                }
            }
        }
    }
    (payload, false, false)
}

/// One input.
pub fn check(data: &[u8]) {
    let Some((&split, input)) = data.split_first() else {
        return;
    };
    let whole = run(input, 0);
    let pieces = run(input, usize::from(split % 16) + 1);
    assert_eq!(whole, pieces, "another split, another result");
}
