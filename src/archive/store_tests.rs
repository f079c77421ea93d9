//! Unit tests of the sequence archive (pages, boxes, conversions, saved format).

use super::*;
use crate::archive::layout::LayerFormat;
use crate::config::ArchiveType;
use crate::ggml::types::GgmlType;

fn layout(ty: ArchiveType) -> Layout {
    Layout::new(
        vec![
            LayerFormat::new(0, (GgmlType::F32, 64), (GgmlType::F32, 32), ty),
            LayerFormat::new(1, (GgmlType::F16, 32), (GgmlType::F16, 32), ty),
        ],
        4,
    )
}

fn val(pos: i32, li: usize, j: usize) -> f32 {
    ((pos as f32) * 0.7 + (li * 13 + j) as f32 * 0.31).sin()
}

/// Raw rows of `pos` for the layout (F32 layer 0, F16 layer 1).
fn raw(l: &Layout, pos: &[i32]) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let mut k = Vec::new();
    let mut v = Vec::new();
    for (li, f) in l.layers.iter().enumerate() {
        let enc = |dim: usize, ty: GgmlType, off: usize| {
            let mut out = Vec::new();
            for &p in pos {
                for j in 0..dim {
                    let x = val(p, li, j + off);
                    match ty {
                        GgmlType::F32 => out.extend_from_slice(&x.to_le_bytes()),
                        _ => out.extend_from_slice(&half::f16::from_f32(x).to_bits().to_le_bytes()),
                    }
                }
            }
            out
        };
        k.push(enc(f.k_dim, f.k_type, 0));
        v.push(enc(f.v_dim, f.v_type, 1000));
    }
    (k, v)
}

fn fill(l: &Layout, pos: &[i32]) -> SeqArchive {
    let (k, v) = raw(l, pos);
    let scores: Vec<f32> = pos.iter().map(|&p| p as f32).collect();
    let mut a = SeqArchive::default();
    a.insert(
        l,
        &RawRows {
            pos,
            scores: &scores,
            k: &k,
            v: &v,
        },
        &mut ArchiveScratch::default(),
    );
    a
}

#[test]
fn bound_never_underestimates_an_exact_score() {
    let l = layout(ArchiveType::Same);
    let pos: Vec<i32> = (10..30).collect();
    let a = fill(&l, &pos);
    let mut k = vec![0.0; 64];
    for q_seed in 0..20 {
        let q: Vec<f32> = (0..64)
            .map(|j| ((q_seed * 7 + j) as f32 * 1.3).cos())
            .collect();
        for (&id, page) in a.pages() {
            let (c, r) = page.summary(&l, 0);
            let bound: f32 = q
                .iter()
                .zip(c.iter().zip(r))
                .map(|(&x, (&c, &r))| x * c + x.abs() * r)
                .sum();
            for idx in 0..page.pos.len() {
                a.k_f32(&l, id, idx, 0, &mut k);
                let exact: f32 = q.iter().zip(&k).map(|(a, b)| a * b).sum();
                assert!(
                    bound >= exact - 1e-4,
                    "page {id}: bound {bound} < exact {exact}"
                );
            }
        }
    }
}

#[test]
fn same_type_round_trip_is_exact_and_counts_cells() {
    let l = layout(ArchiveType::Same);
    let pos = [3, 5, 6, 9];
    let (k, v) = raw(&l, &pos);
    let mut a = fill(&l, &pos);
    assert_eq!(a.n_cells(), 4);
    assert!(a.bytes() > 0);
    assert!(a.contains(&l, 5) && !a.contains(&l, 4));
    // pages of 4 positions: 3 -> page 0; 5, 6 -> page 1; 9 -> page 2
    let mut out = RecallRows::default();
    a.take(&l, 1, &[5, 6], &mut out);
    assert_eq!(a.n_cells(), 2);
    let mut got: Vec<(i32, Vec<u8>)> = out
        .pos
        .iter()
        .enumerate()
        .map(|(i, &p)| (p, out.k[1][i * 64..(i + 1) * 64].to_vec()))
        .collect();
    got.sort();
    assert_eq!(got[0].1, k[1][64..128].to_vec());
    assert_eq!(got[1].1, k[1][128..192].to_vec());
    let vi = out.pos.iter().position(|&p| p == 6).unwrap();
    assert_eq!(out.v[0][vi * 128..(vi + 1) * 128], v[0][2 * 128..3 * 128]);
    assert!(a.page(1).is_none(), "an emptied page is dropped");
}

#[test]
fn quantised_round_trip_is_close() {
    for ty in [ArchiveType::Q8_0, ArchiveType::Q4_0] {
        let l = layout(ty);
        assert!(!l.layers[0].exact());
        let pos = [8, 9];
        let a0 = fill(&l, &pos);
        let mut a = a0.clone();
        let mut out = RecallRows::default();
        a.take(&l, 2, &[8, 9], &mut out);
        let tol = if ty == ArchiveType::Q8_0 { 0.01 } else { 0.15 };
        for (i, &p) in out.pos.iter().enumerate() {
            for j in 0..64 {
                let b = &out.k[0][(i * 64 + j) * 4..(i * 64 + j + 1) * 4];
                let x = f32::from_le_bytes(b.try_into().unwrap());
                assert!(
                    (x - val(p, 0, j)).abs() < tol,
                    "{ty:?} {p} {j}: {x} vs {}",
                    val(p, 0, j)
                );
            }
        }
        // q8_0/q4_0 store less than f32 and f16 rows
        assert!(a0.bytes() < fill(&layout(ArchiveType::Same), &pos).bytes());
    }
}

