//! A run that answers items (conversations, bundles) in every cell (the full cache, then policy
//! entry × budget) and keeps one checked row per (item, cell) in `results.jsonl`, so that a rerun
//! with the same folder and settings runs only what is missing: the output folder, the jobs still
//! to run, the progress line, and --quick's checks that resuming works.

use crate::args::{model_stem, out_dir, unix_now};
use crate::jsonl::{load_lines, replace_lines};
use serde::{de::DeserializeOwned, Serialize};
use std::collections::BTreeSet;
use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The resume file in the output folder.
pub const RESULTS_FILE: &str = "results.jsonl";

/// The output folder of `bench`, created: `--out` as given; for --quick a fresh
/// `results/<bench>-quick-<model stem>-<unix>`; else `results/<bench>-<model stem>`, the folder a
/// rerun resumes.
pub fn out_folder(
    given: Option<&Path>,
    quick: bool,
    model: &Path,
    root: &Path,
    bench: &str,
) -> Result<PathBuf, String> {
    match (given, quick) {
        (Some(o), _) => out_dir(Some(o.to_path_buf()), model, root, "", 0),
        (None, true) => out_dir(None, model, root, &format!("{bench}-quick-"), unix_now()),
        (None, false) => {
            let resumed = root
                .join("results")
                .join(format!("{bench}-{}", model_stem(model)));
            out_dir(Some(resumed), model, root, "", 0)
        }
    }
}

/// Removes the files that exist of `files`: --quick starts from no rows.
pub fn remove_files(files: &[&Path]) -> Result<(), String> {
    for f in files.iter().filter(|f| f.exists()) {
        std::fs::remove_file(f).map_err(|e| format!("cannot remove {}: {e}", f.display()))?;
    }
    Ok(())
}

/// What resuming and --quick's checks read of a row of the results file.
pub trait ResultRow {
    /// The settings fingerprint the row was answered under; a folder holds one.
    fn settings(&self) -> &str;
    /// (item id, policy entry, budget): a folder holds one row per key.
    fn key(&self) -> (&str, &str, u32);
    /// The `beaconkv-eval` config of the cell.
    fn config(&self) -> &str;
    /// What the tool reports of the item's KV cache.
    fn cache_use(&self) -> CacheUse;
}

/// One answered item's use of the KV cache.
pub struct CacheUse {
    /// Prompt and generated tokens, all turns.
    pub tokens: u64,
    pub cells_peak: i64,
    pub evicted: u64,
}

/// A cell and the items (indices into the run's items) it still lacks: one invocation of the
/// tool. Each bench's job converts from it.
#[derive(Clone, Debug, PartialEq)]
pub struct Pending {
    pub cell: usize,
    pub items: Vec<usize>,
}

/// Rows of other settings are an error: a folder's answers must be comparable.
pub fn refuse_other_settings<R: ResultRow>(rows: &[R], settings: &str) -> Result<(), String> {
    match rows.iter().find(|r| r.settings() != settings) {
        Some(r) => Err(format!(
            "the output folder holds answers of other settings ({}; now {settings}): pass another --out",
            r.settings()
        )),
        None => Ok(()),
    }
}

/// The jobs still to run for the items `ids` in `cells`. Items go in rounds of `round`: every
/// cell gets a round's missing items before the next round starts, so that a run cut short leaves
/// every cell with about the same count.
pub fn plan_rounds<R: ResultRow, J: From<Pending>>(
    ids: &[&str],
    cells: &[(String, u32)],
    rows: &[R],
    round: usize,
) -> Vec<J> {
    let done: BTreeSet<(&str, &str, u32)> = rows.iter().map(|r| r.key()).collect();
    let mut jobs = Vec::new();
    let round = round.max(1);
    for start in (0..ids.len()).step_by(round) {
        let end = (start + round).min(ids.len());
        for (ci, (policy, budget)) in cells.iter().enumerate() {
            let missing: Vec<usize> = (start..end)
                .filter(|&i| !done.contains(&(ids[i], policy.as_str(), *budget)))
                .collect();
            if !missing.is_empty() {
                jobs.push(J::from(Pending {
                    cell: ci,
                    items: missing,
                }));
            }
        }
    }
    jobs
}

