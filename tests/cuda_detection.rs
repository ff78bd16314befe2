#![cfg(feature = "cuda")]
//! torchvision's detection ops (`torchvision.roi_align`, `torchvision.nms`)
//! on the CUDA backend's own kernels (`detection.cu`), with no host
//! fallback, against the host backend (which computes what torchvision's
//! CPU kernels compute, `tests/op_layouts.rs`) and PyTorch's recorded
//! outputs (`fixtures/inductor/op_layouts.json`):
//!
//! * the calls the committed CPU family bundles (`roi_heads`,
//!   `box_postprocess`, PyTorch 2.11 and 2.15) make, with the arguments the
//!   host run of each bundle passed them;
//! * edge cases: no regions or boxes, regions outside the image, malformed
//!   regions, every box suppressed, equal scores, more boxes than one mask
//!   word covers;
//! * bad inputs, each an error naming the op.
//!
//! `roi_align` agrees within `|gpu - host| <= 2e-6 + 1e-5 |host|` in float32
//! (`1e-13 + 1e-12 |host|` in float64): the GPU compiler fuses
//! multiply-adds, torchvision's CUDA build too, so the last bits differ from
//! the CPU kernel's. `nms` indices agree exactly.
//!
//! Needs a GPU: `cargo test --features cuda --test cuda_detection`.

mod common;
#[path = "common/op_cases.rs"]
mod op_cases;

use indexmap::IndexMap;
use std::path::Path;
use wrapir::bundle::Bundle;
use wrapir::exec::host::kernels as host_kernels;
use wrapir::exec::host::HostBackend;
use wrapir::exec::{
    run_program, Backend, ExecError, ExternCall, KernelLaunch, MemoryStats, ScalarRequest, ScalarValue, Tensor,
    TensorSpec, Value,
};
use wrapir::ir::DType;

const ROI_ALIGN: &str = "torch.ops.torchvision.roi_align.default";
const NMS: &str = "torch.ops.torchvision.nms.default";

type Kwargs = IndexMap<String, Value<Tensor>>;

/// `op` on the device (host fallback off): its result, copied out.
fn on_device(op: &str, args: &[Value<Tensor>], kwargs: &Kwargs) -> Result<Tensor, String> {
    let mut out = common::extern_on_device(op, args, kwargs)?;
    match (out.pop(), out.is_empty()) {
        (Some(t), true) => Ok(t),
        _ => Err(format!("{op} returned {} tensors, not one", out.len() + 1)),
    }
}

fn on_host(op: &str, args: &[Value<Tensor>], kwargs: &Kwargs) -> Result<Tensor, String> {
    match HostBackend::default().call_extern(ExternCall::new(op, args, kwargs)) {
        Ok(Value::Tensor(t)) => Ok(t),
        Ok(other) => Err(format!("{op} returned {}, not one tensor", other.kind())),
        Err(e) => Err(e.to_string()),
    }
}

fn t(dtype: DType, values: &[f64], size: &[i64]) -> Value<Tensor> {
    Value::Tensor(Tensor::from_f64(dtype, values, size).unwrap())
}

/// Why `got` (the device's result) differs from `want` (the host's): the
/// layout, the dtype, or (for floats) an element past the tolerance of the
/// module doc, (for integers) any element.
fn differences(got: &Tensor, want: &Tensor) -> Option<String> {
    if got.dtype() != want.dtype() || got.size() != want.size() || got.stride() != want.stride() {
        return Some(format!(
            "{} {:?} strides {:?} on the device, {} {:?} strides {:?} on the host",
            got.dtype(),
            got.size(),
            got.stride(),
            want.dtype(),
            want.size(),
            want.stride()
        ));
    }
    if !want.dtype().is_floating() {
        let (g, w) = (got.to_i64_vec().unwrap(), want.to_i64_vec().unwrap());
        return (g != w).then(|| format!("{g:?} on the device, {w:?} on the host"));
    }
    let (atol, rtol) = match want.dtype() {
        DType::Float64 => (1e-13, 1e-12),
        _ => (2e-6, 1e-5),
    };
    let (g, w) = (got.to_f64_vec().unwrap(), want.to_f64_vec().unwrap());
    g.iter().zip(&w).enumerate().find_map(|(i, (g, w))| {
        let same = (g.is_nan() && w.is_nan()) || (g - w).abs() <= atol + rtol * w.abs();
        (!same).then(|| format!("element {i}: {g} on the device, {w} on the host"))
    })
}

