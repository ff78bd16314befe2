//! The ELF64 container of kernel images: cubins (`EM_CUDA`) and the shared
//! objects of host kernels. [`Elf64::read`] reads the header fields wrapir
//! needs and checks that the program header table, every segment's file
//! bytes, the section header table and every section with bytes in the file
//! lie inside the image: a truncated or corrupt image is an error here,
//! not a fault in the driver or the dynamic loader (which maps a segment
//! past the end of its file and dies of SIGBUS when it touches it).

/// The `EM_CUDA` machine number of cubins.
pub(crate) const EM_CUDA: u16 = 190;
/// `ET_DYN`: a shared object.
const ET_DYN: u16 = 3;
/// The length of an ELF64 header.
const ELF64_HEADER_LEN: usize = 64;

/// The fields of an ELF64 header wrapir reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Elf64 {
    /// `EI_ABIVERSION`.
    pub(crate) abi_version: u8,
    /// `e_type` (`ET_DYN` for a shared object).
    pub(crate) kind: u16,
    /// `e_machine`.
    pub(crate) machine: u16,
    /// `e_flags`.
    pub(crate) flags: u32,
}

/// Little-endian integers of an ELF64 image (0 past its end: callers check
/// extents first).
fn le(image: &[u8], at: usize, len: usize) -> u64 {
    at.checked_add(len)
        .and_then(|end| image.get(at..end))
        .map_or(0, |b| b.iter().rev().fold(0u64, |acc, x| (acc << 8) | u64::from(*x)))
}

impl Elf64 {
    /// Reads the header of the 64-bit little-endian ELF file `image` and
    /// checks its extents (see the module docs). `what` names the kind of
    /// file expected (`cubins`, `host kernel images`) in errors.
    pub(crate) fn read(image: &[u8], what: &str) -> Result<Elf64, String> {
        let header = image.get(..ELF64_HEADER_LEN).ok_or_else(|| {
            format!(
                "{} bytes, too short for an ELF64 header ({ELF64_HEADER_LEN} bytes)",
                image.len()
            )
        })?;
        if header[..4] != *b"\x7fELF" {
            return Err(format!("not an ELF file (no `\\x7fELF` magic; {what} are ELF files)"));
        }
        if header[4] != 2 || header[5] != 1 {
            return Err(format!(
                "ELF class {} data encoding {}; {what} are 64-bit little-endian (2, 1)",
                header[4], header[5]
            ));
        }
        let elf = Elf64 {
            abi_version: header[8],
            kind: le(header, 16, 2) as u16,
            machine: le(header, 18, 2) as u16,
            flags: le(header, 48, 4) as u32,
        };
        check_extent(image)?;
        Ok(elf)
    }
}

/// Checks that the program and section header tables, every segment's file
/// bytes and every section with bytes in the file (not `SHT_NOBITS`) lie
/// inside `image` (whose header is at least 64 bytes).
fn check_extent(image: &[u8]) -> Result<(), String> {
    /// `SHT_NOBITS`: a section that takes no bytes in the file (`.bss`).
    const SHT_NOBITS: u64 = 8;
    let len = image.len() as u64;
    let table = |what: &str, offset: u64, count: u64, entry: u64| -> Result<(), String> {
        let end = count.checked_mul(entry).and_then(|n| n.checked_add(offset));
        match end {
            Some(end) if end <= len => Ok(()),
            _ => Err(format!(
                "truncated or corrupt: its {what} ({count} entries of {entry} bytes at byte {offset}) end past its {len} bytes"
            )),
        }
    };
    let (phoff, phentsize, phnum) = (le(image, 32, 8), le(image, 54, 2), le(image, 56, 2));
    let (shoff, shentsize, shnum) = (le(image, 40, 8), le(image, 58, 2), le(image, 60, 2));
    table("program headers", phoff, phnum, phentsize)?;
    table("section headers", shoff, shnum, shentsize)?;
    if phnum > 0 && phentsize < 56 {
        return Err(format!(
            "corrupt: program header entries of {phentsize} bytes (ELF64 needs 56)"
        ));
    }
    if shnum > 0 && shentsize < 64 {
        return Err(format!(
            "corrupt: section header entries of {shentsize} bytes (ELF64 needs 64)"
        ));
    }
    let within = |offset: u64, size: u64| offset.checked_add(size).is_some_and(|end| end <= len);
    for i in 0..phnum {
        // In range: the table was checked above.
        let at = usize::try_from(phoff + i * phentsize)
            .map_err(|_| "corrupt: a program header past the address space".to_string())?;
        let (offset, size) = (le(image, at + 8, 8), le(image, at + 32, 8));
        if !within(offset, size) {
            return Err(format!(
                "truncated or corrupt: segment {i} ({size} bytes at byte {offset}) ends past its {len} bytes"
            ));
        }
    }
    for i in 0..shnum {
        let at = usize::try_from(shoff + i * shentsize)
            .map_err(|_| "corrupt: a section header past the address space".to_string())?;
        let (kind, offset, size) = (le(image, at + 4, 4), le(image, at + 24, 8), le(image, at + 32, 8));
        if kind != SHT_NOBITS && !within(offset, size) {
            return Err(format!(
                "truncated or corrupt: section {i} ({size} bytes at byte {offset}) ends past its {len} bytes"
            ));
        }
    }
    Ok(())
}

