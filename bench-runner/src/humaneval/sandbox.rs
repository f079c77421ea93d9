//! Runs one function against its problem's tests in a Python process of its own, never in the
//! bench's process: `python3 -I` (no environment variables, user site or script folder) in a
//! fresh temporary folder, with an empty environment, stdin from /dev/null, a wall-clock limit
//! after which the whole process group is killed, and, set by the runner before the answer's
//! code runs: address space (`--memory-mb`), CPU time (the limit + 1 s), file size (16 MiB) and
//! no core files. Functions that delete files, change folders or start processes are disabled
//! (as in HumanEval's own harness), and so are sockets; where unprivileged user namespaces are
//! allowed the process also runs under `unshare -rn`, with no network interface but loopback.
//! The program is the problem's prompt (its imports and helpers), the extracted code, the
//! problem's `test`, then `check(entry_point)`.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The trusted part of the program: reads the pieces, sets the limits, disables what could harm
/// the machine, runs the pieces in order and prints one JSON verdict line on the process's own
/// stdout (what the code prints goes nowhere).
pub const RUNNER: &str = r#"import builtins, json, os, resource, sys

MEM, CPU = int(sys.argv[1]), int(sys.argv[2])
src = {}
for name in ("prompt.py", "answer.py", "test.py", "entry.txt"):
    with open(name, encoding="utf-8") as f:
        src[name] = f.read()
entry = src["entry.txt"].strip()
out = os.fdopen(os.dup(1), "w")
_exit, dumps = os._exit, json.dumps


def verdict(ok, why):
    out.write(dumps({"pass": ok, "reason": why}) + "\n")
    out.flush()
    _exit(0)


for res, v in ((resource.RLIMIT_AS, MEM), (resource.RLIMIT_CPU, CPU), (resource.RLIMIT_CORE, 0),
               (resource.RLIMIT_FSIZE, 1 << 24)):
    try:
        resource.setrlimit(res, (v, v))
    except (ValueError, OSError):
        pass

import faulthandler, shutil, socket, subprocess
faulthandler.disable()


class NoNetwork(OSError):
    pass


def no_network(*args, **kwargs):
    raise NoNetwork("network disabled")


socket.socket = no_network
socket.create_connection = no_network
socket.socketpair = no_network
for name in ("kill", "system", "putenv", "remove", "removedirs", "rmdir", "fchdir", "setuid", "fork",
             "forkpty", "killpg", "rename", "renames", "truncate", "replace", "unlink", "fchmod",
             "fchown", "chmod", "chown", "chroot", "lchown", "getcwd", "chdir", "execv", "execve",
             "spawnv", "popen"):
    if hasattr(os, name):
        setattr(os, name, None)
shutil.rmtree = shutil.move = shutil.chown = None
subprocess.Popen = None
builtins.help = None
for name in ("ipdb", "joblib", "resource", "psutil", "tkinter"):
    sys.modules[name] = None


class Sink:
    def write(self, s):
        return len(s)

    def flush(self):
        pass


sys.stdout = sys.stderr = Sink()
g = {"__name__": "__candidate__", "__builtins__": builtins}
stage = "prompt"
try:
    exec(compile(src["prompt.py"], "prompt.py", "exec"), g)
    stage = "syntax"
    code = compile(src["answer.py"], "answer.py", "exec")
    stage = "define"
    exec(code, g)
    stage = "test"
    exec(compile(src["test.py"], "test.py", "exec"), g)
    stage = "check"
    g["check"](g[entry])
except SyntaxError as e:
    if stage == "syntax":
        verdict(False, "syntax error (line %s)" % e.lineno)
    verdict(False, "%s: SyntaxError" % stage)
except BaseException as e:
    if stage == "check" and isinstance(e, AssertionError):
        verdict(False, "assertion")
    msg = " ".join(str(e).split())[:60]
    name = type(e).__name__ + (": " + msg if msg else "")
    if stage == "define":
        verdict(False, "error defining: " + name)
    if stage == "check":
        verdict(False, "exception: " + name)
    verdict(False, "%s: %s" % (stage, name))
verdict(True, "pass")
"#;

/// One function's outcome.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    pub passed: bool,
    /// "pass", "missing function", "syntax error (line N)", "assertion", "exception: TypeError:
    /// ...", "error defining: ...", "timeout", "killed by signal N", ...
    pub reason: String,
}

impl Verdict {
    pub fn fail(reason: &str) -> Verdict {
        Verdict {
            passed: false,
            reason: reason.to_string(),
        }
    }
}

/// How the checks run.
#[derive(Clone, Debug)]
pub struct Sandbox {
    /// The interpreter itself (not a launcher script that needs the environment).
    pub python: PathBuf,
    /// Run under `unshare -rn` (probed at start).
    pub unshare: bool,
    pub timeout: Duration,
    pub memory_mb: u64,
}

static SERIAL: AtomicU64 = AtomicU64::new(0);