/// Runs `op` on both backends; a failure line when they disagree (or either fails).
fn agree(name: &str, op: &str, args: &[Value<Tensor>]) -> Option<String> {
    let kwargs = Kwargs::new();
    let want = match on_host(op, args, &kwargs) {
        Ok(w) => w,
        Err(e) => return Some(format!("{name}: host: {e}")),
    };
    match on_device(op, args, &kwargs) {
        Ok(got) => differences(&got, &want).map(|d| format!("{name}: {d}")),
        Err(e) => Some(format!("{name}: device: {e}")),
    }
}

// ------------------------------------------------- calls of the family bundles

/// One extern call a host run made: its op, a copy of its arguments as they
/// were at the call, and a copy of its result.
struct Recorded {
    op: String,
    args: Vec<Value<Tensor>>,
    kwargs: Kwargs,
    result: Tensor,
}

/// A tensor's own copy, in its layout.
fn deep_copy(t: &Tensor) -> Result<Tensor, ExecError> {
    let copy = Tensor::zeros_like_spec(t.spec())?;
    copy.copy_from(t)?;
    Ok(copy)
}

/// The host backend, recording its detection calls.
struct Recorder {
    host: HostBackend,
    calls: Vec<Recorded>,
}

impl Backend for Recorder {
    type Tensor = Tensor;

    fn name(&self) -> &'static str {
        self.host.name()
    }
    fn allocate(&mut self, spec: &TensorSpec) -> Result<Tensor, ExecError> {
        self.host.allocate(spec)
    }
    fn free(&mut self, tensor: Tensor) {
        self.host.free(tensor)
    }
    fn spec<'a>(&'a self, tensor: &'a Tensor) -> &'a TensorSpec {
        self.host.spec(tensor)
    }
    fn view(&mut self, base: &Tensor, size: &[i64], stride: &[i64], offset: i64) -> Result<Tensor, ExecError> {
        self.host.view(base, size, stride, offset)
    }
    fn launch(&mut self, launch: KernelLaunch<'_, Tensor>) -> Result<(), ExecError> {
        self.host.launch(launch)
    }
    fn call_extern(&mut self, call: ExternCall<'_, Tensor>) -> Result<Value<Tensor>, ExecError> {
        let detection = call.op.contains("torchvision.roi_align") || call.op.contains("torchvision.nms");
        if !detection {
            return self.host.call_extern(call);
        }
        let copy = |v: &Value<Tensor>| v.try_map_tensors(&mut deep_copy);
        let args = call.args.to_vec().iter().map(copy).collect::<Result<Vec<_>, _>>()?;
        let kwargs = call
            .kwargs
            .to_map()
            .iter()
            .map(|(k, v)| Ok((k.clone(), copy(v)?)))
            .collect::<Result<Kwargs, ExecError>>()?;
        let op = call.op.to_string();
        let result = self.host.call_extern(call)?;
        let Value::Tensor(out) = &result else {
            return Err(ExecError::Input(format!("{op} returned {}", result.kind())));
        };
        self.calls.push(Recorded {
            op,
            args,
            kwargs,
            result: deep_copy(out)?,
        });
        Ok(result)
    }
    fn read_scalar(&mut self, tensor: &Tensor, request: &ScalarRequest<'_>) -> Result<ScalarValue, ExecError> {
        self.host.read_scalar(tensor, request)
    }
    fn copy_in(&mut self, tensor: &Tensor) -> Result<Tensor, ExecError> {
        self.host.copy_in(tensor)
    }
    fn place(&mut self, host: &Tensor, spec: &TensorSpec) -> Result<Tensor, ExecError> {
        self.host.place(host, spec)
    }
    fn returns_inputs(&self) -> bool {
        self.host.returns_inputs()
    }
    fn return_input(&mut self, supplied: &Tensor, placed: &Tensor) -> Result<(), ExecError> {
        self.host.return_input(supplied, placed)
    }
    fn copy_out(&mut self, tensor: &Tensor) -> Result<Tensor, ExecError> {
        self.host.copy_out(tensor)
    }
    fn check_alignment(&self, tensor: &Tensor, alignment: u32) -> Result<(), ExecError> {
        self.host.check_alignment(tensor, alignment)
    }
    fn check_finite(&mut self, tensor: &Tensor) -> Result<(), ExecError> {
        self.host.check_finite(tensor)
    }
    fn checks_tensor_asserts(&self) -> bool {
        self.host.checks_tensor_asserts()
    }
    fn memory(&self) -> MemoryStats {
        self.host.memory()
    }
    fn limits(&self) -> wrapir::Limits {
        self.host.limits()
    }
}

