//! AOTI shim calls of fallback ops whose calls pass keyword or optional
//! arguments: the shim takes every schema argument in schema order (optional
//! tensors as `AtenTensorHandle*`, `nullptr` when absent; optional scalars
//! as pointers; absent defaults spelled out) and one out-pointer per schema
//! result, as Inductor's C++ wrapper passes them (checked by compiling the
//! lowering of every bundle against PyTorch's shim headers). The IR lists a
//! call's arguments as the program gave them (`convolution(x, w, stride=...,
//! bias=None)`), so these ops carry their schema here; every other op's
//! arguments go in IR order.

use super::*;

/// One schema parameter, by how the shim takes it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Param {
    /// `Tensor`: a handle.
    Tensor,
    /// `Tensor?`: `&temporary_reference(x.get())` or `nullptr`.
    OptTensor,
    /// `str`.
    Str,
    /// `int` with its default.
    Int(i64),
    /// `bool` with its default (`0` / `1`).
    Bool(bool),
    /// `Scalar?` / `float?` taken as `double*`: a local and its address, or `nullptr`.
    OptDouble,
    /// `float` with its default.
    Double(f64),
    /// `int` / `SymInt` without a default.
    IntRequired,
    /// `int[]` / `SymInt[]`: a pointer and a length.
    IntList,
    /// `Tensor?[]`: `const AtenTensorHandle*` per element (`nullptr` for `None`) and a length.
    OptTensorList,
}

/// One schema result, by how the shim returns it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Out {
    /// `Tensor`: an `AtenTensorHandle*` the shim fills.
    Tensor,
    /// `SymInt` / `int`: an `int64_t*`.
    Int,
    /// A result the shim leaves out for these arguments (`nullptr`): the
    /// cumulative sequence lengths and debug mask of cuDNN attention.
    Absent,
}

/// The results of `op` in schema order, for ops whose shim returns more
/// values than a program may extract.
pub(super) fn schema_results(name: &str, overload: Option<&str>) -> Option<&'static [Out]> {
    use Out::*;
    match (name, overload.unwrap_or("default")) {
        // (output, log_sumexp, philox_seed, philox_offset)
        ("_scaled_dot_product_efficient_attention", "default") => Some(&[Tensor, Tensor, Tensor, Tensor]),
        // (output, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, philox_seed,
        //  philox_offset, debug_attn_mask)
        ("_scaled_dot_product_cudnn_attention", "default") => {
            Some(&[Tensor, Tensor, Absent, Absent, Int, Int, Tensor, Tensor, Absent])
        }
        _ => None,
    }
}

/// The schema parameters of `op` (name without `aten.`, overload) as
/// PyTorch's `native_functions.yaml` writes them, when it is one of these ops.
fn schema_text(name: &str, overload: Option<&str>) -> Option<&'static str> {
    match (name, overload.unwrap_or("default")) {
        ("segment_reduce", "default") => Some(
            "Tensor data, str reduce, *, Tensor? lengths=None, Tensor? indices=None, Tensor? offsets=None, \
             int axis=0, bool unsafe=False, Scalar? initial=None",
        ),
        ("convolution", "default") => Some(
            "Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, SymInt[] padding, SymInt[] dilation, \
             bool transposed, SymInt[] output_padding, SymInt groups",
        ),
        ("topk", "default") => Some("Tensor self, SymInt k, int dim=-1, bool largest=True, bool sorted=True"),
        ("index", "Tensor") => Some("Tensor self, Tensor?[] indices"),
        ("_scaled_dot_product_efficient_attention", "default") => Some(
            "Tensor query, Tensor key, Tensor value, Tensor? attn_bias, bool compute_log_sumexp, \
             float dropout_p=0.0, bool is_causal=False, *, float? scale=None",
        ),
        ("_scaled_dot_product_cudnn_attention", "default") => Some(
            "Tensor query, Tensor key, Tensor value, Tensor? attn_bias, bool compute_log_sumexp, \
             float dropout_p=0.0, bool is_causal=False, bool return_debug_mask=False, *, float? scale=None",
        ),
        _ => None,
    }
}

