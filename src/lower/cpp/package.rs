//! A buildable CMake project per program: the standalone wrapper, the
//! runtime header, a `main.cpp` that runs it on inputs from a safetensors
//! file, and a `CMakeLists.txt` that links it with the CUDA driver and
//! wrapir's runtime library (`libwrapir_runtime`). A host-only program
//! ([`super::host_only`]: a CPU program, its C++ or Halide kernels called in
//! the bundle's compiled images) needs neither CUDA nor a GPU: its `main`
//! runs on the runtime's host context and links only the runtime library.
//!
//! [`package`] returns the files' text; the caller writes them into the
//! package directory together with the program's JSON (`program.json`), the
//! bundle's `bundle.json` and its kernel images (cubins, host kernel objects
//! and the Halide runtime) at their relative paths, so
//! that the directory is a bundle the runtime opens (`wrapir_rt_init`,
//! `wrapir_rt_load_inputs`) and the wrapper loads its cubins from
//! (`WRAPIR_CUBIN_DIR` is the package directory).

use super::{Dialect, Error, Options};
use crate::ir::{GraphOutput, ProgramInfo};

/// One file of a package: its path relative to the package directory, and its text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackageFile {
    /// Relative path (`main.cpp`).
    pub path: String,
    /// The file's contents.
    pub contents: String,
}

/// The name of the directory `CMakeLists.txt` looks for the runtime library
/// in by default (`<package>/lib`; `-DWRAPIR_RUNTIME_DIR=...` overrides it).
pub const RUNTIME_LIB_DIR: &str = "lib";

/// The package's target name for a program called `name`: ASCII letters,
/// digits and `_` (others become `_`), not starting with a digit.
pub fn target_name(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' })
        .collect();
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert_str(0, "model_");
    }
    out
}

/// The text files of the package of `info`'s program, called `name` (see
/// the module documentation): `<target>.cpp`, `wrapir_runtime.h`,
/// `main.cpp` and `CMakeLists.txt`, where `<target>` is [`target_name`].
pub fn package(info: &ProgramInfo<'_>, name: &str) -> Result<Vec<PackageFile>, Error> {
    let target = target_name(name);
    let host_only = super::host_only(info.program());
    let wrapper = super::write_string(info, &Options::for_dialect(Dialect::Standalone))?;
    Ok(vec![
        PackageFile {
            path: format!("{target}.cpp"),
            contents: wrapper,
        },
        PackageFile {
            path: "wrapir_runtime.h".to_string(),
            contents: super::runtime_header().to_string(),
        },
        PackageFile {
            path: "main.cpp".to_string(),
            contents: main_cpp(info, &target, host_only),
        },
        PackageFile {
            path: "CMakeLists.txt".to_string(),
            contents: cmake_lists(&target, host_only),
        },
    ])
}

/// `main.cpp`: loads the inputs, calls the wrapper, writes the outputs.
fn main_cpp(info: &ProgramInfo<'_>, target: &str, host_only: bool) -> String {
    let program = info.program();
    let outputs = program.main.outputs.len();
    let kinds: Vec<&str> = program
        .main
        .outputs
        .iter()
        .map(|o| match o {
            GraphOutput::Buffer(_) => "tensor",
            GraphOutput::Expr(_) => "size (a 0-d int64 tensor)",
            GraphOutput::None => "None (left out)",
        })
        .collect();
    let listing: String = kinds
        .iter()
        .enumerate()
        .map(|(i, k)| format!("//   out{i}: {k}\n"))
        .collect();
    let (define, device, place) = if host_only {
        (
            HOST_ONLY_DEFINE,
            "WRAPIR_RT_HOST_DEVICE",
            "into host memory (the runtime's host context)",
        )
    } else {
        ("", "0", "onto device 0")
    };
    MAIN_TEMPLATE
        .replace("@HOST_ONLY@", define)
        .replace("@DEVICE@", device)
        .replace("@PLACE@", place)
        .replace("@TARGET@", target)
        .replace("@NUM_OUTPUTS@", &outputs.to_string())
        .replace("@OUTPUTS@", &listing)
}

/// `CMakeLists.txt`.
fn cmake_lists(target: &str, host_only: bool) -> String {
    let (needs, find, link) = if host_only {
        (
            "# A host-only program (WRAPIR_HOST_ONLY): no CUDA toolkit is needed. Needs",
            "",
            "${CMAKE_DL_LIBS}",
        )
    } else {
        (
            "# Needs the CUDA toolkit (found with CMake's FindCUDAToolkit; only the\n# driver API is linked) and",
            "\nfind_package(CUDAToolkit REQUIRED)\n",
            "CUDA::cuda_driver",
        )
    };
    CMAKE_TEMPLATE
        .replace("@NEEDS@", needs)
        .replace("@FIND_CUDA@", find)
        .replace("@LINK@", link)
        .replace("@TARGET@", target)
        .replace("@LIB_DIR@", RUNTIME_LIB_DIR)
}