/// Runs the CPU bundle in `dir` on the host (it must match eager), and
/// returns its detection calls.
fn recorded_calls(dir: &Path) -> Result<Vec<Recorded>, String> {
    let bundle = Bundle::open(dir).map_err(|e| e.to_string())?;
    let program = bundle.program().clone();
    let mut host = HostBackend::default();
    host_kernels::load_kernels_from(&mut host, &program, &bundle.kernel_images(), None).map_err(|e| e.to_string())?;
    let inputs = bundle
        .inputs()
        .map_err(|e| e.to_string())?
        .ok_or("no inputs.safetensors")?;
    let mut recorder = Recorder {
        host,
        calls: Vec::new(),
    };
    let out = run_program(&program, &mut recorder, &inputs).map_err(|e| e.to_string())?;
    if let Some(e) = common::compare_with_bundle(&bundle, &out.outputs)?.first_error() {
        return Err(format!("the host run does not match the bundle: {e}"));
    }
    Ok(recorder.calls)
}

/// Every `torchvision.roi_align` and `torchvision.nms` call of the committed
/// CPU bundles of `roi_heads` (two RoIAligns: sampling ratio 2, and aligned
/// with the adaptive grid) and `box_postprocess` (one NMS over the boxes a
/// boolean mask kept), PyTorch 2.11 and 2.15, on the device with the
/// arguments the host run passed: the same layouts, RoIAlign within the
/// module doc's tolerance, the same kept indices.
#[test]
fn family_bundle_calls_match_the_host() {
    let mut failures = Vec::new();
    let mut counts = (0, 0);
    for set in ["bundles_cpu/families", "bundles_cpu_2.15/families"] {
        for (case, want_roi, want_nms) in [("roi_heads", 2, 0), ("box_postprocess", 0, 1)] {
            let dir = common::root().join("fixtures/inductor").join(set).join(case);
            let calls = match recorded_calls(&dir) {
                Ok(c) => c,
                Err(e) => {
                    failures.push(format!("{set}/{case}: {e}"));
                    continue;
                }
            };
            let rois = calls.iter().filter(|c| c.op == ROI_ALIGN).count();
            let nms = calls.iter().filter(|c| c.op == NMS).count();
            if (rois, nms) != (want_roi, want_nms) {
                failures.push(format!(
                    "{set}/{case}: {rois} roi_align and {nms} nms calls, expected {want_roi} and {want_nms}"
                ));
            }
            counts = (counts.0 + rois, counts.1 + nms);
            for (i, call) in calls.iter().enumerate() {
                let name = format!("{set}/{case} call {i} ({})", call.op);
                match on_device(&call.op, &call.args, &call.kwargs) {
                    Ok(got) => failures.extend(differences(&got, &call.result).map(|d| format!("{name}: {d}"))),
                    Err(e) => failures.push(format!("{name}: {e}")),
                }
            }
        }
    }
    common::assert_no_failures(&failures);
    assert_eq!(counts, (4, 2));
}

