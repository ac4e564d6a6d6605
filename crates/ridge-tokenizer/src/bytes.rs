//! The GPT-2 byte-to-character table used by byte-level BPE.
//!
//! Byte-level BPE vocabularies do not store raw bytes: every byte is replaced by one printable
//! Unicode character so that token strings are valid, readable text. The 188 bytes that are
//! already printable (`!`..=`~`, `¡`..=`¬`, `®`..=`ÿ`) stand for themselves; the other 68 bytes
//! (controls, space, DEL, NBSP, soft hyphen) are given the code points U+0100.. in byte order,
//! so the space byte becomes `Ġ` (U+0120) and newline becomes `Ċ` (U+010A). The table is fixed
//! by the GPT-2 release and shared by every byte-level vocabulary.

use std::sync::OnceLock;

fn is_self_mapped(b: u8) -> bool {
    matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF)
}

/// `c - 256 -> byte` for the 68 remapped bytes, in byte order.
fn high_table() -> &'static [u8; 68] {
    static T: OnceLock<[u8; 68]> = OnceLock::new();
    T.get_or_init(|| {
        let mut high = [0u8; 68];
        let mut n = 0usize;
        for b in 0..=255u8 {
            if !is_self_mapped(b) {
                high[n] = b;
                n += 1;
            }
        }
        high
    })
}

/// `byte -> char`.
fn char_table() -> &'static [char; 256] {
    static T: OnceLock<[char; 256]> = OnceLock::new();
    T.get_or_init(|| {
        let mut t = ['\0'; 256];
        let mut n = 0u32;
        for b in 0..=255u8 {
            t[b as usize] = if is_self_mapped(b) {
                char::from(b)
            } else {
                n += 1;
                // 255 + n for n in 1..=68 is a valid scalar value (U+0100 ..= U+0143).
                char::from_u32(255 + n).unwrap_or('\u{FFFD}')
            };
        }
        t
    })
}

/// The character that stands for byte `b` in a byte-level vocabulary.
#[cfg(test)]
pub(crate) fn byte_to_char(b: u8) -> char {
    char_table()[b as usize]
}

/// Appends the byte-level form of `text` (one character per byte) to `out`.
pub(crate) fn encode_bytes(text: &str, out: &mut String) {
    let t = char_table();
    out.extend(text.bytes().map(|b| t[b as usize]));
}

/// The byte a vocabulary character stands for, or `None` for a character outside the table.
pub(crate) fn char_to_byte(c: char) -> Option<u8> {
    let cp = c as u32;
    if cp < 256 {
        let b = cp as u8;
        return is_self_mapped(b).then_some(b);
    }
    // Remapped bytes occupy U+0100 ..= U+0143 in byte order.
    high_table().get((cp - 256) as usize).copied()
}

/// Decodes a byte-level token string back to the bytes it stands for. Characters outside the
/// table (which a well-formed vocabulary never contains) are passed through as their UTF-8.
pub(crate) fn decode_token_text(text: &str, out: &mut Vec<u8>) {
    for c in text.chars() {
        match char_to_byte(c) {
            Some(b) => out.push(b),
            None => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_a_bijection() {
        let mut seen = std::collections::HashSet::new();
        for b in 0..=255u8 {
            let c = byte_to_char(b);
            assert!(seen.insert(c), "duplicate char for byte {b}");
            assert_eq!(char_to_byte(c), Some(b));
        }
        assert_eq!(byte_to_char(b' '), 'Ġ');
        assert_eq!(byte_to_char(b'\n'), 'Ċ');
        assert_eq!(byte_to_char(b'a'), 'a');
        assert_eq!(char_to_byte('Ā'), Some(0));
        assert_eq!(char_to_byte('€'), None);
    }

    #[test]
    fn decodes_token_text() {
        let mut out = Vec::new();
        decode_token_text("ĠcafÃ©", &mut out);
        assert_eq!(out, " café".as_bytes());
    }
}
