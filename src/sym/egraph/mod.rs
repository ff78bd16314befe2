//! Equality of symbolic sizes by equality saturation (egg).
//!
//! [`prove_eq`] answers whether two [`SymExpr`]s are equal for every assignment
//! that satisfies some [`Facts`] (symbol ranges, definitions such as
//! `ks0 == s0*s1`):
//!
//! * [`Outcome::Proven`]: the two sides met in an e-graph built with the
//!   [`rules`] (each valid over all integers under its side condition, conditions
//!   checked by an e-class analysis of constants, ranges, definedness and known
//!   divisors). The [`Explanation`] is egg's step-by-step proof; it can be
//!   replayed through egg's proof checker ([`Explanation::check_with_egg`]).
//! * [`Outcome::Disproved`]: a concrete assignment, within the facts, under which
//!   both sides evaluate ([`crate::sym::eval`]) to different values. Nothing
//!   else ever produces it.
//! * [`Outcome::Unknown`]: neither, with the reason (limits reached, saturation
//!   without a proof, contradictory facts).
//!
//! Counterexamples are searched by deterministic sampling (boundary values,
//! small and power-of-two values, random values within the ranges) before
//! saturation and again after it fails. Runner limits come from [`Limits`],
//! which the caller passes (the library reads no environment; the CLI reads
//! `WRAPIR_PROVE_NODE_LIMIT`, `WRAPIR_PROVE_ITER_LIMIT` and
//! `WRAPIR_PROVE_TIME_LIMIT_MS`).

mod analysis;
mod facts;
mod lang;
mod rules;
mod sample;

pub use analysis::{Bound, ClassData, Interval, SymAnalysis, SymEGraph};
pub use facts::{FactError, Facts};
pub use lang::{from_rec_expr, to_rec_expr, ConvertError, SymLang};
pub use rules::rules;
pub use sample::{eval_value, holds, Counterexample, Value};

use super::{parse, ParseError, SymExpr, Symbol};
use egg::{ENodeOrVar, FlatTerm, Id, Language, RecExpr, Rewrite, SearchMatches};
use std::fmt::{self, Write as _};
use std::time::Duration;
use std::time::Instant;

/// Seed of the counterexample search (fixed: results are reproducible).
const SEED: u64 = 0x5EED_0F_5123;

/// Limits of one proof attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Maximum e-nodes.
    pub node_limit: usize,
    /// Maximum saturation iterations.
    pub iter_limit: usize,
    /// Maximum saturation time.
    pub time_limit: Duration,
    /// Assignments tried before saturation (fewer for expressions over
    /// thousands of symbols: one search assigns at most 2^20 symbol values).
    pub samples_before: usize,
    /// Assignments tried after saturation fails to prove (bounded the same way).
    pub samples_after: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            node_limit: 20_000,
            iter_limit: 30,
            time_limit: Duration::from_secs(2),
            samples_before: 48,
            samples_after: 600,
        }
    }
}

/// A proof: egg's flattened explanation, one term per rewrite step.
#[derive(Clone, Debug)]
pub struct Explanation {
    steps: Vec<FlatTerm<SymLang>>,
    text: String,
}

impl Explanation {
    /// An explanation from egg flat terms (as [`Explanation::steps`] returns them).
    pub fn from_steps(steps: Vec<FlatTerm<SymLang>>) -> Self {
        let text = steps.iter().map(|t| t.to_string()).collect::<Vec<_>>().join("\n");
        Explanation { steps, text }
    }

    /// The flat explanation: one s-expression per line, each after the first
    /// marking the rewritten sub-term with `(Rewrite=> rule ...)` or
    /// `(Rewrite<= rule ...)`.
    pub fn flat_string(&self) -> &str {
        &self.text
    }

    /// The steps as egg flat terms.
    pub fn steps(&self) -> &[FlatTerm<SymLang>] {
        &self.steps
    }

