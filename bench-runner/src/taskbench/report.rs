//! Accuracy aggregates, markdown tables, CSV files and plots of a task run.

use super::rows::{Scored, TraceRow, TraceRun};
use super::{configs, TaskSettings};
use crate::args::config_of;
use crate::plot::{budget_span, draw_chart, init_fonts, policy_lines, Chart, Series};
use crate::results::csv_field;
use crate::stats::mcnemar_exact;
use crate::tasks::{fmt_accuracy, wilson, Task};
use plotters::prelude::SeriesLabelPosition;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// k correct of n, for one (task, length or all, policy, budget).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Acc {
    pub k: u64,
    pub n: u64,
    pub partial: f64,
}

impl Acc {
    pub fn rate(&self) -> f64 {
        if self.n == 0 {
            f64::NAN
        } else {
            self.k as f64 / self.n as f64
        }
    }
}

/// Key: (task, length; 0 = all lengths, policy, budget; 0 for none).
pub type AccKey = (Task, u32, String, i64);

/// The `--policies` entry a config ran: `beacon:512/prompt=inside` → `beacon/prompt=inside`
/// (the budget dropped; entries that differ only in spec keys stay apart).
pub fn policy_entry(config: &str) -> String {
    match config.split_once(':') {
        None => config.to_string(),
        Some((name, rest)) => match rest.split_once('/') {
            Some((_, spec)) => format!("{name}/{spec}"),
            None => name.to_string(),
        },
    }
}

pub fn aggregate(rows: &[Scored]) -> BTreeMap<AccKey, Acc> {
    let mut m: BTreeMap<AccKey, Acc> = BTreeMap::new();
    for r in rows {
        for len in [r.length, 0] {
            let a = m
                .entry((r.task, len, policy_entry(&r.row.config), r.row.budget))
                .or_default();
            a.n += 1;
            a.k += r.correct as u64;
            a.partial += r.partial;
        }
    }
    m
}

fn policy_order(policies: &[String]) -> Vec<String> {
    policies.to_vec()
}

fn length_label(len: u32) -> String {
    if len == 0 {
        "all lengths".into()
    } else {
        format!("{len} tokens")
    }
}

/// The full-cache accuracy: rows tasks, columns lengths then all.
pub fn full_cache_table(acc: &BTreeMap<AccKey, Acc>, tasks: &[Task], lengths: &[u32]) -> String {
    let mut cols: Vec<u32> = lengths.to_vec();
    cols.push(0);
    let mut s = String::from("| task |");
    for &l in &cols {
        let _ = write!(s, " {} |", length_label(l));
    }
    s.push('\n');
    s.push_str(&"| --- ".repeat(cols.len() + 1));
    s.push_str("|\n");
    for &t in tasks {
        let _ = write!(s, "| {t} |");
        for &l in &cols {
            let a = acc
                .get(&(t, l, "none".into(), 0))
                .cloned()
                .unwrap_or_default();
            let _ = write!(s, " {} |", fmt_accuracy(a.k, a.n));
        }
        s.push('\n');
    }
    s
}

/// One task at one length (0 = all): rows policies, columns budgets, plus the full cache.
pub fn task_table(
    acc: &BTreeMap<AccKey, Acc>,
    task: Task,
    length: u32,
    policies: &[String],
    budgets: &[u32],
) -> String {
    let mut s = String::from("| policy |");
    for b in budgets {
        let _ = write!(s, " {b} |");
    }
    s.push_str(" full cache |\n");
    s.push_str(&"| --- ".repeat(budgets.len() + 2));
    s.push_str("|\n");
    for p in policy_order(policies) {
        let _ = write!(s, "| {p} |");
        for &b in budgets {
            let a = acc
                .get(&(task, length, p.clone(), b as i64))
                .cloned()
                .unwrap_or_default();
            let _ = write!(s, " {} |", fmt_accuracy(a.k, a.n));
        }
        s.push_str(" – |\n");
    }
    let none = acc
        .get(&(task, length, "none".into(), 0))
        .cloned()
        .unwrap_or_default();
    let _ = writeln!(
        s,
        "| none |{} {} |",
        " – |".repeat(budgets.len()),
        fmt_accuracy(none.k, none.n)
    );
    s
}

