//! pass@1 per function and whole bundles per split, lengths, CPU time and paired exact McNemar
//! tests per cell, as markdown tables, CSV and plots.

use super::data::Split;
use super::driver::{Row, RunLine};
use super::sandbox::Sandbox;
use super::HumanEvalSettings;
use crate::grid::{budget_label, PerCell};
use crate::plot::{budget_span, draw_chart, init_fonts, policy_lines, side_by_side, Chart, Series};
use crate::results::csv_field;
use crate::tasks::{fmt_accuracy, wilson};
use plotters::prelude::SeriesLabelPosition;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Functions and bundles of one split in one cell.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counts {
    /// Functions that passed, of `n`.
    pub k: u64,
    pub n: u64,
    /// Bundles with every function passed, of `bundles`.
    pub bundles_passed: u64,
    pub bundles: u64,
}

/// The own values of one split in one cell.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OwnCounts {
    pub bundles: u64,
    /// Bundles with every value written again.
    pub all: u64,
    pub asked: u64,
    pub recalled: u64,
    /// Bundles whose numbers follow a pattern.
    pub patterned: u64,
    /// Sum and count of the estimated gaps in tokens between the two dictionaries.
    pub gap_sum: f64,
    pub gaps: u64,
}

impl OwnCounts {
    pub fn mean_gap(&self) -> f64 {
        if self.gaps == 0 {
            f64::NAN
        } else {
            self.gap_sum / self.gaps as f64
        }
    }
}

/// The answers of one cell.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Cell {
    pub splits: BTreeMap<Split, Counts>,
    /// Bundles answered (all splits).
    pub n: u64,
    pub prompt: u64,
    pub gen: u64,
    /// Answers cut at --n-tokens.
    pub cut: u64,
    pub evicted: u64,
    /// Per "bundle task id", passed.
    pub outcome: BTreeMap<String, bool>,
    /// Own values per split (requests that asked for them).
    pub own: BTreeMap<Split, OwnCounts>,
    /// Per bundle, every own value written again.
    pub own_outcome: BTreeMap<String, bool>,
    /// The failures' reasons and their counts.
    pub reasons: BTreeMap<String, u64>,
    /// CPU seconds of the tool over its finished invocations for this cell, and the bundles they
    /// answered.
    pub cpu_s: f64,
    pub cpu_bundles: u64,
}

impl Cell {
    fn add(&mut self, r: &Row) {
        let c = self.splits.entry(r.split).or_default();
        c.k += r.passed.iter().filter(|&&p| p).count() as u64;
        c.n += r.passed.len() as u64;
        c.bundles += 1;
        c.bundles_passed += r.all_passed() as u64;
        self.n += 1;
        self.prompt += r.n_prompt;
        self.gen += r.n_gen;
        self.cut += r.cut as u64;
        self.evicted += r.evicted;
        if let Some(o) = &r.own {
            let c = self.own.entry(r.split).or_default();
            c.bundles += 1;
            c.all += o.all_recalled() as u64;
            c.asked += o.asked as u64;
            c.recalled += o.recalled as u64;
            c.patterned += o.patterned as u64;
            if let Some(g) = o.gap_tokens(r.n_gen) {
                c.gap_sum += g;
                c.gaps += 1;
            }
            self.own_outcome.insert(r.bundle.clone(), o.all_recalled());
        }
        for ((t, &p), why) in r.tasks.iter().zip(&r.passed).zip(&r.reasons) {
            // keyed by bundle too: with own values a problem is asked in two bundles
            self.outcome.insert(format!("{} {t}", r.bundle), p);
            if !p {
                let short = why.split(':').next().unwrap_or(why).to_string();
                *self.reasons.entry(short).or_default() += 1;
            }
        }
    }

    pub fn split(&self, s: Split) -> Counts {
        self.splits.get(&s).cloned().unwrap_or_default()
    }

    /// Mean prompt + answer tokens per bundle.
    pub fn mean_total(&self) -> f64 {
        self.mean(self.prompt + self.gen)
    }

    pub fn mean_gen(&self) -> f64 {
        self.mean(self.gen)
    }

    fn mean(&self, x: u64) -> f64 {
        if self.n == 0 {
            f64::NAN
        } else {
            x as f64 / self.n as f64
        }
    }