    /// The same proof with symbols renamed: `rename(s)` for each symbol it
    /// maps, the rest kept (a proof of a renamed claim, told in the
    /// original names).
    pub fn rename_symbols(&self, rename: &dyn Fn(&Symbol) -> Option<Symbol>) -> Explanation {
        fn term(t: &FlatTerm<SymLang>, rename: &dyn Fn(&Symbol) -> Option<Symbol>) -> FlatTerm<SymLang> {
            let node = match &t.node {
                SymLang::Var(v) => match rename(&Symbol::new(v.as_str())) {
                    Some(s) => SymLang::Var(egg::Symbol::from(s.as_str())),
                    None => t.node.clone(),
                },
                other => other.clone(),
            };
            FlatTerm {
                node,
                backward_rule: t.backward_rule,
                forward_rule: t.forward_rule,
                children: t.children.iter().map(|c| term(c, rename)).collect(),
            }
        }
        Explanation::from_steps(self.steps.iter().map(|t| term(t, rename)).collect())
    }

    /// Each step's term as a [`SymExpr`] (binary sums and products, unfolded).
    pub fn terms(&self) -> Result<Vec<SymExpr>, ConvertError> {
        self.steps
            .iter()
            .map(|t| from_rec_expr(&t.remove_rewrites().get_recexpr()))
            .collect()
    }

    /// The rule (or `constant-fold`, `definition`, `assumption`) justifying each
    /// step after the first.
    pub fn rules_used(&self) -> Vec<String> {
        fn find(t: &FlatTerm<SymLang>) -> Option<String> {
            if let Some(r) = t.forward_rule.or(t.backward_rule) {
                return Some(r.to_string());
            }
            t.children.iter().find_map(find)
        }
        self.steps.iter().skip(1).filter_map(find).collect()
    }

    /// Rebuilds egg's explanation object (e.g. to call its `check_proof`).
    pub fn to_egg(&self) -> egg::Explanation<SymLang> {
        fn tree(t: &FlatTerm<SymLang>) -> std::rc::Rc<egg::TreeTerm<SymLang>> {
            let mut node = egg::TreeTerm::new(t.node.clone(), t.children.iter().map(|c| vec![tree(c)]).collect());
            node.forward_rule = t.forward_rule;
            node.backward_rule = t.backward_rule;
            std::rc::Rc::new(node)
        }
        egg::Explanation::new(self.steps.iter().map(tree).collect())
    }

    /// Replays the proof through egg's proof checker with [`rules`]: every step
    /// naming a rule must be exactly that rule's rewrite. (Steps named
    /// `constant-fold`, `definition` or `assumption` are not rule applications;
    /// egg's checker accepts them as given.)
    pub fn check_with_egg(&self) -> Result<(), String> {
        if self.steps.is_empty() {
            return Err("empty explanation".into());
        }
        let mut expl = self.to_egg();
        let rules = rules();
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || expl.check_proof(&rules)))
            .map_err(|_| format!("egg's proof checker rejected the explanation:\n{}", self.text))
    }
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// The answer of [`prove_eq`].
#[derive(Clone, Debug)]
pub enum Outcome {
    /// Equal wherever the facts hold (and the sides are defined).
    Proven(Explanation),
    /// Different at a concrete assignment within the facts.
    Disproved(Counterexample),
    /// Neither could be established; the reason.
    Unknown(String),
}

impl Outcome {
    /// The CLI's first line: `proven`, `disproved: s0=3, u0=0` or `unknown: <reason>`.
    pub fn summary(&self) -> String {
        match self {
            Outcome::Proven(_) => "proven".to_string(),
            Outcome::Disproved(c) => format!("disproved: {c}"),
            Outcome::Unknown(r) => format!("unknown: {r}"),
        }
    }

    /// `true` for [`Outcome::Proven`].
    pub fn is_proven(&self) -> bool {
        matches!(self, Outcome::Proven(_))
    }

    /// `true` for [`Outcome::Disproved`].
    pub fn is_disproved(&self) -> bool {
        matches!(self, Outcome::Disproved(_))
    }
}

/// Why [`prove_text`] could not run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A side is not a valid expression.
    #[error("{error}")]
    Expr {
        /// The text.
        text: String,
        /// The parser's error (which quotes the text).
        error: ParseError,
    },
    /// An assumption is not usable.
    #[error(transparent)]
    Fact(#[from] FactError),
}

