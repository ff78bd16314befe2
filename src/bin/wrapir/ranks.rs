//! `wrapir run` and `wrapir check` on a rank set (a directory with
//! `ranks.json`: one bundle per rank of a multi-rank program).

use super::*;
use wrapir::bundle::RankSet;
use wrapir::exec::collective::{run_ranks, CollectiveOptions, RankJob, RankResults};

fn open(path: &Path) -> Result<RankSet> {
    RankSet::open(path, &limits()).map_err(|e| anyhow::anyhow!("{e}"))
}

/// `wrapir run RANKSET`: on cpu every rank runs on its own thread, the
/// collectives meeting in one host communicator; on cuda rank `r` runs on GPU
/// `r`, the collectives on NCCL; either way each rank's outputs are compared
/// with its own references. On meta each rank runs alone on its declared
/// layouts.
pub(crate) fn run_rank_set(args: &RunArgs) -> Result<ExitCode> {
    if args.inputs.is_some() || args.expect.is_some() {
        bail!("`--inputs` and `--expect` name one program's tensors; a rank set runs each rank's own bundle inputs");
    }
    let set = open(&args.program)?;
    set.check()
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.program.display()))?;
    let world = set.groups().world_size;
    match args.device {
        RunDevice::Meta => {
            let mut status = ExitCode::SUCCESS;
            for (rank, bundle) in set.ranks().iter().enumerate() {
                println!("rank {rank} ({}):", bundle.name());
                let program = with_guards(bundle)?;
                let inputs = Inputs {
                    tensors: bundle.inputs()?,
                    source: Some(bundle.display(wrapir::bundle::INPUTS)),
                };
                if run_meta(args, &program, bundle.name(), &inputs)? != ExitCode::SUCCESS {
                    status = ExitCode::from(1);
                }
            }
            Ok(status)
        }
        RunDevice::Cpu | RunDevice::Cuda => {
            let mut programs = Vec::with_capacity(world);
            let mut inputs = Vec::with_capacity(world);
            let mut references_of = Vec::with_capacity(world);
            for bundle in set.ranks() {
                programs.push(with_guards(bundle)?.into_owned());
                inputs.push(bundle.inputs()?.unwrap_or_default());
                // Ranks are compared as given (no loosening on cuda) and their mutated inputs not judged.
                references_of.push(references(args, bundle, false)?);
            }
            let options = CollectiveOptions {
                max_bytes: limits().max_alloc_bytes,
                stack_bytes: limits().stack_bytes()?,
                ..Default::default()
            };
            let (results, device) = if args.device == RunDevice::Cuda {
                (run_on_gpus(args, &set, &programs, &inputs, options)?, "cuda")
            } else {
                (run_on_host(&set, &programs, &inputs, options)?, "cpu")
            };
            let results = results.map_err(|e| anyhow::anyhow!("{}: {e}", args.program.display()))?;
            match args.device {
                RunDevice::Cuda => {
                    println!("device: cuda ({world} ranks, one GPU and thread each, collectives on NCCL)")
                }
                _ => println!("device: cpu ({world} ranks, one thread each)"),
            }
            let mut failed = Vec::new();
            let mut status = ExitCode::SUCCESS;
            for (rank, (result, references)) in results.into_iter().zip(&references_of).enumerate() {
                println!("rank {rank} ({}):", set.ranks()[rank].name());
                match result {
                    Ok(out) => {
                        let ran_on = match args.device {
                            RunDevice::Cuda => format!("cuda:{rank}"),
                            _ => "cpu".to_string(),
                        };
                        let mut text = describe_host_outputs(&out.outputs, args.print, &ran_on);
                        text += &describe_symbols(&programs[rank], &out.symbols);
                        write_output(None, &text)?;
                        let bundle = &set.ranks()[rank];
                        let judgement = judge_run(bundle, references, &out.outputs, After::Device)?;
                        if print_output_verdicts(&out.outputs, &judgement)? != ExitCode::SUCCESS {
                            status = ExitCode::from(1);
                        }
                    }
                    Err(e) => failed.push(format!("rank {rank} ({}): {e}", set.ranks()[rank].name())),
                }
            }
            if !failed.is_empty() {
                bail!("running {} on {device}:\n{}", args.program.display(), failed.join("\n"));
            }
            Ok(status)
        }
    }
}

type RanksRun = std::result::Result<RankResults, wrapir::exec::ExecError>;