#[test]
fn cap_drops_lowest_pages_and_range_removal_forgets() {
    let l = layout(ArchiveType::Same);
    let pos: Vec<i32> = (0..16).collect();
    let mut a = fill(&l, &pos);
    a.enforce_cap(9);
    // pages score by their best position: pages 0 and 1 (scores 3, 7) go first
    assert_eq!(a.n_cells(), 8);
    assert_eq!(a.dropped, 8);
    assert!(!a.contains(&l, 7) && a.contains(&l, 8));
    a.remove_range(&l, 10, 13);
    assert_eq!(a.n_cells(), 5);
    assert!(!a.contains(&l, 11) && a.contains(&l, 13));
}

#[test]
fn positions_held_again_leave_the_archive() {
    let l = layout(ArchiveType::Same);
    let mut a = fill(&l, &[1, 2, 7, 40]);
    assert_eq!(a.forget_held(&l, &[0, 2, 3, 40, 41]), 2);
    assert_eq!(a.n_cells(), 2);
    assert!(a.contains(&l, 1) && a.contains(&l, 7));
    assert!(!a.contains(&l, 2) && !a.contains(&l, 40));
    assert_eq!(a.forget_held(&l, &[5, 6]), 0);
}

#[test]
fn an_empty_or_reversed_range_removes_nothing() {
    // a host may remove [p0, p1) with p1 <= p0 (llama.cpp's seq_rm then removes nothing)
    let l = layout(ArchiveType::Same);
    let mut a = fill(&l, &[1, 2, 7, 40]);
    a.remove_range(&l, 30, 5);
    a.remove_range(&l, 7, 7);
    assert_eq!(a.n_cells(), 4);
    assert!(a.contains(&l, 7) && a.contains(&l, 40));
}

#[test]
fn save_load_round_trip() {
    let l = layout(ArchiveType::Q8_0);
    let a = fill(&l, &[1, 2, 7, 40]);
    let mut w = Writer::default();
    a.save(&mut w);
    let b = SeqArchive::load(&l, &mut Reader::new(&w.buf), false).unwrap();
    assert_eq!(
        (b.n_cells(), b.bytes(), b.dropped),
        (a.n_cells(), a.bytes(), a.dropped)
    );
    let mut w2 = Writer::default();
    b.save(&mut w2);
    assert_eq!(w.buf, w2.buf);
    assert!(SeqArchive::load(&layout(ArchiveType::Same), &mut Reader::new(&w.buf), false).is_err());
}

#[test]
fn rows_splice_and_remove_in_place() {
    let mut rows = Vec::new();
    splice_row(&mut rows, 0, 2, false, &[5, 5]);
    splice_row(&mut rows, 0, 2, false, &[1, 1]); // before
    splice_row(&mut rows, 1, 2, false, &[3, 3]); // between
    splice_row(&mut rows, 3, 2, false, &[7, 7]); // append
    assert_eq!(rows, [1, 1, 3, 3, 5, 5, 7, 7]);
    splice_row(&mut rows, 2, 2, true, &[6, 6]); // replace
    assert_eq!(rows, [1, 1, 3, 3, 6, 6, 7, 7]);
    remove_row(&mut rows, 1, 2);
    assert_eq!(rows, [1, 1, 6, 6, 7, 7]);
    remove_row(&mut rows, 2, 2);
    assert_eq!(rows, [1, 1, 6, 6]);
}

#[test]
fn version_2_boxes_load_as_centre_and_radius() {
    let l = layout(ArchiveType::Same);
    let a = fill(&l, &[1, 2, 3, 7, 40]);
    // a version 2 state held each page's box as (min, max)
    let mut old = a.clone();
    for p in old.pages.values_mut() {
        for (c, r) in p.centre.iter_mut().zip(&mut p.radius) {
            (*c, *r) = (*c - *r, *c + *r);
        }
    }
    let mut w = Writer::default();
    old.save(&mut w);
    let b = SeqArchive::load(&l, &mut Reader::new(&w.buf), true).unwrap();
    let mut k = vec![0.0; 64];
    for (&id, page) in b.pages() {
        let (c, r) = page.summary(&l, 0);
        for idx in 0..page.pos.len() {
            b.k_f32(&l, id, idx, 0, &mut k);
            for j in 0..64 {
                assert!(
                    (k[j] - c[j]).abs() <= r[j],
                    "page {id} key {idx} dim {j} outside"
                );
            }
        }
        // and not a vacuous box: as wide as the original, to rounding
        let (c0, r0) = a.page(id).unwrap().summary(&l, 0);
        for j in 0..64 {
            assert!((c[j] - c0[j]).abs() < 1e-5 && (r[j] - r0[j]).abs() < 1e-5);
        }
    }
}
