//! `beaconkv_params` ↔ `Params`, generated from the key table: each field goes through its
//! key's [`KeyValue`] conversion, so ranges and messages are the spec form's.

use crate::config::{
    for_each_key, ArchiveType, ConfigError, Hundredths, KeyValue, Params, Policy, Prefix, Reduce,
    Rule,
};

use super::types::beaconkv_params;

/// `beaconkv_params_default()`, spelled out so that it is a constant (and the failure value of
/// that export); a unit test keeps it equal to `Params::default()`.
pub const C_DEFAULTS: beaconkv_params = beaconkv_params {
    policy: Policy::Beacon as i32,
    budget: 1024,
    budget_min: 0,
    n_beacons: 16,
    n_recent: 16,
    window: 64,
    prefix: -1,
    reduce: Reduce::Max as i32,
    span: 1,
    q_capacity: 64,
    seed: 42,
    read_copy: 0,
    score: 0,
    prefix_max: 0,
    archive: 0,
    archive_type: ArchiveType::Same as i32,
    page: 16,
    recall_every: 4,
    recall_margin: 2.0,
    recall_match: 8,
};

macro_rules! c_conversion {
    ($(
        $(#[$attr:meta])*
        $key:literal => $field:ident: $ty:ty = $default:expr,
            c $c:ident, flag $flag:expr, rule $rule:expr;
    )*) => {
        impl beaconkv_params {
            /// The C form of `p` (exact for every valid `p`).
            pub fn from_params(p: &Params) -> Self {
                beaconkv_params { $( $c: KeyValue::to_c(p.$field), )* }
            }

            /// The Rust form, validated; errors name the field's spec key (fields are read in
            /// key order, so the first bad field is the one named).
            pub fn to_params(&self) -> Result<Params, ConfigError> {
                let p = Params {
                    $( $field: <$ty as KeyValue>::from_c($key, self.$c, $rule)?, )*
                };
                p.validate()?;
                Ok(p)
            }
        }
    };
}
for_each_key!(c_conversion);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_defaults_are_the_rust_defaults() {
        assert_eq!(C_DEFAULTS, beaconkv_params::from_params(&Params::default()));
        assert_eq!(C_DEFAULTS.to_params().unwrap(), Params::default());
    }

    #[test]
    fn c_margin_rounds_to_hundredths() {
        let mut c = C_DEFAULTS;
        c.recall_margin = 2.504;
        assert_eq!(c.to_params().unwrap().recall_margin, Hundredths(250));
        c.recall_margin = 1000.5;
        assert_eq!(c.to_params().unwrap_err().key, "recall_margin");
        c.recall_margin = f32::NAN;
        assert_eq!(c.to_params().unwrap_err().key, "recall_margin");
    }

    #[test]
    fn c_ids_out_of_range_name_the_range_of_the_enum() {
        let mut c = C_DEFAULTS;
        c.policy = 9;
        let e = c.to_params().unwrap_err();
        assert_eq!(e.message, "9 is not a policy id; allowed 0..=4");
        let mut c = C_DEFAULTS;
        c.archive_type = 3;
        let e = c.to_params().unwrap_err();
        assert_eq!(e.message, "3 is not an archive type id; allowed 0..=2");
        let mut c = C_DEFAULTS;
        c.reduce = -1;
        assert_eq!(
            c.to_params().unwrap_err().message,
            "-1 is not a reduction id; allowed 0..=2"
        );
        let mut c = C_DEFAULTS;
        c.read_copy = 2;
        assert_eq!(
            c.to_params().unwrap_err().message,
            "2 is not 0 (auto) or 1 (copy)"
        );
        let mut c = C_DEFAULTS;
        c.prefix = -2;
        assert_eq!(
            c.to_params().unwrap_err().message,
            "-2 is negative; allowed range 0..=2147483647 (or -1 = prompt)"
        );
    }
}
