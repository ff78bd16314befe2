//! PyTorch's CUDA random numbers for the ops Inductor leaves to ATen: the
//! seed buffer of in-graph `rand` / `randn` / `dropout`
//! (`aten.randint.low_out(-2**63, 2**63 - 1, [n], out=seeds)`), whose values
//! Inductor's Triton kernels then feed to `tl.rand` / `tl.randn`.
//!
//! The values follow PyTorch's CUDA generator exactly: Philox4x32-10
//! (curand's `curandStatePhilox4_32_10_t`) keyed by the generator's seed,
//! each thread `idx` of ATen's grid-stride launch (256 threads a block,
//! `min(ceil(n / 256), SMs * (max threads per SM / 256))` blocks) starting at
//! subsequence `idx` and the generator's Philox offset, as
//! `aten/src/ATen/native/cuda/DistributionTemplates.h`
//! (`random_from_to_kernel`, `distribution_nullary_kernel`,
//! `calc_execution_policy`) does:
//!
//! * a range of at least 2^28 takes two 64-bit values per `curand4` call
//!   (`(x << 32) | y`, `(z << 32) | w`), a smaller range four 32-bit ones;
//!   the value is `low + rand % range`;
//! * each call advances the generator's offset by
//!   `((n - 1) / (256 * blocks * unroll) + 1) * 4`.
//!
//! A bundle records the generator's state before the compiled call
//! (`bundle.json` `cuda_rng`: `seed`, `offset`, read from
//! `torch.cuda.get_rng_state()`); without one, PyTorch's default seed
//! (67280421310721) and offset 0 apply, so the random values (not the
//! program's other results) differ from the exporting run's.

use super::ExecError;
use crate::format::bundle_json::CudaRngState;

/// The launch shape ATen's distribution kernels use on a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceShape {
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// Most resident threads per multiprocessor.
    pub max_threads_per_sm: u32,
}

impl Default for DeviceShape {
    /// An H200 (132 SMs, 2,048 threads each): the host's stand-in when no
    /// device is known. It matters only for more than 256 values.
    fn default() -> Self {
        DeviceShape {
            sm_count: 132,
            max_threads_per_sm: 2048,
        }
    }
}

/// Threads per block of ATen's distribution kernels (`block_size_bound`).
pub const BLOCK: u64 = 256;

/// One `randint(low, high)` call's launch: what each thread computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RandintPlan {
    /// The generator's seed.
    pub seed: u64,
    /// The Philox offset the call starts at.
    pub offset: u64,
    /// `high - low` as ATen computes it (wrapping, in `u64`).
    pub range: u64,
    /// `low`.
    pub low: i64,
    /// Values per `curand4` call: 2 (64-bit values) or 4 (32-bit values).
    pub unroll: u64,
    /// Threads in the grid (`256 * blocks`).
    pub threads: u64,
    /// Elements.
    pub numel: u64,
}

impl RandintPlan {
    /// The plan of `randint(low, high, [numel])` at `state`, and the state
    /// after it; an error when `low >= high` (ATen's check).
    pub fn new(
        state: CudaRngState,
        low: i64,
        high: i64,
        numel: u64,
        device: DeviceShape,
    ) -> Result<(RandintPlan, CudaRngState), ExecError> {
        if low >= high {
            return Err(ExecError::op(
                crate::exec::op::key::RANDINT,
                format!("expects `low` to be less than `high`, got low={low} >= high={high}"),
            ));
        }
        let range = (high as u64).wrapping_sub(low as u64);
        let unroll = if range >= 1 << 28 { 2 } else { 4 };
        let blocks_per_sm = u64::from(device.max_threads_per_sm) / BLOCK;
        let max_blocks = (u64::from(device.sm_count) * blocks_per_sm).max(1);
        let blocks = numel.div_ceil(BLOCK).clamp(1, max_blocks);
        let threads = blocks * BLOCK;
        let plan = RandintPlan {
            seed: state.seed,
            offset: state.offset,
            range,
            low,
            unroll,
            threads,
            numel,
        };
        if numel == 0 {
            // ATen returns before taking an offset for an empty tensor.
            return Ok((plan, state));
        }
        // `calc_execution_policy`'s counter offset, rounded up to 4 as `philox_cuda_state` does.
        let increment = ((numel - 1) / (threads * unroll) + 1) * 4;
        let next = CudaRngState {
            seed: state.seed,
            offset: state.offset.wrapping_add(increment),
        };
        Ok((plan, next))
    }

