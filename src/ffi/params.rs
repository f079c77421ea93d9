//! `beaconkv_params` ↔ `Params` and the C defaults, generated from the key table: each field
//! goes through its key's [`KeyValue`] conversion, so ranges and messages are the spec form's.

use crate::config::{
    for_each_key, ArchiveType, ConfigError, Hundredths, KeyValue, Params, Policy, Prefix,
    PromptMode, ReadPath, Reduce, Rule,
};

use super::types::beaconkv_params;

/// A key's default in its C form, in const context: the conversion of `KeyValue::to_c` for
/// each value kind (a unit test keeps the two equal), so that the C defaults are a constant (the
/// failure value of `beaconkv_params_default`).
macro_rules! const_to_c {
    (usize, $v:expr) => {
        $v as i32
    };
    (u64, $v:expr) => {
        $v
    };
    (bool, $v:expr) => {
        $v as i32
    };
    (Prefix, $v:expr) => {
        $v.c_value()
    };
    (Hundredths, $v:expr) => {
        $v.get()
    };
    ($named_enum:ident, $v:expr) => {
        $v as i32
    };
}

macro_rules! c_conversion {
    ($(
        $(#[$attr:meta])*
        $key:literal => $field:ident: $ty:ident = $default:expr,
            c $c:ident, flag $flag:expr, rule $rule:expr;
    )*) => {
        /// `beaconkv_params_default()`: `Params::DEFAULT` in its C form.
        pub const C_DEFAULTS: beaconkv_params = beaconkv_params {
            $( $c: const_to_c!($ty, Params::DEFAULT.$field), )*
        };

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
        assert_eq!(e.message, "9 is not a policy id; allowed 0..=5");
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
        c.read_path = 3;
        assert_eq!(
            c.to_params().unwrap_err().message,
            "3 is not a read path id; allowed 0..=2"
        );
        let mut c = C_DEFAULTS;
        c.prefix = -2;
        assert_eq!(
            c.to_params().unwrap_err().message,
            "-2 is negative; allowed range 0..=2147483647 (or -1 = prompt)"
        );
    }
}
