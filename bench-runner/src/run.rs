//! Runs `beaconkv-eval` once: its stderr lines `progress i/n` drive a progress bar, every other
//! line (and its stdout) goes to a log file; a failure reports the tail of that log. Also the
//! options both benchmarks share for running it ([`EvalArgs`]), and which policies it accepts.

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How both benchmarks run `beaconkv-eval` (flattened into their command lines).
#[derive(clap::Args, Debug)]
pub struct EvalArgs {
    /// The beaconkv-eval binary [default: build/bin/beaconkv-eval in the repository]
    #[arg(long, value_name = "PATH")]
    pub eval: Option<PathBuf>,
    /// CPU threads for llama.cpp
    #[arg(short = 't', long, value_name = "N", default_value_t = 2)]
    pub threads: u32,
    /// Extra BeaconKV spec keys for every compressed config, e.g. "reduce=zmean/span=3"
    #[arg(long, value_name = "k=v/k=v")]
    pub extra: Option<String>,
    /// Extra llama.cpp flags, passed to beaconkv-eval as they are
    #[arg(last = true, value_name = "LLAMA_FLAGS")]
    pub llama_args: Vec<String>,
}

/// [`EvalArgs`] checked: the binary's path, and `extra` as a config suffix ("" or "/k=v/...").
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct EvalOptions {
    pub eval: PathBuf,
    pub threads: u32,
    /// "/k=v/k=v" or empty.
    pub extra: String,
    pub llama_args: Vec<String>,
}

impl EvalArgs {
    /// Defaults filled in from the repository root; an error names the bad flag.
    pub fn resolve(self, root: &Path) -> Result<EvalOptions, String> {
        if self.threads == 0 {
            return Err("--threads must be at least 1".into());
        }
        let extra = match self.extra.as_deref().map(|e| e.trim_matches('/')) {
            None | Some("") => String::new(),
            Some(e) => {
                for kv in e.split('/') {
                    let ok = kv
                        .split_once('=')
                        .is_some_and(|(k, v)| !k.is_empty() && !v.is_empty());
                    if !ok || kv.contains(',') {
                        return Err(format!(
                            "--extra: '{kv}' is not a key=value pair (pairs are separated by '/')"
                        ));
                    }
                }
                format!("/{e}")
            }
        };
        Ok(EvalOptions {
            eval: self
                .eval
                .unwrap_or_else(|| root.join("build/bin/beaconkv-eval")),
            threads: self.threads,
            extra,
            llama_args: self.llama_args,
        })
    }
}

impl EvalOptions {
    /// The binary must exist before a run starts (not checked by `resolve`, which tests call
    /// with made-up paths).
    pub fn check_binary(&self) -> Result<(), String> {
        if self.eval.exists() {
            return Ok(());
        }
        Err(format!(
            "beaconkv-eval not found at {}: build llama.cpp with the plugin first, or pass --eval PATH",
            self.eval.display()
        ))
    }
}

/// One invocation of the tool.
pub struct EvalJob {
    pub eval: PathBuf,
    pub args: Vec<String>,
    /// Shown before the bar, e.g. "agree" or "agree (GPL-3)".
    pub label: String,
    pub log: PathBuf,
}

/// Parses a `progress i/n` line (tolerating other output glued in front of it).
pub fn parse_progress(line: &str) -> Option<(u64, u64)> {
    let idx = line.rfind("progress ")?;
    if line[..idx].ends_with(|c: char| c.is_alphanumeric()) {
        return None;
    }
    let rest = line[idx + "progress ".len()..].trim();
    let (done, total) = rest.split_once('/')?;
    Some((done.parse().ok()?, total.parse().ok()?))
}

