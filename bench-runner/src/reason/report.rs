//! Conversations right and mean generated length per cell, as markdown tables, CSV and plots.

use super::driver::Row;
use super::ReasonSettings;
use crate::grid::{budget_label, PerCell};
use crate::plot::{budget_span, draw_chart, init_fonts, side_by_side, Chart, Series};
use crate::results::csv_field;
use crate::tasks::{fmt_accuracy, wilson};
use plotters::prelude::SeriesLabelPosition;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The conversations of one cell.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Cell {
    /// Conversations with every turn right, of `n`.
    pub k: u64,
    pub n: u64,
    pub final_right: u64,
    pub turns_right: u64,
    pub turns: u64,
    /// Turns whose problem starts from an earlier answer: right, of all.
    pub back_right: u64,
    pub back: u64,
    /// Tokens generated, all conversations.
    pub tokens: u64,
    /// Turns cut at --n-tokens.
    pub cut: u64,
    pub evicted: u64,
}

impl Cell {
    fn add(&mut self, r: &Row) {
        self.n += 1;
        self.k += r.correct as u64;
        self.final_right += r.final_right as u64;
        self.turns_right += r.turns_right as u64;
        self.turns += r.turns as u64;
        for ((g, e), f) in r.given.iter().zip(&r.expected).zip(&r.from) {
            if f.is_some() {
                self.back += 1;
                self.back_right += (*g == Some(*e)) as u64;
            }
        }
        self.tokens += r.n_gen;
        self.cut += r.cut as u64;
        self.evicted += r.evicted;
    }

    pub fn rate(&self) -> f64 {
        if self.n == 0 {
            f64::NAN
        } else {
            self.k as f64 / self.n as f64
        }
    }

    /// Share of turns right (NaN for an empty cell).
    pub fn turn_rate(&self) -> f64 {
        if self.turns == 0 {
            f64::NAN
        } else {
            self.turns_right as f64 / self.turns as f64
        }
    }

    /// Mean tokens generated per conversation.
    pub fn mean_len(&self) -> f64 {
        if self.n == 0 {
            f64::NAN
        } else {
            self.tokens as f64 / self.n as f64
        }
    }

    /// Mean conversation length under `ratio` × budget (never for the full cache, budget 0).
    pub fn flagged(&self, budget: u32, ratio: f64) -> bool {
        budget > 0 && self.n > 0 && self.mean_len() < ratio * budget as f64
    }
}

fn pct(k: u64, n: u64) -> String {
    if n == 0 {
        "–".into()
    } else {
        format!("{:.0}% ({k}/{n})", 100.0 * k as f64 / n as f64)
    }
}

pub struct Report {
    pub per: PerCell<Cell>,
}

impl Report {
    /// Aggregates the rows of the run's cells (rows of conversations beyond `--conversations` count too:
    /// a rerun with fewer conversations keeps what is done).
    pub fn new(cells: &[(String, u32)], rows: &[Row]) -> Report {
        let mut per: PerCell<Cell> = PerCell::new(cells);
        for r in rows {
            if let Some(c) = per.add_to(&r.policy, r.budget) {
                c.add(r);
            }
        }
        Report { per }
    }

    pub fn get(&self, policy: &str, budget: u32) -> Cell {
        self.per.get(policy, budget)
    }

    fn entry(c: &Cell, mark: &str) -> String {
        format!(
            " {}, turns {}, {:.0} tok{mark} |",
            fmt_accuracy(c.k, c.n),
            fmt_accuracy(c.turns_right, c.turns),
            c.mean_len()
        )
    }

