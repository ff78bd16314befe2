//! The GPU architecture a cubin was compiled for, from its ELF header.
//!
//! A cubin is a 64-bit little-endian ELF file for `EM_CUDA` (190). Its
//! `e_flags` hold the SM number (`major * 10 + minor`, 90 for `sm_90`) in one
//! of two layouts, told apart by `EI_ABIVERSION`:
//!
//! | ABI version | SM number | arch-specific (`sm_90a`) flag |
//! |---|---|---|
//! | 7 (CUDA before 12.8) | bits 0-7 | `0x800` |
//! | 8 (CUDA 12.8 and later) | bits 8-15 | `0x8` |
//!
//! (the names are LLVM's `EF_CUDA_SM`, `EF_CUDA_SM_MASK`,
//! `EF_CUDA_ACCELERATORS`). The program and section header tables, and every
//! section with bytes in the file, must lie inside the image (a truncated
//! cubin is an error, not a driver failure). An image in any other form,
//! such as PTX text, is an error naming what is wrong.
//!
//! [`image_arch`] also reads PTX text, which the driver compiles when the
//! module loads (its `.target` names the oldest architecture it runs on), and
//! [`ImageArch::runs_on`] is the one rule of which images a GPU can load.

use super::elf::{Elf64, EM_CUDA};
use std::fmt;

/// The architecture of one cubin.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CubinArch {
    /// The SM number, `major * 10 + minor` (90 for `sm_90`, 100 for `sm_100`).
    pub sm: u32,
    /// Compiled for the architecture-specific feature set (`sm_90a`), which
    /// runs only on that exact architecture.
    pub arch_specific: bool,
}

impl fmt::Display for CubinArch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sm_{}{}", self.sm, if self.arch_specific { "a" } else { "" })
    }
}

impl CubinArch {
    /// Whether this cubin runs on a GPU of SM number `device_sm` (90 for
    /// compute capability 9.0): SASS runs on its own major version from its
    /// minor version up; an arch-specific image (`sm_90a`) only on its own.
    pub fn runs_on(&self, device_sm: u32) -> bool {
        if self.arch_specific {
            self.sm == device_sm
        } else {
            self.sm / 10 == device_sm / 10 && self.sm <= device_sm
        }
    }
}

/// What a kernel image is: a cubin for one architecture, or PTX text that the
/// driver compiles for the GPU it loads on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ImageArch {
    /// An ELF cubin.
    Cubin(CubinArch),
    /// PTX text for `.target` `target` (its SM number and `a` flag).
    Ptx(CubinArch),
}

impl ImageArch {
    /// Whether a GPU of SM number `device_sm` can load the image: a cubin as
    /// [`CubinArch::runs_on`] says; PTX on its target and every later
    /// architecture (an arch-specific target only on its own).
    pub fn runs_on(&self, device_sm: u32) -> bool {
        match self {
            ImageArch::Cubin(arch) => arch.runs_on(device_sm),
            ImageArch::Ptx(t) if t.arch_specific => t.sm == device_sm,
            ImageArch::Ptx(t) => t.sm <= device_sm,
        }
    }

    /// The architecture it was compiled for.
    pub fn arch(&self) -> CubinArch {
        match self {
            ImageArch::Cubin(a) | ImageArch::Ptx(a) => *a,
        }
    }

    /// An error when the image cannot run on a GPU of SM number `device_sm`
    /// (`device` names the GPU, `NVIDIA H200`): names both architectures and
    /// what to do.
    pub fn check_runs_on(&self, device_sm: u32, device: &str) -> Result<(), String> {
        if self.runs_on(device_sm) {
            return Ok(());
        }
        let what = match self {
            ImageArch::Cubin(a) if a.arch_specific => format!("compiled for {a} (runs only on {a})"),
            ImageArch::Cubin(a) => format!("compiled for {a} (runs on {a} to sm_{}9)", a.sm / 10),
            ImageArch::Ptx(a) if a.arch_specific => format!("PTX for {a} (compiles only for {a})"),
            ImageArch::Ptx(a) => format!("PTX for {a} (compiles for {a} and later)"),
        };
        Err(format!(
            "{what}, not for {device} (sm_{device_sm}): re-export the bundle on a GPU of that architecture"
        ))
    }
}

impl fmt::Display for ImageArch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImageArch::Cubin(a) => write!(f, "{a}"),
            ImageArch::Ptx(a) => write!(f, "{a} (PTX)"),
        }
    }
}

