//! Collective ops (`torch.ops._c10d_functional.*`) in a program: what each
//! call means for shapes and dtypes, checked within one rank's program
//! ([`collectives`]) and across the programs of the ranks that run together
//! ([`check_ranks`]). No device is needed: these are the checks a program
//! must pass before any backend runs its collectives.
//!
//! The ops and their arguments are those of PyTorch's functional collectives
//! (`torch/distributed/_functional_collectives.py`), as Inductor's wrapper
//! calls them:
//!
//! | op | arguments | result |
//! |---|---|---|
//! | `all_reduce`, `all_reduce_` | input, reduce op, group name | the input's layout (`_`: the input itself) |
//! | `all_gather_into_tensor` | input, group size, group name | dim 0 times the group size |
//! | `reduce_scatter_tensor` | input, reduce op, group size, group name | dim 0 divided by the group size |
//! | `broadcast`, `broadcast_` | input, source rank, group name | the input's layout |
//! | `wait_tensor` | tensor | the tensor |

use super::{ArgValue, BufName, DType, ExternCall, GraphName, Line, Program, MAIN_GRAPH};
use std::collections::HashMap;
use std::fmt;

/// The reduce ops `_c10d_functional` accepts.
pub const REDUCE_OPS: &[&str] = &[
    "sum",
    "avg",
    "product",
    "min",
    "max",
    "band",
    "bor",
    "bxor",
    "premul_sum",
];

/// What a collective does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `all_reduce` / `all_reduce_`.
    AllReduce {
        /// `all_reduce_`: the result is the input.
        in_place: bool,
    },
    /// `all_gather_into_tensor`.
    AllGather,
    /// `reduce_scatter_tensor`.
    ReduceScatter,
    /// `broadcast` / `broadcast_`.
    Broadcast {
        /// `broadcast_`: the result is the input.
        in_place: bool,
    },
    /// `wait_tensor`: completes an earlier collective.
    Wait,
}

/// One collective call of a program.
#[derive(Clone, Debug, PartialEq)]
pub struct Collective {
    /// Where: the graph and the line's index in it.
    pub graph: GraphName,
    /// Index of the line in its graph.
    pub line: usize,
    /// The op as the program names it.
    pub op: String,
    /// What it does.
    pub kind: Kind,
    /// The process group's name (`None` for `wait_tensor`).
    pub group: Option<String>,
    /// The group size the call states (`all_gather_into_tensor`, `reduce_scatter_tensor`).
    pub group_size: Option<i64>,
    /// The reduce op (`all_reduce`, `reduce_scatter_tensor`).
    pub reduce: Option<String>,
    /// The source rank (`broadcast`).
    pub src: Option<i64>,
    /// The input tensor's dtype and sizes (`None` for a symbolic size).
    pub input: (DType, Vec<Option<i64>>),
}

/// A collective that is not well formed, or ranks that disagree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// One call of one program.
    Call {
        /// The graph.
        graph: GraphName,
        /// The line index in the graph.
        line: usize,
        /// The op.
        op: String,
        /// What is wrong.
        message: String,
    },
    /// Two calls naming one group with different sizes.
    GroupSize {
        /// The group.
        group: String,
        /// The first size and where it was stated.
        first: (i64, GraphName, usize),
        /// The other.
        second: (i64, GraphName, usize),
    },
    /// The programs of two ranks issue different collectives.
    Ranks {
        /// The ranks' labels.
        ranks: (String, String),
        /// The position in the sequence of collectives (0-based).
        index: usize,
        /// What differs.
        message: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Call {
                graph,
                line,
                op,
                message,
            } => write!(f, "graph `{graph}`, line {}: `{op}`: {message}", line + 1),
            Error::GroupSize { group, first, second } => write!(
                f,
                "process group `{group}` has size {} at graph `{}`, line {} but size {} at graph `{}`, line {}",
                first.0,
                first.1,
                first.2 + 1,
                second.0,
                second.1,
                second.2 + 1
            ),
            Error::Ranks { ranks, index, message } => write!(
                f,
                "ranks `{}` and `{}` disagree at collective {}: {message}",
                ranks.0,
                ranks.1,
                index + 1
            ),
        }
    }
}

impl std::error::Error for Error {}

/// `op` without `torch.ops.` and the overload, when it is a `_c10d_functional` op.
fn c10d_name(op: &str) -> Option<&str> {
    let rest = op.strip_prefix("torch.ops.").unwrap_or(op);
    let rest = rest.strip_prefix("_c10d_functional.")?;
    Some(rest.split('.').next().unwrap_or(rest))
}

fn kind_of(name: &str) -> Option<Kind> {
    Some(match name {
        "all_reduce" => Kind::AllReduce { in_place: false },
        "all_reduce_" => Kind::AllReduce { in_place: true },
        "all_gather_into_tensor" => Kind::AllGather,
        "reduce_scatter_tensor" => Kind::ReduceScatter,
        "broadcast" => Kind::Broadcast { in_place: false },
        "broadcast_" => Kind::Broadcast { in_place: true },
        "wait_tensor" => Kind::Wait,
        _ => return None,
    })
}

