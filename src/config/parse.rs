//! The spec-string grammar: items, the bare policy name, and applying a spec to `Params`.

use super::enums::Policy;
use super::keys::KEYS;
use super::value::names;
use super::{ConfigError, Params};

impl Params {
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
