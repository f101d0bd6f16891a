//! A message buffer for signal handlers: `write!` into a fixed array, no
//! allocation (a handler can interrupt the program inside `malloc`, holding
//! its lock). What does not fit is cut.

/// Room for one message line or a few.
const CAP: usize = 768;

/// A message formatted without allocating.
pub struct MsgBuf {
    buf: [u8; CAP],
    len: usize,
}

impl MsgBuf {
    pub fn new() -> MsgBuf {
        MsgBuf {
            buf: [0; CAP],
            len: 0,
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Default for MsgBuf {
    fn default() -> MsgBuf {
        MsgBuf::new()
    }
}

impl std::fmt::Write for MsgBuf {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let n = s.len().min(CAP - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt::Write;

    #[test]
    fn it_formats_and_cuts_what_does_not_fit() {
        let mut m = MsgBuf::new();
        write!(m, "page {} at {:#x}", 7, 4096).unwrap();
        assert_eq!(m.as_bytes(), b"page 7 at 0x1000");
        let mut m = MsgBuf::new();
        for _ in 0..100 {
            m.write_str("0123456789").unwrap();
        }
        assert_eq!(m.as_bytes().len(), CAP);
    }
}