/// Proves or disproves `a == b` under `facts` with [`Limits::default`].
pub fn prove_eq(a: &SymExpr, b: &SymExpr, facts: &Facts) -> Outcome {
    prove_eq_with(a, b, facts, &Limits::default())
}

/// [`prove_eq`] with explicit limits.
pub fn prove_eq_with(a: &SymExpr, b: &SymExpr, facts: &Facts, limits: &Limits) -> Outcome {
    attempt_eq(a, b, facts, limits).outcome
}

/// One attempt of [`prove_eq_with`]: its outcome, and whether the
/// wall-clock limit cut it short.
#[derive(Clone, Debug)]
pub struct Attempt {
    /// What the attempt established.
    pub outcome: Outcome,
    /// The outcome is [`Outcome::Unknown`] and the time limit had passed
    /// when the attempt ended: some phase (sampling, saturation, the second
    /// sampling) stopped at the deadline, so on a less loaded machine the
    /// same claim might have been settled. A proof or counterexample is
    /// never time-limited: both are final whatever the clock said.
    pub time_limited: bool,
}

/// [`prove_eq_with`], telling also whether the time limit cut the attempt
/// short ([`Attempt::time_limited`]): callers that cache outcomes retry
/// those before keeping them.
pub fn attempt_eq(a: &SymExpr, b: &SymExpr, facts: &Facts, limits: &Limits) -> Attempt {
    let started = Instant::now();
    let outcome = prove_eq_until(a, b, facts, limits, started + limits.time_limit);
    let time_limited = matches!(outcome, Outcome::Unknown(_)) && started.elapsed() >= limits.time_limit;
    Attempt { outcome, time_limited }
}

/// [`prove_eq_with`] against `deadline` (the start plus the time limit).
fn prove_eq_until(a: &SymExpr, b: &SymExpr, facts: &Facts, limits: &Limits, deadline: Instant) -> Outcome {
    // Only the facts about the sides' symbols: a program's facts grow with
    // the program, and every phase below walks the facts it is given.
    let facts = &facts.relevant_to(&[a, b]);
    if let Some(s) = facts.empty_range() {
        return Outcome::Unknown(format!("the facts are contradictory: the range of `{s}` is empty"));
    }
    if a.is_boolean() != b.is_boolean() {
        return Outcome::Unknown("one side is a condition and the other an integer".to_string());
    }
    let (ra, rb) = match (to_rec_expr(a), to_rec_expr(b)) {
        (Ok(x), Ok(y)) => (x, y),
        (Err(e), _) | (_, Err(e)) => return Outcome::Unknown(format!("cannot translate into the e-graph: {e}")),
    };
    // Identical sides with no definition or equality to merge e-classes (so
    // nothing for the analysis to find contradictory): no assignment can
    // tell them apart, and saturation would meet at once; the proof is the
    // term itself. (Most claims a lowering's emitted launch makes are of
    // this kind, each over its own symbols, so the cache rarely has them.)
    // Sides over the node limit take the path below, which stops with that
    // limit: an explanation of a term that large costs more than the limits allow.
    if a == b
        && facts.definitions().is_empty()
        && facts.equalities().is_empty()
        && ra.as_ref().len().saturating_mul(2) <= limits.node_limit
    {
        return Outcome::Proven(reflexive(&ra));
    }
    // The time limit bounds the whole attempt (`deadline`): sampling,
    // building the e-graph from the facts, saturation and sampling again.
    if let Some(c) = sample::search_until(a, b, facts, limits.samples_before, SEED, Some(deadline)) {
        return Outcome::Disproved(c);
    }
    let reason = match saturate(&ra, &rb, facts, limits, deadline) {
        Ok(expl) => return Outcome::Proven(expl),
        Err(reason) => reason,
    };
    match sample::search_until(a, b, facts, limits.samples_after, SEED ^ 0xA5A5_A5A5, Some(deadline)) {
        Some(c) => Outcome::Disproved(c),
        None => Outcome::Unknown(reason),
    }
}

/// The proof of `r == r`: egg's explanation of a term equal to itself (the
/// term, no rewrite), what [`saturate`] gives for identical sides.
fn reflexive(r: &RecExpr<SymLang>) -> Explanation {
    let mut egraph = SymEGraph::new(SymAnalysis::default()).with_explanations_enabled();
    egraph.add_expr(r);
    let mut expl = egraph.explain_equivalence(r, r);
    let steps = expl.make_flat_explanation().clone();
    let text = expl.get_flat_string();
    Explanation { steps, text }
}