    /// Policy × budget: conversations right [Wilson 95%] (k/n), turns right and mean generated tokens
    /// per conversation; `*` marks a cell whose mean length is under `--min-ratio` × budget.
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
        let full = self.get("none", 0);
        t.push_str("| none (full cache) |");
        for _ in &s.budgets {
            t.push_str(&Self::entry(&full, ""));
        }
        t.push('\n');
        for p in &s.policies {
            let _ = write!(t, "| {p} |");
            for &b in &s.budgets {
                let c = self.get(p, b);
                let mark = if c.flagged(b, s.min_ratio) { " *" } else { "" };
                t.push_str(&Self::entry(&c, mark));
            }
            t.push('\n');
        }
        let _ = write!(
            t,
            "\nConversations with every turn right [Wilson 95% interval] (right/run), turns (problems) \
             right [Wilson 95% interval over turns; turns of one conversation are not independent, so \
             read it as a lower bound on the spread], mean tokens generated per conversation. `*`: mean length under {} x the budget, \
             too short for the budget to be tested.\n",
            s.min_ratio
        );
        t
    }

    /// Per cell: conversations right, the last turn right, turns right, the turns that start from
    /// an earlier answer, lengths, cut turns and evicted cells.
    pub fn detail_table(&self) -> String {
        let mut t = String::from(
            "| policy | budget | conversations right | last turn right | turns right | turns reaching back right | tokens per turn | turns cut | cells evicted per conversation |\n\
             | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
        );
        for (p, b) in &self.per.cells {
            let c = self.get(p, *b);
            let _ = writeln!(
                t,
                "| {p} | {} | {} | {} | {} | {} | {:.0} | {}/{} | {:.0} |",
                budget_label(*b),
                fmt_accuracy(c.k, c.n),
                pct(c.final_right, c.n),
                pct(c.turns_right, c.turns),
                pct(c.back_right, c.back),
                if c.turns == 0 {
                    f64::NAN
                } else {
                    c.tokens as f64 / c.turns as f64
                },
                c.cut,
                c.turns,
                if c.n == 0 {
                    f64::NAN
                } else {
                    c.evicted as f64 / c.n as f64
                }
            );
        }
        t
    }

    /// --quick: the table has header, separator, the full cache's row and one per policy, a
    /// column per budget, and every cell its conversations.
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
        for (p, b) in &self.per.cells {
            let c = self.get(p, *b);
            if c.n != s.conversations as u64 || c.turns != c.n * s.shape.turns as u64 {
                return Err(format!(
                    "--quick: {p} at {b}: {} conversations ({} turns), expected {} of {} turns",
                    c.n, c.turns, s.conversations, s.shape.turns
                ));
            }
        }
        Ok(())
    }

    pub fn csv(&self) -> String {
        let mut t = String::from(
            "policy,budget,correct,n,accuracy,wilson_lo,wilson_hi,final_right,turns_right,turns,back_right,back,mean_tokens,cut,evicted\n",
        );
        for (p, b) in &self.per.cells {
            let c = self.get(p, *b);
            let (lo, hi) = wilson(c.k, c.n);
            let _ = writeln!(
                t,
                "{},{b},{},{},{:.4},{lo:.4},{hi:.4},{},{},{},{},{},{:.1},{},{}",
                csv_field(p),
                c.k,
                c.n,
                c.rate(),
                c.final_right,
                c.turns_right,
                c.turns,
                c.back_right,
                c.back,
                c.mean_len(),
                c.cut,
                c.evicted
            );
        }
        t
    }

    pub fn summary_markdown(&self, s: &ReasonSettings, model: &Path, seconds: f64) -> String {
        let mut m = String::from("# Chain-of-thought accuracy (beaconkv-bench reason)\n\n");
        let _ = writeln!(
            m,
            "Model `{}`; {} conversations per cell of {} turns (one word problem of {} operations each; \
             from the third turn on, each starts from the answer of a turn at least two back), seed \
             {}, at most {} generated tokens per turn, greedy, {} conversations decoded together, {} \
             thread(s); this invocation took {:.0} s.\n",
            model.display(),
            s.conversations,
            s.shape.turns,
            s.shape.steps,
            s.seed,
            s.n_tokens,
            s.parallel,
            s.run.threads,
            seconds
        );
        m.push_str(&self.table(s));
        m.push_str("\n## Per cell\n\n");
        m.push_str(&self.detail_table());
        m
    }

    pub fn plot(&self, s: &ReasonSettings, dir: &Path) -> Result<Vec<PathBuf>, String> {
        init_fonts()?;
        let span = budget_span(&s.budgets);
        let full = self.get("none", 0);
        let mut written = Vec::new();
        for length in [false, true] {
            // accuracy per turn: at small budgets whole conversations are all wrong and would hide
            // the differences between policies
            let value = |c: &Cell| if length { c.mean_len() } else { c.turn_rate() };
            let mut series: Vec<Series> = s
                .policies
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    let shift = side_by_side(i, s.policies.len());
                    let cells: Vec<(f64, Cell)> = s
                        .budgets
                        .iter()
                        .map(|&b| (b as f64 * shift, self.get(p, b)))
                        .filter(|(_, c)| value(c).is_finite())
                        .collect();
                    Series {
                        label: p.clone(),
                        points: cells.iter().map(|(x, c)| (*x, value(c))).collect(),
                        dashed: false,
                        errors: if length {
                            Vec::new()
                        } else {
                            cells
                                .iter()
                                .map(|(_, c)| wilson(c.turns_right, c.turns))
                                .collect()
                        },
                    }
                })
                .collect();
            if full.n > 0 {
                let label = if length {
                    format!("full cache ({:.0} tokens)", full.mean_len())
                } else {
                    format!(
                        "full cache ({})",
                        fmt_accuracy(full.turns_right, full.turns)
                    )
                };
                series.push(Series::level(label, span, value(&full)));
            }
            if length {
                series.push(Series::budget_ratio(&s.budgets, s.min_ratio));
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
                    "mean generated tokens per conversation"
                } else {
                    "turns right (Wilson 95% over turns)"
                },
                x_log2: true,
                y_min: Some(0.0),
                y_max: if length { None } else { Some(1.05) },
                series,
                // accuracies under compression sit low, lengths high: the legend goes where they are not
                legend: if length {
                    SeriesLabelPosition::LowerRight
                } else {
                    SeriesLabelPosition::UpperRight
                },
            })?;
            written.push(path);
        }
        Ok(written)
    }
}