/// The last `n` lines of a file (lossy UTF-8), for error messages.
pub fn tail_lines(path: &Path, n: usize) -> String {
    let Ok(bytes) = std::fs::read(path) else {
        return String::new();
    };
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The command line as a shell would show it (for logs and messages).
pub fn shell_line(prog: &Path, args: &[String]) -> String {
    let quote = |s: &str| {
        if !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./:=,+@%".contains(c))
        {
            s.to_string()
        } else {
            format!("'{}'", s.replace('\'', "'\\''"))
        }
    };
    std::iter::once(quote(&prog.to_string_lossy()))
        .chain(args.iter().map(|a| quote(a)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs the job to completion; Ok(elapsed) when the tool exits 0.
pub fn run_eval(job: &EvalJob) -> Result<Duration, String> {
    run_eval_lines(job, None)
}

/// A handler of the tool's stdout lines; an error stops the tool.
pub type LineHandler<'a> = &'a mut dyn FnMut(&str) -> Result<(), String>;

/// [`run_eval`], with every stdout line (also logged) handed to `on_line` as it comes, so that
/// results the tool prints one at a time are kept even when a later one fails. An error from
/// `on_line` stops the tool and is returned.
pub fn run_eval_lines(job: &EvalJob, on_line: Option<LineHandler>) -> Result<Duration, String> {
    let started = Instant::now();
    let mut log =
        File::create(&job.log).map_err(|e| format!("cannot create {}: {e}", job.log.display()))?;
    let cmdline = shell_line(&job.eval, &job.args);
    let _ = writeln!(log, "$ {cmdline}");
    let share = |log: &File| {
        log.try_clone()
            .map_err(|e| format!("cannot share the log file: {e}"))
    };
    let stdout = match on_line {
        Some(_) => Stdio::piped(),
        None => Stdio::from(share(&log)?),
    };
    let mut child = Command::new(&job.eval)
        .args(&job.args)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            format!(
                "cannot run {}: {e}\n(build beaconkv-eval first, or pass --eval PATH)",
                job.eval.display()
            )
        })?;

    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template(
            "{prefix:>16} [{bar:40.cyan/blue}] {pos}/{len} {elapsed_precise} (eta {eta})",
        )
        .expect("valid progress template")
        .progress_chars("=> "),
    );
    bar.set_prefix(job.label.clone());
    bar.enable_steady_tick(Duration::from_millis(250));

    let stderr = child.stderr.take().expect("stderr is piped");
    let stderr_log = share(&log)?;
    let mut handled = Ok(());
    std::thread::scope(|scope| {
        let progress = scope.spawn(|| follow_stderr(stderr, stderr_log, &bar));
        if let (Some(on_line), Some(out)) = (on_line, child.stdout.take()) {
            let mut reader = BufReader::new(out);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match reader.read_until(b'\n', &mut buf) {
                    Ok(0) => break,
                    Ok(_) => {
                        let _ = log.write_all(&buf);
                        if !buf.ends_with(b"\n") {
                            let _ = log.write_all(b"\n");
                        }
                        let line = String::from_utf8_lossy(&buf);
                        if let Err(e) = on_line(line.trim_end()) {
                            handled = Err(e);
                            let _ = child.kill();
                            break;
                        }
                    }
                    Err(e) => {
                        let _ = writeln!(log, "[beaconkv-bench] error reading stdout: {e}");
                        break;
                    }
                }
            }
        }
        let _ = progress.join();
    });
    let status = child
        .wait()
        .map_err(|e| format!("waiting for {}: {e}", job.eval.display()))?;
    let _ = log.flush();
    let elapsed = started.elapsed();
    if let Err(e) = handled {
        bar.abandon();
        return Err(format!("{} (stopped beaconkv-eval: {cmdline})", e));
    }
    if status.success() {
        bar.finish();
        Ok(elapsed)
    } else {
        bar.abandon();
        Err(format!(
            "beaconkv-eval failed for {} ({status}) after {:.1} s\ncommand: {cmdline}\nlast lines of {}:\n{}",
            job.label,
            elapsed.as_secs_f64(),
            job.log.display(),
            tail_lines(&job.log, 20)
        ))
    }
}

/// The tool's stderr: `progress i/n` lines move the bar, every other line goes to the log.
fn follow_stderr(stderr: impl std::io::Read, mut log: File, bar: &ProgressBar) {
    let mut reader = BufReader::new(stderr);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf) {
            Ok(0) => break,
            Ok(_) => {
                let line = String::from_utf8_lossy(&buf);
                match parse_progress(&line) {
                    Some((done, total)) => {
                        if bar.length() != Some(total) {
                            bar.set_length(total);
                        }
                        bar.set_position(done.min(total));
                    }
                    None => {
                        let _ = log.write_all(&buf);
                        if !buf.ends_with(b"\n") {
                            let _ = log.write_all(b"\n");
                        }
                    }
                }
            }
            Err(e) => {
                let _ = writeln!(log, "[beaconkv-bench] error reading stderr: {e}");
                break;
            }
        }
    }
}

