//! Up to four parsed, valid programs (separated by a `---` line) run as the
//! ranks of one world on the host, their collectives meeting in a
//! `HostCommunicator` (inputs as for `interp_host`; a 50 ms collective
//! timeout): mismatched, missing and failing ranks must end in errors, never
//! a panic or a hang.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wrapir::exec::collective::{run_ranks, CollectiveOptions, ProcessGroups, RankJob};
use wrapir::exec::host::HostBackend;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let limits = wrapir_fuzz::limits();
    let mut programs = Vec::new();
    for part in text.split("\n---\n").take(4) {
        let Some(program) = wrapir_fuzz::valid_program(part.as_bytes()) else { return };
        programs.push(program);
    }
    let mut inputs = Vec::new();
    for program in &programs {
        let hints = wrapir_fuzz::hints(program, 8);
        let Some(i) = wrapir_fuzz::host_inputs(program, &hints) else { return };
        inputs.push(i);
    }
    let jobs = programs
        .iter()
        .zip(&inputs)
        .map(|(program, inputs)| RankJob {
            program,
            backend: HostBackend::default().with_limits(limits),
            inputs,
        })
        .collect();
    let options = CollectiveOptions {
        timeout: std::time::Duration::from_millis(50),
        max_bytes: limits.max_alloc_bytes,
        stack_bytes: limits.stack_bytes().unwrap_or(wrapir::Limits::BASE_STACK_BYTES as usize),
    };
    let _ = run_ranks(ProcessGroups::world(programs.len()), jobs, options);
});
