//! The sym parser and the prover: line 1 and line 2 are the two sides, the
//! other lines assumptions. Printed forms of a parsed expression parse again;
//! `prove_eq_with` runs under small limits and must stop near its time limit.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wrapir::sym::{egraph, parse, print, Facts};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let mut lines = text.lines();
    let Some(a) = lines.next() else { return };
    let b = lines.next().unwrap_or("0");
    let assumptions: Vec<&str> = lines.take(16).collect();
    let Ok(ea) = parse(a) else { return };
    for printed in [print::python(&ea), print::canonical(&ea)] {
        if let Err(e) = parse(&printed) {
            panic!("printed form {printed:?} of {a:?} does not parse: {e:?}");
        }
    }
    let _ = print::cpp(&ea);
    let _ = wrapir::sym::eval::eval_int(&ea, &Default::default());
    let Ok(eb) = parse(b) else { return };
    let Ok(facts) = Facts::parse(&assumptions) else { return };
    let _ = egraph::bounds(&ea, &facts);
    let limits = wrapir_fuzz::prover_limits();
    let started = std::time::Instant::now();
    let cpu_started = wrapir_fuzz::thread_cpu_time();
    let _ = egraph::prove_eq_with(&ea, &eb, &facts, &limits);
    // Every phase checks the limits: an attempt that runs far past its time
    // limit (the `0 == s0` blow-up ran 14 s under a 2 s limit) is a bug. The
    // thread's CPU time must pass the bound too: at `nice` on a loaded
    // machine the wall clock alone ran past it on a 4 ms input.
    let elapsed = started.elapsed();
    let bound = limits.time_limit * 4 + std::time::Duration::from_secs(1);
    let cpu = cpu_started.and_then(|c0| Some(wrapir_fuzz::thread_cpu_time()?.saturating_sub(c0)));
    assert!(
        elapsed < bound || cpu.is_some_and(|c| c < bound),
        "the prover ran {elapsed:?} ({cpu:?} of CPU) under a {:?} time limit",
        limits.time_limit
    );
});
