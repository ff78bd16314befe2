//! The one-file package (`.wirpkg`): reading and writing the container.
//! `docs/PACKAGE_FORMAT.md` is the specification; in brief:
//!
//! ```text
//! offset  size  field
//! 0       8     magic  89 77 69 72 70 6b 67 0a  ("\x89wirpkg\n")
//! 8       4     format version, u32 little-endian (FORMAT_VERSION = 2)
//! 12      4     flags, u32 little-endian (0; any other value is an error)
//! 16      8     file_length, u64 little-endian: the length of the whole file
//! 24      8     toc_length, u64 little-endian: bytes of the table of contents
//! 32      8     data_offset, u64 little-endian: where payloads start (a multiple of 8)
//! 40      toc_length  table of contents: UTF-8 JSON (a `Manifest`)
//! ...     zero padding up to data_offset
//! data_offset + entry.offset: each entry's bytes (entry offsets are multiples of 8)
//! ```
//!
//! Every offset and length is checked against the file's length with checked
//! arithmetic before any entry is touched, entries may not overlap, and entry
//! names are plain relative paths. From version 2 every entry carries a
//! checksum ([`CHECKSUM_ALGORITHM`] of its bytes) that is verified when the
//! package is opened, over the mapped bytes (no copy); a version-1 package
//! (no checksums) still opens, reported unverified by [`Package::verified`].
//! A bad, truncated, corrupted or hostile file is a
//! [`BundleError`] naming the file and what is wrong, never a panic, and
//! nothing is allocated in proportion to a length the file claims (entries
//! are views of the mapped file; the table of contents is at most
//! [`MAX_TOC_BYTES`] and lies within the file).

use super::kernels::is_plain_relative;
use super::{BundleError, SharedBytes};
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The first eight bytes of every package.
pub const MAGIC: [u8; 8] = *b"\x89wirpkg\n";
/// The format version this wrapir writes (and the newest it reads).
/// Version 2 added a checksum to every entry.
pub const FORMAT_VERSION: u32 = 2;
/// The oldest format version this wrapir reads. A version-1 package has no
/// checksums: it opens, and [`Package::verified`] says its entries were not
/// verified.
pub const OLDEST_VERSION: u32 = 1;
/// The checksum of every entry from version 2: XXH3 (64-bit, seed 0) of the
/// entry's bytes, stored as `xxh3-64:` and 16 lowercase hex digits. It
/// detects corruption (a flipped bit, a truncated copy); it is not a
/// signature (whoever can write the file can write its checksums too).
pub const CHECKSUM_ALGORITHM: &str = "xxh3-64";
/// Bytes of the fixed header before the table of contents.
pub const HEADER_LEN: u64 = 40;
/// Alignment of `data_offset` and of every entry's offset.
pub const ALIGN: u64 = 8;
/// The largest table of contents a reader accepts.
pub const MAX_TOC_BYTES: u64 = 16 << 20;
/// The file name extension of packages.
pub const EXTENSION: &str = "wirpkg";

/// A package's table of contents.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// The program that wrote the package (`wrapir 0.1.0`).
    #[serde(default)]
    pub writer: String,
    /// What the package holds, for readers that do not open the entries.
    #[serde(default)]
    pub metadata: PackageMetadata,
    /// The entries, in file order.
    pub entries: Vec<EntryRecord>,
}

/// The metadata of a package, copied from its bundle when it was packed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PackageMetadata {
    /// The bundle's `case`, `torch`, `triton` and `device` (stored as fields
    /// of the metadata itself).
    #[serde(flatten)]
    pub provenance: crate::format::bundle_json::Provenance,
    /// The tolerance for comparing with eager PyTorch's outputs.
    pub tolerance: Option<ToleranceRecord>,
    /// The tolerance for comparing with Inductor's compiled outputs.
    pub compiled_tolerance: Option<ToleranceRecord>,
    /// The SM numbers of the cubins (sorted, distinct).
    pub cubin_arch: Vec<u32>,
    /// Each cubin the program loads and its architecture (`sm_90`, `sm_90a`).
    pub cubins: BTreeMap<String, String>,
    /// The graph inputs that are the model's weights.
    pub weights: Vec<String>,
    /// The cuDNN, driver and GPU the package's `cudnn-plans/` entries were
    /// made for (`None`: it carries none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cudnn_plans_for: Option<String>,
}