/// Every rank on its own thread, the collectives meeting in one host communicator.
fn run_on_host(
    set: &RankSet,
    programs: &[ir::Program],
    inputs: &[indexmap::IndexMap<String, wrapir::exec::Tensor>],
    options: CollectiveOptions,
) -> Result<RanksRun> {
    // Packaged ranks' host kernels are written to a private scratch directory
    // to be loaded, removed when the run ends (the loaded objects stay mapped).
    let scratch = wrapir::exec::host::kernels::ScratchDir::new_in(&std::env::temp_dir(), "wrapir-rank-kernels")
        .map_err(|e| anyhow::anyhow!("creating a scratch directory: {e}"))?;
    let mut jobs = Vec::with_capacity(programs.len());
    for (rank, ((bundle, program), inputs)) in set.ranks().iter().zip(programs).zip(inputs).enumerate() {
        let mut backend = wrapir::exec::host::HostBackend::default().with_limits(limits());
        if let Some(state) = bundle.meta().cuda_rng {
            backend.set_cuda_rng(state);
        }
        let dir = scratch.path().join(format!("rank{rank}"));
        let loaded =
            wrapir::exec::host::kernels::load_kernels_from(&mut backend, program, &bundle.kernel_images(), Some(&dir));
        loaded.map_err(|e| anyhow::anyhow!("rank {rank} ({}): {e}", bundle.name()))?;
        jobs.push(RankJob {
            program,
            backend,
            inputs,
        });
    }
    let results = run_ranks(set.groups().clone(), jobs, options);
    drop(scratch);
    Ok(results)
}

/// Rank `r` on GPU `r`, on its own thread, the collectives on NCCL; in a
/// build without the `cuda` feature, an error saying so.
fn run_on_gpus(
    args: &RunArgs,
    set: &RankSet,
    programs: &[ir::Program],
    inputs: &[indexmap::IndexMap<String, wrapir::exec::Tensor>],
    options: CollectiveOptions,
) -> Result<RanksRun> {
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (args, set, programs, inputs, options);
        Ok(Err(wrapir::runtime::cuda::CudaError::NotBuilt.into()))
    }
    #[cfg(feature = "cuda")]
    {
        use wrapir::exec::cuda::{CudaOptions, CudaPaths};
        use wrapir::runtime::cuda::CudaRankJob;
        let jobs = set
            .ranks()
            .iter()
            .zip(programs)
            .zip(inputs)
            .enumerate()
            .map(|(rank, ((bundle, program), inputs))| {
                let mut backend = CudaOptions::for_bundle(bundle.kernel_images(), bundle.meta());
                backend.paths = CudaPaths::from_env();
                backend.ordinal = rank;
                backend.host_fallback = args.allow_host_fallback;
                CudaRankJob {
                    program,
                    backend,
                    inputs,
                }
            })
            .collect();
        Ok(run_ranks(set.groups().clone(), jobs, options))
    }
}

/// `wrapir check RANKSET`: each rank's program validated, its collectives
/// well formed and its launches checked against every lowering; then the
/// ranks against each other and against `ranks.json`'s groups.
pub(crate) fn check_rank_set(path: &Path) -> Result<ExitCode> {
    let set = open(path)?;
    let mut ok = true;
    for (rank, bundle) in set.ranks().iter().enumerate() {
        let name = bundle.name();
        let info = match ir::validate_with_limits(bundle.program(), &limits()) {
            Ok(info) => info,
            Err(e) => {
                println!(
                    "rank {rank} ({name}): invalid\n{}",
                    crate::diagnostics::render_validation_errors(bundle, &e)
                );
                ok = false;
                continue;
            }
        };
        let options = wrapir::reconcile::Options {
            limits: limits().prover,
            explain: false,
            ..Default::default()
        };
        let emitters: Vec<Box<dyn wrapir::reconcile::LaunchEmitter>> = wrapir::lower::Target::ALL
            .iter()
            .map(|t| wrapir::reconcile::emitter(*t))
            .collect();
        let refs: Vec<&dyn wrapir::reconcile::LaunchEmitter> = emitters.iter().map(|e| e.as_ref()).collect();
        let report = wrapir::reconcile::check_lowerings(&info, &options, &refs);
        println!("rank {rank} ({name}): valid");
        print!("{}", report.render(false));
        ok &= report.is_ok_where_supported();
    }
    match set.check() {
        Ok(()) => println!(
            "ranks: {} ranks issue the same collectives in the same order, on the groups of {}",
            set.ranks().len(),
            wrapir::bundle::ranks::RANKS_FILE
        ),
        Err(e) => {
            println!("ranks: {e}");
            ok = false;
        }
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
