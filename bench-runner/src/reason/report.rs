//! Accuracy and mean generated length per cell, as markdown tables, CSV and plots.

use super::driver::Row;
use super::problems::Kind;
use super::ReasonSettings;
use crate::plot::{draw_chart, init_fonts, Chart, Series};
use crate::results::csv_field;
use crate::tasks::{fmt_accuracy, wilson};
use plotters::prelude::SeriesLabelPosition;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The answers of one cell (or of one kind of problem in it).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Cell {
    pub k: u64,
    pub n: u64,
    pub tokens: u64,
    pub parts_right: u64,
    pub parts: u64,
    /// Answers cut at --n-tokens.
    pub cut: u64,
}

impl Cell {
    fn add(&mut self, r: &Row) {
        self.n += 1;
        self.k += r.correct as u64;
        self.tokens += r.n_gen;
        self.parts_right += r.parts_right as u64;
        self.parts += r.parts as u64;
        self.cut += !r.stopped as u64;
    }

    pub fn rate(&self) -> f64 {
        if self.n == 0 {
            f64::NAN
        } else {
            self.k as f64 / self.n as f64
        }
    }

    pub fn mean_len(&self) -> f64 {
        if self.n == 0 {
            f64::NAN
        } else {
            self.tokens as f64 / self.n as f64
        }
    }

    /// Mean length under `ratio` × budget (never for the full cache, budget 0).
    pub fn flagged(&self, budget: u32, ratio: f64) -> bool {
        budget > 0 && self.n > 0 && self.mean_len() < ratio * budget as f64
    }
}

/// Key: (policy entry, budget; 0 for the full cache, kind; None = all).
type Key = (String, u32, Option<Kind>);

pub struct Report {
    pub cells: Vec<(String, u32)>,
    pub by: BTreeMap<Key, Cell>,
}

impl Report {
    /// Aggregates the rows of the run's cells (rows of problems beyond `--problems` count too:
    /// a rerun with fewer problems keeps what is done).
    pub fn new(_s: &ReasonSettings, cells: &[(String, u32)], rows: &[Row]) -> Report {
        let mut by: BTreeMap<Key, Cell> = BTreeMap::new();
        for r in rows {
            if !cells.iter().any(|(p, b)| *p == r.policy && *b == r.budget) {
                continue;
            }
            for kind in [None, Some(r.kind)] {
                by.entry((r.policy.clone(), r.budget, kind))
                    .or_default()
                    .add(r);
            }
        }
        Report {
            cells: cells.to_vec(),
            by,
        }
    }

    pub fn get(&self, policy: &str, budget: u32, kind: Option<Kind>) -> Cell {
        self.by
            .get(&(policy.to_string(), budget, kind))
            .cloned()
            .unwrap_or_default()
    }

    /// Policy × budget: accuracy [Wilson 95%] (k/n) and mean generated length; `*` marks a cell
    /// whose mean length is under `--min-ratio` × budget.
    pub fn table(&self, s: &ReasonSettings) -> String {
        let mut t = String::from("| policy |");
        for b in &s.budgets {
            let _ = write!(t, " budget {b} |");
        }
        t.push_str("\n| --- |");
        for _ in &s.budgets {
            t.push_str(" --- |");
        }
        t.push('\n');
        let full = self.get("none", 0, None);
        t.push_str("| none (full cache) |");
        for _ in &s.budgets {
            let _ = write!(
                t,
                " {}, {:.0} tok |",
                fmt_accuracy(full.k, full.n),
                full.mean_len()
            );
        }
        t.push('\n');
        for p in &s.policies {
            let _ = write!(t, "| {p} |");
            for &b in &s.budgets {
                let c = self.get(p, b, None);
                let mark = if c.flagged(b, s.min_ratio) { " *" } else { "" };
                let _ = write!(
                    t,
                    " {}, {:.0} tok{mark} |",
                    fmt_accuracy(c.k, c.n),
                    c.mean_len()
                );
            }
            t.push('\n');
        }
        let _ = write!(
            t,
            "\nAccuracy [Wilson 95% interval] (right/answered), mean generated tokens. `*`: mean \
             length under {} x the budget, too short for the budget to be tested.\n",
            s.min_ratio
        );
        t
    }

    /// Per kind of problem: single problems and chains, with the share of chain answers right.
    pub fn kind_table(&self, s: &ReasonSettings) -> String {
        let mut t = String::from(
            "| policy | budget | single problems | chains | chain answers right | cut at the limit |\n\
             | --- | --- | --- | --- | --- | --- |\n",
        );
        for (p, b) in &self.cells {
            let single = self.get(p, *b, Some(Kind::Single));
            let chain = self.get(p, *b, Some(Kind::Chain));
            let all = self.get(p, *b, None);
            let _ = writeln!(
                t,
                "| {p} | {} | {} | {} | {} | {}/{} |",
                if *b == 0 { "–".into() } else { b.to_string() },
                fmt_accuracy(single.k, single.n),
                fmt_accuracy(chain.k, chain.n),
                if chain.parts == 0 {
                    "–".to_string()
                } else {
                    format!(
                        "{:.0}% ({}/{})",
                        100.0 * chain.parts_right as f64 / chain.parts as f64,
                        chain.parts_right,
                        chain.parts
                    )
                },
                all.cut,
                all.n
            );
        }
        let _ = s;
        t
    }