    pub fn cpu_per_bundle(&self) -> f64 {
        if self.cpu_bundles == 0 {
            f64::NAN
        } else {
            self.cpu_s / self.cpu_bundles as f64
        }
    }

    /// Mean prompt + answer under `ratio` × budget (never for the full cache, budget 0).
    pub fn flagged(&self, budget: u32, ratio: f64) -> bool {
        budget > 0 && self.n > 0 && self.mean_total() < ratio * budget as f64
    }
}

pub use crate::stats::mcnemar_exact;

/// One paired comparison: on the functions both cells answered, those `a` passed and `b`
/// failed (`lost`: the second cell lost them) and the other way round.
#[derive(Clone, Debug, PartialEq)]
pub struct Paired {
    pub pairs: u64,
    pub lost: u64,
    pub won: u64,
    pub p: f64,
}

/// `a` against `b` on the functions both answered (`split`: only that split's).
pub fn paired(a: &Cell, b: &Cell, split: Option<Split>) -> Paired {
    paired_on(&a.outcome, &b.outcome, |k| {
        split.is_none() || split_of(k) == split
    })
}

/// `a` against `b` on the bundles whose own values both checked (`split`: only that split's).
pub fn paired_own(a: &Cell, b: &Cell, split: Option<Split>) -> Paired {
    let of = |k: &str| {
        if k.starts_with("tune-") {
            Some(Split::Tune)
        } else if k.starts_with("heldout-") {
            Some(Split::Heldout)
        } else {
            None
        }
    };
    paired_on(&a.own_outcome, &b.own_outcome, |k| {
        split.is_none() || of(k) == split
    })
}

fn paired_on(
    a: &BTreeMap<String, bool>,
    b: &BTreeMap<String, bool>,
    keep: impl Fn(&str) -> bool,
) -> Paired {
    let (mut pairs, mut lost, mut won) = (0, 0, 0);
    for (t, &pa) in a {
        let Some(&pb) = b.get(t) else {
            continue;
        };
        if !keep(t) {
            continue;
        }
        pairs += 1;
        lost += (pa && !pb) as u64;
        won += (!pa && pb) as u64;
    }
    Paired {
        pairs,
        lost,
        won,
        p: mcnemar_exact(lost, won),
    }
}

/// The split of an outcome key "bundle HumanEval/N".
fn split_of(key: &str) -> Option<Split> {
    let task = key.rsplit(' ').next()?;
    let n: u32 = task.strip_prefix("HumanEval/")?.parse().ok()?;
    Some(if n < super::data::HELDOUT_FROM {
        Split::Tune
    } else {
        Split::Heldout
    })
}

fn fmt_paired(p: &Paired) -> String {
    if p.pairs == 0 {
        "–".into()
    } else {
        format!("−{} +{}, p={:.2} (n={})", p.lost, p.won, p.p, p.pairs)
    }
}

pub struct Report {
    pub s: HumanEvalSettings,
    pub per: PerCell<Cell>,
}

/// A comparison: its label, the budget, the two cells (the first is the reference).
type Comparison = (String, u32, (String, u32), (String, u32));

impl Report {
    /// Aggregates the rows of the run's cells and splits (rows of bundles beyond `--bundles` count
    /// too: a rerun with fewer bundles keeps what is done), and the tool's CPU time per cell.
    pub fn new(
        s: &HumanEvalSettings,
        cells: &[(String, u32)],
        rows: &[Row],
        runs: &[RunLine],
    ) -> Report {
        let mut per: PerCell<Cell> = PerCell::new(cells);
        for r in rows.iter().filter(|r| s.splits.contains(&r.split)) {
            if let Some(c) = per.add_to(&r.policy, r.budget) {
                c.add(r);
            }
        }
        for r in runs {
            if let Some(c) = per.reached_mut(&r.policy, r.budget) {
                c.cpu_s += r.cpu_s;
                c.cpu_bundles += r.bundles.len() as u64;
            }
        }
        Report { s: s.clone(), per }
    }

    pub fn get(&self, policy: &str, budget: u32) -> Cell {
        self.per.get(policy, budget)
    }

