//! `wrapir_rt.h` (the C header the standalone wrappers include, shipped in
//! `wrapir_runtime.h`) against its one source of truth, the Rust
//! definitions in `src/capi/`: every `extern "C"` function with
//! its parameter and return types, every `#[repr(C)]` struct with its
//! fields, and every `WRAPIR_RT_*` constant, nothing more and nothing less.
//! Read from the sources, so no `cuda` feature is needed. The header must
//! also compile as C99 and as C++17.

mod common;

use std::collections::BTreeMap;
use std::process::Command;

/// Declarations by name: functions as `ret(param types)`, structs as
/// `{field type name; ...}`, constants as their value.
#[derive(Debug, Default, PartialEq)]
struct Api {
    functions: BTreeMap<String, String>,
    structs: BTreeMap<String, String>,
    constants: BTreeMap<String, String>,
}

fn squash(s: &str) -> String {
    let spaced = s.replace('*', " * ");
    let joined = spaced.split_whitespace().collect::<Vec<_>>().join(" ");
    joined
        .replace(" *", "*")
        .replace(" )", ")")
        .replace(" ,", ",")
        .replace("( ", "(")
}

/// A Rust FFI type in C spelling.
fn c_type(rust: &str) -> String {
    let t = rust.trim();
    if let Some(rest) = t.strip_prefix("*const ") {
        let inner = c_type(rest);
        // `*const *const T` is `const T* const*`.
        return if rest.trim_start().starts_with('*') {
            format!("{inner} const*")
        } else {
            format!("const {inner}*")
        };
    }
    if let Some(rest) = t.strip_prefix("*mut ") {
        return format!("{}*", c_type(rest));
    }
    match t {
        "i32" => "int32_t",
        "i64" => "int64_t",
        "u32" => "uint32_t",
        "u64" => "uint64_t",
        "f64" => "double",
        "c_char" => "char",
        "c_void" => "void",
        other => other,
    }
    .to_string()
}

fn strip_c_comments(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find("/*") {
        out.push_str(&rest[..i]);
        rest = rest[i..].find("*/").map_or("", |j| &rest[i + j + 2..]);
    }
    out.push_str(rest);
    out
}

/// Splits on commas outside parentheses.
fn params(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty() && *p != "void")
        .map(str::to_string)
        .collect()
}

fn rust_api(sources: &[String]) -> Api {
    let mut api = Api::default();
    for text in sources {
        let mut rest = text.as_str();
        while let Some(i) = rest.find("extern \"C\" fn ") {
            let after = &rest[i + "extern \"C\" fn ".len()..];
            let open = after.find('(').expect("( after an extern fn name");
            let name = after[..open].trim().to_string();
            let close = after.find(')').expect(") after the parameters");
            let types: Vec<String> = params(&after[open + 1..close])
                .iter()
                .map(|p| c_type(p.split_once(':').expect("name: type").1))
                .collect();
            let tail = &after[close + 1..after.find('{').expect("a body")];
            let ret = tail.trim().strip_prefix("->").map_or("void".to_string(), c_type);
            api.functions
                .insert(name, squash(&format!("{ret}({})", types.join(", "))));
            rest = &after[close..];
        }
        let mut rest = text.as_str();
        while let Some(i) = rest.find("#[repr(C)]") {
            let after = &rest[i..];
            let s = after.find("pub struct ").expect("a struct after #[repr(C)]");
            let body = &after[s + "pub struct ".len()..];
            let open = body.find('{').expect("{");
            let name = body[..open].trim().to_string();
            let close = body.find('}').expect("}");
            let fields: Vec<String> = body[open + 1..close]
                .lines()
                .map(str::trim)
                .filter(|l| l.starts_with("pub "))
                .map(|l| {
                    let (n, t) = l["pub ".len()..]
                        .trim_end_matches(',')
                        .split_once(':')
                        .expect("field: type");
                    squash(&format!("{} {};", c_type(t), n.trim()))
                })
                .collect();
            api.structs.insert(name, fields.join(" "));
            rest = &body[close..];
        }
        for line in text.lines() {
            if let Some(decl) = line.trim().strip_prefix("pub const WRAPIR_RT_") {
                let (name, value) = decl.split_once(':').expect("const NAME: T = V;");
                let value = value.split_once('=').expect("= value").1.trim().trim_end_matches(';');
                api.constants.insert(format!("WRAPIR_RT_{name}"), value.to_string());
            }
        }
    }
    api
}

