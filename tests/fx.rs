//! FX lowering: exact printed graphs of small programs, each written as
//! `.wir` text with the FX graph it must print.

/// Parses `input` (a program's text without its `wrapir 1` header) and
/// lowers it; returns a message when the printed graph differs from `expect`.
fn check(name: &str, input: &str, expect: &str) -> Option<String> {
    let program = wrapir::text::parse(&format!("wrapir 1\n{input}")).unwrap_or_else(|e| panic!("{name}: {e}"));
    let info = wrapir::ir::validate(&program).unwrap_or_else(|e| panic!("{name}: invalid program: {e}"));
    let got = wrapir::lower::fx::write_string(&info, &Default::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
    (got.trim() != expect.trim()).then(|| format!("=== {name}: printed FX graph differs, got:\n{got}"))
}

#[test]
fn printed_graphs() {
    let cases: [(&str, &str, &str); 6] = [
        (
            "nonzero_u0",
            r#"
symbol u0: unbacked [0, 100]

graph main(arg0_1: b8[100][1]@cuda:0) -> (buf2, buf3) {
  buffer buf1: multi
  buffer buf2: i64[u0, 1][1, u0]@cuda:0
  buffer buf3: f32[u0, 1][1, 1]@cuda:0
  extern buf1 = torch.ops.aten.nonzero.default(arg0_1)
  bind buf1: u0 = .size()[0]
  free arg0_1
  get buf2 = buf1
  assert (u0 >= 0) 'u0 >= 0'
  alloc buf3
}
"#,
            r#"
def forward(self, arg0_1):
    assert_size_stride_1 = assert_size_stride(arg0_1, [100], [1]);  assert_size_stride_1 = None
    buf1 = torch.ops.aten.nonzero.default(arg0_1);  arg0_1 = None
    u0 = torch.ops.aten.sym_size.int(buf1, 0)
    ge = u0 >= 0
    _assert_scalar = torch.ops.aten._assert_scalar.default(ge, 'u0 >= 0');  ge = _assert_scalar = None
    buf3 = torch.empty_strided([u0, 1], [1, 1], dtype=torch.float32, device='cuda');  u0 = None
    return [buf1, buf3]
"#,
        ),
        (
            "tuple_u1",
            r#"
symbol u1: unbacked [0, inf]

graph main(arg0_1: f32[8][1]@cuda:0) -> (buf2, buf3) {
  buffer buf1: multi
  buffer buf2: f32[u1][1]@cuda:0
  buffer buf3: i64[u1][1]@cuda:0
  extern buf1 = torch.ops.aten._unique2.default(arg0_1)
  bind buf1: u1 = [1].size()[0]
  get buf2 = buf1[tuple 0]
  get buf3 = buf1[tuple 1]
}
"#,
            r#"
def forward(self, arg0_1):
    assert_size_stride_1 = assert_size_stride(arg0_1, [8], [1]);  assert_size_stride_1 = None
    buf1 = torch.ops.aten._unique2.default(arg0_1);  arg0_1 = None
    buf3 = buf1[1]
    u1 = torch.ops.aten.sym_size.int(buf3, 0);  u1 = None
    buf2 = buf1[0];  buf1 = None
    return [buf2, buf3]
"#,
        ),
        (
            "divide_by_two",
            r#"
symbol u0: unbacked [0, inf]

graph main(arg0_1: f32[8][1]@cuda:0) -> (buf1, buf2) {
  buffer buf1: f32[2*u0][1]@cuda:0
  buffer buf2: f32[u0][1]@cuda:0
  extern buf1 = torch.ops.aten.repeat_interleave.Tensor(arg0_1)
  bind buf1: u0 = .size()[0]//2
  alloc buf2
}
"#,
            r#"
def forward(self, arg0_1):
    assert_size_stride_1 = assert_size_stride(arg0_1, [8], [1]);  assert_size_stride_1 = None
    buf1 = torch.ops.aten.repeat_interleave.Tensor(arg0_1);  arg0_1 = None
    sym_size_int = torch.ops.aten.sym_size.int(buf1, 0)
    mod = sym_size_int % 2
    eq = mod == 0;  mod = None
    _assert_scalar = torch.ops.aten._assert_scalar.default(eq, 'u0: value is not a multiple of 2');  eq = _assert_scalar = None
    u0 = sym_size_int // 2;  sym_size_int = None
    buf2 = torch.empty_strided([u0], [1], dtype=torch.float32, device='cuda');  u0 = None
    return [buf1, buf2]
"#,
        ),
        (
            "item_to_int",
            r#"
symbol u0: unbacked [0, 1]

graph main(arg0_1: b8[][]@cuda:0) -> (buf0) {
  buffer buf0: f32[u0 + 3][1]@cuda:0
  item u0 = arg0_1.to_int()
  alloc buf0
}
"#,
            r#"
def forward(self, arg0_1):
    assert_size_stride_1 = assert_size_stride(arg0_1, [], []);  assert_size_stride_1 = None
    where = torch.ops.aten.where.Scalar(arg0_1, 1, 0);  arg0_1 = None
    u0 = torch.ops.aten.item.default(where);  where = None
    sym_sum = torch.sym_sum([u0, 3]);  u0 = None
    buf0 = torch.empty_strided([sym_sum], [1], dtype=torch.float32, device='cuda');  sym_sum = None
    return buf0
"#,
        ),
        (
            "cond",
            r#"
symbol s0: backed [0, inf] hint 4

graph main(arg0_1: b8[][]@cuda:0, arg1_1: f32[4][1]@cuda:0, arg2_1: f32[s0][1]@cuda:0) -> (buf1) {
  buffer buf0: multi
  buffer buf1: f32[2*s0][1]@cuda:0
  cond buf0 = if arg0_1 then true_graph_0 else false_graph_0 (arg1_1)
  get buf1 = buf0[list 0]
}

graph true_graph_0(arg1_1: f32[4][1]@cuda:0) -> (true_graph_0_buf0) {
  buffer true_graph_0_buf0: f32[2*s0][1]@cuda:0
  alloc true_graph_0_buf0
  free arg1_1
}

graph false_graph_0(arg1_1: f32[4][1]@cuda:0) -> (false_graph_0_buf0) {
  buffer false_graph_0_buf0: f32[4][1]@cuda:0
  extern false_graph_0_buf0 = torch.ops.aten.clone.default(arg1_1)
}
"#,
            r#"
def forward(self, arg0_1, arg1_1, arg2_1):
    s0 = torch.ops.aten.sym_size.int(arg2_1, 0)
    assert_size_stride_1 = assert_size_stride(arg0_1, [], []);  assert_size_stride_1 = None
    assert_size_stride_2 = assert_size_stride(arg1_1, [4], [1]);  assert_size_stride_2 = None
    assert_size_stride_3 = assert_size_stride(arg2_1, [s0], [1]);  arg2_1 = assert_size_stride_3 = None
    true_graph_0 = self.true_graph_0
    false_graph_0 = self.false_graph_0
    buf0 = torch.ops.higher_order.cond(arg0_1, true_graph_0, false_graph_0, (arg1_1, s0));  arg0_1 = true_graph_0 = false_graph_0 = arg1_1 = s0 = None
    buf1 = buf0[0];  buf0 = None
    return buf1

class true_graph_0(torch.nn.Module):
    def forward(self, arg1_1, s0):
        assert_size_stride_1 = assert_size_stride(arg1_1, [4], [1]);  arg1_1 = assert_size_stride_1 = None
        mul = 2 * s0;  s0 = None
        true_graph_0_buf0 = torch.empty_strided([mul], [1], dtype=torch.float32, device='cuda');  mul = None
        return [true_graph_0_buf0]

class false_graph_0(torch.nn.Module):
    def forward(self, arg1_1, s0):
        assert_size_stride_1 = assert_size_stride(arg1_1, [4], [1]);  assert_size_stride_1 = None
        false_graph_0_buf0 = torch.ops.aten.clone.default(arg1_1);  arg1_1 = None
        return [false_graph_0_buf0]
"#,
        ),
        (
            "triton_named",
            r#"
symbol s0: backed [0, inf] hint 64

kernel add_kernel_0: triton {
  signature in_ptr: *fp32, BLOCK_SIZE: constexpr, out_ptr: *fp32, n_elements: i32, scale: fp32
  constants BLOCK_SIZE: 16
  grid FixedGrid
  num_warps 4
  extra_launcher_args _grid_0, _grid_1, _grid_2
  user_defined
}

graph main(arg0_1: f32[s0][1]@cuda:0) -> (buf0) {
  buffer buf0: f32[s0][1]@cuda:0
  define add_kernel_0
  alloc buf0
  call add_kernel_0(arg0_1, _grid_0=((s0 + 15) // 16), n_elements=s0, out_ptr=buf0, scale=0.5, _grid_1=1, _grid_2=1) @cuda:0
  free arg0_1
}
"#,
            r#"
def forward(self, arg0_1):
    s0 = torch.ops.aten.sym_size.int(arg0_1, 0)
    assert_size_stride_1 = assert_size_stride(arg0_1, [s0], [1]);  assert_size_stride_1 = None
    buf0 = torch.empty_strided([s0], [1], dtype=torch.float32, device='cuda')
    sym_sum = torch.sym_sum([s0, 15])
    floordiv = sym_sum // 16;  sym_sum = None
    triton_kernel_wrapper_mutation = torch.ops.higher_order.triton_kernel_wrapper_mutation(kernel='add_kernel_0', grid=[(floordiv, 1, 1)], kwargs={'in_ptr': arg0_1, 'BLOCK_SIZE': 16, 'out_ptr': buf0, 'n_elements': s0, 'scale': 0.5});  floordiv = arg0_1 = s0 = triton_kernel_wrapper_mutation = None
    return buf0
"#,
        ),
    ];
    let failures: Vec<String> = cases
        .into_iter()
        .filter_map(|(n, input, e)| check(n, input, e))
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
