//! The timing harness of `wrapir bench` and the crate's benchmarks: medians,
//! and loops that time a call after warm-up with the caller's work drained
//! between repeats.
//!
//! The calls and the drain are the caller's (a backend's launch and its
//! stream synchronisation, or a plain closure), so this module depends on
//! nothing else in the crate and does no I/O: it reads the clock only.

use std::time::{Duration, Instant};

/// The median of `values` (the upper one of an even count), `None` when
/// there are none. NaNs sort last ([`f64::total_cmp`]).
pub fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied()
}

/// The `p`-th percentile (nearest rank, 0 to 100) of `sorted` (ascending);
/// NaN when it is empty.
pub fn percentile(sorted: &[f64], p: usize) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    // Nearest rank: ceil(p/100 * n), 1-based.
    let rank = (p.min(100) * sorted.len()).div_ceil(100).max(1);
    sorted[rank - 1]
}

/// The median of `repeats` timed runs of `f` (at least one), after `warmup`
/// untimed ones; results go through [`std::hint::black_box`].
pub fn median_time<T>(warmup: usize, repeats: usize, mut f: impl FnMut() -> T) -> Duration {
    for _ in 0..warmup {
        std::hint::black_box(f());
    }
    let mut times: Vec<Duration> = (0..repeats.max(1))
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(f());
            t.elapsed()
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

/// How a measurement repeats its calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// Untimed calls before the first timed one (then the work is drained).
    pub warmup: usize,
    /// Calls per timed repeat.
    pub iters: usize,
    /// Timed repeats of `iters` calls.
    pub repeats: usize,
    /// Timed single calls, for the one-call-at-a-time measures.
    pub samples: usize,
}

impl Timing {
    /// `wrapir bench`'s timing for `--iters` and `--repeats` (each at least
    /// 1): a warm-up of up to 50 calls, and 20 single-call samples per
    /// repeat (at least 200).
    pub fn new(iters: usize, repeats: usize) -> Timing {
        let (iters, repeats) = (iters.max(1), repeats.max(1));
        Timing {
            warmup: iters.min(50),
            iters,
            repeats,
            samples: repeats.saturating_mul(20).max(200),
        }
    }

    /// Host µs per call with calls queued back to back: the median over
    /// [`Timing::repeats`] of a repeat's time until its last call returns,
    /// per call; the work is drained between repeats (not timed).
    pub fn queued_us<S, E>(&self, w: &mut Workload<'_, S, E>) -> Result<f64, E> {
        self.warm_up(w)?;
        let samples = self.samples_us(w, self.repeats, self.iters, false)?;
        Ok(median(samples).unwrap_or(f64::NAN))
    }

    /// Host µs of one call alone, the work drained before each: the median
    /// of [`Timing::samples`] calls, free of queue back-pressure.
    pub fn one_call_us<S, E>(&self, w: &mut Workload<'_, S, E>) -> Result<f64, E> {
        self.warm_up(w)?;
        let samples = self.samples_us(w, self.samples, 1, false)?;
        Ok(median(samples).unwrap_or(f64::NAN))
    }

    /// Wall µs per call with the work included (see [`Latency`]).
    pub fn latency_us<S, E>(&self, w: &mut Workload<'_, S, E>) -> Result<Latency, E> {
        self.warm_up(w)?;
        let mut one = self.samples_us(w, self.samples, 1, true)?;
        one.sort_by(f64::total_cmp);
        Ok(Latency {
            one_us: median(one.clone()).unwrap_or(f64::NAN),
            one_p99_us: percentile(&one, 99),
            drained_us: median(self.samples_us(w, self.repeats, self.iters, true)?).unwrap_or(f64::NAN),
        })
    }

    fn warm_up<S, E>(&self, w: &mut Workload<'_, S, E>) -> Result<(), E> {
        for _ in 0..self.warmup {
            (w.call)(w.state)?;
        }
        (w.drain)(w.state)
    }