/// A run's items in its cells, and the file that keeps their rows.
pub struct ResumeFile<'a> {
    pub ids: Vec<&'a str>,
    pub cells: &'a [(String, u32)],
    pub results: &'a Path,
    /// What messages call an item ("conversation", "bundle"; plural with an s).
    pub item: &'static str,
}

impl ResumeFile<'_> {
    /// The plan for the log: cells, items, the round size, what is done and what is left.
    pub fn plan_line(&self, round: usize, todo: usize) -> String {
        let (n, item) = (self.ids.len(), self.item);
        format!(
            "cells:   {} ({n} {item}s each, in rounds of {round}); {} {item}s done, {todo} to run",
            self.cells.len(),
            n * self.cells.len() - todo,
        )
    }

    /// --quick's checks of resuming: every (item, cell) answered exactly once, a rerun finds
    /// nothing to do, and after the last item's rows (`last`: how messages name it) are removed
    /// the rerun plans and `run`s exactly those again.
    pub fn quick_resume_check<R, J>(
        &self,
        last: &str,
        plan: impl Fn(&[R]) -> Result<Vec<J>, String>,
        run: impl FnOnce(&[J]) -> Result<usize, String>,
    ) -> Result<(), String>
    where
        R: ResultRow + Serialize + DeserializeOwned,
        J: From<Pending> + PartialEq + Debug,
    {
        let (n, item) = (self.ids.len(), self.item);
        let once = |rows: &[R]| -> Result<(), String> {
            let keys: BTreeSet<(&str, &str, u32)> = rows.iter().map(|r| r.key()).collect();
            if rows.len() != n * self.cells.len() || keys.len() != rows.len() {
                return Err(format!(
                    "--quick: {} rows ({} distinct) in {}, expected {n} {item}s x {} cells",
                    rows.len(),
                    keys.len(),
                    self.results.display(),
                    self.cells.len()
                ));
            }
            Ok(())
        };
        let rows: Vec<R> = load_lines(self.results)?;
        once(&rows)?;
        let left = plan(&rows)?;
        if !left.is_empty() {
            return Err(format!(
                "--quick: a rerun would run {} jobs although every {item} is done",
                left.len()
            ));
        }
        let last_id = self.ids[n - 1];
        let kept: Vec<&R> = rows.iter().filter(|r| r.key().0 != last_id).collect();
        replace_lines(self.results, &kept)?;
        let rows: Vec<R> = load_lines(self.results)?;
        let todo = plan(&rows)?;
        let expect: Vec<J> = (0..self.cells.len())
            .map(|cell| {
                J::from(Pending {
                    cell,
                    items: vec![n - 1],
                })
            })
            .collect();
        if todo != expect {
            return Err(format!(
                "--quick: after removing {last}'s rows the rerun plans {todo:?}, expected {expect:?}"
            ));
        }
        eprintln!("--quick: resume check: rerunning {last} in every cell");
        run(&todo)?;
        let rows: Vec<R> = load_lines(self.results)?;
        once(&rows)?;
        if !plan(&rows)?.is_empty() {
            return Err(format!("--quick: {item}s still missing after the rerun"));
        }
        Ok(())
    }
}

/// Cells a sequence of `config` (`policy:budget/key=value/...`) may hold: the budget plus the
/// prompt's room (`prompt_max`, 0 = the budget, with the default `prompt=keep` and with
/// `prompt=window`; none with `prompt=inside`).
fn cell_limit(config: &str, budget: usize) -> usize {
    let key = |name: &str| {
        config
            .split('/')
            .skip(1)
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
    };
    if key("prompt") == Some("inside") {
        return budget;
    }
    match key("prompt_max").and_then(|v| v.parse::<usize>().ok()) {
        Some(room) if room > 0 => budget + room,
        _ => 2 * budget,
    }
}

