//! The entry function's inputs and outputs, and the file around its body.

use super::*;

impl<'a> Lowering<'a> {
    pub(super) fn entry_prologue(&mut self) -> Result<(), Error> {
        let program = self.program;
        let main = &program.main;
        let tensor_inputs: Vec<&BufName> = main.tensor_inputs().chain(program.constants.keys()).collect();
        let total = main.inputs.len() + program.constants.len();
        let d = self.dialect;
        d.entry_start(self, total);
        let mut symbol_binds = Vec::new();
        let mut tensor_index = 0usize;
        let mut scalar_index = 0usize;
        let mut handle_index = 0usize;
        let mut integer_inputs: Vec<(&str, &SymExpr)> = Vec::new();
        let inputs = main
            .inputs
            .iter()
            .map(Some)
            .chain(program.constants.keys().map(|_| None));
        let constant_names: Vec<&BufName> = program.constants.keys().collect();
        let mut constant_iter = constant_names.into_iter();
        for input in inputs {
            match input {
                Some(GraphInput::Symbol { name, symbol }) => {
                    d.symbol_input(self, name.as_str(), scalar_index, handle_index);
                    self.declare(name.as_str());
                    scalar_index += 1;
                    if name.as_str() != symbol.as_str() {
                        symbol_binds.push((symbol.clone(), name.to_string()));
                    } else {
                        self.declare(symbol.as_str());
                    }
                }
                Some(GraphInput::SymExpr { name, expr }) => {
                    d.symbol_input(self, name.as_str(), scalar_index, handle_index);
                    self.declare(name.as_str());
                    scalar_index += 1;
                    integer_inputs.push((name.as_str(), expr));
                }
                other => {
                    let name = match other {
                        Some(GraphInput::Tensor { name }) => name,
                        _ => match constant_iter.next() {
                            Some(c) => c,
                            None => break,
                        },
                    };
                    d.tensor_input(self, name.as_str(), tensor_index, handle_index);
                    tensor_index += 1;
                }
            }
            handle_index += 1;
        }
        for (symbol, name) in symbol_binds {
            self.line(format!("int64_t {symbol} = {name};"));
            self.declare(symbol.as_str());
        }
        // Backed symbols that are plain sizes or strides of a tensor input.
        let mut layouts = Vec::with_capacity(tensor_inputs.len());
        let mut headers: Vec<(&str, &str)> = Vec::new();
        for input in &tensor_inputs {
            // Invariant: validation declares every tensor input a tensor of
            // main's table (`UndeclaredBuffer`, `NotATensor`); the rest are
            // the program's constants.
            let layout = main
                .layout(input)
                .or_else(|| program.constants.get(*input))
                .expect("validated: a tensor input is a tensor of main's table");
            layouts.push((input.as_str(), layout));
            for (what, dims) in [("size", &layout.size), ("stride", &layout.stride)] {
                for (i, e) in dims.iter().enumerate() {
                    let SymExpr::Sym(s) = e else { continue };
                    if self.declared(s.as_str()) {
                        continue;
                    }
                    if !headers.contains(&(input.as_str(), what)) {
                        d.input_dims(self, input.as_str(), what);
                        headers.push((input.as_str(), what));
                    }
                    d.input_dim(self, s.as_str(), input.as_str(), what, i);
                    self.declare(s.as_str());
                }
            }
        }
        // Sizes and strides that are expressions (`2*s0 + 1`) bind the one
        // symbol they leave unbound, solved (`sym::solve`; the inputs' size
        // checks then hold the value to the expression), until none binds
        // another.
        let mut progress = true;
        while progress {
            progress = false;
            for &(input, layout) in &layouts {
                for (what, dims) in [("size", &layout.size), ("stride", &layout.stride)] {
                    for (i, e) in dims.iter().enumerate() {
                        if matches!(e, SymExpr::Sym(_)) {
                            continue;
                        }
                        let free = e.free_symbols();
                        let unbound: Vec<&crate::sym::Symbol> =
                            free.iter().filter(|s| !self.declared(s.as_str())).collect();
                        let [s] = unbound.as_slice() else { continue };
                        let Some(affine) = crate::sym::solve::affine_in(e, s) else {
                            continue;
                        };
                        if !headers.contains(&(input, what)) {
                            d.input_dims(self, input, what);
                            headers.push((input, what));
                        }
                        let value = format!("{input}_{what}_{i}");
                        d.input_dim(self, &value, input, what, i);
                        self.declare(&value);
                        let solved = self.cexpr(&affine.solution(SymExpr::sym(&value)));
                        self.line(format!("int64_t {s} = {solved};"));
                        self.declare(s.as_str());
                        progress = true;
                    }
                }
            }
            // Integer inputs that are expressions, from the input's value.
            for &(input, e) in &integer_inputs {
                let free = e.free_symbols();
                let unbound: Vec<&crate::sym::Symbol> = free.iter().filter(|s| !self.declared(s.as_str())).collect();
                let [s] = unbound.as_slice() else { continue };
                let Some(affine) = crate::sym::solve::affine_in(e, s) else {
                    continue;
                };
                let solved = self.cexpr(&affine.solution(SymExpr::sym(input)));
                self.line(format!("int64_t {s} = {solved};"));
                self.declare(s.as_str());
                progress = true;
            }
        }
        // Kept: this walk (plain sizes and strides, then affine solving) is
        // not shown to bind every backed symbol validation finds bound
        // (`BackedSymbolNeverBound`, the compound-input rule).
        for (s, decl) in &program.symbols {
            if decl.kind == SymbolKind::Backed && !self.declared(s.as_str()) {
                return Err(Error::invalid(Location::header(None), format!( "cannot bind backed symbol `{s}`: it is neither a symbol input nor a size or stride of a tensor input that determines it" )));
            }
        }
        Ok(())
    }