/// What a host-only file writes before including the runtime header.
const HOST_ONLY_DEFINE: &str = "#ifndef WRAPIR_HOST_ONLY\n#define WRAPIR_HOST_ONLY\n#endif\n";

const MAIN_TEMPLATE: &str = r#"// Generated by wrapir: runs the standalone wrapper @TARGET@.cpp.
//
//   @TARGET@ INPUTS.safetensors OUTPUTS.safetensors [CALLS]
//
// Loads the graph inputs from INPUTS (a bundle's inputs.safetensors: tensors
// by graph input name, symbol inputs as 0-d integer tensors) @PLACE@,
// laid out as the program declares them (the runtime places them as
// `wrapir run` does), calls the wrapper CALLS times (default 1) on one
// stream, and writes the last call's outputs to OUTPUTS:
@OUTPUTS@//
// Prints the time of the first call and the mean of the others. Exit
// status: 0 on success, 2 on bad usage, 3 when loading, the wrapper or
// writing failed (the message is printed).

@HOST_ONLY@#include "wrapir_runtime.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

extern "C" int wrapir_entry(const wrapir::Tensor* inputs, const int64_t* scalar_inputs, wrapir::Tensor* outputs,
                            CUstream stream) noexcept;
extern "C" const char* wrapir_entry_last_error();

#ifndef WRAPIR_PACKAGE_DIR
#define WRAPIR_PACKAGE_DIR "."
#endif

namespace {

constexpr int kDevice = @DEVICE@;
constexpr size_t kNumOutputs = @NUM_OUTPUTS@;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "@TARGET@: %s\n", what.c_str());
  std::exit(3);
}

void check_rt(int32_t status, const char* what) {
  if (status != WRAPIR_RT_OK) fail(std::string(what) + ": " + wrapir_rt_last_error());
}

void sync(CUstream stream) {
#ifndef WRAPIR_HOST_ONLY
  CU_CHECK(cuStreamSynchronize(stream));
#else
  (void)stream;
#endif
}

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::fprintf(stderr, "usage: %s INPUTS.safetensors OUTPUTS.safetensors [CALLS]\n", argv[0]);
    return 2;
  }
  long calls = 1;
  if (argc == 4) {
    char* end = nullptr;
    calls = std::strtol(argv[3], &end, 10);
    if (end == argv[3] || *end != '\0' || calls < 1 || calls > 1000000) {
      std::fprintf(stderr, "@TARGET@: CALLS must be an integer from 1 to 1000000, got `%s`\n", argv[3]);
      return 2;
    }
  }
  try {
    const auto started = std::chrono::steady_clock::now();
    // The runtime first: it initialises the driver and takes the bundle's math modes.
    check_rt(wrapir_rt_init(kDevice, WRAPIR_PACKAGE_DIR), "wrapir_rt_init");
    CUstream stream = nullptr;
#ifndef WRAPIR_HOST_ONLY
    CU_CHECK(cuInit(0));
    wrapir::set_device(kDevice);
    CU_CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
#endif

    WrapirRtInputs* loaded = nullptr;
    check_rt(wrapir_rt_load_inputs(kDevice, WRAPIR_PACKAGE_DIR, argv[1], stream, &loaded),
             (std::string("loading ") + argv[1]).c_str());
    std::vector<wrapir::Tensor> inputs;
    for (int64_t i = 0; i < wrapir_rt_inputs_num_tensors(loaded); ++i) {
      WrapirRtTensor* t = nullptr;
      check_rt(wrapir_rt_inputs_take(loaded, i, &t), "taking an input");
      inputs.push_back(wrapir::Tensor::adopt_runtime(t, stream));
    }
    const int64_t* scalar_data = wrapir_rt_inputs_scalars(loaded);
    std::vector<int64_t> scalars(scalar_data, scalar_data + wrapir_rt_inputs_num_scalars(loaded));
    wrapir_rt_inputs_free(loaded, stream);
    const double load_ms = ms_since(started);

    std::vector<wrapir::Tensor> outputs;
    double first_ms = 0, rest_ms = 0;
    for (long call = 0; call < calls; ++call) {
      const auto t0 = std::chrono::steady_clock::now();
      outputs.assign(kNumOutputs, wrapir::Tensor());
      if (wrapir_entry(inputs.data(), scalars.data(), outputs.data(), stream) != 0)
        fail(std::string("call ") + std::to_string(call) + ": " + wrapir_entry_last_error());
      sync(stream);
      (call == 0 ? first_ms : rest_ms) += ms_since(t0);
    }

    std::vector<std::string> names;
    std::vector<WrapirRtTensorDesc> descs(kNumOutputs);
    std::vector<const WrapirRtTensorDesc*> ptrs;
    for (size_t i = 0; i < kNumOutputs; ++i) {
      names.push_back("out" + std::to_string(i));
      descs[i] = outputs[i].desc();
      ptrs.push_back(outputs[i].defined() ? &descs[i] : nullptr);
    }
    std::vector<const char*> name_ptrs;
    for (const auto& n : names) name_ptrs.push_back(n.c_str());
    check_rt(wrapir_rt_save_safetensors(kDevice, argv[2], name_ptrs.data(), ptrs.data(),
                                        static_cast<int64_t>(kNumOutputs), stream),
             (std::string("writing ") + argv[2]).c_str());
    std::printf("@TARGET@: inputs loaded in %.3f ms; first call %.3f ms", load_ms, first_ms);
    if (calls > 1) std::printf("; %ld more calls, mean %.3f us", calls - 1, 1000.0 * rest_ms / (calls - 1));
    std::printf("; outputs in %s\n", argv[2]);
    outputs.clear();
    inputs.clear();
    sync(stream);
#ifndef WRAPIR_HOST_ONLY
    CU_CHECK(cuStreamDestroy(stream));
#endif
  } catch (const std::exception& e) {
    fail(e.what());
  }
  return 0;
}
"#;