/// The rewrite rules, built once (parsing their patterns costs more than a
/// small proof).
fn shared_rules() -> &'static [Rewrite<SymLang, SymAnalysis>] {
    static RULES: std::sync::OnceLock<Vec<Rewrite<SymLang, SymAnalysis>>> = std::sync::OnceLock::new();
    RULES.get_or_init(rules)
}

/// Builds the e-graph (sides plus facts), saturates, and explains the equality
/// if the sides meet. `Err` carries the reason there is no proof.
fn saturate(
    ra: &RecExpr<SymLang>,
    rb: &RecExpr<SymLang>,
    facts: &Facts,
    limits: &Limits,
    deadline: std::time::Instant,
) -> Result<Explanation, String> {
    // The sides and facts alone may exceed the node limit: then saturation
    // could only stop at it, after building an e-graph that large.
    let mut nodes = ra.as_ref().len() + rb.as_ref().len();
    let size = |e: &SymExpr| to_rec_expr(e).map_or(0, |r| r.as_ref().len());
    for (_, e) in facts.definitions() {
        nodes += 1 + size(e);
    }
    for (x, y) in facts.equalities() {
        nodes += size(x) + size(y);
    }
    if nodes > limits.node_limit {
        return Err(format!(
            "node limit ({}) reached without proof: the sides and facts have {nodes} nodes",
            limits.node_limit
        ));
    }
    let mut analysis = SymAnalysis::default();
    for (s, (lo, hi)) in facts.ranges() {
        analysis
            .ranges
            .insert(egg::Symbol::from(s.as_str()), Interval::from_opt(lo, hi));
    }
    let mut egraph = SymEGraph::new(analysis).with_explanations_enabled();
    let ida = egraph.add_expr(ra);
    let idb = egraph.add_expr(rb);
    let add_fact = |egraph: &mut SymEGraph, x: &SymExpr, y: &SymExpr, why: &str| -> Result<(), String> {
        let rx = to_rec_expr(x).map_err(|e| format!("cannot translate fact `{x} == {y}`: {e}"))?;
        let ry = to_rec_expr(y).map_err(|e| format!("cannot translate fact `{x} == {y}`: {e}"))?;
        let (ix, iy) = (egraph.add_expr(&rx), egraph.add_expr(&ry));
        egraph.union_trusted(ix, iy, why);
        Ok(())
    };
    for (s, e) in facts.definitions() {
        add_fact(&mut egraph, &SymExpr::Sym(s.clone()), e, "definition")?;
    }
    for (x, y) in facts.equalities() {
        add_fact(&mut egraph, x, y, "assumption")?;
    }
    egraph.rebuild();
    let budget = Budget { limits, deadline };
    if let Err(stop) = budget.check(&egraph) {
        return Err(stop.reason(limits));
    }
    let stop = run_rules(&mut egraph, ida, idb, shared_rules(), &budget);
    if let Some(class) = egraph.classes().find(|c| c.data.conflict) {
        return Err(format!(
            "the facts are contradictory (e-class {} holds `{}` with no consistent value)",
            class.id,
            first_term(&egraph, class.id)
        ));
    }
    if egraph.find(ida) != egraph.find(idb) {
        return Err(stop.reason(limits));
    }
    // egg shortens explanations by shortest-path searches over every e-node
    // (BigUint distances; 0.6 s at 20,000 e-nodes in a test build, growing
    // faster than the e-graph): only small e-graphs get it, so that explaining
    // stays linear in the e-graph and the outcome does not depend on the clock.
    let mut egraph = if Budget::nodes(&egraph) > SHORTEN_EXPLANATIONS_UP_TO {
        egraph.without_explanation_length_optimization()
    } else {
        egraph
    };
    let mut expl = egraph.explain_equivalence(ra, rb);
    // egg's explanation shares subproofs; its flat form (what tests replay)
    // copies them, which can take far longer than saturation did.
    let cap = (limits.node_limit as u64).saturating_mul(FLAT_TERMS_PER_NODE);
    let flat = flat_size(&expl.explanation_trees, &mut Default::default());
    if flat > cap {
        return Err(format!(
            "the proof's flat explanation would hold about {flat} terms, more than {FLAT_TERMS_PER_NODE} per e-node of the node limit ({cap})"
        ));
    }
    let steps = expl.make_flat_explanation().clone();
    let text = expl.get_flat_string();
    Ok(Explanation { steps, text })
}

