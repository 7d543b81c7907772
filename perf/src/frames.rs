//! Counts AMQP frames in a byte stream by walking frame headers, without decoding
//! anything: the 4-byte size of each frame says where the next one starts, and the
//! performative's descriptor code (`00 53 xx` right after an 8-byte header) says what
//! it is. Fed with exactly the bytes a connection reads or writes, starting at a
//! frame boundary (after the protocol headers and the SASL exchange).

/// Frame kinds counted separately.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// TRANSFER (0x14), one per frame: a message split over n frames counts n.
    Transfer = 0,
    /// FLOW (0x13).
    Flow = 1,
    /// DISPOSITION (0x15).
    Disposition = 2,
    /// Empty frames (heartbeats).
    Empty = 3,
    /// Everything else (OPEN, BEGIN, ATTACH, DETACH, END, CLOSE, ...).
    Other = 4,
}

/// Number of [`Kind`]s.
pub const KINDS: usize = 5;

/// Frame counts by kind, indexed by `Kind as usize`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FrameCounts(pub [u64; KINDS]);

impl FrameCounts {
    /// All frames.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// Frames of one kind.
    pub fn get(&self, k: Kind) -> u64 {
        self.0[k as usize]
    }

    /// Add another count to this one.
    pub fn add(&mut self, o: &FrameCounts) {
        for (a, b) in self.0.iter_mut().zip(o.0) {
            *a += b;
        }
    }
}

/// Bytes of a frame needed to classify it: 8 header bytes + `00 53 code`.
const CLASSIFY: usize = 11;

/// An incremental frame walker over one direction of a connection.
#[derive(Debug, Default)]
pub struct FrameCounter {
    /// Bytes of the current frame still to skip.
    skip: u64,
    /// The start of the current frame, while fewer than [`CLASSIFY`] bytes are known.
    head: [u8; CLASSIFY],
    have: usize,
    /// Counts so far.
    pub counts: FrameCounts,
}

impl FrameCounter {
    /// Walk `data`, the next bytes of the stream.
    pub fn feed(&mut self, mut data: &[u8]) {
        loop {
            if self.skip > 0 {
                let k = self.skip.min(data.len() as u64) as usize;
                self.skip -= k as u64;
                data = &data[k..];
            }
            if data.is_empty() {
                return;
            }
            // At a frame start (possibly with part of its head already seen).
            if self.have == 0 && data.len() >= CLASSIFY {
                let size = u32::from_be_bytes([data[0], data[1], data[2], data[3]]) as u64;
                self.count(size, &data[..CLASSIFY]);
                self.skip = size.max(8);
                continue;
            }
            let k = (CLASSIFY - self.have).min(data.len());
            self.head[self.have..self.have + k].copy_from_slice(&data[..k]);
            self.have += k;
            data = &data[k..];
            if self.have < 8 {
                return;
            }
            let size = u32::from_be_bytes([self.head[0], self.head[1], self.head[2], self.head[3]]) as u64;
            if self.have < CLASSIFY && size > self.have as u64 {
                return; // wait for the descriptor bytes
            }
            let head = self.head;
            let have = self.have;
            self.count(size, &head[..have]);
            self.have = 0;
            // Bytes of the head beyond this frame's end belong to the next frames.
            let size = size.max(8);
            if (have as u64) > size {
                let extra = head[size as usize..have].to_vec();
                self.feed(&extra);
                // `feed` above consumed the extra head bytes; continue with `data`.
                continue;
            }
            self.skip = size - have as u64;
        }
    }

    fn count(&mut self, size: u64, head: &[u8]) {
        let kind = if size <= 8 {
            Kind::Empty
        } else if head.len() >= CLASSIFY && head[4] == 2 && head[8] == 0 && head[9] == 0x53 {
            match head[10] {
                0x13 => Kind::Flow,
                0x14 => Kind::Transfer,
                0x15 => Kind::Disposition,
                _ => Kind::Other,
            }
        } else {
            Kind::Other
        };
        self.counts.0[kind as usize] += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(code: u8, body: usize) -> Vec<u8> {
        let size = (8 + 3 + body) as u32;
        let mut f = size.to_be_bytes().to_vec();
        f.extend_from_slice(&[2, 0, 0, 0, 0, 0x53, code]);
        f.extend(vec![0xaa; body]);
        f
    }

    fn stream() -> Vec<u8> {
        let mut s = Vec::new();
        s.extend(frame(0x14, 100));
        s.extend(frame(0x13, 20));
        s.extend([0, 0, 0, 8, 2, 0, 0, 0]); // heartbeat
        s.extend(frame(0x15, 0));
        s.extend(frame(0x14, 0));
        s.extend([0, 0, 0, 8, 2, 0, 0, 0]);
        s.extend(frame(0x10, 40));
        s
    }

    fn expected() -> FrameCounts {
        FrameCounts([2, 1, 1, 2, 1])
    }

    #[test]
    fn whole_stream() {
        let mut c = FrameCounter::default();
        c.feed(&stream());
        assert_eq!(c.counts, expected());
    }

    #[test]
    fn every_split_point_and_byte_by_byte() {
        let s = stream();
        for cut in 0..s.len() {
            let mut c = FrameCounter::default();
            c.feed(&s[..cut]);
            c.feed(&s[cut..]);
            assert_eq!(c.counts, expected(), "cut at {cut}");
        }
        let mut c = FrameCounter::default();
        for b in &s {
            c.feed(std::slice::from_ref(b));
        }
        assert_eq!(c.counts, expected());
    }
}
