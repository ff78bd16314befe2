//! The vector ISAs a C++ kernel image may be compiled for, and whether this
//! CPU runs them.
//!
//! The exporter builds C++ kernels for the baseline x86-64 ISA unless asked
//! for a vector ISA (`--cpu-isa avx2`: some Inductor templates, such as
//! FlexAttention's CPU kernel, exist only vectorised); such a kernel's
//! metadata names the ISA (`CppMeta::isa`), and its image executes that
//! ISA's instructions, possibly in its initialisers, so the host backend
//! checks the CPU's features (`cpuid`) before it loads the image. The ISAs
//! and the features each needs are `ir::VecIsa`'s (an unknown one is refused
//! where the program is read).

use crate::ir::VecIsa;

/// The vector features named in messages, in order of age.
const REPORTED: &[&str] = &[
    "sse4.2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512dq", "avx512vl", "avx512bw",
];

/// Whether this CPU has `feature` (one of [`REPORTED`]).
pub fn cpu_has(feature: &str) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        match feature {
            "sse4.2" => std::arch::is_x86_feature_detected!("sse4.2"),
            "avx" => std::arch::is_x86_feature_detected!("avx"),
            "avx2" => std::arch::is_x86_feature_detected!("avx2"),
            "fma" => std::arch::is_x86_feature_detected!("fma"),
            "f16c" => std::arch::is_x86_feature_detected!("f16c"),
            "avx512f" => std::arch::is_x86_feature_detected!("avx512f"),
            "avx512dq" => std::arch::is_x86_feature_detected!("avx512dq"),
            "avx512vl" => std::arch::is_x86_feature_detected!("avx512vl"),
            "avx512bw" => std::arch::is_x86_feature_detected!("avx512bw"),
            _ => false,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = feature;
        false
    }
}

/// `Ok` when a CPU whose features `has` reports runs images compiled for
/// `isa`; else why not, naming the ISA, the features it needs and those
/// the CPU lacks and has.
pub fn check_isa_with(isa: VecIsa, has: &dyn Fn(&str) -> bool) -> Result<(), String> {
    let needs = isa.cpu_features();
    let missing: Vec<&str> = needs.iter().copied().filter(|f| !has(f)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let present: Vec<&str> = REPORTED.iter().copied().filter(|f| has(f)).collect();
    let arch = if cfg!(target_arch = "x86_64") {
        ""
    } else {
        " (not an x86-64 CPU)"
    };
    Err(format!(
        "compiled for the `{isa}` vector ISA (needs {}), which this CPU{arch} lacks: no {}; its vector features: {}",
        needs.join(", "),
        missing.join(", "),
        if present.is_empty() {
            "none of these".to_string()
        } else {
            present.join(", ")
        }
    ))
}

/// [`check_isa_with`] this CPU.
pub fn check_isa(isa: VecIsa) -> Result<(), String> {
    check_isa_with(isa, &cpu_has)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_isa_the_cpu_lacks_is_refused_naming_both() {
        // A CPU with AVX but no AVX2, FMA or F16C.
        let old = |f: &str| matches!(f, "sse4.2" | "avx");
        let e = check_isa_with(VecIsa::Avx2, &old).unwrap_err();
        assert!(
            e.contains("`avx2` vector ISA (needs avx2, fma, f16c)")
                && e.contains("no avx2, fma, f16c")
                && e.contains("its vector features: sse4.2, avx"),
            "{e}"
        );
        // One with AVX2 but no AVX-512.
        let avx2 = |f: &str| matches!(f, "sse4.2" | "avx" | "avx2" | "fma" | "f16c");
        assert_eq!(check_isa_with(VecIsa::Avx2, &avx2), Ok(()));
        let e = check_isa_with(VecIsa::Avx512, &avx2).unwrap_err();
        assert!(e.contains("no avx512f, avx512dq, avx512vl, avx512bw"), "{e}");
        // An ISA no wrapir knows never gets here: reading the program refuses it.
        assert_eq!(
            "amx".parse::<VecIsa>(),
            Err("unknown vector ISA `amx` (known: avx2, avx512)".to_string())
        );
    }

    #[test]
    fn this_cpu_is_checked_by_cpuid() {
        let has_avx2 = ["avx2", "fma", "f16c"].iter().all(|f| cpu_has(f));
        assert_eq!(check_isa(VecIsa::Avx2).is_ok(), has_avx2);
    }
}