/// Why [`run_rules`] stopped.
#[derive(Debug)]
enum Stop {
    /// The sides are in one e-class.
    Met,
    /// No rule changes the e-graph any more.
    Saturated,
    /// [`Limits::iter_limit`] iterations ran.
    Iterations(usize),
    /// The e-graph holds more e-nodes than [`Limits::node_limit`].
    Nodes(usize),
    /// [`Limits::time_limit`] passed (the time since the attempt began).
    Time,
}

impl Stop {
    /// The reason of an `unknown` outcome, naming the limit.
    fn reason(&self, limits: &Limits) -> String {
        match self {
            Stop::Met => "stopped without proof".to_string(),
            Stop::Saturated => "saturated without proving equality".to_string(),
            Stop::Iterations(n) => format!("iteration limit ({n}) reached without proof"),
            Stop::Nodes(n) => format!("node limit ({}) reached without proof ({n} e-nodes)", limits.node_limit),
            Stop::Time => format!(
                "time limit ({:.3}s) reached without proof",
                limits.time_limit.as_secs_f64()
            ),
        }
    }
}

/// The limits every phase of one attempt checks: e-nodes and the deadline.
struct Budget<'l> {
    limits: &'l Limits,
    deadline: Instant,
}

impl Budget<'_> {
    /// Every e-node the e-graph holds: with explanations enabled egg keeps
    /// each distinct term a rule instantiated as its own node (unioned with
    /// the canonical one), which the hash-consed count (`total_size`) leaves
    /// out. Memory follows this count.
    fn nodes(egraph: &SymEGraph) -> usize {
        egraph.nodes().len().max(egraph.total_size())
    }

    fn check(&self, egraph: &SymEGraph) -> Result<(), Stop> {
        let nodes = Self::nodes(egraph);
        if nodes > self.limits.node_limit {
            return Err(Stop::Nodes(nodes));
        }
        self.check_time()
    }

    fn check_time(&self) -> Result<(), Stop> {
        if Instant::now() >= self.deadline {
            return Err(Stop::Time);
        }
        Ok(())
    }
}

/// A rule's matches are searched up to this many (doubled for every time the
/// rule was banned); a rule with more is banned for a while instead (egg's
/// `BackoffScheduler` defaults).
const MATCH_LIMIT: usize = 1_000;
/// Iterations a rule with too many matches is banned for (doubled each time).
const BAN_LENGTH: usize = 5;
/// Matches applied between two checks of the limits.
const APPLY_CHUNK: usize = 64;
/// Most e-nodes one rule application adds (the largest right-hand side,
/// with room to spare): near the node limit, matches are applied in chunks
/// that cannot pass it by more than one application.
const MAX_NODES_PER_APPLICATION: usize = 16;

#[derive(Clone, Copy, Default)]
struct RuleStats {
    times_banned: u32,
    banned_until: usize,
}

