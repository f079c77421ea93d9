//! The engine's side of the archive (`crate::archive`), switched on when `archive > 0` and the
//! host and layers allow it (`setup_archive`). Nothing here runs without it.
//!
//! - `stage.rs`: the archive's stage of a compression pass. Before selection, the archived pages
//!   whose key summaries give the newest queries the highest bound become candidates (up to
//!   `budget / 4` cells), scored with the cells; selection keeps the best `target` of both; after
//!   it, the cells that lost are archived and the candidates that won are placed back.
//! - `rows.rs`: moving rows between the cache and the archive, and ranking archived pages.
//! - `recall.rs`: recall between passes (a passage being re-read); `quote.rs`: recall before a
//!   turn that quotes an earlier phrase is computed.

mod quote;
mod recall;
mod rows;
mod stage;

use super::fallback::first;
use super::Engine;
use crate::archive::{ArchiveScratch, LayerFormat, Layout, RecallRows};
use crate::host::{Host, LOG_WARN};
use crate::scoring::{ExtraKeys, ScoreRows};

/// Buffers of archive work, reused between passes.
#[derive(Default)]
pub(super) struct ArchScratch {
    /// Recall candidates: position and page; keys per scored layer.
    cand_pos: Vec<i32>,
    cand_page: Vec<i32>,
    cand_k: Vec<Vec<f32>>,
    /// A check's score rows (page bounds, exact logits or the cells' logits) and their column
    /// maxima.
    score_rows: ScoreRows,
    col_max: Vec<f32>,
    /// Archived pages best bound first (page, bound), and the pages a step works on.
    ranked: Vec<(i32, f32)>,
    /// Every archived page, in the order `rank_pages` bounds them.
    all_pages: Vec<i32>,
    page_ids: Vec<i32>,
    /// Cells and candidates of a pass in position order (indices into `0..n + m`), their
    /// positions, scores and raw maxima, and the indices selection evicts.
    order: Vec<usize>,
    comb_pos: Vec<i32>,
    comb_scores: Vec<f32>,
    raw_max: Vec<f32>,
    evict_comb: Vec<usize>,
    /// Evicted cells (position, score) to archive, and candidates (page, position) to recall.
    ev_pos: Vec<i32>,
    ev_scores: Vec<f32>,
    recall: Vec<(i32, i32)>,
    /// A check's winning pages with the logit that won them (page, logit).
    winners: Vec<(i32, f32)>,
    /// The positions taken out of one page.
    take_pos: Vec<i32>,
    k: Vec<Vec<u8>>,
    v: Vec<Vec<u8>>,
    rows: RecallRows,
    place: Vec<u32>,
    archive: ArchiveScratch,
}

impl ArchScratch {
    /// The keys of the first `m` recall candidates, which a pass scores after its cells.
    pub(super) fn candidate_keys(&self, m: usize) -> Option<ExtraKeys<'_>> {
        (m > 0).then_some(ExtraKeys {
            n: m,
            k: &self.cand_k,
        })
    }
}

impl Engine {
    /// Turn the archive on when the params ask for it, the host has its callbacks and every
    /// evictable layer can be scored (a layer the engine cannot read could not be restored).
    pub(super) fn setup_archive(&mut self, host: &mut dyn Host, n_host_layers: i32) {
        let old = self.archive.take();
        if self.params.archive == 0 || n_host_layers <= 0 {
            return;
        }
        let why = if !host.has_archive() {
            Some("the host has no read_kv/write_kv/seq_place".to_string())
        } else if self.layers.descs.len() != n_host_layers as usize {
            Some(format!(
                "{} of {n_host_layers} layers can be scored",
                self.layers.descs.len()
            ))
        } else {
            self.layers
                .descs
                .iter()
                .find(|l| l.v_type.is_none())
                .map(|l| format!("layer {} has no V type the archive reads", l.host_index))
        };
        if let Some(why) = why {
            if first(&mut self.warned.archive) {
                host.log(LOG_WARN, &format!("beaconkv: archive off: {why}"));
            }
            return;
        }
        let ty = self.params.archive_type;
        let formats = self
            .layers
            .descs
            .iter()
            .map(|l| {
                LayerFormat::new(
                    l.host_index,
                    (l.k_type, l.n_head_kv * l.head_dim),
                    (l.v_type.expect("checked above"), l.v_dim),
                    ty,
                )
            })
            .collect();
        let layout = Layout::new(formats, self.params.page);
        if old.as_ref() != Some(&layout) {
            for s in self.seqs.values_mut() {
                s.archive = Default::default();
            }
        }
        self.archive = Some(layout);
    }

    /// The archive failed (a host callback): stop using it for the rest of the context.
    fn stop_archive(&mut self, host: &mut dyn Host, why: &str) {
        if self.archive.take().is_some() {
            host.log(
                LOG_WARN,
                &format!("beaconkv: archive off for the rest of this context: {why}"),
            );
        }
    }
}
