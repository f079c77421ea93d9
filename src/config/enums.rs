//! The named settings (`policy`, `reduce`, `archive_type`) and the protected prefix.

/// Declares a fieldless enum whose variants have a C id and a spec name, with `ALL` (in id
/// order), `from_id`, `name`, `from_name`, and its [`KeyValue`](super::value::KeyValue) as a spec
/// key (errors call a value by the given noun, e.g. "a policy", and list the allowed names/ids).
macro_rules! named_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident ($noun:literal) {
            $( $(#[$vmeta:meta])* $variant:ident = $id:literal => $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant = $id, )+
        }

        impl $name {
            /// Every variant, in id order.
            pub const ALL: [$name; [$($id),+].len()] = [$($name::$variant),+];
            /// The variant with C id `id`, if any.
            pub fn from_id(id: i32) -> Option<Self> {
                Self::ALL.into_iter().find(|v| *v as i32 == id)
            }

            /// The spec name (`to_spec` writes it, `from_name` reads it).
            pub fn name(self) -> &'static str {
                match self {
                    $( $name::$variant => $text, )+
                }
            }

            /// The spec name as a C string (static storage).
            pub fn c_name(self) -> &'static std::ffi::CStr {
                match self {
                    $( $name::$variant => const {
                        match std::ffi::CStr::from_bytes_with_nul(concat!($text, "\0").as_bytes()) {
                            Ok(s) => s,
                            Err(_) => panic!("a spec name holds a NUL"),
                        }
                    }, )+
                }
            }

            /// The variant spelled `name` in a spec, if any (case-sensitive).
            pub fn from_name(name: &str) -> Option<Self> {
                Self::ALL.into_iter().find(|v| v.name() == name)
            }
        }

        impl $crate::config::value::Named for $name {
            const ALL_NAMED: &'static [Self] = &$name::ALL;
            const NOUN: &'static str = $noun;
            fn name(self) -> &'static str {
                $name::name(self)
            }
            fn id(self) -> i32 {
                self as i32
            }
        }

        impl $crate::config::value::KeyValue for $name {
            type C = i32;
            fn parse(
                key: &str,
                text: &str,
                _rule: $crate::config::value::Rule,
            ) -> Result<Self, $crate::config::ConfigError> {
                $crate::config::value::parse_named(key, text)
            }
            fn format(self, _rule: $crate::config::value::Rule) -> String {
                self.name().to_string()
            }
            fn to_c(self) -> i32 {
                self as i32
            }
            fn from_c(
                key: &str,
                c: i32,
                _rule: $crate::config::value::Rule,
            ) -> Result<Self, $crate::config::ConfigError> {
                $crate::config::value::named_from_c(key, c)
            }
        }
    };
}

named_enum! {
    /// Which scorer decides the importance of a cell.
    pub enum Policy ("a policy") {
        None = 0 => "none",
        Beacon = 1 => "beacon",
        Recent = 2 => "recent",
        Streaming = 3 => "streaming",
        Random = 4 => "random",
        Rkv = 5 => "rkv",
    }
}

impl Policy {
    /// Policies that score cells with captured queries (and so need the query store and K).
    pub fn uses_queries(self) -> bool {
        matches!(self, Policy::Beacon | Policy::Recent | Policy::Rkv)
    }

    /// Policies that keep the ring of recent queries (`recent`) rather than the FPS buffer.
    pub fn uses_ring(self) -> bool {
        matches!(self, Policy::Recent | Policy::Rkv)
    }

    /// Policies whose scores the archive can rank evicted cells and recall candidates by.
    pub fn archives(self) -> bool {
        matches!(self, Policy::Beacon | Policy::Recent)
    }

    /// Policies whose score of one cell reads the other cells' keys (`rkv`'s redundancy), so
    /// every cell is scored, prefix and window too.
    pub fn scores_against_other_keys(self) -> bool {
        matches!(self, Policy::Rkv)
    }
}

named_enum! {
    /// How per-(layer, kv head) scores are folded into one score per cell.
    pub enum Reduce ("a reduction") {
        Max = 0 => "max",
        ZMean = 1 => "zmean",
        Rank = 2 => "rank",
    }
}

named_enum! {
    /// What the budget bounds of a sequence's prompt. `inside`: the prompt counts within the
    /// budget like any text (its first `prefix_max` cells protected); a prompt longer than the
    /// budget is compressed while it is read. `keep`: the prompt's first `prompt_max` cells are
    /// kept whole on top of the budget, which bounds everything after them. `window`: the prompt
    /// is read into `budget + prompt_max` cells and compressed once, at its end, scored by the
    /// queries of its last tokens and the beacons gathered while reading it; after that the
    /// budget bounds the whole sequence.
    pub enum PromptMode ("a prompt mode") {
        Inside = 0 => "inside",
        Keep = 1 => "keep",
        Window = 2 => "window",
    }
}

named_enum! {
    /// Where K is read and scored. `auto`: K in host memory is read in place by the library's
    /// kernels; K anywhere else (GPU, RPC) is scored on its own backend when the host can
    /// (`score_keys`), else copied row by row (`read_rows`). `copy` always copies, `backend`
    /// always scores on the backend: both for testing and measuring those paths.
    pub enum ReadPath ("a read path") {
        Auto = 0 => "auto",
        Copy = 1 => "copy",
        Backend = 2 => "backend",
    }
}

named_enum! {
    /// Element type of the archive of evicted cells.
    pub enum ArchiveType ("an archive type") {
        /// The cache's own row bytes: a recall restores them exactly.
        Same = 0 => "same",
        Q8_0 = 1 => "q8_0",
        Q4_0 = 2 => "q4_0",
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

impl Prefix {
    /// The C form: -1 for `Prompt`, else the count.
    pub const fn c_value(self) -> i32 {
        match self {
            Prefix::Prompt => -1,
            Prefix::First(n) => n as i32,
        }
    }

    /// The numeric part (0 for `Prompt`, whose length is capped at run time).
    pub fn cells(self) -> usize {
        match self {
            Prefix::Prompt => 0,
            Prefix::First(n) => n,
        }
    }
}