/// Equality saturation with the limits checked inside every phase: after
/// each rule's search, and after every chunk of applications (egg's `Runner`
/// checks them only between rules, so one rule's matches could add millions
/// of e-nodes, and it rebuilds after a limit stops it). Rule scheduling is
/// egg's backoff: a rule with more matches than its threshold is banned for
/// some iterations.
fn run_rules(
    egraph: &mut SymEGraph,
    ida: Id,
    idb: Id,
    rules: &[Rewrite<SymLang, SymAnalysis>],
    budget: &Budget,
) -> Stop {
    let mut stats = vec![RuleStats::default(); rules.len()];
    let mut iteration = 0;
    loop {
        if egraph.find(ida) == egraph.find(idb) {
            return Stop::Met;
        }
        if let Err(stop) = budget.check(egraph) {
            return stop;
        }
        if iteration >= budget.limits.iter_limit {
            return Stop::Iterations(iteration);
        }
        let (nodes_before, classes_before) = (egraph.total_size(), egraph.number_of_classes());
        let mut found: Vec<Vec<SearchMatches<SymLang>>> = Vec::with_capacity(rules.len());
        for (rule, st) in rules.iter().zip(stats.iter_mut()) {
            if iteration < st.banned_until {
                found.push(Vec::new());
                continue;
            }
            // egg doubles the threshold without end (a rule banned 11 times
            // held 2.6 million matches); more matches than the node limit
            // cannot all add nodes anyway.
            let doubling = 1usize.checked_shl(st.times_banned).unwrap_or(usize::MAX);
            let threshold = MATCH_LIMIT
                .saturating_mul(doubling)
                .min(budget.limits.node_limit.max(MATCH_LIMIT));
            let matches = match search(rule, egraph, threshold.saturating_add(1), budget) {
                Ok(matches) => matches,
                Err(stop) => return stop,
            };
            let total: usize = matches.iter().map(|m| m.substs.len()).sum();
            if total > threshold {
                st.banned_until = iteration.saturating_add(BAN_LENGTH.saturating_mul(doubling));
                st.times_banned += 1;
                found.push(Vec::new());
            } else {
                found.push(matches);
            }
        }
        let mut applied = 0usize;
        let mut stopped = None;
        'apply: for (rule, matches) in rules.iter().zip(found) {
            for m in matches {
                let mut rest = &m.substs[..];
                while !rest.is_empty() {
                    let room = budget.limits.node_limit.saturating_sub(Budget::nodes(egraph));
                    let take = (room / MAX_NODES_PER_APPLICATION).clamp(1, APPLY_CHUNK).min(rest.len());
                    let chunk = SearchMatches {
                        eclass: m.eclass,
                        substs: rest[..take].to_vec(),
                        ast: m.ast.clone(),
                    };
                    rest = &rest[take..];
                    applied += rule.apply(egraph, std::slice::from_ref(&chunk)).len();
                    if let Err(stop) = budget.check(egraph) {
                        stopped = Some(stop);
                        break 'apply;
                    }
                }
            }
        }
        // Congruence closure of what was applied (at most one chunk past the
        // node limit), so that the sides' classes and explanations are current.
        egraph.rebuild();
        iteration += 1;
        if let Some(stop) = stopped {
            return if egraph.find(ida) == egraph.find(idb) {
                Stop::Met
            } else {
                stop
            };
        }
        let unchanged =
            applied == 0 && egraph.total_size() == nodes_before && egraph.number_of_classes() == classes_before;
        if unchanged {
            // Nothing applied: saturated, unless banned rules may still apply
            // (then skip ahead to the first one's return, as egg does).
            let Some(next) = stats.iter().map(|s| s.banned_until).filter(|&b| b > iteration).min() else {
                return if egraph.find(ida) == egraph.find(idb) {
                    Stop::Met
                } else {
                    Stop::Saturated
                };
            };
            let delta = next - iteration;
            for st in stats.iter_mut().filter(|s| s.banned_until > iteration) {
                st.banned_until -= delta;
            }
        }
    }
}

/// The matches of `rule`, at most `limit`, searched e-class by e-class with
/// the deadline checked between classes (one rule's search over an e-graph
/// of a few thousand nodes took 1.4 s, longer than egg's own checks allow
/// for: they run between rules). Like egg's own search, only the classes
/// holding the pattern's root operator are visited.
fn search<'r>(
    rule: &'r Rewrite<SymLang, SymAnalysis>,
    egraph: &SymEGraph,
    limit: usize,
    budget: &Budget,
) -> Result<Vec<SearchMatches<'r, SymLang>>, Stop> {
    let root = rule.searcher.get_pattern_ast().and_then(|ast| ast.as_ref().last());
    let classes: Vec<Id> = match root {
        Some(ENodeOrVar::ENode(node)) => match egraph.classes_for_op(&node.discriminant()) {
            Some(ids) => ids.collect(),
            None => return Ok(Vec::new()),
        },
        _ => egraph.classes().map(|c| c.id).collect(),
    };
    let mut out = Vec::new();
    let mut left = limit;
    for id in classes {
        budget.check_time()?;
        if let Some(m) = rule.searcher.search_eclass_with_limit(egraph, id, left) {
            left = left.saturating_sub(m.substs.len());
            out.push(m);
            if left == 0 {
                break;
            }
        }
    }
    Ok(out)
}