/// Every collective of `program` in order (main, then the subgraphs in
/// declaration order), each checked: its arguments, its result's dtype and
/// sizes against its input's, and one size per group name.
pub fn collectives(program: &Program) -> Result<Vec<Collective>, Error> {
    let mut out = Vec::new();
    let main = GraphName::new(MAIN_GRAPH);
    let graphs = std::iter::once((&main, &program.main)).chain(program.subgraphs.iter());
    let mut sizes: HashMap<String, (i64, GraphName, usize)> = HashMap::new();
    for (name, graph) in graphs {
        for (index, line) in graph.lines.iter().enumerate() {
            let (call, out_buf) = match line {
                Line::ExternKernelAlloc(call) => (call, None),
                Line::ExternKernelOut { call, out } => (call, Some(out)),
                _ => continue,
            };
            let Some(short) = c10d_name(&call.op) else { continue };
            let err = |message: String| Error::Call {
                graph: name.clone(),
                line: index,
                op: call.op.clone(),
                message,
            };
            let kind = kind_of(short).ok_or_else(|| {
                err(format!(
                    "`{short}` is not one of the functional collectives wrapir knows (all_reduce, all_reduce_, all_gather_into_tensor, reduce_scatter_tensor, broadcast, broadcast_, wait_tensor)"
                ))
            })?;
            let c = one(name, index, graph, call, out_buf, kind, &err)?;
            if let (Some(group), Some(size)) = (&c.group, c.group_size) {
                match sizes.get(group) {
                    Some(first) if first.0 != size => {
                        return Err(Error::GroupSize {
                            group: group.clone(),
                            first: first.clone(),
                            second: (size, name.clone(), index),
                        })
                    }
                    Some(_) => {}
                    None => {
                        sizes.insert(group.clone(), (size, name.clone(), index));
                    }
                }
            }
            out.push(c);
        }
    }
    Ok(out)
}

/// Checks one call; `err` builds its error.
fn one(
    name: &GraphName,
    index: usize,
    graph: &super::Graph,
    call: &ExternCall,
    out_buf: Option<&BufName>,
    kind: Kind,
    err: &dyn Fn(String) -> Error,
) -> Result<Collective, Error> {
    let arity = match kind {
        Kind::Wait => 1,
        Kind::AllReduce { .. } | Kind::AllGather | Kind::Broadcast { .. } => 3,
        Kind::ReduceScatter => 4,
    };
    let args: Vec<&ArgValue> = call.args.iter().chain(call.kwargs.values()).collect();
    if args.len() != arity {
        return Err(err(format!("takes {arity} arguments, the call passes {}", args.len())));
    }
    let ArgValue::Buffer(input) = args[0] else {
        return Err(err(format!("its first argument must be a tensor, not {:?}", args[0])));
    };
    let in_layout = graph
        .layout(input)
        .ok_or_else(|| err(format!("input `{input}` is not a tensor of the graph")))?;
    let string = |i: usize, what: &str| match args[i] {
        ArgValue::Str(s) => Ok(s.clone()),
        other => Err(err(format!(
            "{what} (argument {}) must be a string, not {other:?}",
            i + 1
        ))),
    };
    let int = |i: usize, what: &str| match args[i] {
        ArgValue::Expr(e) => e
            .as_int()
            .ok_or_else(|| err(format!("{what} (argument {}) must be a literal integer", i + 1))),
        other => Err(err(format!(
            "{what} (argument {}) must be an integer, not {other:?}",
            i + 1
        ))),
    };
    let reduce_op = |i: usize| -> Result<String, Error> {
        let r = string(i, "the reduce op")?;
        if REDUCE_OPS.contains(&r.as_str()) {
            Ok(r)
        } else {
            Err(err(format!("reduce op `{r}` is not one of {}", REDUCE_OPS.join(", "))))
        }
    };
    let (mut group, mut group_size, mut reduce, mut src) = (None, None, None, None);
    match kind {
        Kind::AllReduce { .. } => {
            reduce = Some(reduce_op(1)?);
            group = Some(string(2, "the group name")?);
        }
        Kind::AllGather => {
            group_size = Some(int(1, "the group size")?);
            group = Some(string(2, "the group name")?);
        }
        Kind::ReduceScatter => {
            reduce = Some(reduce_op(1)?);
            group_size = Some(int(2, "the group size")?);
            group = Some(string(3, "the group name")?);
        }
        Kind::Broadcast { .. } => {
            src = Some(int(1, "the source rank")?);
            group = Some(string(2, "the group name")?);
        }
        Kind::Wait => {}
    }
    if let Some(n) = group_size {
        if n < 1 {
            return Err(err(format!("group size {n} is below 1")));
        }
    }
    if let Some(s) = src {
        if s < 0 || group_size.is_some_and(|n| s >= n) {
            return Err(err(format!("source rank {s} is outside the group")));
        }
    }
    let input_sizes: Vec<Option<i64>> = in_layout.size.iter().map(|d| d.as_int()).collect();
    // The result: the call's own (`extern buf = ...`) or the out= buffer.
    let result = call.result.as_ref().or(out_buf);
    if let Some(r) = result {
        let layout = graph
            .layout(r)
            .ok_or_else(|| err(format!("result `{r}` is not a tensor of the graph")))?;
        if layout.dtype != in_layout.dtype {
            return Err(err(format!(
                "result `{r}` is {} but input `{input}` is {}",
                layout.dtype, in_layout.dtype
            )));
        }
        if layout.size.len() != in_layout.size.len() {
            return Err(err(format!(
                "result `{r}` has {} dimensions, input `{input}` {}",
                layout.size.len(),
                in_layout.size.len()
            )));
        }
        for (d, (o, i)) in layout.size.iter().zip(&in_layout.size).enumerate() {
            let (Some(o), Some(i)) = (o.as_int(), i.as_int()) else {
                continue; // symbolic: nothing to compare without the symbol's value
            };
            let want = match (kind, d, group_size) {
                (Kind::AllGather, 0, Some(n)) => i.checked_mul(n),
                (Kind::ReduceScatter, 0, Some(n)) => {
                    if i % n != 0 {
                        return Err(err(format!(
                            "input `{input}`'s dimension 0 ({i}) is not divisible by the group size {n}"
                        )));
                    }
                    Some(i / n)
                }
                _ => Some(i),
            };
            if want != Some(o) {
                return Err(err(format!(
                    "result `{r}` has size {o} in dimension {d}; the input's {i} makes it {}",
                    want.map_or("too large to represent".to_string(), |w| w.to_string())
                )));
            }
        }
    }
    Ok(Collective {
        graph: name.clone(),
        line: index,
        op: call.op.clone(),
        kind,
        group,
        group_size,
        reduce,
        src,
        input: (in_layout.dtype, input_sizes),
    })
}

