//! The value kinds of the spec keys: how each is parsed, formatted, range-checked and carried
//! in `beaconkv_params`. The key table (`keys.rs`) picks a kind and a [`Rule`] per key.

use super::enums::Prefix;
use super::error::ConfigError;

/// Largest value an `int32_t` field of `beaconkv_params` can hold.
pub(crate) const I32_MAX: u64 = i32::MAX as u64;

/// A key's own constraint beyond what its type holds, checked whatever the other keys say.
#[derive(Clone, Copy, Debug)]
pub enum Rule {
    /// Any value of the type (a count: `0..=i32::MAX`).
    Any,
    /// A count of at least 1.
    AtLeastOne,
    /// An odd count of at least 1.
    Odd,
    /// A count in `min..=max`; `note` follows the range in the message.
    Range {
        min: usize,
        max: usize,
        note: &'static str,
    },
    /// A flag spelled `options[0]` (false, C 0) or `options[1]` (true, C 1).
    Options([&'static str; 2]),
}

/// One spec key's value: its spec text, its own range, and its `beaconkv_params` field.
/// Every error names `key`.
pub trait KeyValue: Copy {
    /// The type of the `beaconkv_params` field.
    type C: Copy;
    /// Read the spec text (syntax, and what the type itself can hold).
    fn parse(key: &str, text: &str, rule: Rule) -> Result<Self, ConfigError>;
    /// The canonical spec text; `parse` reads it back to the same value.
    fn format(self, rule: Rule) -> String;
    /// The key's own rules (range, parity), whatever the other keys say.
    fn check(self, _key: &str, _rule: Rule) -> Result<(), ConfigError> {
        Ok(())
    }
    /// The C form (exact for every value that passes `check`).
    fn to_c(self) -> Self::C;
    /// Read the C form; values the type cannot hold are errors (the rules are `check`'s).
    fn from_c(key: &str, c: Self::C, rule: Rule) -> Result<Self, ConfigError>;
}

/// `'a|b|c'`: the spec names of `all`.
pub(crate) fn names<T: Copy>(all: &[T], name: impl Fn(T) -> &'static str) -> String {
    all.iter().map(|v| name(*v)).collect::<Vec<_>>().join("|")
}

pub(crate) fn parse_uint(key: &str, value: &str, max: u64) -> Result<u64, ConfigError> {
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

/// A count (`int32_t` in C).
impl KeyValue for usize {
    type C = i32;

    fn parse(key: &str, text: &str, _rule: Rule) -> Result<Self, ConfigError> {
        Ok(parse_uint(key, text, I32_MAX)? as usize)
    }

    fn format(self, _rule: Rule) -> String {
        self.to_string()
    }

    fn check(self, key: &str, rule: Rule) -> Result<(), ConfigError> {
        let max = I32_MAX as usize;
        if self > max {
            return Err(ConfigError::new(
                key,
                format!("{self} is too large; allowed range 0..={max}"),
            ));
        }
        match rule {
            Rule::AtLeastOne if self < 1 => Err(ConfigError::new(key, "must be >= 1")),
            Rule::Odd if self < 1 || self.is_multiple_of(2) => Err(ConfigError::new(
                key,
                format!("{self} must be odd and >= 1 (1 = off)"),
            )),
            Rule::Range { min, max, note } if !(min..=max).contains(&self) => {
                Err(ConfigError::new(
                    key,
                    format!("{self} is out of range; allowed range {min}..={max}{note}"),
                ))
            }
            _ => Ok(()),
        }
    }

    fn to_c(self) -> i32 {
        self as i32
    }

    fn from_c(key: &str, c: i32, _rule: Rule) -> Result<Self, ConfigError> {
        usize::try_from(c).map_err(|_| {
            ConfigError::new(
                key,
                format!("{c} is negative; allowed range 0..={}", i32::MAX),
            )
        })
    }
}

/// The random policy's seed (`uint64_t` in C): any value.
impl KeyValue for u64 {
    type C = u64;

    fn parse(key: &str, text: &str, _rule: Rule) -> Result<Self, ConfigError> {
        parse_uint(key, text, u64::MAX)
    }

    fn format(self, _rule: Rule) -> String {
        self.to_string()
    }

    fn to_c(self) -> u64 {
        self
    }

    fn from_c(_key: &str, c: u64, _rule: Rule) -> Result<Self, ConfigError> {
        Ok(c)
    }
}

/// A two-valued key spelled by [`Rule::Options`] (`int32_t` 0 or 1 in C).
impl KeyValue for bool {
    type C = i32;

    fn parse(key: &str, text: &str, rule: Rule) -> Result<Self, ConfigError> {
        let options = options(rule);
        match options.iter().position(|&o| o == text) {
            Some(i) => Ok(i == 1),
            None => Err(ConfigError::new(
                key,
                format!(
                    "'{text}' is not allowed; allowed: {}, {}",
                    options[0], options[1]
                ),
            )),
        }
    }

    fn format(self, rule: Rule) -> String {
        options(rule)[self as usize].to_string()
    }

    fn to_c(self) -> i32 {
        self as i32
    }

    fn from_c(key: &str, c: i32, rule: Rule) -> Result<Self, ConfigError> {
        let options = options(rule);
        match c {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(ConfigError::new(
                key,
                format!("{v} is not 0 ({}) or 1 ({})", options[0], options[1]),
            )),
        }
    }
}

fn options(rule: Rule) -> [&'static str; 2] {
    match rule {
        Rule::Options(o) => o,
        _ => unreachable!("a two-valued key without its spellings"),
    }
}

/// `prompt` or a count (`int32_t` in C, -1 = prompt).
impl KeyValue for Prefix {
    type C = i32;

    fn parse(key: &str, text: &str, rule: Rule) -> Result<Self, ConfigError> {
        if text == "prompt" {
            return Ok(Prefix::Prompt);
        }
        let n = usize::parse(key, text, rule).map_err(|e| ConfigError {
            message: format!("{} (or 'prompt')", e.message),
            ..e
        })?;
        Ok(Prefix::First(n))
    }

    fn format(self, _rule: Rule) -> String {
        match self {
            Prefix::Prompt => "prompt".to_string(),
            Prefix::First(n) => n.to_string(),
        }
    }

    fn check(self, key: &str, rule: Rule) -> Result<(), ConfigError> {
        self.cells().check(key, rule)
    }

    fn to_c(self) -> i32 {
        self.c_value()
    }

    fn from_c(key: &str, c: i32, rule: Rule) -> Result<Self, ConfigError> {
        if c == -1 {
            return Ok(Prefix::Prompt);
        }
        let n = usize::from_c(key, c, rule).map_err(|e| ConfigError {
            message: format!("{} (or -1 = prompt)", e.message),
            ..e
        })?;
        Ok(Prefix::First(n))
    }
}

/// A number >= 0 with at most two decimals, held in hundredths so that parsing, formatting and
/// comparing are exact (`Hundredths(250)` is 2.5). C carries it as a `float` in whole units,
/// rounded to the nearest hundredth on the way in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hundredths(pub usize);

impl Hundredths {
    /// Largest value: 1000 in whole units.
    pub const MAX: Hundredths = Hundredths(100_000);

    /// The value in whole units (its C form).
    pub const fn get(self) -> f32 {
        self.0 as f32 / 100.0
    }
}

/// The canonical form of a value in hundredths ("3", "2.5", "0.25").
pub fn format_centi(v: usize) -> String {
    let s = format!("{}.{:02}", v / 100, v % 100);
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

impl KeyValue for Hundredths {
    type C = f32;

    /// A non-negative decimal with at most two decimals ("3", "2.5", "0.25"), up to 1000.
    fn parse(key: &str, value: &str, _rule: Rule) -> Result<Self, ConfigError> {
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
        if v > Self::MAX.0 {
            return Err(bad());
        }
        Ok(Hundredths(v))
    }

    fn format(self, _rule: Rule) -> String {
        format_centi(self.0)
    }

    fn to_c(self) -> f32 {
        self.get()
    }

    fn from_c(key: &str, m: f32, _rule: Rule) -> Result<Self, ConfigError> {
        if !(0.0..=Self::MAX.get()).contains(&m) {
            return Err(ConfigError::new(
                key,
                format!("{m} is out of range; allowed range 0..=1000"),
            ));
        }
        Ok(Hundredths((m * 100.0).round() as usize))
    }
}

/// [`KeyValue`] of a `named_enum!` type: spec names, C ids; errors list what is allowed.
pub(crate) trait Named: Copy + 'static {
    const ALL_NAMED: &'static [Self];
    const NOUN: &'static str;
    fn name(self) -> &'static str;
    fn id(self) -> i32;
}

pub(crate) fn parse_named<T: Named>(key: &str, text: &str) -> Result<T, ConfigError> {
    T::ALL_NAMED
        .iter()
        .copied()
        .find(|v| v.name() == text)
        .ok_or_else(|| {
            ConfigError::new(
                key,
                format!(
                    "'{text}' is not {}; allowed: {}",
                    T::NOUN,
                    names(T::ALL_NAMED, T::name)
                ),
            )
        })
}

pub(crate) fn named_from_c<T: Named>(key: &str, id: i32) -> Result<T, ConfigError> {
    T::ALL_NAMED
        .iter()
        .copied()
        .find(|v| v.id() == id)
        .ok_or_else(|| {
            let ids = T::ALL_NAMED.iter().map(|v| v.id());
            let (lo, hi) = (ids.clone().min().unwrap_or(0), ids.max().unwrap_or(0));
            ConfigError::new(
                key,
                format!("{id} is not {} id; allowed {lo}..={hi}", T::NOUN),
            )
        })
}