/// The `torchvision.*` cases PyTorch recorded (`op_layouts.json`: RoIAlign
/// with a sampling ratio, aligned and adaptive, on a transposed input, in
/// float64; NMS on strided boxes, float64 transposed, no boxes): the
/// recorded layouts, and values within the module doc's tolerance (the
/// recorded ones are torchvision's CPU kernel's).
#[test]
fn recorded_torchvision_cases_match_pytorch() {
    let fixture = op_cases::fixture();
    let mut failures = Vec::new();
    let mut ran = 0;
    for case in fixture["cases"].as_array().unwrap() {
        if !case["op"].as_str().unwrap().starts_with("torchvision.") {
            continue;
        }
        ran += 1;
        let name = case["name"].as_str().unwrap();
        let (call, args, kwargs) = op_cases::call(case);
        match on_device(&call, &args, &kwargs) {
            Ok(got) => {
                let mut want = case["outputs"][0].clone();
                let floor = if want["dtype"] == "float64" { 1e-13 } else { 2e-6 };
                if want["atol"].as_f64().is_some_and(|a| a < floor) {
                    want["atol"] = serde_json::json!(floor);
                }
                failures.extend(
                    op_cases::differences(&got, &want)
                        .into_iter()
                        .map(|d| format!("{name}: {d}")),
                );
            }
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    assert!(ran >= 7, "only {ran} torchvision cases");
    common::assert_no_failures(&failures);
}

// ------------------------------------------------------------------ edge cases

/// `[n, 5]` regions (batch index, x1, y1, x2, y2).
fn regions(rows: &[[f64; 5]], dtype: DType) -> Value<Tensor> {
    let flat: Vec<f64> = rows.iter().flatten().copied().collect();
    t(dtype, &flat, &[rows.len() as i64, 5])
}

/// An `[n, c, h, w]` feature map of deterministic values.
fn features(size: [i64; 4], dtype: DType, seed: u64) -> Value<Tensor> {
    let n: i64 = size.iter().product();
    t(dtype, &common::uniform_values(n as usize, seed), &size)
}

fn roi_args(
    input: Value<Tensor>,
    rois: Value<Tensor>,
    scale: f64,
    pooled: i64,
    ratio: i64,
    aligned: bool,
) -> Vec<Value<Tensor>> {
    vec![
        input,
        rois,
        Value::Float(scale),
        Value::Int(pooled),
        Value::Int(pooled),
        Value::Int(ratio),
        Value::Bool(aligned),
    ]
}

/// RoIAlign on what the family bundles do not reach, against the host: no
/// regions (an empty `[0, C, PH, PW]`), regions past every edge of the
/// image and wholly outside it (their points weigh 0), malformed regions
/// (x2 < x1: forced to 1 x 1 unless aligned), both `aligned` forms, fixed
/// and adaptive grids, float64, and a channels-last input (read through
/// its strides).
#[test]
fn roi_align_edge_cases_agree_with_the_host() {
    let rows = [
        [0.0, 1.0, 2.0, 9.0, 7.5],
        [1.0, -6.0, -4.0, 3.0, 2.0],
        [1.0, 10.0, 8.0, 30.0, 25.0],
        [0.0, 40.0, 40.0, 50.0, 52.0],
        [1.0, -20.0, -20.0, -12.0, -15.0],
        [0.0, 8.0, 6.0, 3.0, 2.0],
        [1.0, 0.0, 0.0, 15.0, 11.0],
    ];
    let mut failures = Vec::new();
    for dtype in [DType::Float32, DType::Float64] {
        for aligned in [false, true] {
            for ratio in [2, 0, -1] {
                let name = format!("{dtype} aligned={aligned} sampling_ratio={ratio}");
                let args = roi_args(
                    features([2, 3, 12, 16], dtype, 7),
                    regions(&rows, dtype),
                    1.0,
                    3,
                    ratio,
                    aligned,
                );
                failures.extend(agree(&name, ROI_ALIGN, &args));
                let scaled = roi_args(
                    features([2, 3, 12, 16], dtype, 8),
                    regions(&rows, dtype),
                    0.5,
                    2,
                    ratio,
                    aligned,
                );
                failures.extend(agree(&format!("{name} spatial_scale=0.5"), ROI_ALIGN, &scaled));
            }
        }
        let none = roi_args(
            features([2, 3, 12, 16], dtype, 9),
            regions(&[], dtype),
            1.0,
            4,
            2,
            false,
        );
        failures.extend(agree(&format!("{dtype} no regions"), ROI_ALIGN, &none));
    }
    // Channels last: strides (H W C, 1, W C, C).
    let dense = features([2, 4, 12, 16], DType::Float32, 10);
    let Value::Tensor(dense) = dense else { unreachable!() };
    let spec = TensorSpec {
        stride: vec![12 * 16 * 4, 1, 16 * 4, 4],
        ..dense.spec().clone()
    };
    let channels_last = Tensor::zeros_like_spec(&spec).unwrap();
    channels_last.copy_from(&dense).unwrap();
    let args = roi_args(
        Value::Tensor(channels_last),
        regions(&rows, DType::Float32),
        1.0,
        3,
        0,
        true,
    );
    failures.extend(agree("channels-last input", ROI_ALIGN, &args));
    // The output is contiguous whatever the input's layout.
    common::assert_no_failures(&failures);
}

/// `[n, 4]` boxes and their scores, float32.
fn boxes(rows: &[[f64; 4]], scores: &[f64]) -> Vec<Value<Tensor>> {
    let flat: Vec<f64> = rows.iter().flatten().copied().collect();
    vec![
        t(DType::Float32, &flat, &[rows.len() as i64, 4]),
        t(DType::Float32, scores, &[scores.len() as i64]),
        Value::Float(0.5),
    ]
}

fn kept(args: &[Value<Tensor>]) -> Vec<i64> {
    on_device(NMS, args, &Kwargs::new())
        .unwrap_or_else(|e| panic!("nms: {e}"))
        .to_i64_vec()
        .unwrap()
}

/// NMS edge cases, by value (torchvision's result) and against the host: no
/// boxes (an empty int64 `[0]`), every box the same (only the best kept),
/// equal scores (kept in index order: the stable descending sort
/// torchvision's CUDA kernel makes), zero-area boxes (IoU 0 / 0 is not above
/// the threshold: all kept), and random boxes in more than one 64-box mask
/// word (300 and 1,000 boxes, float32 and float64, thresholds 0.25 and 0.75).
#[test]
fn nms_edge_cases() {
    assert_eq!(kept(&boxes(&[], &[])), Vec::<i64>::new());
    let same = [[1.0, 1.0, 5.0, 5.0]; 5];
    assert_eq!(kept(&boxes(&same, &[0.1, 0.7, 0.3, 0.9, 0.2])), [3]);
    // Equal scores: index order.
    let apart = [
        [0.0, 0.0, 1.0, 1.0],
        [10.0, 10.0, 11.0, 11.0],
        [20.0, 20.0, 21.0, 21.0],
        [30.0, 30.0, 31.0, 31.0],
    ];
    assert_eq!(kept(&boxes(&apart, &[0.5, 0.9, 0.5, 0.5])), [1, 0, 2, 3]);
    // Equal scores on overlapping boxes: the lower index wins.
    assert_eq!(kept(&boxes(&same[..3], &[0.4, 0.4, 0.4])), [0]);
    let points = [[2.0, 2.0, 2.0, 2.0]; 3];
    assert_eq!(kept(&boxes(&points, &[0.2, 0.3, 0.1])), [1, 0, 2]);

    let mut failures = Vec::new();
    for (n, seed) in [(300usize, 3u64), (1000, 4)] {
        let u = common::uniform_values(n * 4 + n, seed);
        let mut flat = Vec::with_capacity(n * 4);
        for b in 0..n {
            let (x, y) = (u[4 * b].abs() * 90.0, u[4 * b + 1].abs() * 90.0);
            let (w, h) = (u[4 * b + 2].abs() * 20.0 + 1.0, u[4 * b + 3].abs() * 20.0 + 1.0);
            flat.extend([x, y, x + w, y + h]);
        }
        // Scores with ties: two decimals.
        let scores: Vec<f64> = u[4 * n..].iter().map(|s| (s.abs() * 100.0).round() / 100.0).collect();
        for dtype in [DType::Float32, DType::Float64] {
            // Thresholds exact in float (torchvision's CUDA kernel rounds it to float).
            for threshold in [0.25, 0.75] {
                let args = vec![
                    t(dtype, &flat, &[n as i64, 4]),
                    t(dtype, &scores, &[n as i64]),
                    Value::Float(threshold),
                ];
                failures.extend(agree(&format!("{n} boxes {dtype} iou {threshold}"), NMS, &args));
            }
        }
    }
    common::assert_no_failures(&failures);
}

// ------------------------------------------------------------------ bad inputs

#[track_caller]
fn fails_with(op: &str, args: &[Value<Tensor>], want: &str) {
    let e = match on_device(op, args, &Kwargs::new()) {
        Ok(t) => panic!("{op} returned {:?}, expected an error with `{want}`", t.size()),
        Err(e) => e,
    };
    assert!(
        e.contains("torchvision.") && e.contains(want),
        "want `{want}` naming the op in: {e}"
    );
}

/// Bad arguments are errors naming the op and what is wrong, before or
/// (a region's batch index, a sampling grid) after the kernel.
#[test]
fn bad_inputs_are_errors_naming_the_op() {
    let f32_boxes = |rows: i64, cols: i64| t(DType::Float32, &vec![1.0; (rows * cols) as usize], &[rows, cols]);
    let scores = |n: i64, dtype| t(dtype, &vec![0.5; n as usize], &[n]);
    fails_with(
        NMS,
        &[f32_boxes(4, 3), scores(4, DType::Float32), Value::Float(0.5)],
        "boxes should have 4 elements in dimension 1, got 3",
    );
    fails_with(
        NMS,
        &[f32_boxes(4, 4), scores(3, DType::Float32), Value::Float(0.5)],
        "boxes and scores should have same number of elements in dimension 0, got 4 and 3",
    );
    fails_with(
        NMS,
        &[f32_boxes(4, 4), scores(4, DType::Float64), Value::Float(0.5)],
        "dets should have the same type as scores",
    );
    fails_with(
        NMS,
        &[
            t(DType::Int64, &[0.0; 8], &[2, 4]),
            scores(2, DType::Int64),
            Value::Float(0.5),
        ],
        "float32 or float64",
    );

    let input = || features([1, 2, 8, 8], DType::Float32, 11);
    fails_with(
        ROI_ALIGN,
        &roi_args(input(), f32_boxes(3, 4), 1.0, 2, 2, false),
        "rois must have shape as Tensor[K, 5]",
    );
    fails_with(
        ROI_ALIGN,
        &roi_args(
            input(),
            regions(&[[0.0, 0.0, 0.0, 4.0, 4.0]], DType::Float64),
            1.0,
            2,
            2,
            false,
        ),
        "input should have the same type as rois",
    );
    fails_with(
        ROI_ALIGN,
        &roi_args(
            features([1, 2, 8, 8], DType::Float16, 12),
            regions(&[[0.0, 0.0, 0.0, 4.0, 4.0]], DType::Float16),
            1.0,
            2,
            2,
            false,
        ),
        "float32 or float64",
    );
    let outside = [[0.0, 0.0, 0.0, 4.0, 4.0], [1.0, 0.0, 0.0, 4.0, 4.0]];
    fails_with(
        ROI_ALIGN,
        &roi_args(input(), regions(&outside, DType::Float32), 1.0, 2, 2, false),
        "region 1 has batch index 1, outside the input's batch of 1",
    );
    // An adaptive grid over a region far larger than the map: 1e6 / 2 points a side.
    let huge = [[0.0, 0.0, 0.0, 1.0e6, 1.0e6]];
    fails_with(
        ROI_ALIGN,
        &roi_args(input(), regions(&huge, DType::Float32), 1.0, 2, 0, false),
        "region 0's sampling grid has more than 65536 points a bin",
    );
}
