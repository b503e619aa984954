//! An append cursor over a `Vec<u8>`, for formatting records at the speed of the input.
//!
//! A Chrome JSON event is a dozen short appends (prefix, two timestamps, name, each arg's
//! key and value). Through `Vec` each append loads and stores the length behind the
//! `&mut Vec`, checks the capacity, and copies a slice of varying length with a `memcpy`
//! call. The cursor holds the buffer's pointer, length and capacity in locals (registers,
//! once its methods are inlined into the formatting loop), copies with fixed-size moves,
//! and hands the length back to the `Vec` once, when it is dropped.

use std::ptr;

/// Appends to a `Vec<u8>`; the `Vec`'s length is updated when the cursor is dropped (or
/// [`Cursor::with_vec`] lends the `Vec` out).
pub struct Cursor<'a> {
    vec: &'a mut Vec<u8>,
    ptr: *mut u8,
    /// Bytes written: `vec[..len]` are initialized.
    len: usize,
    cap: usize,
}

impl<'a> Cursor<'a> {
    #[inline(always)]
    pub fn new(vec: &'a mut Vec<u8>) -> Self {
        let (ptr, len, cap) = (vec.as_mut_ptr(), vec.len(), vec.capacity());
        Self { vec, ptr, len, cap }
    }

    /// Bytes in the buffer (a mark for [`Self::truncate`]).
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Drops what was written after `len`.
    #[inline(always)]
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Makes room for `n` more bytes.
    #[inline(always)]
    fn room(&mut self, n: usize) {
        if self.cap - self.len < n {
            self.grow(n);
        }
    }

    #[cold]
    #[inline(never)]
    fn grow(&mut self, n: usize) {
        self.sync();
        self.vec.reserve(n);
        self.reload();
    }

    /// Gives the length to the `Vec`.
    #[inline(always)]
    fn sync(&mut self) {
        // SAFETY: every byte below `len` was written (`put_fixed`, `put`), and `len` never
        // passes the capacity (`room` comes first).
        unsafe { self.vec.set_len(self.len) };
    }

    #[inline(always)]
    fn reload(&mut self) {
        (self.ptr, self.len, self.cap) = (self.vec.as_mut_ptr(), self.vec.len(), self.vec.capacity());
    }

    /// Lends the `Vec` to code that appends to it directly (rare paths: floats). The
    /// cursor takes the `Vec`'s length back afterwards, also when `f` unwinds (so that its
    /// drop never sets a length the `Vec` no longer has).
    pub fn with_vec<R>(&mut self, f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
        struct Reload<'c, 'a>(&'c mut Cursor<'a>);
        impl Drop for Reload<'_, '_> {
            fn drop(&mut self) {
                self.0.reload();
            }
        }
        self.sync();
        let lent = Reload(self);
        f(lent.0.vec)
    }

    /// Appends the first `n` bytes of `bytes` with one move of all `N` (the rest is
    /// written over by the next append).
    #[inline(always)]
    pub fn put_fixed<const N: usize>(&mut self, bytes: [u8; N], n: usize) {
        self.room(N);
        // SAFETY: `room` made N bytes of capacity past `len`.
        unsafe { self.ptr.add(self.len).cast::<[u8; N]>().write_unaligned(bytes) };
        self.len += n.min(N);
    }

    #[inline(always)]
    pub fn push(&mut self, b: u8) {
        self.put_fixed([b], 1);
    }

    /// Appends `s`. Up to 64 bytes (prefixes, names, keys) with two overlapping moves of a
    /// fixed size instead of a `memcpy` call.
    #[inline(always)]
    pub fn put(&mut self, s: &[u8]) {
        let n = s.len();
        self.room(n);
        let (src, dst) = (s.as_ptr(), unsafe { self.ptr.add(self.len) });
        // SAFETY: `s` has `n` readable bytes and `room(n)` made `n` writable ones past `len`;
        // every pair of moves below covers [0, n) within both.
        unsafe {
            match n {
                0 => {}
                1..=3 => {
                    *dst = *src;
                    *dst.add(n / 2) = *src.add(n / 2);
                    *dst.add(n - 1) = *src.add(n - 1);
                }
                4..=7 => move_pair::<4>(src, dst, n),
                8..=15 => move_pair::<8>(src, dst, n),
                16..=31 => move_pair::<16>(src, dst, n),
                32..=64 => move_pair::<32>(src, dst, n),
                _ => ptr::copy_nonoverlapping(src, dst, n),
            }
        }
        self.len += n;
    }
}

/// The bytes that `f` writes through a cursor, in a new buffer (what is formatted once and
/// copied many times: event prefixes, names, stat keys).
pub fn written(f: impl FnOnce(&mut Cursor<'_>)) -> Vec<u8> {
    let mut buf = Vec::new();
    f(&mut Cursor::new(&mut buf));
    buf
}

/// Copies `n` (K..=2K) bytes as the first K and the last K.
///
/// # Safety
/// `src` readable and `dst` writable for `n` bytes, `K <= n`.
#[inline(always)]
unsafe fn move_pair<const K: usize>(src: *const u8, dst: *mut u8, n: usize) {
    let head = src.cast::<[u8; K]>().read_unaligned();
    let tail = src.add(n - K).cast::<[u8; K]>().read_unaligned();
    dst.cast::<[u8; K]>().write_unaligned(head);
    dst.add(n - K).cast::<[u8; K]>().write_unaligned(tail);
}

impl Drop for Cursor<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.sync();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_every_length_at_every_alignment_and_grows() {
        let src: Vec<u8> = (0..200u8).map(|i| i.wrapping_mul(37) ^ 0x55).collect();
        for pre in 0..3 {
            for n in 0..=src.len() {
                // No spare capacity: each append takes the growing path too.
                let mut b = vec![b'x'; pre];
                b.shrink_to_fit();
                {
                    let mut c = Cursor::new(&mut b);
                    c.put(&src[..n]);
                    c.push(b'!');
                    c.put_fixed(*b"12345678", 3);
                }
                assert_eq!(&b[pre..pre + n], &src[..n]);
                assert_eq!(&b[pre + n..], b"!123");
            }
        }
    }

    #[test]
    fn truncate_and_lending_keep_the_length_in_step() {
        let mut b = b"ab".to_vec();
        {
            let mut c = Cursor::new(&mut b);
            let mark = c.len();
            c.put(b"cdefgh");
            c.truncate(mark + 1);
            c.with_vec(|v| v.extend_from_slice(b"XY"));
            c.put(b"z");
            c.truncate(100);
        }
        assert_eq!(b, b"abcXYz");
        // A lender that shrinks the Vec and unwinds: the cursor keeps the Vec's length.
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut c = Cursor::new(&mut b);
            c.put(b"0123456789");
            c.with_vec(|v| {
                v.truncate(2);
                v.shrink_to_fit();
                panic!("lender fails");
            });
        }));
        assert!(unwound.is_err());
        assert_eq!(b, b"ab");
    }
}
