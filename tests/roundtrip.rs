//! Round-trip tests of the `.wir` text form: random programs, fixtures, and
//! malformed inputs with their exact error messages.

mod common;

use indexmap::IndexMap;
use proptest::prelude::*;
use smallvec::SmallVec;
use wrapir::ir::*;
use wrapir::sym::{SymExpr, Symbol};
use wrapir::text::{parse, print, print_line};

// ---------------------------------------------------------------- generators

fn expr_leaf() -> impl Strategy<Value = SymExpr> {
    prop_oneof![
        (-50i64..200).prop_map(SymExpr::Int),
        prop::sample::select(vec!["s0", "s1", "u0", "u1", "ks0"]).prop_map(SymExpr::sym),
    ]
}

/// Random expressions, normalised to the canonical form the expression parser
/// returns for their printed text (compound ones fall back to a leaf while the
/// expression parser cannot read them back).
fn expr() -> impl Strategy<Value = SymExpr> {
    let tree = expr_leaf().prop_recursive(3, 12, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 2..4).prop_map(SymExpr::Add),
            prop::collection::vec(inner.clone(), 2..4).prop_map(SymExpr::Mul),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| SymExpr::floor_div(a, b)),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| SymExpr::Mod(Box::new(a), Box::new(b))),
            prop::collection::vec(inner.clone(), 2..3).prop_map(SymExpr::Min),
            prop::collection::vec(inner.clone(), 2..3).prop_map(SymExpr::Max),
            (inner.clone(), inner).prop_map(|(a, b)| SymExpr::cmp(wrapir::sym::CmpOp::Ge, a, b)),
        ]
    });
    (tree, expr_leaf()).prop_map(|(e, leaf)| canonical(e).unwrap_or(leaf))
}

fn canonical(e: SymExpr) -> Option<SymExpr> {
    let once = wrapir::sym::parse(&e.to_string()).ok()?;
    let twice = wrapir::sym::parse(&once.to_string()).ok()?;
    (once == twice).then_some(once)
}

fn dims() -> impl Strategy<Value = Dims> {
    prop::collection::vec(expr(), 0..4).prop_map(|v| v.into_iter().collect())
}

fn device() -> impl Strategy<Value = Device> {
    prop_oneof![
        (0u32..4).prop_map(Device::cuda),
        Just(Device::cpu()),
        Just(Device {
            kind: DeviceType::Meta,
            index: None
        }),
        (0u32..2).prop_map(|i| Device {
            kind: DeviceType::Xpu,
            index: Some(i)
        }),
    ]
}

fn layout() -> impl Strategy<Value = Layout> {
    (
        prop::sample::select(DType::ALL.to_vec()),
        device(),
        dims(),
        dims(),
        prop::option::of(expr()),
        prop::option::of(expr()),
    )
        .prop_map(|(dtype, device, size, stride, offset, alloc_numel)| Layout {
            dtype,
            device,
            size,
            stride,
            offset: offset.unwrap_or(SymExpr::Int(0)),
            alloc_numel,
        })
}

/// Text with quotes, backslashes, line breaks, `;`, control and non-ASCII characters.
fn text() -> impl Strategy<Value = String> {
    "[ -~\n\t\r\\\\'\"é\u{1}\u{7f}]{0,16}"
}

/// Names that are identifiers or (to exercise quoting) arbitrary text.
fn loose_name() -> impl Strategy<Value = String> {
    prop_oneof![3 => "[A-Za-z_][A-Za-z0-9_]{0,6}", 1 => text()]
}

fn float() -> impl Strategy<Value = f64> {
    prop_oneof![
        -1e6f64..1e6,
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(1e-6),
        Just(1e300),
        Just(-0.0)
    ]
}

fn const_value() -> impl Strategy<Value = ConstValue> {
    prop_oneof![
        Just(ConstValue::None),
        any::<bool>().prop_map(ConstValue::Bool),
        any::<i64>().prop_map(ConstValue::Int),
        float().prop_map(ConstValue::Float),
        text().prop_map(ConstValue::Str),
    ]
}

