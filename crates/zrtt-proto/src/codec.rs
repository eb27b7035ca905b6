//! Big-endian readers and writers for the wire formats. [`Reader`] never
//! panics: every read is bounds-checked and reports [`InvalidMessage::Truncated`].

use crate::error::InvalidMessage;

/// A cursor over untrusted bytes.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// Start reading `buf` from its first byte.
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    /// Bytes consumed so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Whether every byte was consumed.
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// Take the next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], InvalidMessage> {
        if self.remaining() < n {
            return Err(InvalidMessage::Truncated {
                needed: n,
                available: self.remaining(),
            });
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    /// Take everything left.
    pub fn rest(&mut self) -> &'a [u8] {
        let out = &self.buf[self.pos..];
        self.pos = self.buf.len();
        out
    }

    /// Take a fixed-size array.
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], InvalidMessage> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    /// One byte.
    pub fn u8(&mut self) -> Result<u8, InvalidMessage> {
        Ok(self.array::<1>()?[0])
    }

    /// Big-endian u16.
    pub fn u16(&mut self) -> Result<u16, InvalidMessage> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    /// Big-endian u32.
    pub fn u32(&mut self) -> Result<u32, InvalidMessage> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    /// Big-endian u64.
    pub fn u64(&mut self) -> Result<u64, InvalidMessage> {
        Ok(u64::from_be_bytes(self.array()?))
    }

    /// A u8-length-prefixed byte string.
    pub fn vec_u8(&mut self) -> Result<&'a [u8], InvalidMessage> {
        let n = self.u8()? as usize;
        self.take(n)
    }

    /// A u16-length-prefixed byte string.
    pub fn vec_u16(&mut self) -> Result<&'a [u8], InvalidMessage> {
        let n = self.u16()? as usize;
        self.take(n)
    }

    /// Fail unless every byte was consumed.
    pub fn finish(&self) -> Result<(), InvalidMessage> {
        if self.is_empty() {
            Ok(())
        } else {
            Err(InvalidMessage::TrailingBytes(self.remaining()))
        }
    }
}

/// Append helpers for `Vec<u8>`.
pub trait Put {
    /// Append one byte.
    fn put_u8(&mut self, v: u8);
    /// Append a big-endian u16.
    fn put_u16(&mut self, v: u16);
    /// Append a big-endian u32.
    fn put_u32(&mut self, v: u32);
    /// Append a big-endian u64.
    fn put_u64(&mut self, v: u64);
    /// Append a u8-length-prefixed string; the caller guarantees `v.len() <= 255`.
    fn put_vec_u8(&mut self, v: &[u8]);
    /// Append a u16-length-prefixed string; the caller guarantees `v.len() <= 65535`.
    fn put_vec_u16(&mut self, v: &[u8]);
}

impl Put for Vec<u8> {
    fn put_u8(&mut self, v: u8) {
        self.push(v);
    }
    fn put_u16(&mut self, v: u16) {
        self.extend_from_slice(&v.to_be_bytes());
    }
    fn put_u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_be_bytes());
    }
    fn put_u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_be_bytes());
    }
    fn put_vec_u8(&mut self, v: &[u8]) {
        debug_assert!(v.len() <= u8::MAX as usize);
        self.push(v.len() as u8);
        self.extend_from_slice(v);
    }
    fn put_vec_u16(&mut self, v: &[u8]) {
        debug_assert!(v.len() <= u16::MAX as usize);
        self.put_u16(v.len() as u16);
        self.extend_from_slice(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reader_reports_truncation_and_trailing() {
        let mut r = Reader::new(&[1, 2, 3]);
        assert_eq!(r.u16().unwrap(), 0x0102);
        assert_eq!(
            r.u16(),
            Err(InvalidMessage::Truncated {
                needed: 2,
                available: 1
            })
        );
        assert_eq!(r.finish(), Err(InvalidMessage::TrailingBytes(1)));
        assert_eq!(r.u8().unwrap(), 3);
        assert!(r.finish().is_ok());
    }

    #[test]
    fn length_prefixed_round_trip() {
        let mut v = Vec::new();
        v.put_vec_u8(b"abc");
        v.put_vec_u16(b"defg");
        let mut r = Reader::new(&v);
        assert_eq!(r.vec_u8().unwrap(), b"abc");
        assert_eq!(r.vec_u16().unwrap(), b"defg");
        r.finish().unwrap();
    }
}