/// The parameters of a schema's text ([`schema_text`]) in order, the `*`
/// that starts its keyword-only ones passed over; `Err` names a parameter
/// of a type (or default) the shim calls here do not take.
fn parse_schema(text: &str) -> Result<Vec<(&str, Param)>, String> {
    let mut params = Vec::new();
    for p in text.split(',').map(str::trim).filter(|p| *p != "*") {
        let (ty, name) = p
            .split_once(' ')
            .ok_or_else(|| format!("schema parameter `{p}` has no name"))?;
        let (name, default) = match name.split_once('=') {
            Some((n, d)) => (n, Some(d)),
            None => (name, None),
        };
        let bad = || format!("schema parameter `{p}`");
        let param = match (ty, default) {
            ("Tensor", None) => Param::Tensor,
            ("Tensor?", _) => Param::OptTensor,
            ("str", None) => Param::Str,
            ("int", Some(d)) => Param::Int(d.parse().map_err(|_| bad())?),
            ("int" | "SymInt", None) => Param::IntRequired,
            // A `bool` without a default is passed as `false` when absent.
            ("bool", None | Some("False")) => Param::Bool(false),
            ("bool", Some("True")) => Param::Bool(true),
            ("Scalar?" | "float?", _) => Param::OptDouble,
            ("float", Some(d)) => Param::Double(d.parse().map_err(|_| bad())?),
            ("int[]" | "SymInt[]", None) => Param::IntList,
            ("Tensor?[]", None) => Param::OptTensorList,
            _ => return Err(bad()),
        };
        params.push((name, param));
    }
    Ok(params)
}