    fn mark(&self, c: &Cell, budget: u32) -> &'static str {
        if c.flagged(budget, self.s.min_ratio) {
            " *"
        } else {
            ""
        }
    }

    /// Per cell and split: pass@1 per function [Wilson 95%] (k/n) and bundles with every function
    /// passed; `*` marks a cell whose mean prompt + answer is under `--min-ratio` × budget.
    pub fn table(&self) -> String {
        let mut t = String::from("| policy | budget |");
        for sp in &self.s.splits {
            let _ = write!(t, " pass@1 {} |", sp.title());
        }
        for sp in &self.s.splits {
            let _ = write!(t, " bundles all passed, {} |", sp.title());
        }
        t.push_str(" prompt + answer tokens |\n| --- | --- |");
        for _ in 0..2 * self.s.splits.len() + 1 {
            t.push_str(" --- |");
        }
        t.push('\n');
        for (p, b) in &self.per.cells {
            let c = self.get(p, *b);
            let name = if p == "none" { "none (full cache)" } else { p };
            let _ = write!(t, "| {name} | {}{} |", budget_label(*b), self.mark(&c, *b));
            for &sp in &self.s.splits {
                let x = c.split(sp);
                let _ = write!(t, " {} |", fmt_accuracy(x.k, x.n));
            }
            for &sp in &self.s.splits {
                let x = c.split(sp);
                let _ = write!(t, " {} |", fmt_accuracy(x.bundles_passed, x.bundles));
            }
            let _ = writeln!(t, " {:.0} |", c.mean_total());
        }
        let _ = write!(
            t,
            "\npass@1: functions whose tests pass [Wilson 95% interval] (passed/run), one greedy answer \
             each; bundles all passed: requests with every function passing. Prompt + answer: mean \
             tokens per bundle. `*`: mean prompt + answer under {} x the budget, too short for the \
             budget to be tested.\n",
            self.s.min_ratio
        );
        t
    }

    /// Per cell: lengths, cut answers, evictions, CPU time, and the failures by reason.
    pub fn detail_table(&self) -> String {
        let mut t = String::from(
            "| policy | budget | prompt tokens | generated tokens | answers cut | cells evicted per bundle | CPU s per bundle | CPU s | failures by reason |\n\
             | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
        );
        for (p, b) in &self.per.cells {
            let c = self.get(p, *b);
            let reasons: Vec<String> = c.reasons.iter().map(|(r, n)| format!("{r} {n}")).collect();
            let _ = writeln!(
                t,
                "| {p} | {} | {:.0} | {:.0} | {}/{} | {:.0} | {:.1} | {:.0} | {} |",
                budget_label(*b),
                c.mean(c.prompt),
                c.mean_gen(),
                c.cut,
                c.n,
                c.mean(c.evicted),
                c.cpu_per_bundle(),
                c.cpu_s,
                if reasons.is_empty() {
                    "–".into()
                } else {
                    reasons.join(", ")
                }
            );
        }
        t
    }

    /// Every compressed cell against the full cache, then the reference policy against each other
    /// policy at the same budget.
    pub fn comparisons(&self) -> Vec<Comparison> {
        let full = ("none".to_string(), 0);
        let mut out: Vec<Comparison> = self
            .per
            .cells
            .iter()
            .filter(|(p, _)| p != "none")
            .map(|(p, b)| {
                (
                    format!("full cache vs {p}"),
                    *b,
                    full.clone(),
                    (p.clone(), *b),
                )
            })
            .collect();
        if let Some(r) = &self.s.reference {
            for &b in &self.s.budgets {
                for p in self.s.policies.iter().filter(|p| *p != r) {
                    out.push((format!("{r} vs {p}"), b, (r.clone(), b), (p.clone(), b)));
                }
            }
        }
        out
    }

    /// The paired comparisons: for each, per split and over the splits run, the functions the
    /// second cell lost (−) and won (+) against the first, and the exact McNemar p.
    pub fn mcnemar_table(&self) -> String {
        self.paired_table(paired, "functions")
    }

    fn paired_table(&self, pair: fn(&Cell, &Cell, Option<Split>) -> Paired, what: &str) -> String {
        let mut t = String::from("| comparison | budget |");
        for sp in &self.s.splits {
            let _ = write!(t, " {} |", sp.title());
        }
        let both = self.s.splits.len() > 1;
        if both {
            t.push_str(" both |");
        }
        t.push_str("\n| --- | --- |");
        for _ in 0..self.s.splits.len() + both as usize {
            t.push_str(" --- |");
        }
        t.push('\n');
        for (label, b, x, y) in self.comparisons() {
            let (cx, cy) = (self.get(&x.0, x.1), self.get(&y.0, y.1));
            let _ = write!(t, "| {label} | {b} |");
            for &sp in &self.s.splits {
                let _ = write!(t, " {} |", fmt_paired(&pair(&cx, &cy, Some(sp))));
            }
            if both {
                let _ = write!(t, " {} |", fmt_paired(&pair(&cx, &cy, None)));
            }
            t.push('\n');
        }
        let _ = write!(
            t,
            "\nOn the {what} both cells answered: −k the second cell failed where the first passed, \
             +k the other way round; p: two-sided exact McNemar test (binomial on the discordant \
             pairs).\n"
        );
        t
    }

    /// Per cell and split, the own values: requests with every value written again [Wilson 95%],
    /// values written again, patterned dictionaries and the mean gap between the two.
    pub fn own_table(&self) -> String {
        let mut t = String::from("| policy | budget |");
        for sp in &self.s.splits {
            let _ = write!(
                t,
                " all values again, {0} | values again, {0} | patterned, {0} |",
                sp.title()
            );
        }
        t.push_str(" gap (tokens) |\n| --- | --- |");
        for _ in 0..3 * self.s.splits.len() + 1 {
            t.push_str(" --- |");
        }
        t.push('\n');
        for (p, b) in &self.per.cells {
            let c = self.get(p, *b);
            let name = if p == "none" { "none (full cache)" } else { p };
            let _ = write!(t, "| {name} | {}{} |", budget_label(*b), self.mark(&c, *b));
            let mut gap = (0.0, 0u64);
            for sp in &self.s.splits {
                let x = c.own.get(sp).cloned().unwrap_or_default();
                let _ = write!(
                    t,
                    " {} | {} | {}/{} |",
                    fmt_accuracy(x.all, x.bundles),
                    if x.asked == 0 {
                        "–".to_string()
                    } else {
                        format!("{:.1}%", 100.0 * x.recalled as f64 / x.asked as f64)
                    },
                    x.patterned,
                    x.bundles
                );
                gap = (gap.0 + x.gap_sum, gap.1 + x.gaps);
            }
            if gap.1 == 0 {
                t.push_str(" – |\n");
            } else {
                let _ = writeln!(t, " {:.0} |", gap.0 / gap.1 as f64);
            }
        }
        let _ = write!(
            t,
            "\nAll values again: requests whose `codes_again()` gives every one of the {} numbers \
             its `CODES` chose [Wilson 95% interval] (requests/run); values again: of all numbers \
             asked for; patterned: requests whose numbers are sorted or step by a constant (they \
             could be written again without remembering them); gap: mean estimated tokens from \
             the end of `CODES` to `codes_again()`.\n",
            self.s.own_values
        );
        t
    }

    /// [`Self::mcnemar_table`] on the requests' own values (every value written again or not).
    pub fn own_mcnemar_table(&self) -> String {
        self.paired_table(paired_own, "requests")
    }

    /// --quick: the table has a row per cell and a column per split, and every cell every
    /// function and bundle of the splits run.
    pub fn check_shape(&self) -> Result<(), String> {
        let table = self.table();
        let rows: Vec<&str> = table.lines().filter(|l| l.starts_with("| ")).collect();
        // header, separator, one per cell
        if rows.len() != 2 + self.per.cells.len() {
            return Err(format!("--quick: table has {} rows:\n{table}", rows.len()));
        }
        let width = 3 + 2 * self.s.splits.len() + 1;
        for r in &rows {
            if r.matches('|').count() != width {
                return Err(format!("--quick: table row of the wrong width: {r}"));
            }
        }
        let per = self.s.bundles.unwrap_or(1) as u64;
        for (p, b) in &self.per.cells {
            let c = self.get(p, *b);
            for &sp in &self.s.splits {
                let x = c.split(sp);
                let own = c.own.get(&sp).map_or(0, |o| o.bundles);
                if self.s.own_values > 0 && own != per {
                    return Err(format!(
                        "--quick: {p} at {b}, {}: own values checked in {own} bundles, expected {per}",
                        sp.as_str()
                    ));
                }
                if x.bundles != per || x.n != per * self.s.bundle_size as u64 {
                    return Err(format!(
                        "--quick: {p} at {b}, {}: {} bundles ({} functions), expected {per} of {}",
                        sp.as_str(),
                        x.bundles,
                        x.n,
                        self.s.bundle_size
                    ));
                }
            }
        }
        Ok(())
    }

    pub fn csv(&self) -> String {
        let mut t = String::from(
            "policy,budget,split,passed,functions,pass1,wilson_lo,wilson_hi,bundles_passed,bundles,\
             mean_prompt,mean_gen,mean_total,cut,evicted_per_bundle,cpu_s,cpu_s_per_bundle,flagged\n",
        );
        for (p, b) in &self.per.cells {
            let c = self.get(p, *b);
            for &sp in &self.s.splits {
                let x = c.split(sp);
                let (lo, hi) = wilson(x.k, x.n);
                let _ = writeln!(
                    t,
                    "{},{b},{},{},{},{:.4},{lo:.4},{hi:.4},{},{},{:.1},{:.1},{:.1},{},{:.1},{:.1},{:.2},{}",
                    csv_field(p),
                    sp.as_str(),
                    x.k,
                    x.n,
                    if x.n == 0 { f64::NAN } else { x.k as f64 / x.n as f64 },
                    x.bundles_passed,
                    x.bundles,
                    c.mean(c.prompt),
                    c.mean_gen(),
                    c.mean_total(),
                    c.cut,
                    c.mean(c.evicted),
                    c.cpu_s,
                    c.cpu_per_bundle(),
                    c.flagged(*b, self.s.min_ratio)
                );
            }
        }
        t
    }

    pub fn own_csv(&self) -> String {
        let mut t = String::from(
            "policy,budget,split,all_again,bundles,wilson_lo,wilson_hi,values_again,values,patterned,mean_gap_tokens\n",
        );
        for (p, b) in &self.per.cells {
            let c = self.get(p, *b);
            for &sp in &self.s.splits {
                let x = c.own.get(&sp).cloned().unwrap_or_default();
                let (lo, hi) = wilson(x.all, x.bundles);
                let _ = writeln!(
                    t,
                    "{},{b},{},{},{},{lo:.4},{hi:.4},{},{},{},{:.1}",
                    csv_field(p),
                    sp.as_str(),
                    x.all,
                    x.bundles,
                    x.recalled,
                    x.asked,
                    x.patterned,
                    x.mean_gap()
                );
            }
        }
        t
    }

    pub fn mcnemar_csv(&self) -> String {
        let mut t = String::from("first,second,budget,split,pairs,lost,won,p\n");
        for (_, b, x, y) in self.comparisons() {
            let (cx, cy) = (self.get(&x.0, x.1), self.get(&y.0, y.1));
            let splits: Vec<Option<Split>> = self
                .s
                .splits
                .iter()
                .map(|&s| Some(s))
                .chain(std::iter::once(None))
                .collect();
            for sp in splits {
                let r = paired(&cx, &cy, sp);
                let _ = writeln!(
                    t,
                    "{},{},{b},{},{},{},{},{:.4}",
                    csv_field(&format!("{}@{}", x.0, x.1)),
                    csv_field(&y.0),
                    sp.map_or("all", Split::as_str),
                    r.pairs,
                    r.lost,
                    r.won,
                    r.p
                );
            }
        }
        t
    }

    pub fn summary_markdown(&self, model: &Path, sandbox: &Sandbox, seconds: f64) -> String {
        let s = &self.s;
        let mut m = String::from("# HumanEval in long answers (beaconkv-bench humaneval)\n\n");
        let splits: Vec<&str> = s.splits.iter().map(|x| x.title()).collect();
        let _ = writeln!(
            m,
            "Model `{}`; requests of {} HumanEval functions each ({}{}), at most {} generated tokens \
             per answer, greedy, {} requests decoded together, {} thread(s). Each function is taken \
             from the answer and run with the problem's tests in a separate Python process \
             ({} s limit, {} MiB address space; network: {}). This invocation took {:.0} s.\n",
            model.display(),
            s.bundle_size,
            splits.join(", "),
            s.bundles
                .map(|n| format!("; the first {n} bundles of each"))
                .unwrap_or_default(),
            s.n_tokens,
            s.parallel,
            s.run.threads,
            s.timeout,
            s.memory_mb,
            sandbox.network(),
            seconds
        );
        m.push_str(&self.table());
        m.push_str("\n## Paired comparisons\n\n");
        m.push_str(&self.mcnemar_table());
        if s.own_values > 0 {
            let _ = write!(
                m,
                "\n## Own values\n\nEach request also asked for {} numbers of the model's own \
                 choosing before the functions, and for the same numbers again after them.\n\n",
                s.own_values
            );
            m.push_str(&self.own_table());
            m.push_str("\n### Paired comparisons of the own values\n\n");
            m.push_str(&self.own_mcnemar_table());
        }
        m.push_str("\n## Per cell\n\n");
        m.push_str(&self.detail_table());
        m.push_str(
            "\nCPU s: the tool's process over its finished invocations for the cell (prompt, \
             generation, compression; the checks not counted), per bundle answered.\n",
        );
        m
    }

    pub fn plot(&self, dir: &Path) -> Result<Vec<PathBuf>, String> {
        init_fonts()?;
        let s = &self.s;
        let span = budget_span(&s.budgets);
        let full = self.get("none", 0);
        let mut written = Vec::new();
        for &sp in &s.splits {
            let rate = |c: &Cell| {
                let x = c.split(sp);
                if x.n == 0 {
                    f64::NAN
                } else {
                    x.k as f64 / x.n as f64
                }
            };
            let mut series: Vec<Series> = s
                .policies
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    let cells: Vec<(f64, Cell)> = s
                        .budgets
                        .iter()
                        .map(|&b| (b as f64 * side_by_side(i, s.policies.len()), self.get(p, b)))
                        .filter(|(_, c)| rate(c).is_finite())
                        .collect();
                    Series {
                        label: p.clone(),
                        points: cells.iter().map(|(x, c)| (*x, rate(c))).collect(),
                        dashed: false,
                        errors: cells
                            .iter()
                            .map(|(_, c)| {
                                let x = c.split(sp);
                                wilson(x.k, x.n)
                            })
                            .collect(),
                    }
                })
                .collect();
            let f = full.split(sp);
            if f.n > 0 {
                let label = format!("full cache ({})", fmt_accuracy(f.k, f.n));
                series.push(Series::level(label, span, rate(&full)));
            }
            let path = dir.join(format!("accuracy-{}.png", sp.as_str()));
            let title = format!("HumanEval pass@1 vs KV budget, {}", sp.title());
            draw_chart(&Chart {
                path: &path,
                title: &title,
                x_desc: "KV budget (cells)",
                y_desc: "pass@1 per function (Wilson 95%)",
                x_log2: true,
                y_min: Some(0.0),
                y_max: Some(1.05),
                series,
                // pass@1 of a 1.5B model stays under about 0.8: the legend goes above it
                legend: SeriesLabelPosition::UpperRight,
            })?;
            written.push(path);
        }
        let length = |p: &str, b| Some(self.get(p, b).mean_total()).filter(|y| y.is_finite());
        let mut series = policy_lines(&s.policies, &s.budgets, length);
        if full.n > 0 {
            let label = format!("full cache ({:.0} tokens)", full.mean_total());
            series.push(Series::level(label, span, full.mean_total()));
        }
        series.push(Series::budget_ratio(&s.budgets, s.min_ratio));
        let path = dir.join("length.png");
        draw_chart(&Chart {
            path: &path,
            title: "Mean prompt + answer length vs KV budget",
            x_desc: "KV budget (cells)",
            y_desc: "mean prompt + answer tokens per bundle",
            x_log2: true,
            y_min: Some(0.0),
            y_max: None,
            series,
            legend: SeriesLabelPosition::LowerRight,
        })?;
        written.push(path);
        Ok(written)
    }
}
