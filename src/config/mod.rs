//! Compression settings (`beaconkv_params`), the spec-string parser and its canonical form.
//!
//! Spec grammar: comma-separated `key=value` items, whitespace around items tolerated, keys
//! case-sensitive; a bare item that names a policy means `policy=<name>`. Every error names the
//! offending key and the allowed range, so a user reading a llama.cpp log can fix the flag.

use std::fmt;

/// Which scorer decides the importance of a cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    None = 0,
    Beacon = 1,
    Recent = 2,
    Streaming = 3,
    Random = 4,
}

impl Policy {
    pub const ALL: [Policy; 5] = [
        Policy::None,
        Policy::Beacon,
        Policy::Recent,
        Policy::Streaming,
        Policy::Random,
    ];

    pub fn from_id(id: i32) -> Option<Self> {
        Self::ALL.into_iter().find(|p| *p as i32 == id)
    }

    pub fn name(self) -> &'static str {
        match self {
            Policy::None => "none",
            Policy::Beacon => "beacon",
            Policy::Recent => "recent",
            Policy::Streaming => "streaming",
            Policy::Random => "random",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }

    /// Policies that score cells with captured queries (and so need the query store and K).
    pub fn uses_queries(self) -> bool {
        matches!(self, Policy::Beacon | Policy::Recent)
    }
}

/// How per-(layer, kv head) scores are folded into one score per cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduce {
    Max = 0,
    ZMean = 1,
    Rank = 2,
}

impl Reduce {
    pub const ALL: [Reduce; 3] = [Reduce::Max, Reduce::ZMean, Reduce::Rank];

    pub fn from_id(id: i32) -> Option<Self> {
        Self::ALL.into_iter().find(|r| *r as i32 == id)
    }

    pub fn name(self) -> &'static str {
        match self {
            Reduce::Max => "max",
            Reduce::ZMean => "zmean",
            Reduce::Rank => "rank",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.name() == name)
    }
}

/// Element type of the archive of evicted cells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArchiveType {
    /// The cache's own row bytes: a recall restores them exactly.
    Same = 0,
    Q8_0 = 1,
    Q4_0 = 2,
}

impl ArchiveType {
    pub const ALL: [ArchiveType; 3] = [ArchiveType::Same, ArchiveType::Q8_0, ArchiveType::Q4_0];

    pub fn from_id(id: i32) -> Option<Self> {
        Self::ALL.into_iter().find(|t| *t as i32 == id)
    }

    pub fn name(self) -> &'static str {
        match self {
            ArchiveType::Same => "same",
            ArchiveType::Q8_0 => "q8_0",
            ArchiveType::Q4_0 => "q4_0",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }
}

/// Which leading cells are protected from eviction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prefix {
    /// The whole prompt (known when the first single-token decode arrives).
    Prompt,
    /// The first `n` cells.
    First(usize),
}

/// Compression settings; mirrors `beaconkv_params`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Params {
    pub policy: Policy,
    pub budget: usize,
    /// Cells left after a compression; 0 = budget * 7 / 8.
    pub budget_min: usize,
    pub n_beacons: usize,
    pub n_recent: usize,
    pub window: usize,
    pub prefix: Prefix,
    /// Most cells `prefix=prompt` protects (the prompt's first cells); 0 = budget / 4.
    pub prefix_max: usize,
    pub reduce: Reduce,
    pub span: usize,
    pub q_capacity: usize,
    pub seed: u64,
    /// Read K and queries through the host's `read_rows` copy even when they are in host memory
    /// (the path device and remote buffers take); for testing and measuring that path.
    pub read_copy: bool,
    /// Score cells by attention probability (per-query log-softmax over the sequence's cells)
    /// instead of the raw logit q·k/√d of the method; see docs/results.md for the measurements.
    pub score_prob: bool,
    /// Most archived cells per sequence; 0 = no archive.
    pub archive: usize,
    pub archive_type: ArchiveType,
    /// Consecutive positions per archive page.
    pub page: usize,
    /// Decode steps between recall checks (where the newest tokens repeat an earlier passage, or,
    /// with `recall_match` = 0, the holes after the kept cell the newest queries attend most; see
    /// `engine/recall.rs`); 0 = none.
    pub recall_every: usize,
    /// Logits by which a recall check's best logit must beat the weakest kept cell's, in
    /// hundredths (spec value 3 = 300).
    pub recall_margin_centi: usize,
    /// Tokens the newest text must repeat of an earlier passage before a check recalls that
    /// passage's archived continuation (and passes let archived pages compete); 0 = read the
    /// position from the queries alone (see `engine/recall.rs`).
    pub recall_match: usize,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            policy: Policy::Beacon,
            budget: 1024,
            budget_min: 0,
            n_beacons: 16,
            n_recent: 16,
            window: 64,
            prefix: Prefix::Prompt,
            prefix_max: 0,
            reduce: Reduce::Max,
            span: 1,
            q_capacity: 64,
            seed: 42,
            read_copy: false,
            score_prob: false,
            archive: 0,
            archive_type: ArchiveType::Same,
            page: 16,
            recall_every: 4,
            recall_margin_centi: 200,
            recall_match: 8,
        }
    }
}

