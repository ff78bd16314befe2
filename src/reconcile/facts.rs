//! What a program states about its symbols, as facts for the prover.

use crate::ir::{Line, Program, SymbolKind};
use crate::sym::Facts;

/// The facts a program states: each declared symbol's range (backed sizes
/// at least 0) and each `SymbolicCallArg` binding (`ks0 = s0*s1`) as a
/// definition. A symbol bound twice keeps its first definition.
pub fn program_facts(program: &Program) -> Facts {
    let mut facts = Facts::new();
    for (sym, decl) in &program.symbols {
        let mut lo = decl.range.lo;
        if decl.kind == SymbolKind::Backed {
            lo = Some(lo.map_or(0, |v| v.max(0)));
        }
        facts.restrict(sym.clone(), lo, decl.range.hi);
    }
    for graph in std::iter::once(&program.main).chain(program.subgraphs.values()) {
        for line in &graph.lines {
            if let Line::SymbolicCallArg { symbol, expr } = line {
                facts.define(symbol.clone(), expr.clone());
            }
        }
    }
    facts
}