/// The `e_machine` of this process's own code, `None` where wrapir does not
/// know it.
fn host_machine() -> Option<(u16, &'static str)> {
    if cfg!(target_arch = "x86_64") {
        Some((62, "x86-64"))
    } else if cfg!(target_arch = "aarch64") {
        Some((183, "AArch64"))
    } else {
        None
    }
}

/// Checks that `image` is a shared object this process can load: a 64-bit
/// little-endian ELF `ET_DYN` file for this machine, whole (see the module
/// docs). An error says what is wrong.
pub fn check_host_image(image: &[u8]) -> Result<(), String> {
    let elf = Elf64::read(image, "host kernel images")?;
    if elf.kind != ET_DYN {
        return Err(format!(
            "ELF type {} is not a shared object (ET_DYN, {ET_DYN})",
            elf.kind
        ));
    }
    if let Some((machine, name)) = host_machine() {
        if elf.machine != machine {
            return Err(format!(
                "compiled for ELF machine {}, not for this {name} host (machine {machine})",
                elf.machine
            ));
        }
    }
    Ok(())
}

/// A 64-bit little-endian ELF header of `len` bytes for `machine` (tests).
#[cfg(test)]
pub(crate) fn test_header(len: usize, machine: u16) -> Vec<u8> {
    let mut h = vec![0u8; len];
    h[..4].copy_from_slice(b"\x7fELF");
    h[4] = 2;
    h[5] = 1;
    h[18..20].copy_from_slice(&machine.to_le_bytes());
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shared-object header with one segment of `filesz` bytes at byte 120.
    fn shared_object(machine: u16, filesz: u64) -> Vec<u8> {
        let mut h = test_header(256, machine);
        h[16..18].copy_from_slice(&ET_DYN.to_le_bytes());
        h[32..40].copy_from_slice(&64u64.to_le_bytes()); // e_phoff
        h[54..56].copy_from_slice(&56u16.to_le_bytes()); // e_phentsize
        h[56..58].copy_from_slice(&1u16.to_le_bytes()); // e_phnum
        h[64 + 8..64 + 16].copy_from_slice(&120u64.to_le_bytes()); // p_offset
        h[64 + 32..64 + 40].copy_from_slice(&filesz.to_le_bytes()); // p_filesz
        h
    }

    #[test]
    fn host_images_are_whole_shared_objects_for_this_machine() {
        let Some((machine, _)) = host_machine() else { return };
        assert_eq!(check_host_image(&shared_object(machine, 136)), Ok(()));
        let e = check_host_image(&shared_object(machine, 137)).unwrap_err();
        assert!(
            e.contains("segment 0 (137 bytes at byte 120) ends past its 256 bytes"),
            "{e}"
        );
        let e = check_host_image(&shared_object(EM_CUDA, 8)).unwrap_err();
        assert!(e.contains("compiled for ELF machine 190"), "{e}");
        let e = check_host_image(&shared_object(machine, 8)[..100]).unwrap_err();
        assert!(
            e.contains("program headers (1 entries of 56 bytes at byte 64) end past its 100 bytes"),
            "{e}"
        );
        let mut exec = shared_object(machine, 8);
        exec[16] = 2;
        assert!(check_host_image(&exec).unwrap_err().contains("not a shared object"));
        assert!(check_host_image(b"garbage").unwrap_err().contains("too short"));
        assert!(check_host_image(&[b'x'; 64]).unwrap_err().contains("not an ELF file"));
    }
}
