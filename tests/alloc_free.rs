//! The decode hot path allocates nothing once a context is warm: a counting global allocator
//! (this test binary's own) counts the allocations made on the calling thread inside each C-ABI
//! hook call of long generations. Decode steps that do not compress must allocate nothing; after
//! warm-up, compression passes must not either (all buffers only grow).
//!
//! The fake host does not allocate when warm (see `src/testing/fake_host.rs`), so what is counted is the
//! plugin's.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::ffi::{c_char, CStr, CString};

use beaconkv::ffi::*;
use beaconkv::testing::fake_host::{FakeHost, Lcg};
use half::f16;

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<usize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        System.realloc(ptr, layout, new_size)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

fn note() {
    // try_with: thread-locals being torn down at thread exit are not counted.
    let _ = COUNTING.try_with(|on| {
        if on.get() {
            let _ = COUNT.try_with(|c| c.set(c.get() + 1));
        }
    });
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Allocations `f` makes on this thread.
fn allocations<R>(f: impl FnOnce() -> R) -> (usize, R) {
    COUNT.with(|c| c.set(0));
    COUNTING.with(|on| on.set(true));
    let r = f();
    COUNTING.with(|on| on.set(false));
    (COUNT.with(|c| c.get()), r)
}

const D: usize = 32;

/// Run a prompt and `steps` single-token decode steps; returns, per step after `warm` steps,
/// (allocations, whether the step compressed).
fn run(spec: &str, via_read_rows: bool, steps: usize, warm: usize) -> Vec<(usize, bool)> {
    let mut host = Box::new(FakeHost::new(3, 4, 2, D, 1024, 64).with_rope());
    host.via_read_rows = via_read_rows;
    let table = host.c_host();
    let mut p = beaconkv_params_default();
    let cspec = CString::new(spec).unwrap();
    let mut err = [0 as c_char; 256];
    unsafe {
        assert_eq!(
            beaconkv_params_parse(cspec.as_ptr(), &mut p, err.as_mut_ptr(), err.len()),
            BEACONKV_OK
        );
    }
    let ctx = unsafe { beaconkv_context_new(&p, &table, err.as_mut_ptr(), err.len()) };
    assert!(!ctx.is_null());
    let mut rng = Lcg(3);
    let mut next = 0i32;
    let seq = 0i32;
    let mut step = |n: i32, host: &mut FakeHost| -> (usize, bool) {
        // token ids: the positions
        let pos: Vec<i32> = (next..next + n).collect();
        let sid = vec![seq; n as usize];
        let qrow: Vec<i32> = (0..n).collect();
        let events = |ctx| {
            let mut st = beaconkv_stats::default();
            unsafe { beaconkv_get_stats(ctx, 0, &mut st) };
            st.compress_events
        };
        let before_events = events(ctx);
        let (a0, rc) = allocations(|| unsafe {
            let (p, s) = (pos.as_ptr(), sid.as_ptr());
            beaconkv_before_batch(ctx, 1, &seq, &n, std::ptr::null(), n, p, s, p)
        });
        assert_eq!(rc, BEACONKV_OK);
        for i in 0..n {
            let cell = host.place(seq, next);
            for l in 0..3 {
                host.k_row_mut(l, cell)
                    .iter_mut()
                    .for_each(|v| *v = f16::from_f32(rng.next()));
                host.q_row_mut(l, i as usize)
                    .iter_mut()
                    .for_each(|v| *v = rng.next());
            }
            next += 1;
        }
        let (a1, rc) = allocations(|| unsafe {
            beaconkv_after_ubatch(ctx, n, pos.as_ptr(), sid.as_ptr(), qrow.as_ptr())
        });
        assert_eq!(rc, BEACONKV_OK);
        let (a2, rc) = allocations(|| unsafe { beaconkv_after_decode(ctx) });
        assert_eq!(rc, BEACONKV_OK);
        (a0 + a1 + a2, events(ctx) > before_events)
    };
    for _ in 0..4 {
        step(25, &mut host);
    }
    let mut out = Vec::new();
    for i in 0..steps {
        let r = step(1, &mut host);
        if i >= warm {
            out.push(r);
        }
    }
    let msg = unsafe { CStr::from_ptr(beaconkv_last_error(ctx)) };
    assert!(msg.to_bytes().is_empty(), "{msg:?}");
    unsafe { beaconkv_context_free(ctx) };
    out
}

fn check(spec: &str, via_read_rows: bool) {
    let steps = run(spec, via_read_rows, 1500, 500);
    let quiet: Vec<usize> = steps.iter().filter(|s| !s.1).map(|s| s.0).collect();
    let passes: Vec<usize> = steps.iter().filter(|s| s.1).map(|s| s.0).collect();
    assert!(quiet.len() > 500, "{spec}: too few plain steps");
    assert!(passes.len() >= 10, "{spec}: too few compression passes");
    assert_eq!(
        quiet.iter().sum::<usize>(),
        0,
        "{spec}: decode steps without compression allocated"
    );
    assert_eq!(
        passes.iter().sum::<usize>(),
        0,
        "{spec}: warm compression passes allocated"
    );
}

#[test]
fn beacon_hot_path_does_not_allocate() {
    check("beacon,budget=256,beacons=8,recent=8", false);
    // the method's logit scores take the pruned path
    check("beacon,budget=256,beacons=8,recent=8,score=logit", false);
}

#[test]
fn beacon_over_read_rows_does_not_allocate() {
    check("beacon,budget=256,reduce=zmean,span=3,score=prob", true);
}

#[test]
fn recent_and_position_policies_do_not_allocate() {
    check("recent,budget=256,reduce=rank", false);
    check("streaming,budget=256", false);
    check("random,budget=256", false);
}

/// The counter itself works: an allocation inside the window is seen.
#[test]
fn the_counter_counts() {
    let (n, v) = allocations(|| vec![1u8; 100]);
    assert_eq!((n, v.len()), (1, 100));
}
