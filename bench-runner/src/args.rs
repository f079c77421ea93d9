//! Argument and output-folder plumbing shared by the benches.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// The repository root (this crate lives in `bench-runner/`).
pub fn repo_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent().unwrap_or(here).to_path_buf()
}

/// An option's value: as given, else its `--quick` or its full default.
pub fn pick<T>(given: Option<T>, quick: bool, q: T, full: T) -> T {
    given.unwrap_or(if quick { q } else { full })
}

/// `--policies` as given, else `defaults`.
pub fn policies_or(given: Option<Vec<String>>, defaults: &[&str]) -> Vec<String> {
    given.unwrap_or_else(|| defaults.iter().map(|s| s.to_string()).collect())
}

/// `--policies` as given, where "none" alone means no policy (the full cache only), else
/// `defaults`; an empty list is an error.
pub fn policies_or_none(
    given: Option<Vec<String>>,
    defaults: &[&str],
) -> Result<Vec<String>, String> {
    match given {
        Some(p) if p == ["none"] => Ok(Vec::new()),
        Some(p) if p.is_empty() => Err("--policies needs at least one policy".into()),
        Some(p) => Ok(p),
        None => Ok(policies_or(None, defaults)),
    }
}

/// Each named count must be at least 1; the error names the first that is not.
pub fn check_at_least_one(counts: &[(&str, u32)]) -> Result<(), String> {
    match counts.iter().find(|(_, v)| *v == 0) {
        Some((name, _)) => Err(format!("{name} must be at least 1")),
        None => Ok(()),
    }
}

/// A policy entry: a name (letters, digits, `_`, `-`, optionally `+archive[_TYPE]`), then
/// optional `/key=value` spec keys. `none` is the reference and always measured.
pub fn check_policy(p: &str) -> Result<(), String> {
    let (name, keys) = p.split_once('/').unwrap_or((p, ""));
    if name == "none" {
        return Err(
            "--policies: 'none' (the full cache) is the reference and always measured".into(),
        );
    }
    let name_ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-+".contains(c));
    let keys_ok = keys.is_empty()
        || keys.split('/').all(|kv| {
            kv.split_once('=').is_some_and(|(k, v)| {
                !k.is_empty()
                    && !v.is_empty()
                    && kv
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "_-.=".contains(c))
            })
        });
    if name_ok && keys_ok {
        Ok(())
    } else {
        Err(format!(
            "--policies: invalid entry '{p}' (NAME[+archive][/key=value...], e.g. beacon/score=prob)"
        ))
    }
}

/// Every entry of a `--policies` list checked by [`check_policy`], none given twice.
pub fn check_policy_entries(policies: &[String]) -> Result<(), String> {
    for p in policies {
        check_policy(p)?;
    }
    let mut dedup = policies.to_vec();
    dedup.sort();
    dedup.dedup();
    if dedup.len() != policies.len() {
        return Err("--policies: an entry is given twice".into());
    }
    Ok(())
}

/// The `beaconkv-eval` config of a policy entry at a budget: "beacon/score=prob" at 64 is
/// "beacon:64/score=prob" (with `--extra` keys after it); `none` is "none".
pub fn config_of(policy: &str, budget: u32, extra: &str) -> String {
    if policy == "none" {
        return "none".into();
    }
    match policy.split_once('/') {
        Some((name, keys)) => format!("{name}:{budget}/{keys}{extra}"),
        None => format!("{policy}:{budget}{extra}"),
    }
}

/// The model's file name ("" for a path without one), as fingerprints name it.
pub fn model_file_name(model: &Path) -> String {
    model
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The model's file name without its extension ("model" for a path without one), as output
/// folders name it.
pub fn model_stem(model: &Path) -> String {
    model
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into())
}

/// Seconds since the Unix epoch (0 on a clock set before it): the run's start, which also names
/// its default output folder.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The output folder, created: `--out` as given, else `results/<prefix><model stem>-<unix>` in
/// the repository.
pub fn out_dir(
    given: Option<PathBuf>,
    model: &Path,
    root: &Path,
    prefix: &str,
    unix: u64,
) -> Result<PathBuf, String> {
    let out = given.unwrap_or_else(|| {
        let stem = model_stem(model);
        root.join("results").join(format!("{prefix}{stem}-{unix}"))
    });
    std::fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    Ok(out)
}

/// Writes a whole file, naming it in the error.
pub fn write_file(path: &Path, contents: &str) -> Result<(), String> {
    std::fs::write(path, contents).map_err(|e| format!("cannot write {}: {e}", path.display()))
}