/// Most e-nodes of an e-graph whose explanations egg shortens (see [`saturate`]).
const SHORTEN_EXPLANATIONS_UP_TO: usize = 4_096;

/// How many flat-explanation terms a proof may take per e-node of
/// [`Limits::node_limit`] before it is given up as too large to replay.
const FLAT_TERMS_PER_NODE: u64 = 100;

/// An upper bound of the nodes egg's flat form of `proof` holds: its steps
/// times the size of its largest term, each subproof counted every time it
/// is used (memoised per shared subproof; saturating).
fn flat_size(
    proof: &egg::TreeExplanation<SymLang>,
    memo: &mut std::collections::HashMap<*const egg::TreeTerm<SymLang>, (u64, u64)>,
) -> u64 {
    let (steps, size) = proof_shape(proof, memo);
    steps.saturating_mul(size)
}

/// (steps, largest term size) of a proof.
fn proof_shape(
    proof: &egg::TreeExplanation<SymLang>,
    memo: &mut std::collections::HashMap<*const egg::TreeTerm<SymLang>, (u64, u64)>,
) -> (u64, u64) {
    proof.iter().fold((0u64, 0u64), |(steps, size), term| {
        let (s, z) = term_shape(term, memo);
        (steps.saturating_add(s), size.max(z))
    })
}

fn term_shape(
    term: &std::rc::Rc<egg::TreeTerm<SymLang>>,
    memo: &mut std::collections::HashMap<*const egg::TreeTerm<SymLang>, (u64, u64)>,
) -> (u64, u64) {
    let key = std::rc::Rc::as_ptr(term);
    if let Some(shape) = memo.get(&key) {
        return *shape;
    }
    let (mut steps, mut size) = (1u64, 1u64);
    for child in &term.child_proofs {
        let (s, z) = proof_shape(child, memo);
        steps = steps.saturating_add(s);
        size = size.saturating_add(z);
    }
    memo.insert(key, (steps, size));
    (steps, size)
}

fn first_term(egraph: &SymEGraph, id: Id) -> String {
    match from_rec_expr(&egraph.id_to_expr(id)) {
        Ok(e) => e.to_string(),
        Err(_) => format!("{}", egraph.id_to_expr(id)),
    }
}

/// What `wrapir sym prove A B --assume FACT [--explain]` prints: the first line
/// is `proven`, `disproved: s0=3, u0=0` or `unknown: <reason>`; with `explain`,
/// the proof (one step per line) or the two sides' values follow.
/// Within [`Limits::default`]; [`prove_text_with`] takes the limits.
pub fn prove_text(a: &str, b: &str, assumptions: &[String], explain: bool) -> Result<(Outcome, String), Error> {
    prove_text_with(a, b, assumptions, explain, &Limits::default())
}

/// [`prove_text`] within `limits`.
pub fn prove_text_with(
    a: &str,
    b: &str,
    assumptions: &[String],
    explain: bool,
    limits: &Limits,
) -> Result<(Outcome, String), Error> {
    let pa = parse(a).map_err(|error| Error::Expr {
        text: a.to_string(),
        error,
    })?;
    let pb = parse(b).map_err(|error| Error::Expr {
        text: b.to_string(),
        error,
    })?;
    let facts = Facts::parse(assumptions)?;
    let outcome = prove_eq_with(&pa, &pb, &facts, limits);
    let mut out = outcome.summary();
    out.push('\n');
    if explain {
        match &outcome {
            Outcome::Proven(e) => {
                out.push_str(e.flat_string());
                out.push('\n');
            }
            Outcome::Disproved(c) => {
                let _ = writeln!(out, "{a} = {}", c.lhs);
                let _ = writeln!(out, "{b} = {}", c.rhs);
            }
            Outcome::Unknown(_) => {}
        }
    }
    Ok((outcome, out))
}