/// Spec keys, in canonical order.
pub const KEYS: [&str; 20] = [
    "policy",
    "budget",
    "min",
    "beacons",
    "recent",
    "window",
    "prefix",
    "prefix_max",
    "reduce",
    "span",
    "qcap",
    "seed",
    "read",
    "score",
    "archive",
    "archive_type",
    "page",
    "recall_every",
    "recall_margin",
    "recall_match",
];

/// The command-line flag of the patched llama.cpp tools that sets `key`, for error messages
/// (`--kv-compress-spec KEY=` for the keys without a flag of their own).
pub fn flag_for_key(key: &str) -> String {
    match key {
        "policy" => "--kv-compress".into(),
        "budget" => "--kv-budget".into(),
        "beacons" => "--kv-beacons".into(),
        "recent" => "--kv-recent".into(),
        "window" => "--kv-window".into(),
        "prefix" => "--kv-prefix".into(),
        "archive" => "--kv-archive".into(),
        other => format!("--kv-compress-spec {other}="),
    }
}

/// A two-valued key: `options[0]` is false, `options[1]` true; anything else names the key.
fn choice(key: &str, value: &str, options: [&str; 2]) -> Result<bool, ConfigError> {
    match options.iter().position(|&o| o == value) {
        Some(i) => Ok(i == 1),
        None => Err(ConfigError::new(
            key,
            format!(
                "'{value}' is not allowed; allowed: {}, {}",
                options[0], options[1]
            ),
        )),
    }
}

/// Largest value an `int32_t` field of `beaconkv_params` can hold.
const I32_MAX: u64 = i32::MAX as u64;

/// A rejected setting: the key it concerns and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub key: String,
    pub message: String,
}

impl ConfigError {
    fn new(key: &str, message: impl Into<String>) -> Self {
        ConfigError {
            key: key.to_string(),
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "beaconkv: {}: {}", self.key, self.message)
    }
}

impl std::error::Error for ConfigError {}

fn names<T: Copy>(all: &[T], name: impl Fn(T) -> &'static str) -> String {
    all.iter().map(|v| name(*v)).collect::<Vec<_>>().join("|")
}

fn parse_uint(key: &str, value: &str, max: u64) -> Result<u64, ConfigError> {
    if let Some(rest) = value.strip_prefix('-') {
        if !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()) {
            return Err(ConfigError::new(
                key,
                format!("'{value}' is negative; allowed range 0..={max}"),
            ));
        }
    }
    match value.parse::<u64>() {
        Ok(v) if v <= max => Ok(v),
        Ok(_) => Err(ConfigError::new(
            key,
            format!("'{value}' is too large; allowed range 0..={max}"),
        )),
        Err(_) => Err(ConfigError::new(
            key,
            format!("'{value}' is not an integer; allowed range 0..={max}"),
        )),
    }
}