impl Sandbox {
    /// The interpreter behind `python` (as `sys.executable` names it), and whether `unshare -rn`
    /// works here.
    pub fn new(python: &Path, timeout_s: f64, memory_mb: u64) -> Result<Sandbox, String> {
        let out = Command::new(python)
            .args(["-I", "-c", "import sys, resource; print(sys.executable)"])
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e} (pass --python PATH)", python.display()))?;
        let exe = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !out.status.success() || exe.is_empty() {
            return Err(format!(
                "{} -I does not run a Python with the resource module (pass --python PATH)",
                python.display()
            ));
        }
        let exe = PathBuf::from(exe);
        let unshare = Command::new("unshare")
            .arg("-rn")
            .arg(&exe)
            .args(["-I", "-c", "pass"])
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        Ok(Sandbox {
            python: exe,
            unshare,
            timeout: Duration::from_secs_f64(timeout_s),
            memory_mb,
        })
    }

    /// How the network is kept out, in words.
    pub fn network(&self) -> &'static str {
        if self.unshare {
            "unshare -rn (a network namespace with loopback only) and sockets disabled in Python"
        } else {
            "sockets disabled in Python and proxy variables set to an unused local port \
             (unprivileged user namespaces are not allowed here, so no unshare -rn)"
        }
    }

    /// Runs the problem's `test` and `check(entry)` on `code` after `prompt`.
    pub fn check(&self, prompt: &str, code: &str, test: &str, entry: &str) -> Verdict {
        match self.run(prompt, code, test, entry) {
            Ok(v) => v,
            Err(e) => Verdict::fail(&format!("harness: {e}")),
        }
    }

    fn run(&self, prompt: &str, code: &str, test: &str, entry: &str) -> Result<Verdict, String> {
        let n = SERIAL.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "beaconkv-humaneval-{}-{n}-{}",
            std::process::id(),
            crate::args::unix_now()
        ));
        let work = dir.join("work");
        std::fs::create_dir_all(&work)
            .map_err(|e| format!("cannot create {}: {e}", work.display()))?;
        let result = self.run_in(&dir, &work, prompt, code, test, entry);
        let _ = std::fs::remove_dir_all(&dir);
        result
    }

    fn run_in(
        &self,
        dir: &Path,
        work: &Path,
        prompt: &str,
        code: &str,
        test: &str,
        entry: &str,
    ) -> Result<Verdict, String> {
        use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
        let write = |p: PathBuf, t: &str| {
            std::fs::write(&p, t).map_err(|e| format!("cannot write {}: {e}", p.display()))
        };
        write(dir.join("runner.py"), RUNNER)?;
        write(work.join("prompt.py"), prompt)?;
        write(work.join("answer.py"), code)?;
        write(work.join("test.py"), test)?;
        write(work.join("entry.txt"), entry)?;
        let stdout_path = dir.join("stdout.txt");
        let stdout = std::fs::File::create(&stdout_path)
            .map_err(|e| format!("cannot create {}: {e}", stdout_path.display()))?;
        let memory = self.memory_mb.saturating_mul(1 << 20);
        let cpu = self.timeout.as_secs() + 1;
        let mut cmd = if self.unshare {
            let mut c = Command::new("unshare");
            c.arg("-rn").arg(&self.python);
            c
        } else {
            Command::new(&self.python)
        };
        cmd.arg("-I")
            .arg(dir.join("runner.py"))
            .arg(memory.to_string())
            .arg(cpu.to_string())
            .current_dir(work)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", work)
            .env("LANG", "C.UTF-8")
            .env("OMP_NUM_THREADS", "1");
        for proxy in [
            "http_proxy",
            "https_proxy",
            "all_proxy",
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
        ] {
            cmd.env(proxy, "http://127.0.0.1:9");
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::from(stdout))
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", self.python.display()))?;
        let started = Instant::now();
        let status = loop {
            if let Some(s) = child
                .try_wait()
                .map_err(|e| format!("waiting for python: {e}"))?
            {
                break Some(s);
            }
            if started.elapsed() >= self.timeout {
                break None;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let Some(status) = status else {
            // the whole group: whatever the code started goes too
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            let _ = child.kill();
            let _ = child.wait();
            return Ok(Verdict::fail("timeout"));
        };
        let mut text = String::new();
        std::fs::File::open(&stdout_path)
            .and_then(|mut f| f.read_to_string(&mut text))
            .map_err(|e| format!("cannot read {}: {e}", stdout_path.display()))?;
        let last = text.lines().rev().find(|l| l.starts_with('{'));
        if let Some(v) = last.and_then(|l| serde_json::from_str::<serde_json::Value>(l).ok()) {
            if let (Some(passed), Some(reason)) = (v["pass"].as_bool(), v["reason"].as_str()) {
                return Ok(Verdict {
                    passed,
                    reason: reason.to_string(),
                });
            }
        }
        Ok(Verdict::fail(&match status.signal() {
            Some(sig) => format!("killed by signal {sig}"),
            None => format!("no verdict (exit {})", status.code().unwrap_or(-1)),
        }))
    }
}

/// Seconds of CPU used by this process's waited-for children so far (Linux: /proc/self/stat;
/// 0 elsewhere).
pub fn children_cpu_seconds() -> f64 {
    static TICK: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    let tick = *TICK.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .stderr(Stdio::null())
            .output()
            .ok()
            .and_then(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .trim()
                    .parse::<f64>()
                    .ok()
            })
            .filter(|&t| t > 0.0)
            .unwrap_or(100.0)
    });
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // fields after the command name's closing parenthesis start at field 3; cutime and cstime
    // are fields 16 and 17
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    match (f.get(13), f.get(14)) {
        (Some(u), Some(s)) => (u + s) / tick,
        _ => 0.0,
    }
}
