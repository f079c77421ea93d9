//! Unit tests of the spec form: parsing, errors naming keys, canonical text, flags.

use super::value::format_centi;
use super::*;

#[test]
fn recall_margin_takes_two_decimals() {
    let p = Params::parse("archive=64,recall_margin=2.5").unwrap();
    assert_eq!(p.recall_margin, Hundredths(250));
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
    // rkv's scores are no logits the archive could rank its pages against
    let e = Params::parse("rkv,archive=64").unwrap_err();
    assert_eq!(e.key, "archive");
    assert!(e.message.contains("rkv"), "{e}");
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
    let p =
        Params::parse("random,budget=300,min=250,prefix=4,reduce=zmean,span=5,seed=99").unwrap();
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
    assert_names("policy=rkv,recent=0", "recent");
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

/// An empty key ("=5") is named by its whole item, so that no message reads "beaconkv: : ...",
/// naming no key.
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

#[test]
fn default_canonical_spec_is_stable() {
    assert_eq!(
        Params::default().to_spec(),
        "policy=beacon,budget=1024,min=0,beacons=16,recent=16,window=64,prefix=prompt,\
         prefix_max=0,prompt=keep,prompt_max=0,reduce=max,span=1,qcap=64,seed=42,read=auto,\
         score=prob,archive=0,archive_type=same,page=16,recall_every=4,recall_margin=2,\
         recall_match=8"
    );
}