/// A non-negative decimal with at most two decimals ("3", "2.5", "0.25"), in hundredths.
fn parse_centi(key: &str, value: &str) -> Result<usize, ConfigError> {
    let bad = || {
        ConfigError::new(
            key,
            format!("'{value}' is not a number >= 0 with at most two decimals (e.g. 3 or 2.5); allowed range 0..=1000"),
        )
    };
    let (int, frac) = value.split_once('.').unwrap_or((value, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if int.is_empty() || !digits(int) || !digits(frac) || frac.len() > 2 || int.len() > 4 {
        return Err(bad());
    }
    let whole: usize = int.parse().map_err(|_| bad())?;
    let cents: usize = format!("{frac:0<2}").parse().map_err(|_| bad())?;
    let v = whole * 100 + cents;
    if v > 100_000 {
        return Err(bad());
    }
    Ok(v)
}

/// The canonical form of a value in hundredths ("3", "2.5", "0.25").
pub fn format_centi(v: usize) -> String {
    let s = format!("{}.{:02}", v / 100, v % 100);
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

impl Params {
    /// The recall margin in logits.
    pub fn recall_margin(&self) -> f32 {
        self.recall_margin_centi as f32 / 100.0
    }

    /// Cells left after a compression pass.
    pub fn effective_min(&self) -> usize {
        if self.budget_min == 0 {
            self.budget * 7 / 8
        } else {
            self.budget_min
        }
    }

    /// Most cells `prefix=prompt` protects.
    pub fn effective_prefix_max(&self) -> usize {
        if self.prefix_max == 0 {
            self.budget / 4
        } else {
            self.prefix_max
        }
    }

    /// The numeric part of the prefix (0 for `Prompt`, whose length is capped at run time).
    fn numeric_prefix(&self) -> usize {
        match self.prefix {
            Prefix::Prompt => 0,
            Prefix::First(n) => n,
        }
    }

    /// The rules one key's value must meet on its own (its range, and for some keys a lower
    /// bound or parity), whatever the other keys say.
    fn check_own(&self, key: &str) -> Result<(), ConfigError> {
        let max = I32_MAX as usize;
        let value = match key {
            "budget" => self.budget,
            "min" => self.budget_min,
            "beacons" => self.n_beacons,
            "recent" => self.n_recent,
            "window" => self.window,
            "prefix" => self.numeric_prefix(),
            "prefix_max" => self.prefix_max,
            "span" => self.span,
            "qcap" => self.q_capacity,
            "archive" => self.archive,
            "page" => self.page,
            "recall_every" => self.recall_every,
            "recall_match" => self.recall_match,
            _ => return Ok(()), // enumerations, the seed and the flags: any parsed value is valid
        };
        if value > max {
            return Err(ConfigError::new(
                key,
                format!("{value} is too large; allowed range 0..={max}"),
            ));
        }
        match key {
            "budget" if value < 1 => Err(ConfigError::new(key, "must be >= 1")),
            "span" if value < 1 || value.is_multiple_of(2) => Err(ConfigError::new(
                key,
                format!("{value} must be odd and >= 1 (1 = off)"),
            )),
            "qcap" if value < 1 => Err(ConfigError::new(key, "must be >= 1")),
            "page" if !(1..=4096).contains(&value) => Err(ConfigError::new(
                key,
                format!("{value} is out of range; allowed range 1..=4096"),
            )),
            "recall_match" if value > 1024 => Err(ConfigError::new(
                key,
                format!("{value} is out of range; allowed range 0..=1024 (0 = by queries)"),
            )),
            _ => Ok(()),
        }
    }

    /// Check every rule: each key's own range, then the rules between keys; the error names
    /// the key to change.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for key in KEYS {
            self.check_own(key)?;
        }
        match self.policy {
            Policy::Beacon if self.n_beacons + self.n_recent == 0 => {
                return Err(ConfigError::new(
                    "beacons",
                    "beacons + recent must be >= 1 for policy beacon",
                ));
            }
            Policy::Recent if self.n_recent == 0 => {
                return Err(ConfigError::new(
                    "recent",
                    "must be >= 1 for policy recent (it scores with the recent queries only)",
                ));
            }
            _ => {}
        }
        if self.archive > 0 && !self.policy.uses_queries() {
            return Err(ConfigError::new(
                "archive",
                format!(
                    "needs a policy that scores with queries (beacon, recent), not {}; 0 = off",
                    self.policy.name()
                ),
            ));
        }
        let protected = self.window + self.numeric_prefix();
        if protected >= self.budget {
            let key = match self.prefix {
                Prefix::First(n) if n > 0 => "prefix",
                _ => "window",
            };
            return Err(ConfigError::new(
                key,
                format!(
                    "window + prefix = {protected} must be < budget ({}); allowed range 0..={}",
                    self.budget,
                    self.budget - 1
                ),
            ));
        }
        let min = self.effective_min();
        if min > self.budget {
            return Err(ConfigError::new(
                "min",
                format!(
                    "{min} exceeds budget; allowed range {}..={} (0 = budget*7/8)",
                    protected + 1,
                    self.budget
                ),
            ));
        }
        if min < protected + 1 {
            return Err(ConfigError::new(
                "min",
                format!(
                    "{min} (budget*7/8 when 0) must be >= window + prefix + 1 = {}; allowed range {}..={}",
                    protected + 1,
                    protected + 1,
                    self.budget
                ),
            ));
        }
        Ok(())
    }

    /// Apply a spec string on top of `self`; on error `self` is unchanged.
    pub fn apply_spec(&mut self, spec: &str) -> Result<(), ConfigError> {
        let mut next = self.clone();
        for item in spec_items(spec) {
            let (key, value) = item?;
            next.set(key, value)?;
        }
        next.validate()?;
        *self = next;
        Ok(())
    }

    /// Parse a spec on top of the defaults.
    pub fn parse(spec: &str) -> Result<Params, ConfigError> {
        let mut p = Params::default();
        p.apply_spec(spec)?;
        Ok(p)
    }

    /// Check the items of a spec each on its own: syntax, known key, no key twice, and each
    /// value's own rules (range, `budget >= 1`, odd `span`, ...). Rules between keys
    /// (`window + prefix < budget`, ...) are not checked: that is [`Params::parse`]'s job once
    /// every item is known. This is what a command-line parser checks flag by flag.
    pub fn check_items(spec: &str) -> Result<(), ConfigError> {
        for item in spec_items(spec) {
            let (key, value) = item?;
            let mut p = Params::default();
            p.set(key, value)?;
            p.check_own(key)?;
        }
        Ok(())
    }

    fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        let uint = |max| parse_uint(key, value, max);
        match key {
            "policy" => {
                self.policy = Policy::from_name(value).ok_or_else(|| {
                    ConfigError::new(
                        key,
                        format!(
                            "'{value}' is not a policy; allowed: {}",
                            names(&Policy::ALL, Policy::name)
                        ),
                    )
                })?
            }
            "reduce" => {
                self.reduce = Reduce::from_name(value).ok_or_else(|| {
                    ConfigError::new(
                        key,
                        format!(
                            "'{value}' is not a reduction; allowed: {}",
                            names(&Reduce::ALL, Reduce::name)
                        ),
                    )
                })?
            }
            "prefix" if value == "prompt" => self.prefix = Prefix::Prompt,
            "prefix" => {
                self.prefix = Prefix::First(uint(I32_MAX).map_err(|e| ConfigError {
                    message: format!("{} (or 'prompt')", e.message),
                    ..e
                })? as usize)
            }
            "budget" => self.budget = uint(I32_MAX)? as usize,
            "min" => self.budget_min = uint(I32_MAX)? as usize,
            "beacons" => self.n_beacons = uint(I32_MAX)? as usize,
            "recent" => self.n_recent = uint(I32_MAX)? as usize,
            "window" => self.window = uint(I32_MAX)? as usize,
            "prefix_max" => self.prefix_max = uint(I32_MAX)? as usize,
            "span" => self.span = uint(I32_MAX)? as usize,
            "qcap" => self.q_capacity = uint(I32_MAX)? as usize,
            "seed" => self.seed = uint(u64::MAX)?,
            "read" => self.read_copy = choice("read", value, ["auto", "copy"])?,
            "score" => self.score_prob = choice("score", value, ["logit", "prob"])?,
            "archive" => self.archive = uint(I32_MAX)? as usize,
            "archive_type" => {
                self.archive_type = ArchiveType::from_name(value).ok_or_else(|| {
                    ConfigError::new(
                        key,
                        format!(
                            "'{value}' is not an archive type; allowed: {}",
                            names(&ArchiveType::ALL, ArchiveType::name)
                        ),
                    )
                })?
            }
            "page" => self.page = uint(I32_MAX)? as usize,
            "recall_every" => self.recall_every = uint(I32_MAX)? as usize,
            "recall_margin" => self.recall_margin_centi = parse_centi(key, value)?,
            "recall_match" => self.recall_match = uint(I32_MAX)? as usize,
            _ => unreachable!("key list and setter disagree: {key}"),
        }
        Ok(())
    }

    /// Canonical spec string; `Params::parse(&p.to_spec()) == Ok(p)` for every valid `p`.
    pub fn to_spec(&self) -> String {
        let prefix = match self.prefix {
            Prefix::Prompt => "prompt".to_string(),
            Prefix::First(n) => n.to_string(),
        };
        format!(
            "policy={},budget={},min={},beacons={},recent={},window={},prefix={},prefix_max={},reduce={},span={},qcap={},seed={},read={},score={},archive={},archive_type={},page={},recall_every={},recall_margin={},recall_match={}",
            self.policy.name(),
            self.budget,
            self.budget_min,
            self.n_beacons,
            self.n_recent,
            self.window,
            prefix,
            self.prefix_max,
            self.reduce.name(),
            self.span,
            self.q_capacity,
            self.seed,
            if self.read_copy { "copy" } else { "auto" },
            if self.score_prob { "prob" } else { "logit" },
            self.archive,
            self.archive_type.name(),
            self.page,
            self.recall_every,
            format_centi(self.recall_margin_centi),
            self.recall_match
        )
    }
}

