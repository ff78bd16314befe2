//! Where the members of a process group meet for each collective call: the
//! `k`-th call a rank makes on a group meets the other members' `k`-th call
//! on it. Each member deposits what its call asks ([`Signature`]) and a
//! payload; the last to arrive checks that all agree and computes every
//! member's result from the payloads; the others wait, for at most the
//! timeout. Host collectives pass tensors and get their results; NCCL
//! collectives pass nothing and only learn that the group agreed, so that
//! no rank enqueues a collective its peers will never match.

use super::{ProcessGroups, Request};
use crate::ir::DType;
use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// What one member's call asks: compared across the members of a meeting.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Signature {
    pub(crate) request: Request,
    pub(crate) dtype: DType,
    pub(crate) size: Vec<i64>,
}

/// One collective call on one group, as the members arrive.
struct Meeting<P, R> {
    /// The first member's call, and its global rank.
    first: (Signature, usize),
    /// The op string of the first member's call (for messages).
    op: String,
    /// Each member's payload, by position in the group.
    payloads: Vec<Option<P>>,
    /// Each member's result, once the last member has computed them.
    results: Option<Vec<Option<R>>>,
}

struct State<P, R> {
    /// (group, call index) -> the meeting in progress.
    meetings: HashMap<(String, u64), Meeting<P, R>>,
    /// (rank, group) -> how many calls this rank has made on the group.
    calls: HashMap<(usize, String), u64>,
    /// Set when a rank failed: every waiting and later call fails with it.
    aborted: Option<String>,
}

/// The meeting point of the ranks of one run (shared by their threads).
pub(crate) struct Rendezvous<P, R> {
    groups: ProcessGroups,
    timeout: Duration,
    state: Mutex<State<P, R>>,
    arrived: Condvar,
}

impl<P: Clone, R> Rendezvous<P, R> {
    pub(crate) fn new(groups: ProcessGroups, timeout: Duration) -> Self {
        Rendezvous {
            groups,
            timeout,
            state: Mutex::new(State {
                meetings: HashMap::new(),
                calls: HashMap::new(),
                aborted: None,
            }),
            arrived: Condvar::new(),
        }
    }

    pub(crate) fn groups(&self) -> &ProcessGroups {
        &self.groups
    }

    fn lock(&self) -> MutexGuard<'_, State<P, R>> {
        // A panic while holding the lock leaves the maps consistent (every
        // update is a single insert or remove), so a poisoned lock is usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Fails every waiting and later call with `message` (the first abort wins).
    pub(crate) fn abort(&self, message: &str) {
        let mut state = self.lock();
        if state.aborted.is_none() {
            state.aborted = Some(message.to_string());
        }
        drop(state);
        self.arrived.notify_all();
    }

    fn fail(&self, mut state: MutexGuard<'_, State<P, R>>, message: String) -> String {
        state.aborted = Some(message.clone());
        drop(state);
        self.arrived.notify_all();
        message
    }

    /// Deposits this rank's call on `group`, waits for the rest of the group,
    /// and returns this rank's result. The last member to arrive runs
    /// `compute` over every member's payload (in group order, with the
    /// group's global ranks) and must return one result per member.
    pub(crate) fn meet(
        &self,
        rank: usize,
        op: &str,
        group: &str,
        signature: Signature,
        payload: P,
        compute: impl FnOnce(&[P], &[usize]) -> Result<Vec<R>, String>,
    ) -> Result<R, String> {
        let members = self.groups.members(group)?;
        let position = members
            .iter()
            .position(|&r| r == rank)
            .ok_or_else(|| format!("rank {rank} is not in process group `{group}` (ranks {members:?})"))?;
        let mut state = self.lock();
        if let Some(m) = &state.aborted {
            return Err(format!("the run was aborted: {m}"));
        }
        let counter = state.calls.entry((rank, group.to_string())).or_insert(0);
        let index = *counter;
        *counter += 1;
        let key = (group.to_string(), index);
        let meeting = state.meetings.entry(key.clone()).or_insert_with(|| Meeting {
            first: (signature.clone(), rank),
            op: op.to_string(),
            payloads: (0..members.len()).map(|_| None).collect(),
            results: None,
        });
        if let Some(mismatch) = disagreement(&meeting.first.0, &meeting.op, &signature) {
            let first = meeting.first.1;
            let message = format!(
                "rank {rank} and rank {first} disagree at call {} on process group `{group}`: {mismatch}",
                index + 1
            );
            return Err(self.fail(state, message));
        }
        meeting.payloads[position] = Some(payload);
        if meeting.payloads.iter().all(Option::is_some) {
            let payloads: Vec<P> = meeting.payloads.iter().flatten().cloned().collect();
            match compute(&payloads, members) {
                Ok(results) if results.len() == members.len() => {
                    meeting.results = Some(results.into_iter().map(Some).collect());
                }
                Ok(results) => {
                    let message = format!(
                        "internal: `{op}` computed {} results for a group of {}",
                        results.len(),
                        members.len()
                    );
                    return Err(self.fail(state, message));
                }
                Err(m) => {
                    let message = format!("`{op}` (call {} on process group `{group}`): {m}", index + 1);
                    return Err(self.fail(state, message));
                }
            }
            self.arrived.notify_all();
        }
        let deadline = Instant::now() + self.timeout;
        loop {
            if let Some(m) = &state.aborted {
                return Err(format!("the run was aborted: {m}"));
            }
            let meeting = state
                .meetings
                .get_mut(&key)
                .ok_or_else(|| "internal: the meeting of this call is gone".to_string())?;
            if let Some(results) = &mut meeting.results {
                let mine = results[position]
                    .take()
                    .ok_or_else(|| "internal: result taken twice".to_string())?;
                if results.iter().all(Option::is_none) {
                    state.meetings.remove(&key);
                }
                return Ok(mine);
            }
            let now = Instant::now();
            if now >= deadline {
                let missing: Vec<usize> = members
                    .iter()
                    .zip(&meeting.payloads)
                    .filter(|(_, p)| p.is_none())
                    .map(|(r, _)| *r)
                    .collect();
                let message = format!(
                    "rank {rank} waited {:?} at `{op}` (call {} on process group `{group}`) for ranks {missing:?}, which never made it",
                    self.timeout,
                    index + 1
                );
                return Err(self.fail(state, message));
            }
            state = self
                .arrived
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

/// Why `signature` does not match the meeting's first call, if it does not.
fn disagreement(first: &Signature, op: &str, signature: &Signature) -> Option<String> {
    if first.request != signature.request {
        return Some(format!(
            "`{}` against `{}`",
            signature.request.describe(),
            first.request.describe()
        ));
    }
    if first.dtype != signature.dtype {
        return Some(format!("`{op}` on {} against {}", signature.dtype, first.dtype));
    }
    if first.size != signature.size {
        return Some(format!("`{op}` on sizes {:?} against {:?}", signature.size, first.size));
    }
    None
}
