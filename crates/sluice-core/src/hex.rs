//! Lower-case hex of byte strings (trace and span ids), without `core::fmt`.

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// Writes `bytes` as hex into `out`, which must be twice as long.
pub fn encode_into(out: &mut [u8], bytes: &[u8]) {
    for (pair, b) in out.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(b >> 4)];
        pair[1] = DIGITS[usize::from(b & 15)];
    }
}

/// Appends `bytes` as hex to `out`.
pub fn push(out: &mut Vec<u8>, bytes: &[u8]) {
    let at = out.len();
    out.resize(at + 2 * bytes.len(), 0);
    encode_into(&mut out[at..], bytes);
}

/// `bytes` as a hex string.
pub fn encode(bytes: &[u8]) -> String {
    let mut out = Vec::with_capacity(2 * bytes.len());
    push(&mut out, bytes);
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #[test]
    fn hex_is_lower_case_two_digits_a_byte() {
        assert_eq!(super::encode(&[0x00, 0x0f, 0xa5, 0xff]), "000fa5ff");
        let mut v = b"x".to_vec();
        super::push(&mut v, &[1, 0xab]);
        assert_eq!(v, b"x01ab");
    }
}