/// Checks that the programs of ranks that run together issue the same
/// collectives in the same order: same op, group, group size, reduce op,
/// source rank, dtype and (where both are literal) input sizes. `ranks`
/// pairs a label (`rank0`) with each program.
pub fn check_ranks(ranks: &[(&str, &Program)]) -> Result<(), Error> {
    let Some(((first_label, first), rest)) = ranks.split_first() else {
        return Ok(());
    };
    let reference = collectives(first)?;
    for (label, program) in rest {
        let other = collectives(program)?;
        let pair = || (first_label.to_string(), label.to_string());
        // The first call that differs, then the counts (a missing call is
        // reported after the calls both ranks make agree).
        for (index, (a, b)) in reference.iter().zip(&other).enumerate() {
            let differ = |what: &str, x: String, y: String| Error::Ranks {
                ranks: pair(),
                index,
                message: format!(
                    "{what} {x} (graph `{}`, line {}) against {y} (graph `{}`, line {})",
                    a.graph,
                    a.line + 1,
                    b.graph,
                    b.line + 1
                ),
            };
            if a.kind != b.kind {
                return Err(differ("op", format!("`{}`", a.op), format!("`{}`", b.op)));
            }
            let text = |v: &Option<String>| v.as_ref().map_or("none".to_string(), |s| format!("'{s}'"));
            let number = |v: &Option<i64>| v.map_or("none".to_string(), |n| n.to_string());
            if a.group != b.group {
                return Err(differ("group", text(&a.group), text(&b.group)));
            }
            if a.group_size != b.group_size {
                return Err(differ("group size", number(&a.group_size), number(&b.group_size)));
            }
            if a.reduce != b.reduce {
                return Err(differ("reduce op", text(&a.reduce), text(&b.reduce)));
            }
            if a.src != b.src {
                return Err(differ("source rank", number(&a.src), number(&b.src)));
            }
            if a.input.0 != b.input.0 {
                return Err(differ("dtype", a.input.0.to_string(), b.input.0.to_string()));
            }
            let sizes_differ = a.input.1.len() != b.input.1.len()
                || a.input
                    .1
                    .iter()
                    .zip(&b.input.1)
                    .any(|(x, y)| matches!((x, y), (Some(x), Some(y)) if x != y));
            if sizes_differ {
                return Err(differ(
                    "input sizes",
                    format!("{:?}", a.input.1),
                    format!("{:?}", b.input.1),
                ));
            }
        }
        if other.len() != reference.len() {
            return Err(Error::Ranks {
                ranks: pair(),
                index: reference.len().min(other.len()),
                message: format!("{} collectives against {}", reference.len(), other.len()),
            });
        }
    }
    Ok(())
}