fn sig_type() -> impl Strategy<Value = SigType> {
    prop::sample::select(vec![
        "*fp32",
        "*i1",
        "*bf16",
        "*fp8e4nv",
        "i32",
        "i64",
        "fp32",
        "u64",
        "constexpr",
        "nvTmaDesc",
        "tensordesc<fp16[64, 64]>",
    ])
    .prop_map(|s| s.parse().expect("valid signature type"))
}

fn grid_type() -> impl Strategy<Value = GridType> {
    let entry = (
        prop::collection::vec(("[A-Z]{1,6}", any::<i64>()), 0..3),
        expr(),
        expr(),
        expr(),
    )
        .prop_map(|(cfg, x, y, z)| PrecomputedGridEntry {
            config: cfg.into_iter().collect(),
            grid: [x, y, z],
        });
    prop_oneof![
        Just(GridType::Grid1D),
        Just(GridType::Grid2D),
        Just(GridType::Grid3D),
        any::<i64>().prop_map(|max_y_grid| GridType::Grid2DWithYZOverflow { max_y_grid }),
        Just(GridType::CooperativeReductionGrid),
        Just(GridType::SplitScanGrid),
        Just(GridType::FixedGrid),
        prop::collection::vec(entry, 0..3).prop_map(|grids| GridType::PrecomputedGrid { grids }),
    ]
}

fn triton_meta() -> impl Strategy<Value = TritonMeta> {
    (
        prop::collection::vec((loose_name(), sig_type()), 0..5),
        prop::collection::vec((loose_name(), const_value()), 0..3),
        prop::collection::vec((loose_name(), any::<i64>()), 0..3),
        grid_type(),
        (
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            prop::option::of(any::<u64>()),
            prop::option::of(any::<u64>()),
        ),
        prop::collection::vec(loose_name(), 0..3),
        (prop::option::of(text()), prop::option::of(text()), any::<bool>()),
    )
        .prop_map(
            |(sig, consts, config, grid_type, nums, extra, (mangled_name, cubin, user_defined))| TritonMeta {
                signature: sig.into_iter().collect(),
                constants: consts.into_iter().collect(),
                config: config.into_iter().collect(),
                grid_type,
                num_warps: nums.0,
                num_stages: nums.1,
                shared_mem: nums.2,
                global_scratch: nums.3,
                profile_scratch: nums.4,
                extra_launcher_args: extra,
                mangled_name,
                cubin,
                user_defined,
            },
        )
}

fn halide_meta() -> impl Strategy<Value = HalideMeta> {
    let strs = || prop::option::of(prop::collection::vec(text(), 0..3));
    let arg = (
        loose_name(),
        text(),
        strs(),
        strs(),
        prop::option::of(text()),
        prop::option::of(text()),
    )
        .prop_map(|(name, ctype, shape, stride, offset, alias_of)| HalideArg {
            ctype,
            name,
            shape,
            stride,
            offset,
            alias_of,
        });
    (
        prop::collection::vec(arg, 0..3),
        text(),
        prop::option::of(text()),
        prop::collection::vec((loose_name(), const_value()), 0..3),
        prop::option::of(any::<u32>()),
    )
        .prop_map(|(argtypes, target, scheduler, flags, cuda_device)| HalideMeta {
            argtypes,
            target,
            scheduler,
            scheduler_flags: flags.into_iter().collect(),
            cuda_device,
        })
}

/// Kernel source: lines including ones that look like the block delimiter.
fn source() -> impl Strategy<Value = String> {
    let line = prop_oneof![
        Just(String::new()),
        Just("\"\"\"".to_string()),
        Just("\\\"\"\"".to_string()),
        Just("    \"\"\"docstring\"\"\"".to_string()),
        Just("}".to_string()),
        Just("x = 1  ; not a comment".to_string()),
        "[ -~\t\r]{0,20}",
    ];
    prop::collection::vec(line, 0..6).prop_map(|v| v.join("\n"))
}

fn kernel(name: String) -> impl Strategy<Value = KernelDef> {
    let backend = prop_oneof![
        triton_meta().prop_map(KernelBackend::Triton),
        halide_meta().prop_map(KernelBackend::Halide),
        (
            prop::collection::vec(text(), 0..3),
            prop::option::of(prop::sample::select(wrapir::ir::VecIsa::ALL.to_vec()))
        )
            .prop_map(|(arg_types, isa)| KernelBackend::Cpp(CppMeta { arg_types, isa })),
        Just(KernelBackend::CudaC),
        Just(KernelBackend::Host),
    ];
    (backend, source(), prop::collection::vec(text(), 0..3)).prop_map(move |(backend, source, comments)| KernelDef {
        name: KernelName::new(&name),
        backend,
        source,
        comments,
    })
}

