//! The C ABI called from Rust, over the shared fake host's C table: the panic boundary of every
//! context function, fallback to position-only eviction, host errors, the last-error lifetime,
//! the configuration and sizing entry points.

use std::ffi::{c_char, CStr, CString};

use beaconkv::ffi::*;
use beaconkv::testing::fake_host::{FakeHost, Lcg};
use half::f16;

const D: usize = 16;

fn params(spec: &str) -> beaconkv_params {
    let mut p = beaconkv_params_default();
    let spec = CString::new(spec).unwrap();
    let mut err = [0 as c_char; 256];
    let rc = unsafe { beaconkv_params_parse(spec.as_ptr(), &mut p, err.as_mut_ptr(), err.len()) };
    assert_eq!(rc, BEACONKV_OK, "{}", text(&err));
    p
}

fn text(buf: &[c_char]) -> String {
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

fn last_error(ctx: *const beaconkv_context) -> String {
    unsafe { CStr::from_ptr(beaconkv_last_error(ctx)) }
        .to_string_lossy()
        .into_owned()
}

fn stats(ctx: *const beaconkv_context, seq: i32) -> beaconkv_stats {
    let mut st = beaconkv_stats::default();
    assert_eq!(
        unsafe { beaconkv_get_stats(ctx, seq, &mut st) },
        BEACONKV_OK
    );
    st
}

/// A context over a boxed fake host (the box keeps the host's address fixed).
struct Ctx {
    host: Box<FakeHost>,
    ctx: *mut beaconkv_context,
    next: i32,
    rng: Lcg,
}

impl Ctx {
    fn new(spec: &str, host: FakeHost) -> Self {
        let mut host = Box::new(host);
        let table = host.c_host();
        let p = params(spec);
        let mut err = [0 as c_char; 256];
        let ctx = unsafe { beaconkv_context_new(&p, &table, err.as_mut_ptr(), err.len()) };
        assert!(!ctx.is_null(), "{}", text(&err));
        Ctx {
            host,
            ctx,
            next: 0,
            rng: Lcg(11),
        }
    }

    /// A host with two RoPE layers of 2 query heads over 1 kv head, 512 cells.
    fn beacon(spec: &str) -> Self {
        Self::new(spec, FakeHost::new(2, 2, 1, D, 512, 64).with_rope())
    }

    /// One decode call of `n` tokens of sequence 0; returns the hooks' statuses.
    fn decode(&mut self, n: i32) -> [i32; 3] {
        let (seq, ctx) = (0, self.ctx);
        // token ids: the positions
        let pos: Vec<i32> = (self.next..self.next + n).collect();
        let sid = vec![seq; n as usize];
        let qrow: Vec<i32> = (0..n).collect();
        let before = unsafe {
            beaconkv_before_batch(
                ctx,
                1,
                &seq,
                &n,
                std::ptr::null(),
                n,
                pos.as_ptr(),
                sid.as_ptr(),
                pos.as_ptr(),
            )
        };
        for i in 0..n {
            let p = self.next;
            self.next += 1;
            let cell = self.host.place(seq, p);
            for l in 0..self.host.layers.len() {
                let rng = &mut self.rng;
                self.host
                    .k_row_mut(l, cell)
                    .iter_mut()
                    .for_each(|v| *v = f16::from_f32(rng.next()));
                self.host
                    .q_row_mut(l, i as usize)
                    .iter_mut()
                    .for_each(|v| *v = rng.next());
            }
        }
        let after =
            unsafe { beaconkv_after_ubatch(ctx, n, pos.as_ptr(), sid.as_ptr(), qrow.as_ptr()) };
        [before, after, unsafe { beaconkv_after_decode(ctx) }]
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        unsafe { beaconkv_context_free(self.ctx) };
    }
}

#[test]
fn panic_in_a_hook_falls_back_to_position_only_eviction() {
    let mut c = Ctx::beacon("beacon,budget=64,min=48,window=8,prefix=4,prompt=inside");
    assert_eq!(c.decode(40), [BEACONKV_OK; 3]);
    for _ in 0..24 {
        assert_eq!(c.decode(1), [BEACONKV_OK; 3]);
    }
    assert_eq!(c.host.count(0), 64, "full: the next token needs room");
    assert!(unsafe { beaconkv_is_enabled(c.ctx) });
    unsafe { debug_panic_next_call(c.ctx) };
    let [before, after, decode] = c.decode(1);
    assert_eq!(before, BEACONKV_ERR_PANIC);
    assert_eq!((after, decode), (BEACONKV_OK, BEACONKV_OK));
    assert!(
        c.host.count(0) <= 64,
        "the retry made room in fallback mode"
    );
    assert!(!unsafe { beaconkv_is_enabled(c.ctx) });
    let msg = last_error(c.ctx);
    assert!(
        msg.contains("panic") && msg.contains("beaconkv_before_batch"),
        "{msg}"
    );
    let st = stats(c.ctx, -1);
    assert_eq!((st.disabled, st.fallback), (1, 1));

    let syncs = c.host.syncs;
    for _ in 0..300 {
        assert_eq!(c.decode(1), [BEACONKV_OK; 3]);
        assert!(c.host.count(0) <= 64);
    }
    assert_eq!(c.host.syncs, syncs, "fallback reads no K and no query");
    let kept = c.host.positions(0);
    assert_eq!(kept[..4], [0, 1, 2, 3], "prefix kept");
    assert_eq!(*kept.last().unwrap(), c.next - 1, "newest kept");
    let said: Vec<_> = c
        .host
        .logs
        .iter()
        .filter(|m| m.contains("position-only"))
        .collect();
    assert_eq!(said.len(), 1, "said once: {:?}", c.host.logs);
}

/// Every function taking a context goes through the same boundary: an injected panic returns
/// the function's failure value, records the message and moves the context to fallback mode.
#[test]
fn every_context_function_survives_a_panic() {
    type Call = Box<dyn Fn(*mut beaconkv_context) -> i64>;
    let zero = 0i32;
    let calls: Vec<(&str, Call, i64)> = vec![
        (
            "beaconkv_context_params",
            Box::new(|c| {
                let mut p = beaconkv_params_default();
                unsafe { beaconkv_context_params(c, &mut p) as i64 }
            }),
            BEACONKV_ERR_PANIC as i64,
        ),
        (
            "beaconkv_refresh_layers",
            Box::new(|c| unsafe { beaconkv_refresh_layers(c) as i64 }),
            BEACONKV_ERR_PANIC as i64,
        ),
        (
            "beaconkv_before_batch",
            Box::new(move |c| unsafe {
                beaconkv_before_batch(c, 1, &zero, &zero, std::ptr::null(), 1, &zero, &zero, &zero)
                    as i64
            }),
            BEACONKV_ERR_PANIC as i64,
        ),
        (
            "beaconkv_after_ubatch",
            Box::new(move |c| unsafe { beaconkv_after_ubatch(c, 1, &zero, &zero, &zero) as i64 }),
            BEACONKV_ERR_PANIC as i64,
        ),
        (
            "beaconkv_after_decode",
            Box::new(|c| unsafe { beaconkv_after_decode(c) as i64 }),
            BEACONKV_ERR_PANIC as i64,
        ),
        (
            "beaconkv_seq_removed",
            Box::new(|c| unsafe {
                beaconkv_seq_removed(c, 0, -1, -1);
                0
            }),
            0,
        ),
        (
            "beaconkv_seq_copied",
            Box::new(|c| unsafe {
                beaconkv_seq_copied(c, 0, 1, -1, -1);
                0
            }),
            0,
        ),
        (
            "beaconkv_seq_state_size",
            Box::new(|c| unsafe { beaconkv_seq_state_size(c, 0) as i64 }),
            0,
        ),
        (
            "beaconkv_seq_state_get",
            Box::new(|c| {
                let mut buf = [0u8; 64];
                unsafe { beaconkv_seq_state_get(c, 0, buf.as_mut_ptr(), buf.len()) }
            }),
            BEACONKV_ERR_PANIC as i64,
        ),
        (
            "beaconkv_seq_state_set",
            Box::new(|c| {
                let buf = [0u8; 8];
                unsafe { beaconkv_seq_state_set(c, 0, buf.as_ptr(), buf.len()) as i64 }
            }),
            BEACONKV_ERR_PANIC as i64,
        ),
        (
            "beaconkv_get_stats",
            Box::new(|c| {
                let mut st = beaconkv_stats::default();
                unsafe { beaconkv_get_stats(c, 0, &mut st) as i64 }
            }),
            BEACONKV_ERR_PANIC as i64,
        ),
        (
            "beaconkv_seq_override",
            Box::new(|c| unsafe { beaconkv_seq_override(c, 0, 48, -1, 0) as i64 }),
            BEACONKV_ERR_PANIC as i64,
        ),
        (
            "beaconkv_seq_params",
            Box::new(|c| {
                let mut p = beaconkv_params_default();
                unsafe { beaconkv_seq_params(c, 0, &mut p) as i64 }
            }),
            BEACONKV_ERR_PANIC as i64,
        ),
        (
            "beaconkv_is_enabled",
            Box::new(|c| unsafe { beaconkv_is_enabled(c) as i64 }),
            0,
        ),
    ];
    for (name, call, failure) in &calls {
        let c = Ctx::beacon("beacon,budget=64,min=48,window=8");
        unsafe { debug_panic_next_call(c.ctx) };
        assert_eq!(call(c.ctx), *failure, "{name}");
        let msg = last_error(c.ctx);
        assert!(
            msg.contains("internal panic") && msg.contains(name),
            "{name}: {msg}"
        );
        assert_eq!(stats(c.ctx, -1).fallback, 1, "{name}");
        let logged = c.host.logs.iter().filter(|m| m.contains(name)).count();
        assert_eq!(logged, 1, "{name}: {:?}", c.host.logs);
    }
}

#[test]
fn failing_evict_is_a_host_error_and_the_next_call_retries() {
    let mut c = Ctx::new(
        "random,budget=32,window=8,prompt=inside",
        FakeHost::new(0, 1, 1, D, 128, 8),
    );
    c.decode(32);
    c.host.fail.seq_evict = 1;
    assert_eq!(c.decode(1)[0], BEACONKV_ERR_HOST);
    assert!(
        last_error(c.ctx).contains("seq_evict"),
        "{}",
        last_error(c.ctx)
    );
    assert!(
        unsafe { beaconkv_is_enabled(c.ctx) },
        "the policy is not at fault"
    );
    assert_eq!(c.decode(1), [BEACONKV_OK; 3]);
    assert!(c.host.count(0) <= 32);
}

#[test]
fn failing_query_read_moves_to_fallback_and_eviction_goes_on() {
    let mut host = FakeHost::new(2, 2, 1, D, 512, 64).with_rope();
    host.via_read_rows = true;
    let mut c = Ctx::new("beacon,budget=64,window=8,prompt=inside", host);
    c.decode(30);
    c.host.fail.read_rows = 1;
    assert_eq!(c.decode(1)[1], BEACONKV_ERR_HOST);
    assert!(last_error(c.ctx).contains("read_rows"));
    assert_eq!(stats(c.ctx, 0).fallback, 1);
    let reads = (c.host.k_reads, c.host.q_reads);
    for _ in 0..200 {
        assert_eq!(c.decode(1), [BEACONKV_OK; 3]);
        assert!(c.host.count(0) <= 64);
    }
    assert_eq!((c.host.k_reads, c.host.q_reads), reads);
    assert!(stats(c.ctx, 0).evicted > 0);
}

#[test]
fn no_readable_layer_evicts_by_position() {
    let mut host = FakeHost::new(1, 2, 1, D, 512, 64);
    host.layers[0].raw.k_type = 99;
    let mut c = Ctx::new("beacon,budget=64,window=8,prompt=inside", host);
    for _ in 0..150 {
        c.decode(1);
        assert!(c.host.count(0) <= 64);
    }
    assert!(!unsafe { beaconkv_is_enabled(c.ctx) });
    let st = stats(c.ctx, 0);
    assert_eq!((st.disabled, st.fallback), (1, 1));
    assert!(st.evicted > 0);
}

/// The failed context still follows the host's sequences: it never keeps state for a sequence
/// the host removed.
#[test]
fn fallback_context_tracks_removals_and_copies() {
    let mut c = Ctx::beacon("beacon,budget=64,window=8");
    c.decode(20);
    unsafe { debug_panic_next_call(c.ctx) };
    assert_eq!(c.decode(1)[0], BEACONKV_ERR_PANIC);
    assert_eq!(stats(c.ctx, -1).fallback, 1);
    unsafe { beaconkv_seq_copied(c.ctx, 0, 1, -1, -1) };
    assert_eq!(stats(c.ctx, 1).n_tokens, 21);
    assert!(unsafe { beaconkv_seq_state_size(c.ctx, 1) } > 0);
    unsafe { beaconkv_seq_removed(c.ctx, 1, -1, -1) };
    assert_eq!(stats(c.ctx, 1).n_tokens, 0);
    assert_eq!(unsafe { beaconkv_seq_state_size(c.ctx, 1) }, 0);
    unsafe { beaconkv_seq_removed(c.ctx, -1, -1, -1) };
    assert_eq!(stats(c.ctx, -1).n_tokens, 0);
    assert_eq!(unsafe { beaconkv_seq_state_size(c.ctx, 0) }, 0);
}

#[test]
fn last_error_pointer_lives_with_the_context() {
    let c = Ctx::beacon("beacon,budget=64,window=8");
    let p = unsafe { beaconkv_last_error(c.ctx) };
    assert_eq!(unsafe { CStr::from_ptr(p) }.to_bytes(), b"");
    let mut small = [0u8; 4];
    let rc = unsafe { beaconkv_seq_state_get(c.ctx, 7, small.as_mut_ptr(), small.len()) };
    assert_eq!(rc, BEACONKV_ERR_INVALID as i64);
    let first = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
    assert!(first.contains("unknown sequence 7"), "{first}");
    let rc = unsafe { beaconkv_seq_state_set(c.ctx, 0, small.as_ptr(), small.len()) };
    assert_eq!(rc, BEACONKV_ERR_INVALID);
    assert_eq!(unsafe { beaconkv_last_error(c.ctx) }, p, "same buffer");
    let second = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
    assert!(second.starts_with("beaconkv_seq_state_set"), "{second}");

    let mut buf = [0 as c_char; 10];
    let n = unsafe { beaconkv_last_error_copy(c.ctx, buf.as_mut_ptr(), buf.len()) };
    assert_eq!(n as usize, second.len());
    assert_eq!(text(&buf), second[..9]);
    let n0 = unsafe { beaconkv_last_error_copy(c.ctx, std::ptr::null_mut(), 0) };
    assert_eq!(n0, n, "length query");
    let null = unsafe { beaconkv_last_error_copy(std::ptr::null(), buf.as_mut_ptr(), 10) };
    assert_eq!(null, BEACONKV_ERR_NULL);
    assert_eq!(unsafe { *beaconkv_last_error(std::ptr::null()) }, 0);
}

#[test]
fn c_params_round_trip_and_reject_bad_fields() {
    let p = params("recent,budget=300,min=260,prefix=12,prefix_max=40,reduce=zmean,span=5,seed=9");
    assert_eq!(p.prefix_max, 40);
    let mut buf = [0 as c_char; 256];
    let n = unsafe { beaconkv_params_format(&p, buf.as_mut_ptr(), buf.len()) };
    let formatted = text(&buf);
    assert_eq!(n as usize, formatted.len());
    assert_eq!(params(&formatted), p);

    let mut err = [0 as c_char; 256];
    for (field, key) in [
        ("policy", "policy"),
        ("window", "window"),
        ("prefix", "prefix"),
        ("prefix_max", "prefix_max"),
        ("span", "span"),
    ] {
        let mut bad = beaconkv_params_default();
        match field {
            "policy" => bad.policy = 17,
            "window" => bad.window = -3,
            "prefix" => bad.prefix = -2,
            "prefix_max" => bad.prefix_max = -1,
            _ => bad.span = 4,
        }
        let rc = unsafe { beaconkv_params_validate(&bad, err.as_mut_ptr(), err.len()) };
        assert_eq!(rc, BEACONKV_ERR_INVALID);
        assert!(text(&err).contains(key), "{field}: {}", text(&err));
    }
}

fn check_flag(flag: Option<&str>, kv: &str) -> (i32, String) {
    let flag = flag.map(|f| CString::new(f).unwrap());
    let kv = CString::new(kv).unwrap();
    let mut err = [0 as c_char; 512];
    let rc = unsafe {
        beaconkv_check_flag_value(
            flag.as_ref().map_or(std::ptr::null(), |f| f.as_ptr()),
            kv.as_ptr(),
            err.as_mut_ptr(),
            err.len(),
        )
    };
    (rc, text(&err))
}

fn spec_check(spec: &str) -> (i32, String) {
    let spec = CString::new(spec).unwrap();
    let mut err = [0 as c_char; 512];
    let rc = unsafe { beaconkv_spec_check(spec.as_ptr(), err.as_mut_ptr(), err.len()) };
    (rc, text(&err))
}

#[test]
fn flag_values_are_checked_on_their_own() {
    assert_eq!(
        check_flag(Some("--kv-window"), "window=5000"),
        (BEACONKV_OK, String::new())
    );
    assert_eq!(
        check_flag(Some("--kv-compress"), "streaming").0,
        BEACONKV_OK
    );
    let (rc, msg) = check_flag(Some("--kv-window"), "window=-1");
    assert_eq!(rc, BEACONKV_ERR_INVALID);
    assert!(msg.starts_with("--kv-window: beaconkv: window: "), "{msg}");
    let (rc, msg) = check_flag(Some("--kv-budget"), "budget=0");
    assert_eq!(rc, BEACONKV_ERR_INVALID);
    assert!(msg.starts_with("--kv-budget: "), "{msg}");
    let (rc, msg) = check_flag(None, "span=2");
    assert_eq!(rc, BEACONKV_ERR_INVALID);
    assert!(
        msg.starts_with("--kv-compress-spec span=: beaconkv: span:"),
        "{msg}"
    );
    let (rc, msg) = check_flag(Some("--kv-compress-spec"), "budget=64,turbo=1");
    assert_eq!(rc, BEACONKV_ERR_INVALID);
    assert!(
        msg.starts_with("--kv-compress-spec: beaconkv: turbo: unknown key"),
        "{msg}"
    );
    let rc = unsafe {
        beaconkv_check_flag_value(std::ptr::null(), std::ptr::null(), std::ptr::null_mut(), 0)
    };
    assert_eq!(rc, BEACONKV_ERR_NULL);
}

#[test]
fn whole_specs_name_the_flag_of_the_offending_key() {
    assert_eq!(
        spec_check("beacon,budget=512,window=64"),
        (BEACONKV_OK, String::new())
    );
    for (spec, lead) in [
        (
            "budget=64,window=100",
            "--kv-window: beaconkv: window: window + prefix = 100",
        ),
        ("budget=64,window=8,prefix=60", "--kv-prefix: "),
        ("policy=fast", "--kv-compress: "),
        ("budget=0", "--kv-budget: "),
        ("beacon,beacons=0,recent=0", "--kv-beacons: "),
        ("policy=recent,recent=0", "--kv-recent: "),
        (
            "budget=100,min=101",
            "--kv-compress-spec min=: beaconkv: min: ",
        ),
        ("turbo=3", "--kv-compress-spec turbo=: "),
    ] {
        let (rc, msg) = spec_check(spec);
        assert_eq!(rc, BEACONKV_ERR_INVALID, "{spec}");
        assert!(msg.starts_with(lead), "{spec}: {msg}");
    }
    let rc = unsafe { beaconkv_spec_check(std::ptr::null(), std::ptr::null_mut(), 0) };
    assert_eq!(rc, BEACONKV_ERR_NULL);
}

#[test]
fn sizing_entry_points() {
    let p = params("budget=256,prompt=inside");
    unsafe {
        assert_eq!(beaconkv_max_ubatch(&p), 32);
        assert_eq!(beaconkv_max_ubatch(&params("budget=2048")), 256);
        assert_eq!(beaconkv_max_ubatch(&params("none")), 0);
        assert_eq!(beaconkv_max_ubatch(std::ptr::null()), BEACONKV_ERR_NULL);
        // the prompt's room beside the budget: the budget by default, prompt_max when set
        assert_eq!(beaconkv_prompt_room(&p), 0);
        assert_eq!(beaconkv_prompt_room(&params("budget=256")), 256);
        assert_eq!(
            beaconkv_prompt_room(&params("budget=256,prompt_max=1024")),
            1024
        );
        assert_eq!(
            beaconkv_prompt_room(&params("budget=256,prompt=window,prompt_max=100")),
            100
        );
        assert_eq!(beaconkv_prompt_room(std::ptr::null()), BEACONKV_ERR_NULL);
        assert_eq!(beaconkv_physical_cells(&p, 1, 32, false, 8192, 0), 288);
        assert_eq!(beaconkv_physical_cells(&p, 4, 32, false, 32768, 0), 4 * 288);
        assert_eq!(
            beaconkv_physical_cells(&p, 4, 32, true, 32768, 0),
            4 * 256 + 32
        );
        assert_eq!(
            beaconkv_physical_cells(&p, 1, 32, false, 256, 0),
            0,
            "no gain"
        );
        assert_eq!(beaconkv_physical_cells(&p, 1, 32, false, 8192, 1000), 1000);
        assert_eq!(
            beaconkv_physical_cells(std::ptr::null(), 1, 32, false, 8192, 0),
            0
        );
        let mut bad = p;
        bad.span = 2;
        assert_eq!(beaconkv_physical_cells(&bad, 1, 32, false, 8192, 0), 0);
        assert_eq!(beaconkv_max_ubatch(&bad), BEACONKV_ERR_INVALID);
        assert_eq!(beaconkv_prompt_room(&bad), BEACONKV_ERR_INVALID);
    }
}

/// With the physical cells and ubatch the sizing functions give, a prompt far longer than the
/// budget streams through a cache of exactly that many cells, and so does generation.
#[test]
fn sized_cache_never_overflows() {
    for spec in [
        "beacon,budget=256",
        "streaming,budget=300,window=32",
        "random,budget=100,min=100",
    ] {
        let p = params(spec);
        let ubatch = unsafe { beaconkv_max_ubatch(&p) };
        let cells = unsafe { beaconkv_physical_cells(&p, 1, 512.min(ubatch), false, 1 << 20, 0) };
        let host = FakeHost::new(1, 2, 1, D, cells as usize, ubatch as usize).with_rope();
        let mut c = Ctx::new(spec, host);
        for _ in 0..40 {
            assert_eq!(c.decode(ubatch), [BEACONKV_OK; 3], "{spec}: prompt");
        }
        for _ in 0..300 {
            assert_eq!(c.decode(1), [BEACONKV_OK; 3], "{spec}: generation");
        }
        // prompt=keep (the default): the prompt's first `budget` cells on top of the budget
        assert!(c.host.count(0) <= 2 * p.budget as usize, "{spec}");
    }
}