fn c_api(header: &str) -> Api {
    let text = strip_c_comments(header);
    let mut api = Api::default();
    for line in text.lines() {
        if let Some(def) = line.trim().strip_prefix("#define WRAPIR_RT_") {
            if let Some((name, value)) = def.split_once(' ') {
                api.constants.insert(
                    format!("WRAPIR_RT_{name}"),
                    value.trim().trim_end_matches('u').to_string(),
                );
            }
        }
    }
    let mut rest = text.as_str();
    while let Some(i) = rest.find("typedef struct ") {
        let after = &rest[i + "typedef struct ".len()..];
        let semi = after.find(';').expect(";");
        let open = match after.find('{') {
            Some(open) if open < semi => open,
            // An opaque type (`typedef struct WrapirRtTensor WrapirRtTensor;`).
            _ => {
                rest = &after[semi..];
                continue;
            }
        };
        let name = after[..open].trim().to_string();
        let close = after.find('}').expect("}");
        let fields: Vec<String> = after[open + 1..close]
            .split(';')
            .map(|f| f.trim().replace("struct ", ""))
            .filter(|f| !f.is_empty())
            .map(|f| squash(&format!("{f};")))
            .collect();
        if !fields.is_empty() {
            api.structs.insert(name, fields.join(" "));
        }
        rest = &after[close..];
    }
    // Function declarations: everything up to `;` that names `wrapir_rt_<fn>(`,
    // preprocessor lines and `extern "C" {` brackets left out.
    let code: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#') && !l.contains("extern \"C\"") && l.trim() != "}")
        .collect::<Vec<_>>()
        .join("\n");
    for decl in code.split(';') {
        let decl = decl.trim();
        let Some(i) = decl.find("wrapir_rt_") else { continue };
        if decl.contains("typedef") || decl.contains('{') {
            continue;
        }
        let open = decl[i..]
            .find('(')
            .map(|j| i + j)
            .unwrap_or_else(|| panic!("no ( in `{decl}`"));
        let ret = squash(&decl[..i]);
        let name = decl[i..open].trim().to_string();
        let close = decl.rfind(')').expect(")");
        let types: Vec<String> = params(&decl[open + 1..close])
            .iter()
            .map(|p| {
                // Drop the parameter name (the last identifier).
                let p = squash(p);
                let cut = p
                    .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .map_or(0, |k| k + 1);
                p[..cut].trim().to_string()
            })
            .collect();
        api.functions
            .insert(name, squash(&format!("{ret}({})", types.join(", "))));
    }
    api
}

fn check(rust: &Api, c: &Api) {
    for (what, r, h) in [
        ("function", &rust.functions, &c.functions),
        ("struct", &rust.structs, &c.structs),
        ("constant", &rust.constants, &c.constants),
    ] {
        for (name, def) in r {
            match h.get(name) {
                None => panic!("wrapir_rt.h lacks the {what} `{name}`: {def}"),
                Some(d) => assert_eq!(d, def, "the {what} `{name}` differs (header, then Rust)"),
            }
        }
        for name in h.keys() {
            assert!(
                r.contains_key(name),
                "wrapir_rt.h declares the {what} `{name}`, which the Rust ABI lacks"
            );
        }
    }
}

#[test]
fn header_declares_exactly_the_rust_abi() {
    let dir = common::root().join("src/capi");
    let mut sources = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            sources.push(std::fs::read_to_string(&path).unwrap());
        }
    }
    let rust = rust_api(&sources);
    let c = c_api(wrapir::lower::cpp::RT_HEADER);
    assert!(rust.functions.len() >= 12, "found only {:?}", rust.functions.keys());
    assert!(rust.structs.len() == 3, "found {:?}", rust.structs.keys());
    check(&rust, &c);
    // The shipped C++ runtime header carries the same declarations.
    assert!(wrapir::lower::cpp::runtime_header().starts_with(wrapir::lower::cpp::RT_HEADER));
}

#[test]
fn header_parser_sees_a_difference() {
    // The comparison is not vacuous: a changed parameter type is caught.
    let c = c_api(wrapir::lower::cpp::RT_HEADER);
    let changed = c_api(&wrapir::lower::cpp::RT_HEADER.replace(
        "int32_t wrapir_rt_init(int32_t device, const char* bundle);",
        "int32_t wrapir_rt_init(int64_t device, const char* bundle);",
    ));
    assert_ne!(
        c.functions.get("wrapir_rt_init"),
        changed.functions.get("wrapir_rt_init")
    );
    assert_eq!(
        c.functions.get("wrapir_rt_init").map(String::as_str),
        Some("int32_t(int32_t, const char*)")
    );
}