/// Buffers every generated graph declares (inputs first, then intermediates).
const INPUTS: [&str; 2] = ["arg0_1", "arg1_1"];
const BUFFERS: [&str; 4] = ["buf0", "buf1", "buf2", "buf3"];
const KERNELS: [&str; 2] = ["triton_poi_fused_add_0", "cpp_fused_1"];
const GRAPHS: [&str; 2] = ["true_graph_0", "false_graph_0"];

fn buf() -> impl Strategy<Value = BufName> {
    prop::sample::select(INPUTS.iter().chain(BUFFERS.iter()).copied().collect::<Vec<_>>()).prop_map(BufName::new)
}

fn symbol() -> impl Strategy<Value = Symbol> {
    prop::sample::select(vec!["s0", "s1", "u0", "u1", "ks0"]).prop_map(Symbol::new)
}

fn arg_value() -> impl Strategy<Value = ArgValue> {
    let leaf = prop_oneof![
        buf().prop_map(ArgValue::Buffer),
        expr().prop_map(ArgValue::Expr),
        float().prop_map(ArgValue::Float),
        any::<bool>().prop_map(ArgValue::Bool),
        Just(ArgValue::None),
        text().prop_map(ArgValue::Str),
        prop::sample::select(DType::ALL.to_vec()).prop_map(ArgValue::DType),
        device().prop_map(ArgValue::Device),
    ];
    leaf.prop_recursive(2, 8, 3, |inner| {
        prop::collection::vec(inner, 0..3).prop_map(ArgValue::List)
    })
}

fn key_path() -> impl Strategy<Value = KeyPath> {
    let entry = prop_oneof![
        prop::sample::select(vec![
            TensorMethod::Size,
            TensorMethod::Stride,
            TensorMethod::StorageOffset
        ])
        .prop_map(KeyEntry::CallMethod),
        any::<i64>().prop_map(KeyEntry::Index),
        any::<i64>().prop_map(KeyEntry::DivideBy),
        Just(KeyEntry::ConvertInt),
        "[a-z_][a-z0-9_]{0,5}".prop_map(KeyEntry::InnerTensor),
    ];
    prop::collection::vec(entry, 0..4).prop_map(|v| v.into_iter().collect())
}

fn extern_call() -> impl Strategy<Value = ExternCall> {
    (
        prop::option::of(buf()),
        prop::sample::select(vec![
            "torch.ops.aten.topk.default",
            "extern_kernels.addmm",
            "aten._foo_.bar",
        ]),
        prop::collection::vec(arg_value(), 0..4),
        prop::collection::vec(("[a-z_][a-z0-9_]{0,5}", arg_value()), 0..3),
    )
        .prop_map(|(result, op, args, kwargs)| ExternCall {
            result,
            op: op.to_string(),
            args,
            kwargs: kwargs.into_iter().collect(),
        })
}

fn graph_name() -> impl Strategy<Value = GraphName> {
    prop::sample::select(GRAPHS.to_vec()).prop_map(GraphName::new)
}