/// A tolerance as the table of contents stores it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToleranceRecord {
    /// Relative tolerance.
    pub rtol: f64,
    /// Absolute tolerance.
    pub atol: f64,
}

/// Where one entry's bytes are.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryRecord {
    /// The entry's path in the bundle (`program.json`, `kernels/k.cubin`).
    pub name: String,
    /// Its first byte, relative to `data_offset` (a multiple of [`ALIGN`]).
    pub offset: u64,
    /// Its length in bytes.
    pub length: u64,
    /// [`CHECKSUM_ALGORITHM`] of its bytes, `xxh3-64:<16 hex digits>`
    /// (required from version 2; `None` in a version-1 package).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<String>,
}

/// The checksum of `bytes` as a table of contents stores it.
pub fn checksum(bytes: &[u8]) -> String {
    format!("{CHECKSUM_ALGORITHM}:{:016x}", xxhash_rust::xxh3::xxh3_64(bytes))
}

/// Whether `text` has the form [`checksum`] writes.
fn is_checksum_text(text: &str) -> bool {
    text.strip_prefix(CHECKSUM_ALGORITHM)
        .and_then(|t| t.strip_prefix(':'))
        .is_some_and(|hex| hex.len() == 16 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

/// An opened package: the mapped file, its table of contents and its entries.
#[derive(Clone, Debug)]
pub struct Package {
    path: PathBuf,
    version: u32,
    manifest: Manifest,
    entries: IndexMap<String, SharedBytes>,
}

impl Package {
    /// Maps and checks the package at `path`.
    pub fn open(path: &Path) -> Result<Package, BundleError> {
        Package::parse(path, SharedBytes::map(path)?)
    }

    /// Checks the package `bytes` (`path` names it in errors).
    pub fn parse(path: &Path, bytes: SharedBytes) -> Result<Package, BundleError> {
        let bad = |message: String| BundleError::Package {
            path: path.to_path_buf(),
            message,
        };
        let file_len = bytes.len() as u64;
        if bytes.get(..8) != Some(&MAGIC[..]) {
            return Err(BundleError::BadMagic {
                path: path.to_path_buf(),
            });
        }
        let Some(header) = bytes.get(..HEADER_LEN as usize) else {
            return Err(bad(format!(
                "truncated: {file_len} bytes, shorter than the {HEADER_LEN}-byte header"
            )));
        };
        let u32_at = |at: usize| u32::from_le_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]]);
        let u64_at = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&header[at..at + 8]);
            u64::from_le_bytes(b)
        };
        let version = u32_at(8);
        if !(OLDEST_VERSION..=FORMAT_VERSION).contains(&version) {
            return Err(BundleError::UnsupportedVersion {
                path: path.to_path_buf(),
                found: version,
                oldest: OLDEST_VERSION,
                supported: FORMAT_VERSION,
            });
        }
        let flags = u32_at(12);
        if flags != 0 {
            return Err(bad(format!(
                "unknown header flags {flags:#x} (version {version} has none)"
            )));
        }
        let declared = u64_at(16);
        if declared != file_len {
            return Err(bad(if declared > file_len {
                format!("truncated: the header says the package is {declared} bytes, the file has {file_len}")
            } else {
                format!(
                    "the header says the package is {declared} bytes, the file has {file_len} (bytes after its end)"
                )
            }));
        }
        let (toc_len, data_offset) = (u64_at(24), u64_at(32));
        if toc_len > MAX_TOC_BYTES {
            return Err(bad(format!(
                "the table of contents claims {toc_len} bytes, more than the {MAX_TOC_BYTES} a package may have"
            )));
        }
        let toc_end = HEADER_LEN + toc_len;
        if toc_end > file_len {
            return Err(bad(format!(
                "truncated: the table of contents ends at byte {toc_end}, the file has {file_len}"
            )));
        }
        if data_offset % ALIGN != 0 || data_offset < toc_end || data_offset > file_len {
            return Err(bad(format!(
                "data offset {data_offset} must be a multiple of {ALIGN} between the end of the table of contents ({toc_end}) and the end of the file ({file_len})"
            )));
        }
        // In range of the file (checked above), so these fit in usize.
        let toc = bytes
            .get(HEADER_LEN as usize..toc_end as usize)
            .ok_or_else(|| bad("the table of contents lies outside the file".into()))?;
        let toc = std::str::from_utf8(toc).map_err(|e| bad(format!("the table of contents is not UTF-8: {e}")))?;
        let manifest: Manifest =
            serde_json::from_str(toc).map_err(|e| bad(format!("the table of contents is not valid: {e}")))?;
        let mut spans: Vec<(u64, u64, &str)> = Vec::with_capacity(manifest.entries.len());
        let mut entries = IndexMap::with_capacity(manifest.entries.len());
        for e in &manifest.entries {
            let name = &e.name;
            if !is_plain_relative(name) {
                return Err(bad(format!(
                    "entry name `{name}` is not a plain relative path (no root, `..`, `.`, empty components, backslashes)"
                )));
            }
            if version >= 2 {
                match &e.checksum {
                    Some(c) if is_checksum_text(c) => {}
                    Some(c) => {
                        return Err(bad(format!(
                            "entry `{name}`: checksum `{c}` is not `{CHECKSUM_ALGORITHM}:` and 16 lowercase hex digits"
                        )))
                    }
                    None => {
                        return Err(bad(format!(
                            "entry `{name}` has no checksum (a version-{version} package records one for every entry)"
                        )))
                    }
                }
            }
            if e.offset % ALIGN != 0 {
                return Err(bad(format!(
                    "entry `{name}`: offset {} is not a multiple of {ALIGN}",
                    e.offset
                )));
            }
            let span = data_offset
                .checked_add(e.offset)
                .and_then(|start| Some((start, start.checked_add(e.length)?)))
                .filter(|(_, end)| *end <= file_len);
            let Some((start, end)) = span else {
                return Err(bad(format!(
                    "entry `{name}`: {} bytes at data offset {} run past the end of the {file_len}-byte file (truncated?)",
                    e.length, e.offset
                )));
            };
            // Within the file, so both fit in usize.
            let view = bytes
                .slice(start as usize, e.length as usize)
                .ok_or_else(|| bad(format!("entry `{name}` lies outside the file")))?;
            if entries.insert(name.clone(), view).is_some() {
                return Err(bad(format!("entry `{name}` appears twice")));
            }
            spans.push((start, end, name));
        }
        spans.sort_unstable();
        for pair in spans.windows(2) {
            let ((_, end, a), (start, _, b)) = (pair[0], pair[1]);
            if start < end {
                return Err(bad(format!("entries `{a}` and `{b}` overlap")));
            }
        }
        if version >= 2 {
            verify_checksums(path, &manifest, &entries)?;
        }
        Ok(Package {
            path: path.to_path_buf(),
            version,
            manifest,
            entries,
        })
    }

    /// The format version of the file.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Whether every entry was verified against its checksum when the
    /// package was opened: `false` for a version-1 package, which records
    /// none (its entries are used unverified; packing it again adds them).
    pub fn verified(&self) -> bool {
        self.version >= 2
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The table of contents.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The bytes of entry `name`, a view of the mapped file.
    pub fn entry(&self, name: &str) -> Option<&SharedBytes> {
        self.entries.get(name)
    }

    /// The entries by name, in file order.
    pub fn entries(&self) -> &IndexMap<String, SharedBytes> {
        &self.entries
    }
}