    /// `samples` timings of µs per call of `calls` calls, the drain inside
    /// the timed span (`timed_drain`) or after it.
    fn samples_us<S, E>(
        &self,
        w: &mut Workload<'_, S, E>,
        samples: usize,
        calls: usize,
        timed_drain: bool,
    ) -> Result<Vec<f64>, E> {
        let mut per_call = Vec::with_capacity(samples);
        for _ in 0..samples {
            let t0 = Instant::now();
            for _ in 0..calls {
                (w.call)(w.state)?;
            }
            if timed_drain {
                (w.drain)(w.state)?;
            }
            per_call.push(t0.elapsed().as_secs_f64() * 1e6 / calls as f64);
            if !timed_drain {
                (w.drain)(w.state)?;
            }
        }
        Ok(per_call)
    }
}

/// What a measurement times: a state (a backend), one call of the work on
/// it, and the drain that waits until the work it queued is done.
pub struct Workload<'w, S, E> {
    /// The state the calls run on.
    pub state: &'w mut S,
    /// One call.
    pub call: &'w mut Call<'w, S, E>,
    /// The wait for the queued work.
    pub drain: &'w Drain<'w, S, E>,
}

/// One call of the measured work on a state (a backend).
pub type Call<'a, S, E> = dyn FnMut(&mut S) -> Result<(), E> + 'a;

/// Waits until the state's queued work is done (a stream synchronisation).
pub type Drain<'a, S, E> = dyn Fn(&S) -> Result<(), E> + 'a;

/// Wall time per call with the caller's work included.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Latency {
    /// One call and the wait for its work (median of [`Timing::samples`]).
    pub one_us: f64,
    /// The 99th percentile of the same samples.
    pub one_p99_us: f64,
    /// [`Timing::iters`] calls queued back to back and the wait for the
    /// last, per call (median of [`Timing::repeats`]): the throughput when
    /// the work, not the caller, bounds it.
    pub drained_us: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_takes_the_middle_value() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), Some(3.0));
        assert_eq!(median(vec![f64::NAN, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(Vec::new()), None);
    }

    #[test]
    fn percentile_takes_the_nearest_rank() {
        let v: Vec<f64> = (1..=200).map(f64::from).collect();
        assert_eq!(percentile(&v, 99), 198.0);
        assert_eq!(percentile(&v, 50), 100.0);
        assert_eq!(percentile(&v, 100), 200.0);
        assert_eq!(percentile(&v, 0), 1.0);
        assert_eq!(percentile(&[5.0], 99), 5.0);
        assert!(percentile(&[], 99).is_nan());
    }

    #[test]
    fn timing_counts_calls_and_drains() {
        let t = Timing::new(3, 2);
        assert_eq!(
            t,
            Timing {
                warmup: 3,
                iters: 3,
                repeats: 2,
                samples: 200
            }
        );
        assert_eq!(Timing::new(0, 0).iters, 1);
        let mut calls = 0usize;
        let drains = std::cell::Cell::new(0usize);
        let drain = |_: &usize| -> Result<(), String> {
            drains.set(drains.get() + 1);
            Ok(())
        };
        let mut count = |c: &mut usize| {
            *c += 1;
            Ok(())
        };
        let us = t
            .queued_us(&mut Workload {
                state: &mut calls,
                call: &mut count,
                drain: &drain,
            })
            .unwrap();
        assert!(us >= 0.0);
        // Warm-up 3, then 2 repeats of 3; a drain after the warm-up and each repeat.
        assert_eq!((calls, drains.get()), (9, 3));
        let mut fail = |_: &mut usize| Err("failed".to_string());
        let err = t
            .one_call_us(&mut Workload {
                state: &mut calls,
                call: &mut fail,
                drain: &drain,
            })
            .unwrap_err();
        assert_eq!(err, "failed");
    }
}