fn line() -> impl Strategy<Value = Line> {
    let names = || prop::collection::vec(buf(), 0..3);
    prop_oneof![
        buf().prop_map(|buffer| Line::Allocate { buffer }),
        (buf(), any::<bool>()).prop_map(|(buffer, is_reused)| Line::FreeIfNotReused { buffer, is_reused }),
        buf().prop_map(|buffer| Line::Free { buffer }),
        (buf(), buf(), any::<bool>()).prop_map(|(old, new, delete_old)| Line::Reuse { old, new, delete_old }),
        (buf(), buf()).prop_map(|(base, alias)| Line::Reinterpret { base, alias }),
        prop::sample::select(KERNELS.to_vec()).prop_map(|k| Line::KernelDefinition {
            kernel: KernelName::new(k)
        }),
        (
            prop::sample::select(KERNELS.to_vec()),
            prop::collection::vec((prop::option::of(loose_name()), arg_value()), 0..4),
            prop::option::of(device())
        )
            .prop_map(|(k, args, device)| Line::KernelCall(KernelCall {
                kernel: KernelName::new(k),
                args: args.into_iter().map(|(name, value)| CallArg { name, value }).collect(),
                device,
            })),
        (symbol(), expr()).prop_map(|(symbol, expr)| Line::SymbolicCallArg { symbol, expr }),
        extern_call().prop_map(Line::ExternKernelAlloc),
        (extern_call(), buf()).prop_map(|(call, out)| Line::ExternKernelOut { call, out }),
        (extern_call(), prop::collection::vec(("out[0-9]", buf()), 0..3)).prop_map(|(call, outs)| {
            // An output keyword is never also one of the call's own keywords.
            let outs = outs.into_iter().filter(|(k, _)| !call.kwargs.contains_key(k)).collect();
            Line::ExternKernelMultiOut(ExternMultiOut { call, outs })
        }),
        (
            buf(),
            buf(),
            prop::collection::vec(
                prop_oneof![
                    any::<i64>().prop_map(MultiIndex::Tuple),
                    any::<i64>().prop_map(MultiIndex::List),
                    text().prop_map(MultiIndex::Dict)
                ],
                0..3
            )
        )
            .prop_map(|(result, source, idx)| Line::MultiOutput(MultiOutput {
                result,
                source,
                indices: idx.into_iter().collect()
            })),
        (
            buf(),
            prop::collection::vec(prop::option::of(buf()), 0..3),
            buf(),
            any::<bool>()
        )
            .prop_map(
                |(target, indices, values, accumulate)| Line::IndexPutFallback(IndexPutFallback {
                    target,
                    indices,
                    values,
                    accumulate
                })
            ),
        (
            buf(),
            any::<i64>(),
            buf(),
            arg_value(),
            prop::option::of(text()),
            prop::option::of(any::<bool>())
        )
            .prop_map(|(target, dim, index, src, reduce, include_self)| Line::ScatterFallback(
                ScatterFallback {
                    op: "aten.scatter_.src".into(),
                    target,
                    dim,
                    index,
                    src,
                    reduce,
                    include_self
                }
            )),
        (symbol(), buf(), key_path(), prop::option::of(buf())).prop_map(|(symbol, source, keypath, node)| {
            Line::DynamicScalar(DynamicScalar {
                symbol,
                source,
                keypath,
                node,
            })
        }),
        (buf(), prop::collection::vec((symbol(), key_path()), 0..3)).prop_map(|(source, b)| Line::UnbackedSymbolDefs {
            source,
            bindings: b.into_iter().collect()
        }),
        (
            buf(),
            prop_oneof![buf().prop_map(Predicate::Tensor), expr().prop_map(Predicate::Expr)],
            graph_name(),
            graph_name(),
            names()
        )
            .prop_map(
                |(result, predicate, true_graph, false_graph, operands)| Line::Conditional(Conditional {
                    result,
                    predicate,
                    true_graph,
                    false_graph,
                    operands
                })
            ),
        (
            buf(),
            prop_oneof![buf().prop_map(Predicate::Tensor), expr().prop_map(Predicate::Expr)],
            prop::collection::vec(graph_name(), 0..4),
            names(),
            any::<bool>()
        )
            .prop_map(|(result, selector, branches, operands, cond)| Line::Switch(Switch {
                result,
                selector,
                branches,
                operands,
                cond
            })),
        (buf(), graph_name(), graph_name(), names(), names()).prop_map(
            |(result, cond_graph, body_graph, carried, additional)| {
                Line::WhileLoop(WhileLoop {
                    result,
                    cond_graph,
                    body_graph,
                    carried,
                    additional,
                })
            }
        ),
        (
            any::<u32>(),
            prop::option::of((prop::collection::vec(any::<u32>(), 0..3), any::<bool>()))
        )
            .prop_map(|(device_index, streams)| Line::EnterDeviceContext {
                device_index,
                streams: streams.map(|(user_objects, reads_current_stream)| DeviceStreams {
                    user_objects,
                    reads_current_stream,
                }),
            }),
        Just(Line::ExitDeviceContext),
        prop_oneof![
            any::<u32>().prop_map(|stream| Scope::Stream { stream }),
            (any::<u32>(), any::<u32>()).prop_map(|(pool, device_index)| Scope::MemPool { pool, device_index }),
            Just(Scope::KernelProfile),
        ]
        .prop_map(Line::EnterScope),
        prop::sample::select(ScopeKind::ALL.to_vec()).prop_map(|scope| Line::ExitScope { scope }),
        buf().prop_map(|buffer| Line::AssertFinite { buffer }),
        text().prop_map(|text| Line::Comment { text }),
        (
            buf(),
            dims(),
            dims(),
            prop::option::of(prop::sample::select(DType::ALL.to_vec())),
            prop::option::of(text())
        )
            .prop_map(|(buffer, size, stride, dtype, context)| {
                Line::AssertSizeStride(AssertSizeStride {
                    buffer,
                    size,
                    stride,
                    dtype,
                    context,
                })
            }),
        (
            prop::collection::vec((buf(), dims(), dims()), 0..3),
            prop::option::of(text())
        )
            .prop_map(|(members, context)| {
                Line::AssertSizeStrideGrouped(AssertSizeStrideGrouped {
                    asserts: members
                        .into_iter()
                        .map(|(buffer, size, stride)| SizeStrideCheck { buffer, size, stride })
                        .collect(),
                    context,
                })
            }),
        (expr(), text()).prop_map(|(divisor, context)| Line::AssertDivByZero { divisor, context }),
        (buf(), any::<u32>(), prop::option::of(text())).prop_map(|(buffer, alignment, context)| {
            Line::AssertAlignment {
                buffer,
                alignment,
                context,
            }
        }),
        (expr(), text(), prop::option::of(buf())).prop_map(|(cond, message, node)| Line::RuntimeAssert {
            cond,
            message,
            node
        }),
        (buf(), text(), text()).prop_map(|(buffer, comm_kind, group)| Line::CommBufferAllocate {
            buffer,
            comm_kind,
            group
        }),
        buf().prop_map(|buffer| Line::CommBufferFree { buffer }),
    ]
}

