//! `VecIsa`: the vector ISAs Inductor compiles C++ kernels for, as a C++
//! kernel's metadata names them (`CppMeta::isa`).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A vector ISA Inductor compiles C++ kernels for (`torch/_inductor/cpu_vec_isa.py`),
/// spelled as in program files (`avx2`, `avx512`). An unknown name is refused
/// where the program is read, so every back end handles every ISA.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VecIsa {
    /// `VecAVX2`: compiled with `-mavx2 -mfma -mf16c`.
    Avx2,
    /// `VecAVX512`: compiled with `-mavx512f -mavx512dq -mavx512vl -mavx512bw -mfma`.
    Avx512,
}

impl VecIsa {
    /// Every ISA, in order of width.
    pub const ALL: [VecIsa; 2] = [VecIsa::Avx2, VecIsa::Avx512];

    /// Its name in program files.
    pub fn name(self) -> &'static str {
        match self {
            VecIsa::Avx2 => "avx2",
            VecIsa::Avx512 => "avx512",
        }
    }

    /// The CPU features an image compiled for it executes (the `-m` flags
    /// Inductor compiles it with), as `cpuid` names them.
    pub fn cpu_features(self) -> &'static [&'static str] {
        match self {
            VecIsa::Avx2 => &["avx2", "fma", "f16c"],
            VecIsa::Avx512 => &["avx512f", "avx512dq", "avx512vl", "avx512bw", "fma"],
        }
    }

    /// Inductor's `cpp.simdlen` (bits) that makes its `pick_vec_isa` choose it.
    pub fn simdlen(self) -> u32 {
        match self {
            VecIsa::Avx2 => 256,
            VecIsa::Avx512 => 512,
        }
    }
}

impl fmt::Display for VecIsa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for VecIsa {
    type Err = String;

    /// The ISA named `s`, or why not, listing the known names.
    fn from_str(s: &str) -> Result<Self, String> {
        VecIsa::ALL.into_iter().find(|i| i.name() == s).ok_or_else(|| {
            let known: Vec<&str> = VecIsa::ALL.iter().map(|i| i.name()).collect();
            format!("unknown vector ISA `{s}` (known: {})", known.join(", "))
        })
    }
}