/// The `(key, value)` items of a spec, in order: whitespace around items and keys trimmed,
/// empty items skipped, a bare policy name read as `policy=<name>`. An unknown or empty key,
/// or a key given twice, is an error naming it.
fn spec_items(spec: &str) -> impl Iterator<Item = Result<(&'static str, &str), ConfigError>> {
    let mut seen: Vec<&'static str> = Vec::new();
    spec.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(move |item| {
            let (key, value) = match item.split_once('=') {
                Some((k, v)) => (k.trim(), v.trim()),
                None if Policy::from_name(item).is_some() => ("policy", item),
                None => {
                    return Err(ConfigError::new(
                        item,
                        format!(
                            "unknown key or policy; valid keys: {}; policies: {}",
                            KEYS.join(", "),
                            names(&Policy::ALL, Policy::name)
                        ),
                    ))
                }
            };
            if key.is_empty() {
                // Name the whole item: an empty key name would read "beaconkv: : ...".
                return Err(ConfigError::new(
                    item,
                    format!("empty key before '='; valid keys: {}", KEYS.join(", ")),
                ));
            }
            let Some(&key) = KEYS.iter().find(|k| **k == key) else {
                return Err(ConfigError::new(
                    key,
                    format!("unknown key; valid keys: {}", KEYS.join(", ")),
                ));
            };
            if seen.contains(&key) {
                return Err(ConfigError::new(key, "given more than once"));
            }
            seen.push(key);
            Ok((key, value))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recall_margin_takes_two_decimals() {
        let p = Params::parse("archive=64,recall_margin=2.5").unwrap();
        assert_eq!(p.recall_margin_centi, 250);
        assert!(p.to_spec().contains("recall_margin=2.5"));
        assert_eq!(Params::parse(&p.to_spec()).unwrap(), p);
        assert_eq!(format_centi(300), "3");
        assert_eq!(format_centi(25), "0.25");
        for bad in ["-1", "1.234", "x", "", "1e3", "20000"] {
            let e = Params::parse(&format!("recall_margin={bad}")).unwrap_err();
            assert_eq!(e.key, "recall_margin", "{bad}: {e}");
        }
    }

    #[test]
    fn archive_needs_a_query_policy() {
        let e = Params::parse("streaming,archive=64").unwrap_err();
        assert_eq!(e.key, "archive");
        assert!(Params::parse("recent,archive=64").is_ok());
        let e = Params::parse("archive_type=q2").unwrap_err();
        assert_eq!(e.key, "archive_type");
        assert_eq!(Params::parse("page=0").unwrap_err().key, "page");
    }

    fn err(spec: &str) -> ConfigError {
        Params::parse(spec).expect_err(spec)
    }

    fn assert_names(spec: &str, key: &str) {
        let e = err(spec);
        assert_eq!(e.key, key, "{spec}: {e}");
        assert!(e.to_string().contains(key), "{spec}: {e}");
    }

    #[test]
    fn defaults_are_the_methods() {
        let p = Params::default();
        assert_eq!(p.effective_min(), 896);
        assert_eq!((p.n_beacons, p.n_recent, p.window), (16, 16, 64));
        p.validate().unwrap();
    }

    #[test]
    fn full_spec_parses() {
        let p = Params::parse(
            " policy=recent , budget=512,min=400,beacons=8,recent=4,window=32,prefix=10,reduce=rank,span=3,qcap=16,seed=7",
        )
        .unwrap();
        assert_eq!(p.policy, Policy::Recent);
        assert_eq!(
            (p.budget, p.budget_min, p.n_beacons, p.n_recent),
            (512, 400, 8, 4)
        );
        assert_eq!(
            (p.window, p.prefix, p.reduce),
            (32, Prefix::First(10), Reduce::Rank)
        );
        assert_eq!((p.span, p.q_capacity, p.seed), (3, 16, 7));
    }

    #[test]
    fn bare_policy_name_and_empty_spec() {
        assert_eq!(
            Params::parse("streaming").unwrap().policy,
            Policy::Streaming
        );
        assert_eq!(Params::parse("").unwrap(), Params::default());
        assert_eq!(Params::parse(" , ").unwrap(), Params::default());
    }

    #[test]
    fn canonical_form_round_trips() {
        let base = Params::default();
        assert_eq!(Params::parse(&base.to_spec()).unwrap(), base);
        let p = Params::parse("random,budget=300,min=250,prefix=4,reduce=zmean,span=5,seed=99")
            .unwrap();
        assert_eq!(Params::parse(&p.to_spec()).unwrap(), p);
    }

    #[test]
    fn error_paths_name_the_key() {
        assert_names("budgets=3", "budgets");
        assert!(err("budgets=3").message.contains("valid keys"));
        assert_names("beacon,turbo", "turbo");
        assert_names("policy=fast", "policy");
        assert_names("reduce=mean", "reduce");
        assert_names("budget=abc", "budget");
        assert_names("budget=1.5", "budget");
        assert_names("budget=-4", "budget");
        assert!(err("window=-1").message.contains("negative"));
        assert_names("budget=0", "budget");
        assert_names("beacons=0,recent=0", "beacons");
        assert_names("policy=recent,recent=0", "recent");
        assert_names("budget=100,window=100", "window");
        assert_names("budget=100,window=50,prefix=50", "prefix");
        assert_names("budget=100,min=101", "min");
        assert_names("budget=100,window=40,prefix=20,min=60", "min");
        assert_names("span=2", "span");
        assert_names("span=0", "span");
        assert_names("qcap=0", "qcap");
        assert_names("read=fast", "read");
        assert_names("score=softmax", "score");
        assert_names("budget=10,budget=20", "budget");
        assert_names("prefix=x", "prefix");
        assert_names("seed=-1", "seed");
        assert_names("budget=99999999999", "budget");
    }

    /// Found by the `spec_parser` fuzzer: "=5" was reported as "beaconkv: : unknown key", an
    /// error that names no key.
    #[test]
    fn empty_key_names_the_item() {
        for spec in ["=5", "budget=512, =5", " = "] {
            let e = err(spec);
            assert!(!e.key.trim().is_empty(), "{spec}: {e}");
            assert!(e.message.contains("empty key"), "{spec}: {e}");
        }
        assert_eq!(err("budget=512,=5").key, "=5");
    }

    #[test]
    fn failed_apply_leaves_params_unchanged() {
        let mut p = Params::default();
        assert!(p.apply_spec("budget=512,span=2").is_err());
        assert_eq!(p, Params::default());
    }

    #[test]
    fn beacons_plus_recent_only_matters_for_query_policies() {
        Params::parse("streaming,beacons=0,recent=0").unwrap();
        Params::parse("beacon,beacons=0,recent=4").unwrap();
    }

    #[test]
    fn prefix_max_defaults_to_a_quarter_of_the_budget() {
        let p = Params::parse("budget=512").unwrap();
        assert_eq!((p.prefix_max, p.effective_prefix_max()), (0, 128));
        let p = Params::parse("budget=512,prefix_max=300").unwrap();
        assert_eq!(p.effective_prefix_max(), 300);
        assert_eq!(Params::parse(&p.to_spec()).unwrap(), p);
        assert_names("prefix_max=-1", "prefix_max");
        assert_names("prefix_max=x", "prefix_max");
    }

    #[test]
    fn items_are_checked_on_their_own() {
        // Values that only conflict with other keys pass; their own range does not.
        for ok in [
            "window=5000",
            "prefix=4000",
            "min=3",
            "beacon",
            "policy=recent,recent=0",
        ] {
            Params::check_items(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for (bad, key) in [
            ("budget=0", "budget"),
            ("span=4", "span"),
            ("qcap=0", "qcap"),
            ("window=-1", "window"),
            ("budget=99999999999", "budget"),
            ("turbo=1", "turbo"),
            ("fast", "fast"),
            ("=3", "=3"),
            ("budget=8,budget=9", "budget"),
            ("reduce=mean", "reduce"),
        ] {
            let e = Params::check_items(bad).expect_err(bad);
            assert_eq!(e.key, key, "{bad}: {e}");
        }
    }

    #[test]
    fn flags_name_the_keys_they_set() {
        assert_eq!(flag_for_key("window"), "--kv-window");
        assert_eq!(flag_for_key("policy"), "--kv-compress");
        assert_eq!(flag_for_key("min"), "--kv-compress-spec min=");
        assert_eq!(flag_for_key("turbo"), "--kv-compress-spec turbo=");
    }
}