fn buffer_kind() -> impl Strategy<Value = BufferKind> {
    prop_oneof![3 => layout().prop_map(BufferKind::Tensor), 1 => Just(BufferKind::Multi)]
}

fn graph() -> impl Strategy<Value = Graph> {
    let output = prop_oneof![
        buf().prop_map(GraphOutput::Buffer),
        expr().prop_map(GraphOutput::Expr),
        Just(GraphOutput::None)
    ];
    (
        prop::collection::vec(buffer_kind(), INPUTS.len()),
        prop::option::of(symbol()),
        prop::collection::vec(buffer_kind(), BUFFERS.len()),
        prop::collection::vec(line(), 0..24),
        prop::collection::vec(output, 0..4),
    )
        .prop_map(|(input_kinds, sym_input, buffer_kinds, lines, outputs)| {
            let mut g = Graph::default();
            for (name, kind) in INPUTS.iter().zip(input_kinds) {
                g.inputs.push(GraphInput::Tensor {
                    name: BufName::new(name),
                });
                g.buffers.insert(BufName::new(name), BufferDecl { kind });
            }
            if let Some(symbol) = sym_input {
                g.inputs.push(GraphInput::Symbol {
                    name: BufName::new(symbol.as_str()),
                    symbol,
                });
            }
            for (name, kind) in BUFFERS.iter().zip(buffer_kinds) {
                g.buffers.insert(BufName::new(name), BufferDecl { kind });
            }
            g.lines = lines;
            g.outputs = outputs;
            g
        })
}