    /// --quick: the table has header, separator, the full cache's row and one per policy, a column per budget, and
    /// every cell its answers.
    pub fn check_shape(&self, s: &ReasonSettings) -> Result<(), String> {
        let table = self.table(s);
        let rows: Vec<&str> = table.lines().filter(|l| l.starts_with("| ")).collect();
        if rows.len() != 3 + s.policies.len() {
            return Err(format!("--quick: table has {} rows:\n{table}", rows.len()));
        }
        for r in &rows {
            if r.matches('|').count() != 2 + s.budgets.len() {
                return Err(format!("--quick: table row of the wrong width: {r}"));
            }
        }
        for (p, b) in &self.cells {
            let c = self.get(p, *b, None);
            if c.n != s.problems as u64 {
                return Err(format!(
                    "--quick: {p} at {b}: {} answers, expected {}",
                    c.n, s.problems
                ));
            }
        }
        Ok(())
    }

    pub fn csv(&self) -> String {
        let mut t = String::from(
            "policy,budget,kind,correct,n,accuracy,wilson_lo,wilson_hi,mean_tokens,parts_right,parts,cut\n",
        );
        for (p, b) in &self.cells {
            for kind in [None, Some(Kind::Single), Some(Kind::Chain)] {
                let c = self.get(p, *b, kind);
                let (lo, hi) = wilson(c.k, c.n);
                let _ = writeln!(
                    t,
                    "{},{b},{},{},{},{:.4},{lo:.4},{hi:.4},{:.1},{},{},{}",
                    csv_field(p),
                    kind.map_or("all", Kind::as_str),
                    c.k,
                    c.n,
                    c.rate(),
                    c.mean_len(),
                    c.parts_right,
                    c.parts,
                    c.cut
                );
            }
        }
        t
    }

    pub fn summary_markdown(&self, s: &ReasonSettings, model: &Path, seconds: f64) -> String {
        let mut m = String::from("# Chain-of-thought accuracy (beaconkv-bench reason)\n\n");
        let _ = writeln!(
            m,
            "Model `{}`; {} problems per cell (half chains of {} word problems of {} steps, half \
             single problems of {} steps), seed {}, at most {} generated tokens, greedy, {} \
             thread(s); this invocation took {:.0} s.\n",
            model.display(),
            s.problems,
            s.shape.parts,
            s.shape.steps,
            s.shape.single_steps,
            s.seed,
            s.n_tokens,
            s.run.threads,
            seconds
        );
        m.push_str(&self.table(s));
        m.push_str("\n## By kind of problem\n\n");
        m.push_str(&self.kind_table(s));
        m
    }

    pub fn plot(&self, s: &ReasonSettings, dir: &Path) -> Result<Vec<PathBuf>, String> {
        init_fonts()?;
        let (lo, hi) = (
            *s.budgets.iter().min().unwrap_or(&1) as f64,
            *s.budgets.iter().max().unwrap_or(&1) as f64,
        );
        let full = self.get("none", 0, None);
        let mut written = Vec::new();
        for length in [false, true] {
            let value = |c: &Cell| if length { c.mean_len() } else { c.rate() };
            let mut series: Vec<Series> = s
                .policies
                .iter()
                .map(|p| Series {
                    label: p.clone(),
                    points: s
                        .budgets
                        .iter()
                        .map(|&b| (b as f64, value(&self.get(p, b, None))))
                        .filter(|(_, y)| y.is_finite())
                        .collect(),
                    dashed: false,
                })
                .collect();
            if full.n > 0 {
                series.push(Series {
                    label: if length {
                        format!("full cache ({:.0} tokens)", full.mean_len())
                    } else {
                        format!("full cache ({:.0}%)", 100.0 * full.rate())
                    },
                    points: vec![(lo, value(&full)), (hi, value(&full))],
                    dashed: true,
                });
            }
            if length {
                series.push(Series {
                    label: format!("{} x budget", s.min_ratio),
                    points: s
                        .budgets
                        .iter()
                        .map(|&b| (b as f64, s.min_ratio * b as f64))
                        .collect(),
                    dashed: true,
                });
            }
            let path = dir.join(if length { "length.png" } else { "accuracy.png" });
            draw_chart(&Chart {
                path: &path,
                title: if length {
                    "Mean generated length vs KV budget"
                } else {
                    "Chain-of-thought accuracy vs KV budget"
                },
                x_desc: "KV budget (cells)",
                y_desc: if length {
                    "mean generated tokens"
                } else {
                    "problems answered right"
                },
                x_log2: true,
                y_min: Some(0.0),
                y_max: if length { None } else { Some(1.05) },
                series,
                legend: SeriesLabelPosition::LowerRight,
            })?;
            written.push(path);
        }
        Ok(written)
    }
}