/// Hashes every entry (in parallel, over the mapped bytes: nothing is
/// copied) and compares it with the checksum its record holds (each checked
/// for form by the caller); the first mismatch in table order is the error.
fn verify_checksums(
    path: &Path,
    manifest: &Manifest,
    entries: &IndexMap<String, SharedBytes>,
) -> Result<(), BundleError> {
    use rayon::prelude::*;
    let mismatch = manifest.entries.par_iter().find_map_first(|record| {
        let bytes = entries.get(&record.name)?;
        let found = checksum(bytes);
        let recorded = record.checksum.as_deref()?;
        (found != recorded).then(|| BundleError::ChecksumMismatch {
            path: path.to_path_buf(),
            entry: record.name.clone(),
            recorded: recorded.to_string(),
            found,
        })
    });
    mismatch.map_or(Ok(()), Err)
}

/// Writes a package of `entries` (in this order) and `metadata` to `out`;
/// returns the bytes written. Entry names must be plain relative paths and
/// distinct (an error names the first that is not).
pub fn write(
    out: &mut dyn std::io::Write,
    entries: &[(String, SharedBytes)],
    metadata: &PackageMetadata,
) -> Result<u64, String> {
    let align = |n: u64| n.div_ceil(ALIGN) * ALIGN;
    use rayon::prelude::*;
    let checksums: Vec<String> = entries.par_iter().map(|(_, bytes)| checksum(bytes)).collect();
    let mut records = Vec::with_capacity(entries.len());
    let mut at = 0u64;
    let mut seen = std::collections::HashSet::new();
    for ((name, bytes), checksum) in entries.iter().zip(checksums) {
        if !is_plain_relative(name) || !seen.insert(name.as_str()) {
            return Err(format!("entry name `{name}` is not a distinct plain relative path"));
        }
        records.push(EntryRecord {
            name: name.clone(),
            offset: at,
            length: bytes.len() as u64,
            checksum: Some(checksum),
        });
        at = align(at + bytes.len() as u64);
    }
    let manifest = Manifest {
        writer: format!("wrapir {}", env!("CARGO_PKG_VERSION")),
        metadata: metadata.clone(),
        entries: records,
    };
    let toc = serde_json::to_string_pretty(&manifest).map_err(|e| e.to_string())?;
    let toc_len = toc.len() as u64;
    if toc_len > MAX_TOC_BYTES {
        return Err(format!(
            "the table of contents would take {toc_len} bytes, more than the {MAX_TOC_BYTES} a package may have"
        ));
    }
    let data_offset = align(HEADER_LEN + toc_len);
    let file_length = data_offset + at;
    let mut header = Vec::with_capacity(HEADER_LEN as usize);
    header.extend_from_slice(&MAGIC);
    header.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    header.extend_from_slice(&0u32.to_le_bytes());
    header.extend_from_slice(&file_length.to_le_bytes());
    header.extend_from_slice(&toc_len.to_le_bytes());
    header.extend_from_slice(&data_offset.to_le_bytes());
    let io = |e: std::io::Error| e.to_string();
    out.write_all(&header).map_err(io)?;
    out.write_all(toc.as_bytes()).map_err(io)?;
    let zeros = [0u8; ALIGN as usize];
    out.write_all(&zeros[..(data_offset - HEADER_LEN - toc_len) as usize])
        .map_err(io)?;
    for (_, bytes) in entries {
        out.write_all(bytes).map_err(io)?;
        let pad = align(bytes.len() as u64) - bytes.len() as u64;
        out.write_all(&zeros[..pad as usize]).map_err(io)?;
    }
    Ok(file_length)
}