/// The range of an integer expression under the facts' symbol ranges, by the
/// e-graph's interval analysis (no rewriting); [`Interval::TOP`] when the
/// expression has no e-graph form.
pub fn bounds(e: &SymExpr, facts: &Facts) -> Interval {
    let Ok(rec) = to_rec_expr(e) else { return Interval::TOP };
    let analysis = analysis_of(e, facts);
    // The analysis's data bottom-up over the expression's nodes (children
    // come first in a `RecExpr`): what an e-graph of the expression alone
    // would hold for its root, without building one (see `analysis::derive`).
    let mut data: Vec<analysis::Derived> = Vec::with_capacity(rec.as_ref().len());
    for node in rec.as_ref() {
        let d = analysis::derive(node, &|id: Id| data[usize::from(id)], &analysis.ranges);
        data.push(d);
    }
    data.last().map_or(Interval::TOP, |d| d.range)
}

/// An analysis with the ranges of `e`'s own symbols under `facts`: only
/// they matter where no rewrites run (copying every fact's range made each
/// [`bounds`] call cost O(symbols in the program)).
fn analysis_of(e: &SymExpr, facts: &Facts) -> SymAnalysis {
    let mut analysis = SymAnalysis::default();
    for s in e.free_symbols() {
        let (lo, hi) = facts.range(&s);
        analysis
            .ranges
            .insert(egg::Symbol::from(s.as_str()), Interval::from_opt(lo, hi));
    }
    analysis
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `text` parsed, and as the e-graph's expression.
    fn parsed(text: &str) -> (SymExpr, RecExpr<SymLang>) {
        let e = parse(text).expect("parses");
        let rec = to_rec_expr(&e).expect("converts");
        (e, rec)
    }

    /// [`bounds`] walks the expression; an e-graph of it (what it built
    /// before) holds the same range at the root, folded constants, shared
    /// subterms and undefined divisions included.
    #[test]
    fn bounds_are_the_e_graph_analysis_of_the_expression() {
        let facts =
            Facts::parse(&["s0 >= 1", "s0 <= 4096", "u0 >= 0", "u0 <= 100", "u1 >= -5", "u1 <= 7"]).expect("facts");
        for text in [
            "s0",
            "7",
            "2*3 + 6",
            "(s0*s1 + 1023) // 1024",
            "(u0 + 7) // 8 + (u0 + 7) // 8",
            "-((u1 + 3) // -4)",
            "s0 // 0",
            "s0 // (u1 - u1)",
            "Max(u0, 3) % 8",
            "Min(u1, 2*u0) - 3",
            "ModularIndexing(u0, 4, 8)",
            "u0 ** 3",
            "u1 ** 2 + 2 ** 10",
            "CleanDiv(8*u0, 4)",
            "u0 < 3 and not s0 >= 2",
            "9223372036854775807 + 1",
        ] {
            let (e, rec) = parsed(text);
            let mut egraph = SymEGraph::new(analysis_of(&e, &facts));
            let id = egraph.add_expr(&rec);
            egraph.rebuild();
            assert_eq!(bounds(&e, &facts), egraph[id].data.range, "{text}");
        }
    }

    /// The shortcut for identical sides gives the proof saturation gives.
    #[test]
    fn reflexive_proofs_are_what_saturation_explains() {
        let ranges = ["s0 >= 1", "s0 <= 4096", "u0 >= 0", "u0 <= 100"];
        let facts = Facts::parse(&ranges).expect("facts");
        for text in [
            "s0",
            "7",
            "2*u0",
            "(s0*s1 + 1023) // 1024",
            "2*3 + s0",
            "s0 // 0",
            "Max(u0, 3) % 8",
        ] {
            let (e, r) = parsed(text);
            let deadline = Instant::now() + Duration::from_secs(60);
            let slow = saturate(&r, &r, &facts, &Limits::default(), deadline).expect("saturation meets");
            let fast = reflexive(&r);
            assert_eq!(fast.flat_string(), slow.flat_string(), "{text}");
            assert_eq!(fast.steps(), slow.steps(), "{text}");
            match prove_eq(&e, &e, &facts) {
                Outcome::Proven(p) => assert_eq!(p.flat_string(), slow.flat_string(), "{text}"),
                other => panic!("{text}: {}", other.summary()),
            }
        }
    }
}