/// --quick's checks on what the tool reports: a compressed cell never held more cells than its
/// budget and prompt room allow, and evicted some once it ran past them; the full cache evicted
/// nothing and held every token.
pub fn check_cells<R: ResultRow>(rows: &[R]) -> Result<(), String> {
    for r in rows {
        let (item, _, budget) = r.key();
        let limit = cell_limit(r.config(), budget as usize) as i64;
        let CacheUse {
            tokens,
            cells_peak,
            evicted,
        } = r.cache_use();
        let tokens = tokens as i64;
        let bad = if budget == 0 {
            (evicted != 0 || cells_peak != tokens)
                .then(|| format!("held {cells_peak} cells of {tokens} tokens, evicted {evicted}"))
        } else if cells_peak > limit {
            Some(format!("held {cells_peak} cells, more than {limit}"))
        } else if tokens > limit && evicted == 0 {
            Some(format!("evicted nothing from {tokens} tokens"))
        } else {
            None
        };
        if let Some(why) = bad {
            return Err(format!("--quick: {item} {}: {why}", r.config()));
        }
    }
    Ok(())
}

/// The line after each answer: how many are done, the decode rate so far and the time left.
pub struct Progress {
    started: Instant,
    pub total: usize,
    done: usize,
    tokens: u64,
}

impl Progress {
    pub fn new(total: usize) -> Progress {
        Progress {
            started: Instant::now(),
            total,
            done: 0,
            tokens: 0,
        }
    }

    /// Counts one answer of `n_gen` tokens and prints its line, `detail` being the bench's
    /// verdict.
    pub fn answered(&mut self, item: &str, config: &str, detail: &str, n_gen: u64) {
        self.done += 1;
        self.tokens += n_gen;
        let (done, total) = (self.done, self.total);
        let secs = self.started.elapsed().as_secs_f64();
        eprintln!(
            "[{done}/{total}] {item} {config}: {detail}; {:.1} tok/s so far, about {:.0} min left",
            self.tokens as f64 / secs,
            secs / done as f64 * (total - done) as f64 / 60.0
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct R(&'static str, &'static str, u32);

    impl ResultRow for R {
        fn settings(&self) -> &str {
            "S"
        }
        fn key(&self) -> (&str, &str, u32) {
            (self.0, self.1, self.2)
        }
        fn config(&self) -> &str {
            self.1
        }
        fn cache_use(&self) -> CacheUse {
            CacheUse {
                tokens: 10,
                cells_peak: 10,
                evicted: 0,
            }
        }
    }

    #[test]
    fn rounds_give_every_cell_a_round_before_the_next() {
        let cells = crate::grid::cells(&["a".to_string()], &[32, 64]);
        let ids = ["x", "y", "z"];
        let done = [R("x", "a", 32), R("z", "none", 0)];
        let jobs: Vec<Pending> = plan_rounds(&ids, &cells, &done, 2);
        let job = |cell, items: &[usize]| Pending {
            cell,
            items: items.to_vec(),
        };
        assert_eq!(
            jobs,
            [
                job(0, &[0, 1]),
                job(1, &[1]),
                job(2, &[0, 1]),
                job(1, &[2]),
                job(2, &[2])
            ]
        );
        assert!(refuse_other_settings(&done, "S").is_ok());
        assert!(refuse_other_settings(&done, "T")
            .unwrap_err()
            .contains("other settings (S; now T)"));
        assert!(check_cells(&done[1..]).is_ok());
        // the default prompt=keep: the budget and as many prompt cells again
        assert!(check_cells(&[R("x", "a", 8)]).is_ok());
        assert!(check_cells(&[R("x", "a", 4)])
            .unwrap_err()
            .contains("--quick: x a: held 10 cells, more than 8"));
        assert!(check_cells(&[R("x", "a/prompt=inside", 8)])
            .unwrap_err()
            .contains("held 10 cells, more than 8"));
    }

    #[test]
    fn the_cell_limit_follows_the_prompt_policy() {
        assert_eq!(cell_limit("beacon:64", 64), 128);
        assert_eq!(cell_limit("beacon:64/score=prob/prompt_max=1024", 64), 1088);
        assert_eq!(cell_limit("beacon:64/prompt=window/prompt_max=16", 64), 80);
        assert_eq!(cell_limit("streaming:64/prompt=inside", 64), 64);
    }
}
