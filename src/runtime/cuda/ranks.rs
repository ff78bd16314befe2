//! Multi-rank runs on GPUs: [`crate::exec::collective::run_ranks`] over
//! [`CudaRankJob`]s runs each rank on its own thread and GPU, with a backend
//! of its own built there and joined to one NCCL world
//! ([`crate::exec::cuda::NcclWorld`]: the communicators and the meeting of
//! the collectives, which the backend's collective calls use).

use crate::exec::collective::{CollectiveOptions, ProcessGroups, RankBackend, RankJob};
use crate::exec::cuda::{run_to_host, CudaBackend, CudaOptions, NcclWorld};
use crate::exec::interp::RunOutput;
use crate::exec::{ExecError, RunError, Tensor};
use crate::ir::Device;
use std::sync::Arc;

/// One rank of a [`run_ranks`](crate::exec::collective::run_ranks) run on
/// GPUs: the options of its backend (its GPU: [`CudaOptions::ordinal`]).
pub type CudaRankJob<'a> = RankJob<'a, CudaOptions>;

/// Each rank runs on its own thread and GPU, its backend built there from
/// its options, the collectives on NCCL; the outputs are copied to the host.
impl RankBackend for CudaOptions {
    type World = Arc<NcclWorld>;

    fn world(groups: ProcessGroups, options: CollectiveOptions, first: &Self) -> Result<Self::World, ExecError> {
        // NCCL is loaded once per process, from where the first rank's options say.
        NcclWorld::new(groups, options, &first.paths)
    }

    fn device(&self) -> Option<Device> {
        u32::try_from(self.ordinal).ok().map(Device::cuda)
    }

    fn abort(world: &Self::World, message: &str) {
        world.abort(message);
    }

    fn run_rank(world: &Self::World, rank: usize, job: RankJob<'_, Self>) -> Result<RunOutput<Tensor>, RunError> {
        let mut backend = CudaBackend::new(job.backend).map_err(ExecError::from)?;
        backend.join_world(world, rank)?;
        run_to_host(job.program, &mut backend, job.inputs)
    }
}
