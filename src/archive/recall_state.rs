//! The recall bookkeeping of one sequence between compression passes (what
//! `engine/archiving/recall.rs` reads and the passes write), and its part of a saved state.

use crate::codec::{ReadResult, Reader, Writer};

/// Per-sequence recall state.
#[derive(Clone, Debug, Default)]
pub struct SeqRecall {
    /// The middle cells the last pass kept, weakest first: (raw score = max logit, position).
    /// A page whose keys beat the weakest under the newest query is recalled in their place.
    /// Empty until a pass ran (or after a restore).
    pub victims: Vec<(f32, i32)>,
    /// Decode steps since the last recall check.
    pub since_check: usize,
    /// The last batch brought several tokens in the decode phase (a new user turn).
    pub after_batch: bool,
    /// Positions recalled by the last pass: the next pass keeps them.
    pub held: Vec<i32>,
    /// A check since the last pass found the text repeating an earlier passage (recall by
    /// tokens): the next pass lets archived pages compete.
    pub repeat_seen: bool,
    /// The first and last positions of the batch about to be placed, when its token ids are
    /// known (set by `record_tokens`, taken by `before_batch`).
    pub batch_span: Option<(i32, i32)>,
    /// The first position of the last batch when it brought several tokens and asked for no
    /// output: a chunk of a prompt or turn whose end is still to come.
    pub chunk_start: Option<i32>,
}

impl SeqRecall {
    /// The bookkeeping in a saved state (`persist`), so that a restored sequence recalls what
    /// the uninterrupted one would: without the victims, its first check would run a swap pass.
    pub fn save(&self, w: &mut Writer) {
        let scores: Vec<f32> = self.victims.iter().map(|v| v.0).collect();
        let pos: Vec<i32> = self.victims.iter().map(|v| v.1).collect();
        w.f32s(&scores);
        w.i32s(&pos);
        w.u64(self.since_check as u64);
        w.u32(self.after_batch as u32 | (self.repeat_seen as u32) << 1);
        w.i32s(&self.held);
        for span in [self.batch_span, self.chunk_start.map(|p| (p, p))] {
            let (a, b) = span.unwrap_or((i32::MIN, i32::MIN));
            w.i32(a);
            w.i32(b);
        }
    }

    /// Reads what `save` wrote.
    pub fn load(r: &mut Reader) -> ReadResult<Self> {
        let scores = r.f32s()?;
        let pos = r.i32s()?;
        if scores.len() != pos.len() {
            return Err("recall victims: scores and positions differ in number".into());
        }
        let victims = scores.into_iter().zip(pos).collect();
        let since_check = r.u64()? as usize;
        let flags = r.u32()?;
        let held = r.i32s()?;
        let mut spans = [None; 2];
        for span in &mut spans {
            let (a, b) = (r.i32()?, r.i32()?);
            *span = (a != i32::MIN).then_some((a, b));
        }
        Ok(SeqRecall {
            victims,
            since_check,
            after_batch: flags & 1 != 0,
            held,
            repeat_seen: flags & 2 != 0,
            batch_span: spans[0],
            chunk_start: spans[1].map(|(p, _)| p),
        })
    }
}