fn program() -> impl Strategy<Value = Program> {
    let symbol_decl = (
        prop::sample::select(vec![
            SymbolKind::Backed,
            SymbolKind::Unbacked,
            SymbolKind::Precomputed,
            SymbolKind::UnbackedFloat,
        ]),
        prop::option::of(any::<i64>()),
        prop::option::of(any::<i64>()),
        prop::option::of(any::<i64>()),
    )
        .prop_map(|(kind, lo, hi, hint)| SymbolDecl {
            kind,
            range: ValueRange::new(lo, hi),
            hint,
        });
    (
        prop::collection::vec((symbol(), symbol_decl), 0..5),
        prop::collection::vec(("_tensor_constant[0-9]", layout()), 0..3),
        (kernel(KERNELS[0].into()), kernel(KERNELS[1].into()), any::<bool>()),
        graph(),
        prop::collection::vec(graph(), 0..3),
    )
        .prop_map(|(symbols, constants, (k0, k1, both), main, subs)| {
            let mut p = Program::new();
            p.symbols = symbols.into_iter().collect();
            p.constants = constants.into_iter().map(|(n, l)| (BufName::new(n), l)).collect();
            p.kernels.insert(k0.name.clone(), k0);
            if both {
                p.kernels.insert(k1.name.clone(), k1);
            }
            p.main = main;
            p.subgraphs = GRAPHS.iter().zip(subs).map(|(n, g)| (GraphName::new(n), g)).collect();
            p
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_programs_round_trip(p in program()) {
        let text = print(&p);
        let back = parse(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(&back, &p, "text:\n{}", text);
        // Stricter than `==` (which ignores table order): the JSON forms agree too.
        prop_assert_eq!(back.to_json(), p.to_json());
        prop_assert_eq!(print(&back), text);
    }

    #[test]
    fn every_line_prints_on_one_line(l in line()) {
        let text = print_line(&l);
        prop_assert!(!text.contains('\n'), "{}", text);
    }
}

// ---------------------------------------------------------------- fixtures

#[test]
fn fixtures_round_trip_through_text_and_json() {
    let mut problems = Vec::new();
    for path in common::fixtures() {
        let name = common::name(&path);
        let text = std::fs::read_to_string(&path).expect("read fixture");
        let program = common::load(&path);
        let printed = print(&program);
        if printed != text {
            let (line_no, (want, got)) = text
                .lines()
                .zip(printed.lines())
                .enumerate()
                .find(|(_, (a, b))| a != b)
                .unwrap_or((text.lines().count().min(printed.lines().count()), ("<end>", "<end>")));
            problems.push(format!(
                "{name}: not canonical at line {}:\n  file:    {want}\n  printed: {got}",
                line_no + 1
            ));
            continue;
        }
        match Program::from_json(&program.to_json()) {
            Ok(back) if back == program && print(&back) == text => {}
            Ok(_) => problems.push(format!("{name}: changes through JSON")),
            Err(e) => problems.push(format!("{name}: JSON does not read back: {e}")),
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Canonical text covering every line kind and kernel backend.
const EVERY_KIND: &str = r#"wrapir 1

symbol s0: backed [2, inf] hint 8
symbol u0: unbacked [0, 100]
symbol u1: unbacked [-inf, 7]
symbol ks0: precomputed

constant _tensor_constant0: f32[4][1]@cuda:0

kernel triton_poi_fused_add_0: triton {
  signature in_ptr0: *fp32, out_ptr0: *fp32, xnumel: i32, desc: 'tensordesc<fp16[64, 64]>', XBLOCK: constexpr
  constants xnumel2: 1, y: None, z: 1.5, w: 'a;b', 'odd name': True
  config XBLOCK: 128
  grid PrecomputedGrid
    candidate XBLOCK: 128, YBLOCK: 8 => (s0, 1, 1)
    candidate => (1, 2, 3)
  num_warps 4
  num_stages 3
  shared_mem 1024
  global_scratch 0
  profile_scratch 16
  extra_launcher_args _grid_0, _grid_1, _grid_2
  mangled_name 'triton_poi_fused_add_0'
  cubin 'kernels/triton_poi_fused_add_0.cubin'
  user_defined
  comment 'kernel path: /x/y.py; it\'s \\ here'
  source
"""
@triton.jit
def triton_poi_fused_add_0(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    """docstring"""
\"""

    xoffset = tl.program_id(0) * XBLOCK  ; not a comment
"""
}

kernel triton_red_1: triton {
  signature
  grid Grid2DWithYZOverflow max_y_grid 65535
  num_warps 8
}

kernel halide_kernel_0: halide {
  target 'host-strict_float-no_runtime-no_asserts'
  scheduler 'Adams2019'
  scheduler_flags parallelism: 8
  cuda_device 0
  arg in_ptr0: 'float*' shape ['1024L'] stride ['1L'] offset '0' alias_of 'x'
  arg ks0: 'long'
}

kernel cpp_fused_0: cpp {
  arg_types 'const float*', 'int64_t'
  source
"""
extern "C" void kernel() {}
"""
}

kernel cuda_kernel: cuda_c {
}

kernel host_fn: host {
  comment 'supplied by the embedder'
}

graph main(arg0_1: f32[s0][1]@cuda:0, arg1_1: i64[u0, 1][1, u0]+2@cuda:0 alloc 8, s1: sym s1) -> (buf1, s0, 3, None) {
  buffer buf0: f32[s0][1]@cuda:0
  buffer buf1: f32[5][1]@cpu alloc 8
  buffer buf2: multi
  buffer buf3: b8[][]@cuda:0
  define triton_poi_fused_add_0
  alloc buf0
  device 0 {
    call triton_poi_fused_add_0(arg0_1, buf0, s0, -1, 1.5, -2.5e-7, True, None, 'x', torch.float32, device('cuda:0'), [1, [buf0]], xnumel=16) @cuda:0
  }
  let ks0 = s0
  extern buf2 = torch.ops.aten.topk.default(arg0_1, 2, dim=-1)
  extern torch.ops.aten.foo.default(buf0)
  extern_out buf1 = extern_kernels.addmm(arg0_1, buf0, buf0, alpha=1, beta=1)
  get buf3 = buf2[tuple 0][list 1][dict 'k']
  get buf3 = buf2
  index_put buf0[buf1, None] = buf3 accumulate
  index_put buf0[] = buf3
  scatter aten.scatter_.src(buf0, 0, buf1, buf3) reduce 'add' include_self True
  scatter aten.scatter_.value(buf0, -1, buf1, 1.0)
  item u0 = buf3
  item u0 = buf3.to_int() node buf1
  item u0 = buf3//2
  bind buf2: u0 = .size()[0], u1 = [1].stride()[0]//2, ks0, s1 = .values.storage_offset()
  bind buf3:
  cond buf2 = if buf3 then true_graph_0 else false_graph_0 (arg0_1, buf0)
  cond buf2 = if s0 then true_graph_0 else false_graph_0 ()
  while buf2 = true_graph_0 do false_graph_0 (buf0, buf1) additional (arg0_1)
  while buf2 = true_graph_0 do false_graph_0 ()
  comment 'Topologically Sorted Source Nodes: [gt]'
  comment ''
  assert_size_stride buf0 [s0] [1] 'torch.ops.aten.nonzero.default'
  assert_size_stride buf3 [] []
  assert_alignment buf0 16 'torch.ops.aten.nonzero.default'
  assert_alignment buf0 16
  assert u0 'u0 >= 0' node buf3
  assert 1 ''
  comm_alloc buf0 'symm_mem' 'group0'
  comm_free buf0
  free_if_not_reused buf0
  free_if_not_reused buf0 reused
  free arg0_1
  reuse buf0 -> buf1
  reuse buf0 -> buf1 keep_old
  reinterpret buf0 -> buf1
  enter_device 1
}

graph true_graph_0(arg0_1: multi, arg1_1) -> () {
  exit_device
  device 3 {
    device 4 {
    }
  }
}

graph false_graph_0() -> (u0) {
}
"#;

#[test]
fn every_kind_is_canonical() {
    let program = parse(EVERY_KIND).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(print(&program), EVERY_KIND);
    let back = Program::from_json(&program.to_json()).expect("JSON round trip");
    assert_eq!(back, program);
    // Spot checks that the text means what it says.
    let lines = &program.main.lines;
    assert!(matches!(&lines[2], Line::EnterDeviceContext { device_index: 0, .. }));
    assert!(matches!(&lines[4], Line::ExitDeviceContext));
    let Line::KernelCall(call) = &lines[3] else {
        panic!("expected a call, got {:?}", lines[3])
    };
    assert_eq!(call.args[0].value, ArgValue::Buffer(BufName::new("arg0_1")));
    assert_eq!(call.args[2].value, ArgValue::Expr(SymExpr::sym("s0")));
    assert_eq!(call.args[3].value, ArgValue::Expr(SymExpr::Int(-1)));
    assert_eq!(call.args[12].name.as_deref(), Some("xnumel"));
    let KernelBackend::Triton(meta) = &program.kernels[0].backend else {
        panic!("triton")
    };
    assert_eq!(
        meta.signature["desc"],
        SigType::Other("tensordesc<fp16[64, 64]>".into())
    );
    assert_eq!(
        program.kernels[0].source,
        "@triton.jit\ndef triton_poi_fused_add_0(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):\n    \"\"\"docstring\"\"\"\n\"\"\"\n\n    xoffset = tl.program_id(0) * XBLOCK  ; not a comment"
    );
    assert_eq!(
        program.kernels[0].comments,
        vec!["kernel path: /x/y.py; it's \\ here".to_string()]
    );
    assert_eq!(
        program.main.outputs,
        vec![
            GraphOutput::Buffer(BufName::new("buf1")),
            GraphOutput::Expr(SymExpr::sym("s0")),
            GraphOutput::Expr(SymExpr::Int(3)),
            GraphOutput::None
        ]
    );
    let sub = &program.subgraphs[0];
    assert!(sub.buffers.get("arg1_1").is_none(), "a bare input has no declaration");
    assert_eq!(sub.lines.len(), 5);
}

#[test]
fn comments_and_blank_lines_are_ignored() {
    let text = "; leading comment\n\nwrapir 1 ; version\n\n\ngraph main() -> () { ; open\n  ; inside\n  comment 'a;b' ; trailing\n}\n";
    let program = parse(text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(program.main.lines, vec![Line::Comment { text: "a;b".into() }]);
}

#[test]
fn print_line_forms() {
    let table: Vec<(Line, &str)> = vec![
        (
            Line::EnterDeviceContext {
                device_index: 2,
                streams: None,
            },
            "device 2 {",
        ),
        (
            Line::EnterDeviceContext {
                device_index: 0,
                streams: Some(DeviceStreams {
                    user_objects: vec![3, 5],
                    reads_current_stream: false,
                }),
            },
            "device 0 streams(3, 5) reuse_stream_cache {",
        ),
        (Line::EnterScope(Scope::Stream { stream: 1 }), "stream 1 {"),
        (
            Line::EnterScope(Scope::MemPool {
                pool: 4,
                device_index: 0,
            }),
            "mem_pool 4 device 0 {",
        ),
        (Line::EnterScope(Scope::KernelProfile), "profile_scope {"),
        (Line::AssertFinite { buffer: "buf0".into() }, "assert_finite buf0"),
        (Line::ExitDeviceContext, "}"),
        (Line::Allocate { buffer: "buf0".into() }, "alloc buf0"),
        (
            Line::RuntimeAssert {
                cond: SymExpr::sym("u0"),
                message: "it's\n".into(),
                node: None,
            },
            r"assert u0 'it\'s\n'",
        ),
        (
            Line::ExternKernelOut {
                call: ExternCall {
                    result: Some("buf9".into()),
                    op: "extern_kernels.mm".into(),
                    args: vec![ArgValue::Buffer("buf0".into())],
                    kwargs: IndexMap::new(),
                },
                out: "buf1".into(),
            },
            "extern_out buf1 = extern_kernels.mm(buf0) result buf9",
        ),
        (
            Line::DynamicScalar(DynamicScalar {
                symbol: "u0".into(),
                source: "buf0".into(),
                keypath: SmallVec::from_vec(vec![KeyEntry::DivideBy(-2)]),
                node: None,
            }),
            "item u0 = buf0//-2",
        ),
    ];
    for (line, expect) in table {
        assert_eq!(print_line(&line), expect);
    }
}

/// The generator's expressions must include compound ones, or the property
/// test would only exercise integers and symbols.
#[test]
fn generated_expressions_include_compound_ones() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = expr();
    let samples = 400;
    let compound = (0..samples)
        .filter(|_| {
            let e = strategy.new_tree(&mut runner).expect("expression tree").current();
            !matches!(e, SymExpr::Int(_) | SymExpr::Sym(_))
        })
        .count();
    assert!(
        compound * 4 >= samples,
        "only {compound} of {samples} generated expressions are compound"
    );
}