/// Per config, pooled over prompts (token-weighted): top-1, KL, first mismatch, free run.
pub fn trace_table(t: &TraceRun, configs: &[String]) -> String {
    let mut s = String::from(
        "| config | top-1 | mean KL | first top-1 miss (teacher-forced) | free run: tokens before divergence |\n| --- | --- | --- | --- | --- |\n",
    );
    for c in configs {
        let rows: Vec<&TraceRow> = t.rows.iter().filter(|r| &r.config == c).collect();
        if rows.is_empty() {
            continue;
        }
        let n: u64 = rows.iter().map(|r| r.n_tokens).sum();
        let top1 = rows.iter().map(|r| r.top1 * r.n_tokens as f64).sum::<f64>() / n.max(1) as f64;
        let kl = rows.iter().map(|r| r.kl * r.n_tokens as f64).sum::<f64>() / n.max(1) as f64;
        let miss: Vec<String> = rows
            .iter()
            .map(|r| {
                if r.first_mismatch < 0 {
                    "none".into()
                } else {
                    r.first_mismatch.to_string()
                }
            })
            .collect();
        let free: Vec<String> = rows
            .iter()
            .map(|r| match r.diverge_free {
                None => "–".into(),
                Some(d) if d >= r.free_limit => format!("≥{d}"),
                Some(d) => d.to_string(),
            })
            .collect();
        // many prompts: the median, not a list
        let list = |v: Vec<String>, of: Vec<i64>| {
            if v.len() <= 3 {
                return v.join(", ");
            }
            let mut of = of;
            of.sort_unstable();
            format!("median {} of {}", of[of.len() / 2], of.len())
        };
        let misses = rows
            .iter()
            .map(|r| {
                if r.first_mismatch < 0 {
                    r.n_tokens as i64
                } else {
                    r.first_mismatch
                }
            })
            .collect();
        let frees: Vec<i64> = rows.iter().filter_map(|r| r.diverge_free).collect();
        let free = if frees.is_empty() {
            "–".to_string()
        } else {
            list(free, frees)
        };
        let _ = writeln!(
            s,
            "| {c} | {top1:.3} | {kl:.4} | {} | {free} |",
            list(miss, misses)
        );
    }
    s
}

/// Paired over prompts, per budget: the first policy against each other one, and how many
/// prompts each is closer to the full cache on (top-1 higher; KL lower), with the sign test.
pub fn trace_pairs_table(
    t: &TraceRun,
    policies: &[String],
    budgets: &[u32],
    extra: &str,
) -> String {
    let mut s = String::from(
        "| first | second | budget | prompts | first's top-1 higher | second's higher | sign test | first's KL lower | second's lower | sign test |\n| --- | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- |\n",
    );
    let Some(first) = policies.first() else {
        return s;
    };
    let row = |policy: &str, budget: u32, id: &str| {
        let c = config_of(policy, budget, extra);
        t.rows.iter().find(|r| r.config == c && r.id == id)
    };
    for &b in budgets {
        for second in &policies[1..] {
            let (mut n, mut top1, mut kl) = (0, (0, 0), (0, 0));
            for p in &t.prompts {
                let (Some(x), Some(y)) = (row(first, b, &p.id), row(second, b, &p.id)) else {
                    continue;
                };
                n += 1;
                match x.top1.partial_cmp(&y.top1) {
                    Some(std::cmp::Ordering::Greater) => top1.0 += 1,
                    Some(std::cmp::Ordering::Less) => top1.1 += 1,
                    _ => {}
                }
                match x.kl.partial_cmp(&y.kl) {
                    Some(std::cmp::Ordering::Less) => kl.0 += 1,
                    Some(std::cmp::Ordering::Greater) => kl.1 += 1,
                    _ => {}
                }
            }
            if n == 0 {
                continue;
            }
            let _ = writeln!(
                s,
                "| {first} | {second} | {b} | {n} | {} | {} | p = {:.3} | {} | {} | p = {:.3} |",
                top1.0,
                top1.1,
                mcnemar_exact(top1.0, top1.1),
                kl.0,
                kl.1,
                mcnemar_exact(kl.0, kl.1)
            );
        }
    }
    s
}

/// Top-1 (or KL) per position bucket, pooled over prompts: rows configs, columns buckets.
pub fn bucket_table(t: &TraceRun, configs: &[String], kl: bool) -> String {
    let edges: Vec<(u64, u64)> = t
        .rows
        .first()
        .map(|r| r.buckets.iter().map(|b| (b.from, b.to)).collect())
        .unwrap_or_default();
    let mut s = String::from("| config |");
    for (a, b) in &edges {
        let _ = write!(s, " {a}–{} |", b.saturating_sub(1));
    }
    s.push('\n');
    s.push_str(&"| --- ".repeat(edges.len() + 1));
    s.push_str("|\n");
    for c in configs {
        let rows: Vec<&TraceRow> = t.rows.iter().filter(|r| &r.config == c).collect();
        if rows.is_empty() {
            continue;
        }
        let _ = write!(s, "| {c} |");
        for i in 0..edges.len() {
            let (mut sum, mut n) = (0.0, 0u64);
            for r in &rows {
                if let Some(b) = r.buckets.get(i) {
                    sum += if kl { b.kl } else { b.top1 } * b.n as f64;
                    n += b.n;
                }
            }
            let v = if n > 0 { sum / n as f64 } else { f64::NAN };
            if kl {
                let _ = write!(s, " {v:.4} |");
            } else {
                let _ = write!(s, " {v:.3} |");
            }
        }
        s.push('\n');
    }
    s
}

