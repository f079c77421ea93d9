//! The byte codec of saved state: little-endian values and length-prefixed arrays, every read
//! bounds-checked. A leaf: `persist`, the archive and the query stores encode with it.

/// Appends values to a byte buffer.
#[derive(Default)]
pub struct Writer {
    pub buf: Vec<u8>,
}

impl Writer {
    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn i32(&mut self, v: i32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn f64(&mut self, v: f64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn f32s(&mut self, v: &[f32]) {
        self.u64(v.len() as u64);
        for x in v {
            self.buf.extend_from_slice(&x.to_le_bytes());
        }
    }
    pub fn i32s(&mut self, v: &[i32]) {
        self.u64(v.len() as u64);
        for x in v {
            self.buf.extend_from_slice(&x.to_le_bytes());
        }
    }
}

/// Reads values back; every read is bounds-checked.
pub struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

pub type ReadResult<T> = Result<T, String>;

impl<'a> Reader<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Reader { data, at: 0 }
    }
    pub fn take(&mut self, n: usize) -> ReadResult<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.data.len());
        let end = end.ok_or_else(|| format!("state truncated at byte {}", self.at))?;
        let s = &self.data[self.at..end];
        self.at = end;
        Ok(s)
    }
    pub fn u32(&mut self) -> ReadResult<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    pub fn u64(&mut self) -> ReadResult<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    pub fn i32(&mut self) -> ReadResult<i32> {
        Ok(i32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    pub fn f64(&mut self) -> ReadResult<f64> {
        Ok(f64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    /// A length-prefixed array that must have exactly `expect` elements.
    fn len(&mut self, expect: usize) -> ReadResult<usize> {
        let n = self.u64()? as usize;
        if n != expect {
            return Err(format!("array of {n} values where {expect} were expected"));
        }
        Ok(n)
    }
    pub fn f32s_into(&mut self, out: &mut [f32]) -> ReadResult<()> {
        let n = self.len(out.len())?;
        let bytes = self.take(n * 4)?;
        for (o, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
            *o = f32::from_le_bytes(b.try_into().expect("4 bytes"));
        }
        Ok(())
    }
    pub fn i32s_into(&mut self, out: &mut [i32]) -> ReadResult<()> {
        let n = self.len(out.len())?;
        let bytes = self.take(n * 4)?;
        for (o, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
            *o = i32::from_le_bytes(b.try_into().expect("4 bytes"));
        }
        Ok(())
    }
    /// A length-prefixed array of any length (bounded by the bytes left).
    pub fn f32s(&mut self) -> ReadResult<Vec<f32>> {
        let n = self.u64()? as usize;
        let bytes = self.take(n.checked_mul(4).ok_or("array length overflows")?)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
            .collect())
    }
    pub fn i32s(&mut self) -> ReadResult<Vec<i32>> {
        let n = self.u64()? as usize;
        let bytes = self.take(n.checked_mul(4).ok_or("array length overflows")?)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes(b.try_into().expect("4 bytes")))
            .collect())
    }
    pub fn finish(&self) -> ReadResult<()> {
        if self.at == self.data.len() {
            Ok(())
        } else {
            Err(format!(
                "{} unexpected bytes after the state",
                self.data.len() - self.at
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip() {
        let mut w = Writer::default();
        w.u32(7);
        w.i32(-3);
        w.f64(1.5);
        w.f32s(&[1.0, -2.0]);
        w.i32s(&[4, 5, 6]);
        let mut r = Reader::new(&w.buf);
        assert_eq!(r.u32().unwrap(), 7);
        assert_eq!(r.i32().unwrap(), -3);
        assert_eq!(r.f64().unwrap(), 1.5);
        let mut f = [0.0f32; 2];
        r.f32s_into(&mut f).unwrap();
        assert_eq!(f, [1.0, -2.0]);
        let mut i = [0i32; 3];
        r.i32s_into(&mut i).unwrap();
        assert_eq!(i, [4, 5, 6]);
        r.finish().unwrap();
    }

    #[test]
    fn truncated_and_mismatched_input_is_an_error() {
        let mut w = Writer::default();
        w.f32s(&[1.0, 2.0, 3.0]);
        let mut two = [0.0f32; 2];
        assert!(Reader::new(&w.buf).f32s_into(&mut two).is_err());
        let mut three = [0.0f32; 3];
        assert!(Reader::new(&w.buf[..10]).f32s_into(&mut three).is_err());
        let mut r = Reader::new(&w.buf);
        r.u32().unwrap();
        assert!(r.finish().is_err());
    }
}