impl Lowering<'_> {
    /// The shim arguments of `call` in schema order, when its op has a schema
    /// here; `local` names the locals it declares (optional scalars).
    pub(super) fn schema_args(
        &mut self,
        g: &GraphCtx<'_>,
        call: &ExternCall,
        name: &str,
        overload: Option<&str>,
        local: &str,
        cx: &super::Cx<'_>,
    ) -> Result<Option<Vec<String>>, Error> {
        let Some(text) = schema_text(name, overload) else {
            return Ok(None);
        };
        // Kept, reachable: the IR carries no op schemas, so validation
        // cannot hold a call against its shim's (an unknown keyword, a
        // missing argument, a value of the wrong kind for a parameter).
        let bad = |message: String| Error::invalid(cx, message);
        let params = parse_schema(text).map_err(|p| bad(format!("`{}`: {p} is not a shim argument", call.op)))?;
        if call.args.len() > params.len() {
            return Err(bad(format!(
                "`{}` takes {} arguments, the call passes {} positionally",
                call.op,
                params.len(),
                call.args.len()
            )));
        }
        if let Some(k) = call.kwargs.keys().find(|k| !params.iter().any(|(p, _)| p == k)) {
            return Err(bad(format!("`{}` has no parameter `{k}`", call.op)));
        }
        let mut out = Vec::with_capacity(params.len());
        for (i, (pname, param)) in params.iter().enumerate() {
            let given = call
                .args
                .get(i)
                .or_else(|| call.kwargs.get(*pname))
                .filter(|v| !matches!(v, ArgValue::None));
            out.push(match (param, given) {
                (Param::Tensor | Param::Str | Param::IntRequired | Param::IntList, Some(v)) => {
                    self.shim_arg(g, v, cx)?
                }
                (Param::Tensor | Param::Str | Param::IntRequired | Param::IntList | Param::OptTensorList, None) => {
                    return Err(bad(format!("`{}`: missing argument `{pname}`", call.op)))
                }
                (Param::OptTensorList, Some(ArgValue::List(items))) => {
                    let mut elems = Vec::with_capacity(items.len());
                    for item in items {
                        elems.push(match item {
                            ArgValue::Buffer(b) => format!("&temporary_reference({}.get())", g.tensor_arg(b, cx)?),
                            ArgValue::None => "nullptr".to_string(),
                            other => {
                                return Err(bad(format!(
                                    "`{}`: an element of `{pname}` cannot be {other:?}",
                                    call.op
                                )))
                            }
                        });
                    }
                    let n = items.len();
                    format!(
                        "std::array<const AtenTensorHandle*, {n}>{{{}}}.data(), {n}",
                        elems.join(", ")
                    )
                }
                (Param::Double(_), Some(ArgValue::Float(f))) => c_float(*f),
                (Param::Double(d), None) => c_float(*d),
                (Param::OptTensor, Some(ArgValue::Buffer(b))) => {
                    format!("&temporary_reference({}.get())", g.tensor_arg(b, cx)?)
                }
                (Param::OptTensor | Param::OptDouble, None) => "nullptr".into(),
                (Param::Int(_), Some(v)) => self.shim_arg(g, v, cx)?,
                (Param::Int(d), None) => format!("{d}L"),
                (Param::Bool(_), Some(ArgValue::Bool(b))) | (Param::Bool(b), None) => u8::from(*b).to_string(),
                (Param::OptDouble, Some(v)) => {
                    let value = match v {
                        ArgValue::Float(f) => c_float(*f),
                        other => format!("static_cast<double>({})", self.shim_arg(g, other, cx)?),
                    };
                    let var = format!("{local}_{pname}");
                    self.line(format!("double {var} = {value};"));
                    format!("&{var}")
                }
                (_, Some(v)) => return Err(bad(format!("`{}`: argument `{pname}` cannot be {v:?}", call.op))),
            });
        }
        Ok(Some(out))
    }

    pub(super) fn shim_arg(&mut self, g: &GraphCtx<'_>, a: &ArgValue, cx: &Cx<'_>) -> Result<String, Error> {
        Ok(match a {
            ArgValue::Buffer(b) => g.tensor_arg(b, cx)?,
            ArgValue::Expr(e) => self.cexpr(e),
            ArgValue::Float(v) => c_float(*v),
            ArgValue::Bool(b) => b.to_string(),
            ArgValue::None => "nullptr".into(),
            ArgValue::Str(s) => c_string(s),
            ArgValue::DType(d) => self.use_dtype(*d),
            ArgValue::Device(d) => {
                self.devices.insert(d.kind);
                format!("cached_torch_device_type_{}, {}", d.kind.as_str(), device_index(d))
            }
            ArgValue::List(_) => self.list_arg(g, a, cx)?,
        })
    }

    /// A list argument of an AOTI shim: a pointer and a length.
    fn list_arg(&mut self, g: &GraphCtx<'_>, a: &ArgValue, cx: &Cx<'_>) -> Result<String, Error> {
        let ArgValue::List(items) = a else {
            return self.shim_arg(g, a, cx);
        };
        let n = items.len();
        let all_tensors = items.iter().all(|i| matches!(i, ArgValue::Buffer(_)));
        let tensors_or_none = items.iter().all(|i| matches!(i, ArgValue::Buffer(_) | ArgValue::None));
        if n > 0 && all_tensors {
            let mut v: Vec<String> = Vec::with_capacity(n);
            for i in items {
                if let ArgValue::Buffer(b) = i {
                    v.push(format!("{}.get()", g.tensor_arg(b, cx)?));
                }
            }
            return Ok(format!(
                "std::array<AtenTensorHandle, {n}>{{{}}}.cbegin(), {n}",
                v.join(", ")
            ));
        }
        if n > 0 && tensors_or_none {
            let mut v: Vec<String> = Vec::with_capacity(n);
            for i in items {
                v.push(match i {
                    ArgValue::Buffer(b) => format!("&temporary_reference({}.get())", g.tensor_arg(b, cx)?),
                    _ => "nullptr".to_string(),
                });
            }
            return Ok(format!(
                "std::array<const AtenTensorHandle*, {n}>{{{}}}.data(), {n}",
                v.join(", ")
            ));
        }
        let mut v = Vec::new();
        for i in items {
            match i {
                ArgValue::Expr(e) => v.push(self.cexpr(e)),
                ArgValue::Bool(b) => v.push(if *b { "1L".into() } else { "0L".into() }),
                ArgValue::Float(_) => {
                    let f: Vec<String> = items
                        .iter()
                        .map(|i| match i {
                            ArgValue::Float(x) => Ok(c_float(*x)),
                            ArgValue::Expr(SymExpr::Int(x)) => Ok(format!("{x}.0")),
                            _ => Err(self.unsupported(cx, "a list mixing floats with other values")),
                        })
                        .collect::<Result<_, _>>()?;
                    return Ok(format!("std::array<double, {n}>{{{}}}.cbegin(), {n}", f.join(", ")));
                }
                _ => return Err(self.unsupported(cx, "a list argument that is not all tensors, integers or floats")),
            }
        }
        if n == 0 {
            return Ok("nullptr, 0".into());
        }
        Ok(format!("std::array<int64_t, {n}>{{{}}}.cbegin(), {n}", v.join(", ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_schema_parses() {
        let ops = [
            ("segment_reduce", None),
            ("convolution", None),
            ("topk", None),
            ("index", Some("Tensor")),
            ("_scaled_dot_product_efficient_attention", None),
            ("_scaled_dot_product_cudnn_attention", None),
        ];
        for (name, overload) in ops {
            let text = schema_text(name, overload).expect("a schema");
            assert!(parse_schema(text).is_ok(), "{name}: {:?}", parse_schema(text));
        }
    }

    #[test]
    fn schema_parameters_carry_their_defaults() {
        use Param::*;
        let text = schema_text("segment_reduce", None).expect("a schema");
        assert_eq!(
            parse_schema(text),
            Ok(vec![
                ("data", Tensor),
                ("reduce", Str),
                ("lengths", OptTensor),
                ("indices", OptTensor),
                ("offsets", OptTensor),
                ("axis", Int(0)),
                ("unsafe", Bool(false)),
                ("initial", OptDouble),
            ])
        );
        let text = schema_text("topk", None).expect("a schema");
        let params = parse_schema(text).expect("parses");
        assert_eq!(params[2], ("dim", Int(-1)));
        assert_eq!(params[3], ("largest", Bool(true)));
        let text = schema_text("_scaled_dot_product_efficient_attention", None).expect("a schema");
        let params = parse_schema(text).expect("parses");
        assert_eq!(params[5], ("dropout_p", Double(0.0)));
        assert_eq!(params.last(), Some(&("scale", OptDouble)));
        assert_eq!(
            parse_schema("Tensor[] x"),
            Err("schema parameter `Tensor[] x`".to_string())
        );
    }
}