const CMAKE_TEMPLATE: &str = r#"# Generated by wrapir: the standalone C++ package of @TARGET@.
#
#   cmake -B build <this directory> && cmake --build build
#   build/@TARGET@ INPUTS.safetensors OUTPUTS.safetensors [CALLS]
#
@NEEDS@ wrapir's runtime library libwrapir_runtime
# (`cargo build --release -p wrapir-runtime` in wrapir's checkout), looked for
# in WRAPIR_RUNTIME_DIR: by default this directory's @LIB_DIR@/, which
# `wrapir lower --package` fills when the library lies next to the wrapir
# binary; else configure with -DWRAPIR_RUNTIME_DIR=<checkout>/target/release.
# The shared library is preferred; with only the static one, the system
# libraries it needs are linked too. The kernels (cubins, host kernel objects)
# and program.json are read from this directory at run time, found from the
# executable's own path, and the runtime library through an RPATH relative to
# it ($ORIGIN): build inside this directory (`cmake -B <this directory>/build
# <this directory>`) and the whole folder can move.

cmake_minimum_required(VERSION 3.18)
project(@TARGET@ LANGUAGES CXX)

set(CMAKE_CXX_STANDARD 17)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
if(NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)
  set(CMAKE_BUILD_TYPE Release CACHE STRING "Build type" FORCE)
endif()
@FIND_CUDA@
set(WRAPIR_RUNTIME_DIR "${CMAKE_CURRENT_SOURCE_DIR}/@LIB_DIR@" CACHE PATH
    "Directory holding libwrapir_runtime.so or libwrapir_runtime.a")
find_library(WRAPIR_RUNTIME_LIBRARY NAMES wrapir_runtime PATHS "${WRAPIR_RUNTIME_DIR}" NO_DEFAULT_PATH)
if(NOT WRAPIR_RUNTIME_LIBRARY)
  message(FATAL_ERROR
    "libwrapir_runtime not found in WRAPIR_RUNTIME_DIR=${WRAPIR_RUNTIME_DIR}: build it with "
    "`cargo build --release -p wrapir-runtime` in wrapir's checkout and configure with "
    "-DWRAPIR_RUNTIME_DIR=<checkout>/target/release")
endif()
message(STATUS "wrapir runtime: ${WRAPIR_RUNTIME_LIBRARY}")

# Paths relative to the executable, so that nothing absolute is built in.
file(RELATIVE_PATH WRAPIR_PACKAGE_FROM_EXE "${CMAKE_CURRENT_BINARY_DIR}" "${CMAKE_CURRENT_SOURCE_DIR}")
get_filename_component(WRAPIR_RUNTIME_LIBRARY_DIR "${WRAPIR_RUNTIME_LIBRARY}" DIRECTORY)
file(RELATIVE_PATH WRAPIR_RUNTIME_FROM_EXE "${CMAKE_CURRENT_BINARY_DIR}" "${WRAPIR_RUNTIME_LIBRARY_DIR}")

add_executable(@TARGET@ main.cpp @TARGET@.cpp)
target_include_directories(@TARGET@ PRIVATE "${CMAKE_CURRENT_SOURCE_DIR}")
target_compile_definitions(@TARGET@ PRIVATE WRAPIR_PACKAGE_FROM_EXE="${WRAPIR_PACKAGE_FROM_EXE}")
set_target_properties(@TARGET@ PROPERTIES
  BUILD_WITH_INSTALL_RPATH TRUE
  INSTALL_RPATH "$ORIGIN/${WRAPIR_RUNTIME_FROM_EXE}"
  INSTALL_RPATH_USE_LINK_PATH FALSE)
target_link_libraries(@TARGET@ PRIVATE "${WRAPIR_RUNTIME_LIBRARY}" @LINK@)
if(WRAPIR_RUNTIME_LIBRARY MATCHES "\\.a$")
  find_package(Threads REQUIRED)
  target_link_libraries(@TARGET@ PRIVATE Threads::Threads ${CMAKE_DL_LIBS} m)
endif()
"#;