#[test]
fn header_compiles_as_c_and_cpp() {
    let dir = std::env::temp_dir().join(format!("wrapir_capi_header_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("wrapir_rt.h"), wrapir::lower::cpp::RT_HEADER).unwrap();
    // Uses every type, so that a malformed declaration fails to compile.
    let probe = "#include \"wrapir_rt.h\"\n\
                 static int probe(void) {\n\
                   WrapirRtArg a; WrapirRtLayout l; WrapirRtTensorDesc d;\n\
                   WrapirRtTensor* t = 0; WrapirRtInputs* in = 0;\n\
                   a.kind = WRAPIR_RT_ARG_LIST; l.ndim = 0; d.flags = WRAPIR_RT_HOST;\n\
                   (void)a; (void)l; (void)d;\n\
                   wrapir_rt_tensor_free(t, 0); wrapir_rt_inputs_free(in, 0);\n\
                   return wrapir_rt_last_error()[0] + WRAPIR_RT_OK;\n\
                 }\n\
                 int main(void) { return probe(); }\n";
    // g++ (which CI has) compiles C with `-x c`.
    for (file, lang, std) in [("probe.c", "c", "-std=c99"), ("probe.cpp", "c++", "-std=c++17")] {
        std::fs::write(dir.join(file), probe).unwrap();
        let out = common::run_tool(
            Command::new("g++")
                .args([
                    "-x",
                    lang,
                    std,
                    "-fsyntax-only",
                    "-Wall",
                    "-Wextra",
                    "-Werror",
                    "-pedantic",
                ])
                .arg("-I")
                .arg(&dir)
                .arg(dir.join(file)),
            "g++",
            "compiling wrapir_rt.h",
        );
        common::assert_tool_ok(&out, format_args!("wrapir_rt.h does not compile as {lang} ({std})"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn dtype_codes_are_the_rust_dtype_order() {
    // The runtime's dtype codes are indices in `DType::ALL`; the C++ header's
    // `wrapir::DType` enumerators and the C header's list must follow it.
    let header = wrapir::lower::cpp::runtime_header();
    let start = header.find("enum class DType : int32_t {").expect("the DType enum");
    let body = &header[start..start + header[start..].find('}').expect("}")];
    let cpp: Vec<String> = body
        .lines()
        .skip(1)
        .map(|l| l.trim().trim_end_matches(',').to_string())
        .filter(|l| !l.is_empty())
        .collect();
    let rust: Vec<String> = wrapir::ir::DType::ALL.iter().map(|d| format!("{d:?}")).collect();
    assert_eq!(cpp, rust);
    let listed: String = rust
        .iter()
        .enumerate()
        .map(|(i, d)| format!("{d} {i}"))
        .collect::<Vec<_>>()
        .join(", ");
    // The comment's words, without its ` * ` line prefixes.
    let c_comment = wrapir::lower::cpp::RT_HEADER
        .split_whitespace()
        .filter(|w| *w != "*")
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        c_comment.contains(&listed),
        "wrapir_rt.h should list the dtype codes as `{listed}`"
    );
}

/// The C++ side of the ABI (`wrapir::call_op` in `wrapir_runtime.h`), run on
/// the host against a recording stand-in for the runtime library: how it
/// passes arguments (kinds, keyword names, lists, tensor descriptors, the
/// expected layout), adopts results (fresh, `None`, aliasing an argument),
/// releases them, and turns a failed call into a `wrapir::Error` naming the op.
#[test]
fn cpp_call_op_passes_arguments_and_adopts_results() {
    let include = common::cuda_include();
    let dir = std::env::temp_dir().join(format!("wrapir_capi_call_op_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("wrapir_runtime.h"), wrapir::lower::cpp::runtime_header()).unwrap();
    std::fs::write(dir.join("probe.cpp"), CALL_OP_PROBE).unwrap();
    let exe = dir.join("probe");
    let out = common::run_tool(
        Command::new("g++")
            .args(["-std=c++17", "-Wall", "-Wextra", "-Werror", "-I"])
            .arg(&include)
            .arg("-I")
            .arg(&dir)
            .arg(dir.join("probe.cpp"))
            .arg("-o")
            .arg(&exe),
        "g++",
        "building the call_op probe",
    );
    common::assert_tool_ok(&out, format_args!("the probe does not build"));
    let run = Command::new(&exe).output().expect("the probe runs");
    let _ = std::fs::remove_dir_all(&dir);
    let transcript = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        run.status.success(),
        "the probe failed:\n{transcript}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let expected = [
        "op extern_kernels.demo args 6 results 3",
        "arg 0 tensor storage 4096 bytes 32 dtype 8 sizes [2,4] strides [4,1] offset 0",
        "arg 1 `out` tensor storage 8192 bytes 24 dtype 4 sizes [3] strides [1] offset 0",
        "arg 2 `alpha` float 0.5",
        "arg 3 list [int 1, none, bool 1]",
        "arg 4 `device` device 0",
        "arg 5 `dtype` dtype 7",
        "expected dtype 8 sizes [2,4] strides [4,1] offset 0",
        "result 0 defined 1 dtype 4 sizes [5] storage 65536",
        "result 1 defined 0",
        "result 2 defined 1 dtype 15 sizes [2,2] storage 4096 shares arg 0 1",
        "freed after results dropped 1",
        "error: extern op `extern_kernels.fails`: the stand-in refuses",
    ];
    let got: Vec<&str> = transcript.lines().collect();
    assert_eq!(got, expected, "transcript:\n{transcript}");
}

/// The probe of `cpp_call_op_passes_arguments_and_adopts_results`: defines
/// the runtime library's functions (and the few CUDA driver functions the
/// header calls) itself, so it runs without a GPU, CUDA or the library.
const CALL_OP_PROBE: &str = r#"#include "wrapir_runtime.h"
#include <cstdio>
#include <string>

// CUDA driver stand-ins (the header's Storage frees device memory it owns).
extern "C" CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr, CUstream) { return CUDA_SUCCESS; }
extern "C" CUresult CUDAAPI cuGetErrorName(CUresult, const char** s) { *s = "stand-in"; return CUDA_SUCCESS; }
extern "C" CUresult CUDAAPI cuGetErrorString(CUresult, const char** s) { *s = "stand-in"; return CUDA_SUCCESS; }

struct WrapirRtTensor {
  uint64_t storage, bytes;
  uint32_t flags;
  int32_t dtype;
  std::vector<int64_t> sizes, strides;
};
static int freed = 0;
static std::string message;

static std::string ints(int32_t n, const int64_t* v) {
  std::string s = "[";
  for (int32_t i = 0; i < n; ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}
static std::string show(const WrapirRtArg& a) {
  switch (a.kind) {
    case WRAPIR_RT_ARG_NONE: return "none";
    case WRAPIR_RT_ARG_INT: return "int " + std::to_string(a.int_value);
    case WRAPIR_RT_ARG_BOOL: return "bool " + std::to_string(a.int_value);
    case WRAPIR_RT_ARG_FLOAT: { char b[32]; std::snprintf(b, sizeof b, "float %g", a.float_value); return b; }
    case WRAPIR_RT_ARG_DEVICE: return "device " + std::to_string(a.int_value);
    case WRAPIR_RT_ARG_DTYPE: return "dtype " + std::to_string(a.dtype);
    case WRAPIR_RT_ARG_STRING: return std::string("string ") + a.string_value;
    case WRAPIR_RT_ARG_TENSOR:
      return "tensor storage " + std::to_string(a.tensor.storage) + " bytes " + std::to_string(a.tensor.storage_bytes) +
             " dtype " + std::to_string(a.tensor.layout.dtype) + " sizes " +
             ints(a.tensor.layout.ndim, a.tensor.layout.sizes) + " strides " +
             ints(a.tensor.layout.ndim, a.tensor.layout.strides) + " offset " + std::to_string(a.tensor.layout.offset);
    case WRAPIR_RT_ARG_LIST: {
      std::string s = "list [";
      for (int64_t i = 0; i < a.num_items; ++i) s += (i ? ", " : "") + show(a.items[i]);
      return s + "]";
    }
  }
  return "?";
}

extern "C" const char* wrapir_rt_last_error(void) { return message.c_str(); }
extern "C" int32_t wrapir_rt_call(int32_t, const char* op, const WrapirRtArg* args, int64_t num_args,
                                  const WrapirRtLayout* expected, void*, WrapirRtTensor** results, int64_t num_results) {
  if (std::string(op) == "extern_kernels.fails") {
    message = "the stand-in refuses";
    return WRAPIR_RT_ERR_OP;
  }
  std::printf("op %s args %lld results %lld\n", op, (long long)num_args, (long long)num_results);
  for (int64_t i = 0; i < num_args; ++i)
    std::printf("arg %lld %s%s\n", (long long)i, args[i].name ? ("`" + std::string(args[i].name) + "` ").c_str() : "",
                show(args[i]).c_str());
  if (expected)
    std::printf("expected dtype %d sizes %s strides %s offset %lld\n", expected->dtype,
                ints(expected->ndim, expected->sizes).c_str(), ints(expected->ndim, expected->strides).c_str(),
                (long long)expected->offset);
  results[0] = new WrapirRtTensor{65536, 20, 0, 4, {5}, {1}};
  results[1] = nullptr;
  // A view of argument 0 (as view_as_complex returns one).
  results[2] = new WrapirRtTensor{args[0].tensor.storage, args[0].tensor.storage_bytes, WRAPIR_RT_BORROWED, 15, {2, 2}, {2, 1}};
  return WRAPIR_RT_OK;
}
extern "C" int32_t wrapir_rt_tensor_desc(const WrapirRtTensor* t, WrapirRtTensorDesc* d) {
  d->storage = t->storage;
  d->storage_bytes = t->bytes;
  d->flags = t->flags;
  d->layout = wrapir::layout(static_cast<wrapir::DType>(t->dtype), static_cast<int64_t>(t->sizes.size()), t->sizes.data(),
                             t->strides.data(), 0);
  return WRAPIR_RT_OK;
}
extern "C" void wrapir_rt_tensor_free(WrapirRtTensor* t, void*) {
  ++freed;
  delete t;
}

int main() {
  wrapir::Tensor a = wrapir::Tensor::borrow(4096, wrapir::DType::Float32, {2, 4}, {4, 1});
  wrapir::Tensor out = wrapir::Tensor::borrow(8192, wrapir::DType::Int64, {3}, {1});
  const wrapir::ExternArg items[] = {wrapir::ExternArg::of_int(1), wrapir::ExternArg::none(), wrapir::ExternArg::of_bool(true)};
  const wrapir::ExternArg args[] = {wrapir::ExternArg::of_tensor(a), wrapir::ExternArg::of_tensor(out, "out"),
                                    wrapir::ExternArg::of_float(0.5, "alpha"), wrapir::ExternArg::of_list(items, 3),
                                    wrapir::ExternArg::of_device(0, "device"),
                                    wrapir::ExternArg::of_dtype(wrapir::DType::Bfloat16, "dtype")};
  static constexpr int64_t sizes[] = {2, 4};
  static constexpr int64_t strides[] = {4, 1};
  const WrapirRtLayout expected = wrapir::layout(wrapir::DType::Float32, 2, sizes, strides, 0);
  {
    wrapir::Tensor r0, r1, r2;
    wrapir::Tensor* const results[] = {&r0, &r1, &r2};
    wrapir::call_op(0, "extern_kernels.demo", args, 6, &expected, results, 3, nullptr);
    std::printf("result 0 defined %d dtype %d sizes %s storage %llu\n", r0.defined(), static_cast<int>(r0.dtype()),
                ints(static_cast<int32_t>(r0.dim()), r0.sizes().data()).c_str(), (unsigned long long)r0.storage_ptr());
    std::printf("result 1 defined %d\n", r1.defined());
    std::printf("result 2 defined %d dtype %d sizes %s storage %llu shares arg 0 %d\n", r2.defined(),
                static_cast<int>(r2.dtype()), ints(static_cast<int32_t>(r2.dim()), r2.sizes().data()).c_str(),
                (unsigned long long)r2.storage_ptr(), r2.storage_ptr() == a.storage_ptr());
  }
  // The aliasing result's handle went at once; the fresh one with its tensor.
  std::printf("freed after results dropped %d\n", freed == 2);
  try {
    wrapir::call_op(0, "extern_kernels.fails", args, 6, nullptr, nullptr, 0, nullptr);
    std::printf("no error\n");
  } catch (const wrapir::Error& e) {
    std::printf("error: %s\n", e.what());
  }
  return 0;
}
"#;