/// What the kernel image `image` is: a cubin ([`cubin_arch`]) when it starts
/// with the ELF magic, PTX when it is text whose first directive is
/// `.version` (its `.target` gives the architecture); any other image is an
/// error saying what is wrong.
pub fn image_arch(image: &[u8]) -> Result<ImageArch, String> {
    if image.starts_with(b"\x7fELF") {
        return cubin_arch(image).map(ImageArch::Cubin);
    }
    if let Some(target) = ptx_target(image)? {
        return Ok(ImageArch::Ptx(target));
    }
    Err(format!(
        "{} bytes that are neither a cubin (an ELF file: no `\\x7fELF` magic) nor PTX text (no `.version` directive first)",
        image.len()
    ))
}

/// The `.target` of PTX text; `None` when `image` is not PTX (its first
/// directive, after blank lines and `//` comments, is not `.version`).
fn ptx_target(image: &[u8]) -> Result<Option<CubinArch>, String> {
    // The directives come first; the rest of a large image need not be text.
    let head = &image[..image.len().min(4096)];
    let text = match std::str::from_utf8(head) {
        Ok(t) => t,
        Err(e) => match std::str::from_utf8(&head[..e.valid_up_to()]) {
            Ok(t) => t,
            Err(_) => return Ok(None),
        },
    };
    let mut lines = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("//"));
    if !lines.next().is_some_and(|l| l.starts_with(".version")) {
        return Ok(None);
    }
    let target = lines
        .find_map(|l| l.strip_prefix(".target"))
        .ok_or("PTX without a `.target` directive near its start")?;
    let first = target.split([',', ' ', '\t']).find(|t| !t.is_empty()).unwrap_or("");
    let parsed = first.strip_prefix("sm_").and_then(|n| {
        let (digits, specific) = match n.strip_suffix('a').or_else(|| n.strip_suffix('f')) {
            Some(d) => (d, n.ends_with('a')),
            None => (n, false),
        };
        digits.parse::<u32>().ok().map(|sm| CubinArch {
            sm,
            arch_specific: specific,
        })
    });
    parsed
        .filter(|a| a.sm > 0)
        .map(Some)
        .ok_or_else(|| format!("PTX `.target {}` names no SM architecture", target.trim()))
}