/// The policy entries this `beaconkv-eval` accepts (asked with `--mode configs` at `budget`, logged
/// to `log`). An entry of a default list it rejects (a policy of a newer library) is left out
/// with a warning; one given with --policies is an error.
pub fn known_policies(
    run: &EvalOptions,
    policies: &[String],
    budget: u32,
    defaults: bool,
    log: &Path,
) -> Result<Vec<String>, String> {
    let mut kept = Vec::new();
    for p in policies {
        let job = EvalJob {
            eval: run.eval.clone(),
            args: vec![
                "--mode".into(),
                "configs".into(),
                "--configs".into(),
                crate::args::config_of(p, budget, &run.extra),
            ],
            label: format!("check {p}"),
            log: log.to_path_buf(),
        };
        match run_eval(&job) {
            Ok(_) => kept.push(p.clone()),
            Err(_) if defaults => eprintln!(
                "warning: leaving out the default policy '{p}': this beaconkv-eval rejects it ({})",
                tail_lines(&job.log, 1)
            ),
            Err(e) => return Err(format!("--policies: '{p}' is not accepted: {e}")),
        }
    }
    if kept.is_empty() && !policies.is_empty() {
        return Err("no policy left to measure".into());
    }
    Ok(kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_lines() {
        assert_eq!(parse_progress("progress 3/10\n"), Some((3, 10)));
        assert_eq!(parse_progress("progress 1535/1535"), Some((1535, 1535)));
        assert_eq!(
            parse_progress("llama_context: n_ctx = 512 progress 64/1535\n"),
            Some((64, 1535))
        );
        assert_eq!(parse_progress("progress x/10"), None);
        assert_eq!(parse_progress("progress 3/"), None);
        assert_eq!(parse_progress("load_tensors: loading model"), None);
        assert_eq!(parse_progress("inprogress 3/10"), None);
    }

    #[test]
    fn shell_quoting() {
        let s = shell_line(
            Path::new("/bin/x"),
            &[
                "--configs".into(),
                "a:1,b:2".into(),
                "it's".into(),
                "".into(),
            ],
        );
        assert_eq!(s, "/bin/x --configs a:1,b:2 'it'\\''s' ''");
    }

    #[test]
    fn failing_tool_reports_log_tail() {
        let dir = std::env::temp_dir().join(format!("beaconkv-bench-run-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let job = EvalJob {
            eval: PathBuf::from("/bin/sh"),
            args: vec![
                "-c".into(),
                "echo 'progress 1/2' >&2; echo 'error: boom' >&2; exit 3".into(),
            ],
            label: "agree".into(),
            log: dir.join("agree.log"),
        };
        let err = run_eval(&job).unwrap_err();
        assert!(err.contains("error: boom"), "{err}");
        assert!(err.contains("agree"), "{err}");
        let log = std::fs::read_to_string(&job.log).unwrap();
        assert!(!log.lines().any(|l| l == "progress 1/2"), "{log}");
        assert!(log.lines().any(|l| l == "error: boom"), "{log}");
        let ok = EvalJob {
            args: vec!["-c".into(), "echo out; echo 'progress 2/2' >&2".into()],
            ..job
        };
        assert!(run_eval(&ok).is_ok());
        assert!(std::fs::read_to_string(&ok.log).unwrap().contains("out"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn stdout_lines_reach_the_handler_as_they_come() {
        let dir = std::env::temp_dir().join(format!("beaconkv-bench-lines-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let job = EvalJob {
            eval: PathBuf::from("/bin/sh"),
            args: vec![
                "-c".into(),
                "echo one; echo 'progress 1/3' >&2; echo two; echo 'note' >&2; echo three; exec sleep 5".into(),
            ],
            label: "lines".into(),
            log: dir.join("lines.log"),
        };
        let mut seen = Vec::new();
        let mut handler = |l: &str| {
            seen.push(l.to_string());
            if l == "three" {
                Err("enough".to_string())
            } else {
                Ok(())
            }
        };
        let t0 = Instant::now();
        let err = run_eval_lines(&job, Some(&mut handler)).unwrap_err();
        // the handler's error stops the tool at once (it would sleep 5 s more)
        assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
        assert!(err.starts_with("enough"), "{err}");
        assert_eq!(seen, ["one", "two", "three"]);
        let log = std::fs::read_to_string(&job.log).unwrap();
        assert!(log.contains("one\n") && log.contains("note\n"), "{log}");
        assert!(!log.lines().any(|l| l == "progress 1/3"), "{log}");
        let mut n = 0;
        let ok = EvalJob {
            args: vec!["-c".into(), "echo a; echo b".into()],
            ..job
        };
        let mut count = |_: &str| {
            n += 1;
            Ok(())
        };
        assert!(run_eval_lines(&ok, Some(&mut count)).is_ok());
        assert_eq!(n, 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn missing_tool_is_a_clear_error() {
        let job = EvalJob {
            eval: PathBuf::from("/nonexistent/beaconkv-eval"),
            args: vec![],
            label: "speed".into(),
            log: std::env::temp_dir()
                .join(format!("beaconkv-bench-missing-{}.log", std::process::id())),
        };
        let err = run_eval(&job).unwrap_err();
        assert!(err.contains("--eval PATH"), "{err}");
        let _ = std::fs::remove_file(&job.log);
    }
}