    /// Element `i`'s value.
    pub fn value(&self, i: u64) -> i64 {
        let per_round = self.threads * self.unroll;
        let call = i / per_round;
        let lane = (i % per_round) / self.threads;
        let thread = i % self.threads;
        let r = philox_at(self.seed, thread, self.offset / 4 + call);
        let rand = if self.unroll == 2 {
            let (hi, lo) = if lane == 0 { (r[0], r[1]) } else { (r[2], r[3]) };
            (u64::from(hi) << 32) | u64::from(lo)
        } else {
            u64::from(r[lane as usize])
        };
        (rand % self.range).wrapping_add(self.low as u64) as i64
    }

    /// Every element's value, in order.
    pub fn values(&self) -> Vec<i64> {
        (0..self.numel).map(|i| self.value(i)).collect()
    }
}

const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

/// Philox4x32-10 of counter `ctr` under key `key` (curand's `curand_Philox4x32_10`).
pub fn philox4x32_10(mut ctr: [u32; 4], mut key: [u32; 2]) -> [u32; 4] {
    for round in 0..10 {
        if round > 0 {
            key[0] = key[0].wrapping_add(W0);
            key[1] = key[1].wrapping_add(W1);
        }
        let p0 = u64::from(M0) * u64::from(ctr[0]);
        let p1 = u64::from(M1) * u64::from(ctr[2]);
        let (hi0, lo0) = ((p0 >> 32) as u32, p0 as u32);
        let (hi1, lo1) = ((p1 >> 32) as u32, p1 as u32);
        ctr = [hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0];
    }
    ctr
}

/// The output of `curand4` for the state `curand_init(seed, subsequence,
/// 4 * position)` after `position`'s blocks: counter `(position,
/// subsequence)` (low and high 64 bits), key `seed`.
pub fn philox_at(seed: u64, subsequence: u64, position: u64) -> [u32; 4] {
    let ctr = [
        position as u32,
        (position >> 32) as u32,
        subsequence as u32,
        (subsequence >> 32) as u32,
    ];
    philox4x32_10(ctr, [seed as u32, (seed >> 32) as u32])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn philox_known_answer() {
        // Random123's known-answer vectors for philox4x32_10.
        assert_eq!(
            philox4x32_10([0, 0, 0, 0], [0, 0]),
            [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8]
        );
        assert_eq!(
            philox4x32_10([u32::MAX; 4], [u32::MAX; 2]),
            [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd]
        );
        assert_eq!(
            philox4x32_10(
                [0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344],
                [0xa409_3822, 0x299f_31d0]
            ),
            [0xd16c_fe09, 0x94fd_cceb, 0x5001_e420, 0x2412_6ea1]
        );
    }

    #[test]
    fn offsets_advance_like_aten() {
        let s = CudaRngState { seed: 1, offset: 8 };
        let (_, next) = RandintPlan::new(s, i64::MIN, i64::MAX, 1, DeviceShape::default()).unwrap();
        assert_eq!(next.offset, 12);
        // 132 * 8 blocks of 256 threads, 2 values each: one round covers 540,672 values.
        let (_, next) = RandintPlan::new(s, i64::MIN, i64::MAX, 540_673, DeviceShape::default()).unwrap();
        assert_eq!(next.offset, 16);
        let (_, next) = RandintPlan::new(s, 0, 10, 0, DeviceShape::default()).unwrap();
        assert_eq!(next, s);
        assert!(RandintPlan::new(s, 3, 3, 1, DeviceShape::default()).is_err());
    }
}