/// The architecture of the cubin `image`, from its ELF header; an error says
/// what is wrong with the header, or that the image is cut short of its
/// header tables or sections.
pub fn cubin_arch(image: &[u8]) -> Result<CubinArch, String> {
    let elf = Elf64::read(image, "cubins").map_err(|e| match image.len() >= 64 && !image.starts_with(b"\x7fELF") {
        true => "not an ELF file (no `\\x7fELF` magic; a PTX or fatbin image has no cubin header)".to_string(),
        false => e,
    })?;
    if elf.machine != EM_CUDA {
        return Err(format!("ELF machine {} is not EM_CUDA ({EM_CUDA})", elf.machine));
    }
    let flags = elf.flags;
    let (sm, arch_specific) = match elf.abi_version {
        7 => (flags & 0xff, flags & 0x800 != 0),
        8 => ((flags >> 8) & 0xff, flags & 0x8 != 0),
        v => {
            return Err(format!(
                "CUDA ELF ABI version {v} is not one this wrapir reads (7 or 8); e_flags {flags:#x}"
            ))
        }
    };
    if sm == 0 {
        return Err(format!("e_flags {flags:#x} name no SM architecture"));
    }
    Ok(CubinArch { sm, arch_specific })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(abi: u8, flags: u32) -> Vec<u8> {
        let mut h = super::super::elf::test_header(64, EM_CUDA);
        h[8] = abi;
        h[48..52].copy_from_slice(&flags.to_le_bytes());
        h
    }

    #[test]
    fn both_abi_layouts() {
        assert_eq!(cubin_arch(&header(8, 0x0900_5a04)).unwrap().to_string(), "sm_90");
        assert_eq!(cubin_arch(&header(8, 0x0600_640a)).unwrap().to_string(), "sm_100a");
        assert_eq!(cubin_arch(&header(7, 0x0050_0550)).unwrap().to_string(), "sm_80");
        assert_eq!(cubin_arch(&header(7, 0x005a_0d5a)).unwrap().to_string(), "sm_90a");
    }

    #[test]
    fn cubins_run_on_their_major_version_from_their_minor_up() {
        let cubin = |sm, arch_specific| ImageArch::Cubin(CubinArch { sm, arch_specific });
        assert!(cubin(90, false).runs_on(90));
        assert!(cubin(80, false).runs_on(86));
        assert!(!cubin(86, false).runs_on(80));
        assert!(!cubin(80, false).runs_on(90));
        assert!(cubin(90, true).runs_on(90));
        assert!(!cubin(90, true).runs_on(91));
        let ptx = |sm, arch_specific| ImageArch::Ptx(CubinArch { sm, arch_specific });
        assert!(ptx(80, false).runs_on(90) && !ptx(90, false).runs_on(80));
        assert!(ptx(90, true).runs_on(90) && !ptx(90, true).runs_on(100));
        assert!(ptx(100, false)
            .check_runs_on(90, "H200")
            .unwrap_err()
            .starts_with("PTX for sm_100 (compiles for sm_100 and later), not for H200 (sm_90)"));
        assert_eq!(
            cubin(90, false).check_runs_on(80, "NVIDIA A100").unwrap_err(),
            "compiled for sm_90 (runs on sm_90 to sm_99), not for NVIDIA A100 (sm_80): re-export the bundle on a GPU of that architecture"
        );
        assert!(cubin(90, true)
            .check_runs_on(100, "B200")
            .unwrap_err()
            .starts_with("compiled for sm_90a (runs only on sm_90a), not for B200 (sm_100)"));
    }

    #[test]
    fn ptx_images_name_their_target() {
        let triton = b"//\n// Generated by LLVM NVPTX Back-End\n//\n\n.version 8.7\n.target sm_90a\n.address_size 64\n";
        assert_eq!(image_arch(triton).unwrap().to_string(), "sm_90a (PTX)");
        let plain = b".version 7.0\n.target sm_80\n.visible .entry k()\n{\n    trap;\n}\n";
        assert_eq!(
            image_arch(plain).unwrap(),
            ImageArch::Ptx(CubinArch {
                sm: 80,
                arch_specific: false
            })
        );
        assert!(image_arch(b".version 7.0\n.address_size 64\n")
            .unwrap_err()
            .contains("without a `.target`"));
        assert!(image_arch(b".version 7.0\n.target compute_x\n")
            .unwrap_err()
            .contains("names no SM architecture"));
        assert_eq!(
            image_arch(b"not an ELF image").unwrap_err(),
            "16 bytes that are neither a cubin (an ELF file: no `\\x7fELF` magic) nor PTX text (no `.version` directive first)"
        );
        // The ELF magic alone: a cubin cut short.
        assert!(image_arch(b"\x7fELF\x02\x01")
            .unwrap_err()
            .contains("too short for an ELF64 header"));
    }

    #[test]
    fn truncated_cubins_are_errors() {
        // Section headers past the end of the image.
        let mut h = header(8, 0x0900_5a04);
        h[40..48].copy_from_slice(&64u64.to_le_bytes());
        h[58..60].copy_from_slice(&64u16.to_le_bytes());
        h[60..62].copy_from_slice(&2u16.to_le_bytes());
        let e = cubin_arch(&h).unwrap_err();
        assert!(
            e.contains(
                "truncated or corrupt: its section headers (2 entries of 64 bytes at byte 64) end past its 64 bytes"
            ),
            "{e}"
        );
        // A section past the end; a NOBITS section takes no bytes.
        let mut image = h.clone();
        image.resize(64 + 128, 0);
        let section = |image: &mut Vec<u8>, i: usize, kind: u32, offset: u64, size: u64| {
            let at = 64 + i * 64;
            image[at + 4..at + 8].copy_from_slice(&kind.to_le_bytes());
            image[at + 24..at + 32].copy_from_slice(&offset.to_le_bytes());
            image[at + 32..at + 40].copy_from_slice(&size.to_le_bytes());
        };
        section(&mut image, 1, 8, 0, 1 << 40);
        assert_eq!(cubin_arch(&image).unwrap().to_string(), "sm_90");
        section(&mut image, 1, 1, 100, 1000);
        let e = cubin_arch(&image).unwrap_err();
        assert!(
            e.contains("section 1 (1000 bytes at byte 100) ends past its 192 bytes"),
            "{e}"
        );
        section(&mut image, 1, 1, u64::MAX, 2);
        assert!(cubin_arch(&image).is_err());
    }

    #[test]
    fn bad_headers_are_errors() {
        assert!(cubin_arch(b"//\n// Generated by LLVM NVPTX Back-End")
            .unwrap_err()
            .contains("too short"));
        let mut ptx = b".version 8.7\n.target sm_90".to_vec();
        ptx.resize(80, b' ');
        assert!(cubin_arch(&ptx).unwrap_err().contains("not an ELF file"));
        assert!(cubin_arch(&header(9, 0x5a00)).unwrap_err().contains("ABI version 9"));
        let mut x86 = header(8, 0x5a00);
        x86[18] = 62;
        assert!(cubin_arch(&x86).unwrap_err().contains("not EM_CUDA"));
    }
}