pub fn summary_markdown(
    s: &TaskSettings,
    acc: &BTreeMap<AccKey, Acc>,
    trace: Option<&TraceRun>,
) -> String {
    let mut md = String::new();
    if !acc.is_empty() {
        md.push_str("## Full-cache accuracy (exact match, 95% Wilson interval, correct/asked)\n\n");
        md.push_str(&full_cache_table(acc, &s.tasks, &s.lengths));
        md.push('\n');
        for &t in &s.tasks {
            let mut lens = vec![0];
            if s.lengths.len() > 1 {
                lens.extend(&s.lengths);
            }
            for l in lens {
                let _ = writeln!(
                    md,
                    "## {t}: {} — accuracy vs KV budget ({})\n",
                    t.describe(),
                    length_label(if s.lengths.len() > 1 { l } else { s.lengths[0] })
                );
                md.push_str(&task_table(acc, t, l, &s.policies, &s.budgets));
                md.push('\n');
            }
        }
    }
    if let Some(tr) = trace {
        let cfgs = configs(s);
        let _ = writeln!(
            md,
            "## Own-trace fidelity: {} tokens of the full cache's greedy answer ({})\n",
            s.trace_tokens,
            tr.prompts
                .iter()
                .map(|p| p.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
        md.push_str("Top-1 agreement with the trace and KL(full || config), teacher-forced; first miss and free-run divergence per prompt.\n\n");
        md.push_str(&trace_table(tr, &cfgs));
        if tr.prompts.len() > 1 && s.policies.len() > 1 {
            md.push_str("\n### Paired over prompts\n\n");
            md.push_str(&trace_pairs_table(
                tr,
                &s.policies,
                &s.budgets,
                &s.run.extra,
            ));
        }
        md.push_str("\n### Top-1 agreement by position in the answer\n\n");
        md.push_str(&bucket_table(tr, &cfgs, false));
        md.push_str("\n### Mean KL by position in the answer\n\n");
        md.push_str(&bucket_table(tr, &cfgs, true));
        md.push('\n');
    }
    md
}

// ---------------------------------------------------------------------------------------------
// CSV

pub const TASK_CSV_COLUMNS: [&str; 20] = [
    "task",
    "length",
    "doc",
    "question",
    "depth",
    "config",
    "policy",
    "budget",
    "n_doc",
    "n_question",
    "n_gen",
    "correct",
    "partial",
    "answer",
    "output",
    "cells_peak",
    "evicted",
    "compress_events",
    "prefill_ms",
    "answer_ms",
];

pub fn tasks_csv(rows: &[Scored]) -> String {
    let mut s = TASK_CSV_COLUMNS.join(",");
    s.push('\n');
    for r in rows {
        let f = [
            r.task.to_string(),
            r.length.to_string(),
            r.doc.to_string(),
            r.row.question.to_string(),
            format!("{:.3}", r.depth),
            r.row.config.clone(),
            r.row.policy.clone(),
            r.row.budget.to_string(),
            r.row.n_doc.to_string(),
            r.row.n_question.to_string(),
            r.row.n_gen.to_string(),
            r.correct.to_string(),
            format!("{}", r.partial),
            r.answer.clone(),
            r.row.output.clone(),
            r.row.cells_peak.to_string(),
            r.row.evicted.to_string(),
            r.row.compress_events.to_string(),
            format!("{:.1}", r.row.prefill_ms),
            format!("{:.1}", r.row.answer_ms),
        ];
        let line: Vec<String> = f.iter().map(|x| csv_field(x)).collect();
        s.push_str(&line.join(","));
        s.push('\n');
    }
    s
}

pub fn accuracy_csv(acc: &BTreeMap<AccKey, Acc>) -> String {
    let mut s =
        String::from("task,length,policy,budget,correct,n,accuracy,wilson_lo,wilson_hi,partial\n");
    for ((t, l, p, b), a) in acc {
        let (lo, hi) = wilson(a.k, a.n);
        let _ = writeln!(
            s,
            "{t},{},{p},{b},{},{},{:.4},{lo:.4},{hi:.4},{:.4}",
            if *l == 0 {
                "all".to_string()
            } else {
                l.to_string()
            },
            a.k,
            a.n,
            a.rate(),
            a.partial / a.n.max(1) as f64
        );
    }
    s
}

pub fn trace_csv(t: &TraceRun) -> String {
    let mut s = String::from(
        "prompt,config,policy,budget,from,to,n,top1,kl,first_mismatch,diverge_free,free_limit\n",
    );
    for r in &t.rows {
        for b in &r.buckets {
            let _ = writeln!(
                s,
                "{},{},{},{},{},{},{},{},{},{},{},{}",
                csv_field(&r.id),
                csv_field(&r.config),
                r.policy,
                r.budget,
                b.from,
                b.to,
                b.n,
                b.top1,
                b.kl,
                r.first_mismatch,
                r.diverge_free.map(|d| d.to_string()).unwrap_or_default(),
                r.free_limit
            );
        }
    }
    s
}

// ---------------------------------------------------------------------------------------------
// Plots

pub fn plot_tasks(
    s: &TaskSettings,
    acc: &BTreeMap<AccKey, Acc>,
    trace: Option<&TraceRun>,
    dir: &Path,
) -> Result<Vec<PathBuf>, String> {
    init_fonts()?;
    let mut written = Vec::new();
    let span = budget_span(&s.budgets);
    for &t in &s.tasks {
        if !acc.keys().any(|k| k.0 == t) {
            continue;
        }
        let rate = |p: &str, b| acc.get(&(t, 0, p.to_string(), b as i64)).map(Acc::rate);
        let mut series = policy_lines(&s.policies, &s.budgets, rate);
        if let Some(a) = acc.get(&(t, 0, "none".into(), 0)) {
            let label = format!("full cache ({:.0}%)", 100.0 * a.rate());
            series.push(Series::level(label, span, a.rate()));
        }
        let path = dir.join(format!("accuracy_{t}.png"));
        let title = format!("{}: accuracy vs KV budget", t.describe());
        draw_chart(&Chart {
            path: &path,
            title: &title,
            x_desc: "KV budget (cells)",
            y_desc: "exact-match accuracy",
            x_log2: true,
            y_min: Some(0.0),
            y_max: Some(1.05),
            series,
            legend: SeriesLabelPosition::LowerRight,
        })?;
        written.push(path);
    }
    if let Some(tr) = trace {
        for &b in &s.budgets {
            for kl in [false, true] {
                let mut series = Vec::new();
                let mut cfgs: Vec<String> = s
                    .policies
                    .iter()
                    .map(|p| config_of(p, b, &s.run.extra))
                    .collect();
                if !kl {
                    cfgs.push("none".into());
                }
                for c in cfgs {
                    let rows: Vec<&TraceRow> = tr.rows.iter().filter(|r| r.config == c).collect();
                    let Some(first) = rows.first() else { continue };
                    let points = (0..first.buckets.len())
                        .map(|i| {
                            let (mut sum, mut n) = (0.0, 0u64);
                            let mut mid = 0.0;
                            for r in &rows {
                                if let Some(bk) = r.buckets.get(i) {
                                    sum += if kl { bk.kl } else { bk.top1 } * bk.n as f64;
                                    n += bk.n;
                                    mid = (bk.from + bk.to) as f64 / 2.0;
                                }
                            }
                            (mid, if n > 0 { sum / n as f64 } else { f64::NAN })
                        })
                        .collect();
                    let none = c == "none";
                    series.push(Series {
                        label: if none {
                            "full cache, teacher-forced (noise floor)".into()
                        } else {
                            c.clone()
                        },
                        points,
                        dashed: none,
                        errors: Vec::new(),
                    });
                }
                let what = if kl { "kl" } else { "top1" };
                let path = dir.join(format!("trace_{what}_{b}.png"));
                let title = format!(
                    "Own trace, budget {b}: {} by position",
                    if kl {
                        "KL(full || config)"
                    } else {
                        "top-1 agreement"
                    }
                );
                draw_chart(&Chart {
                    path: &path,
                    title: &title,
                    x_desc: "position in the generated answer (tokens)",
                    y_desc: if kl { "mean KL" } else { "top-1 agreement" },
                    x_log2: false,
                    y_min: Some(0.0),
                    y_max: if kl { None } else { Some(1.02) },
                    series,
                    legend: if kl {
                        SeriesLabelPosition::UpperLeft
                    } else {
                        SeriesLabelPosition::LowerLeft
                    },
                })?;
                written.push(path);
            }
        }
    }
    Ok(written)
}