    pub(super) fn entry_outputs(&mut self, main: &GraphCtx<'_>) -> Result<(), Error> {
        let mut released: HashMap<String, usize> = HashMap::default();
        let d = self.dialect;
        for (i, out) in main.graph.outputs.iter().enumerate() {
            match out {
                GraphOutput::Buffer(b) => {
                    let name = main.local(b);
                    if let Some(first) = released.get(&name) {
                        d.output_again(self, i, *first);
                    } else {
                        d.output_tensor(self, i, &name);
                        released.insert(name, i);
                    }
                }
                GraphOutput::Expr(e) => {
                    let v = self.cexpr(e);
                    d.output_scalar(self, i, &v);
                }
                GraphOutput::None => {
                    d.output_none(self, i);
                }
            }
        }
        Ok(())
    }

    /// Writes the whole file around `body`.
    pub(super) fn assemble(
        &mut self,
        out: &mut dyn fmt::Write,
        body: &str,
        wrappers: &KernelWrappers,
    ) -> Result<(), Error> {
        self.write_head(out, wrappers)?;
        out.write_str(body)?;
        self.write_tail(out)
    }

    /// The file up to the entry function's body.
    pub(super) fn write_head(&self, out: &mut dyn fmt::Write, wrappers: &KernelWrappers) -> Result<(), Error> {
        self.dialect.write_head(self, out, wrappers)
    }

    /// The file after the entry function's body.
    pub(super) fn write_tail(&self, out: &mut dyn fmt::Write) -> Result<(), Error> {
        self.dialect.write_tail(self, out)
    }

    /// The Halide helper and the sources/declarations of directly called kernels.
    pub(super) fn direct_text(&self, out: &mut dyn fmt::Write) -> Result<(), Error> {
        if self.halide.is_some() {
            out.write_char('\n')?;
            out.write_str(direct::HALIDE_HELPER)?;
        }
        for text in self.direct_decls.values() {
            out.write_char('\n')?;
            out.write_str(text)?;
        }
        Ok(())
    }
}
