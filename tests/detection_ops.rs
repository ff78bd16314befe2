//! torchvision's detection ops on the host (`torchvision.roi_align`,
//! `torchvision.nms`) and the boolean mask index (`aten.index.Tensor`):
//! what torchvision's CPU kernels leave undefined or refuse is an error that
//! names the op and the argument. Their values and layouts against
//! torchvision's are in `tests/op_layouts.rs`.

use indexmap::IndexMap;
use wrapir::exec::host::HostBackend;
use wrapir::exec::{Backend, ExternCall, Tensor, Value};
use wrapir::ir::DType;

const ROI_ALIGN: &str = "torch.ops.torchvision.roi_align.default";
const NMS: &str = "torch.ops.torchvision.nms.default";
const INDEX: &str = "torch.ops.aten.index.Tensor";

fn tensor(dtype: DType, data: &[f64], size: &[i64]) -> Value<Tensor> {
    Value::Tensor(Tensor::from_f64(dtype, data, size).expect("tensor"))
}

/// Calls `op` on the host backend: its result, or its error's text.
fn call(op: &str, args: Vec<Value<Tensor>>) -> Result<Value<Tensor>, String> {
    let kwargs = IndexMap::new();
    HostBackend::default()
        .call_extern(ExternCall::new(op, &args, &kwargs))
        .map_err(|e| e.to_string())
}

fn roi_align(input: Value<Tensor>, rois: Value<Tensor>) -> Result<Value<Tensor>, String> {
    call(
        ROI_ALIGN,
        vec![
            input,
            rois,
            Value::Float(1.0),
            Value::Int(2),
            Value::Int(2),
            Value::Int(-1),
            Value::Bool(false),
        ],
    )
}

#[test]
fn a_region_outside_the_batch_is_an_error_naming_it() {
    let input = tensor(DType::Float32, &[1.0; 16], &[1, 1, 4, 4]);
    let rois = tensor(
        DType::Float32,
        &[0.0, 0.0, 0.0, 2.0, 2.0, 1.0, 0.0, 0.0, 2.0, 2.0],
        &[2, 5],
    );
    let e = roi_align(input, rois).unwrap_err();
    assert!(
        e.contains("torchvision.roi_align") && e.contains("region 1 has batch index 1, outside the input's batch of 1"),
        "{e}"
    );
}

#[test]
fn a_region_past_the_image_pools_zeros_and_a_constant_image_pools_its_value() {
    let input = tensor(DType::Float32, &[2.5; 16], &[1, 1, 4, 4]);
    // Inside: every sample of a constant image is the constant; far outside: weight 0.
    let rois = tensor(
        DType::Float32,
        &[0.0, 0.5, 0.5, 3.0, 3.0, 0.0, 50.0, 50.0, 60.0, 60.0],
        &[2, 5],
    );
    let Value::Tensor(out) = roi_align(input, rois).unwrap() else {
        panic!("roi_align returns one tensor")
    };
    assert_eq!((out.size(), out.stride()), (&[2i64, 1, 2, 2][..], &[4i64, 4, 2, 1][..]));
    assert_eq!(out.to_f64_vec().unwrap(), [2.5, 2.5, 2.5, 2.5, 0.0, 0.0, 0.0, 0.0]);
}

#[test]
fn other_dtypes_and_shapes_are_refused_by_name() {
    let half = roi_align(
        tensor(DType::Float16, &[1.0; 16], &[1, 1, 4, 4]),
        tensor(DType::Float16, &[0.0; 5], &[1, 5]),
    );
    assert!(half.unwrap_err().contains("float32 or float64"));
    let mixed = roi_align(
        tensor(DType::Float32, &[1.0; 16], &[1, 1, 4, 4]),
        tensor(DType::Float64, &[0.0; 5], &[1, 5]),
    );
    let e = mixed.unwrap_err();
    assert!(
        e.contains("input should have the same type as rois (f32 and f64)"),
        "{e}"
    );
    let rois = roi_align(
        tensor(DType::Float32, &[1.0; 16], &[1, 1, 4, 4]),
        tensor(DType::Float32, &[0.0; 4], &[1, 4]),
    );
    assert!(rois.unwrap_err().contains("rois must have shape as Tensor[K, 5]"));
    let boxes = tensor(DType::Float32, &[0.0; 6], &[2, 3]);
    let scores = tensor(DType::Float32, &[0.5, 0.4], &[2]);
    let e = call(NMS, vec![boxes, scores, Value::Float(0.5)]).unwrap_err();
    assert!(
        e.contains("torchvision.nms") && e.contains("boxes should have 4 elements in dimension 1, got 3"),
        "{e}"
    );
    let boxes = tensor(DType::Float32, &[0.0, 0.0, 1.0, 1.0], &[1, 4]);
    let scores = tensor(DType::Float64, &[0.5], &[1]);
    let e = call(NMS, vec![boxes, scores, Value::Float(0.5)]).unwrap_err();
    assert!(
        e.contains("dets should have the same type as scores (f32 and f64)"),
        "{e}"
    );
    let values = tensor(DType::Float32, &[1.0, 2.0, 3.0], &[3]);
    let index = tensor(DType::Int64, &[0.0, 2.0], &[2]);
    let e = call(INDEX, vec![values, Value::List(vec![index])]).unwrap_err();
    assert!(e.contains("one boolean mask"), "{e}");
}

/// A mask over no rows of a tensor whose trailing sizes multiply past any
/// count: an error naming the sizes, not an overflow.
#[test]
fn a_mask_over_rows_too_large_to_count_is_an_error() {
    let huge = 1i64 << 40;
    let values = match Tensor::from_f64(DType::Float32, &[], &[0, huge, huge]) {
        Ok(t) => Value::Tensor(t),
        // The tensor itself refuses sizes like these: nothing to index.
        Err(e) => return eprintln!("tensor refused: {e}"),
    };
    let mask = tensor(DType::Bool, &[], &[0]);
    let e = call(INDEX, vec![values, Value::List(vec![mask])]).unwrap_err();
    assert!(e.contains("too many elements"), "{e}");
}

#[test]
fn nms_of_no_boxes_is_an_empty_int64_index() {
    let boxes = tensor(DType::Float32, &[], &[0, 4]);
    let scores = tensor(DType::Float32, &[], &[0]);
    let Value::Tensor(keep) = call(NMS, vec![boxes, scores, Value::Float(0.5)]).unwrap() else {
        panic!("nms returns one tensor")
    };
    assert_eq!((keep.size(), keep.dtype()), (&[0i64][..], DType::Int64));
}
