//! The back ends by name: one dispatch from a [`Target`] to its lowering,
//! used by the CLI (`lower`, `check`), the snapshot helper and the tests.

use crate::ir::ProgramInfo;

/// A back end, with the name the CLI, reports and snapshots use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// [`crate::lower::python`]: Inductor's Python wrapper module.
    Python,
    /// [`crate::lower::cpp`] in the AOTI shim dialect (`cpp_wrapper=True`).
    Cpp,
    /// [`crate::lower::cpp`] in the standalone dialect (CUDA driver API and
    /// wrapir's runtime header only).
    CppStandalone,
    /// [`crate::lower::fx`], printed in torch.fx's readable style.
    Fx,
}

impl Target {
    /// Every back end, in report and snapshot order.
    pub const ALL: [Target; 4] = [Target::Python, Target::Cpp, Target::CppStandalone, Target::Fx];

    /// The name: `python`, `cpp`, `cpp-standalone`, `fx`.
    pub fn name(self) -> &'static str {
        match self {
            Target::Python => "python",
            Target::Cpp => "cpp",
            Target::CppStandalone => "cpp-standalone",
            Target::Fx => "fx",
        }
    }

    /// The target with this [`Target::name`].
    pub fn from_name(name: &str) -> Option<Target> {
        Target::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The C++ dialect, for the C++ targets.
    pub fn cpp_dialect(self) -> Option<super::cpp::Dialect> {
        match self {
            Target::Cpp => Some(super::cpp::Dialect::Aoti),
            Target::CppStandalone => Some(super::cpp::Dialect::Standalone),
            Target::Python | Target::Fx => None,
        }
    }

    /// Lowers `info` with this back end's default options.
    pub fn write_string(self, info: &ProgramInfo<'_>) -> Result<String, super::Error> {
        Ok(match self.cpp_dialect() {
            Some(dialect) => {
                let options = super::cpp::Options {
                    dialect,
                    ..Default::default()
                };
                super::cpp::write_string(info, &options)?
            }
            None if self == Target::Python => super::python::write_string(info, &Default::default())?,
            None => super::fx::write_string(info, &Default::default())?,
        })
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::Target;

    #[test]
    fn names_round_trip() {
        for t in Target::ALL {
            assert_eq!(Target::from_name(t.name()), Some(t));
        }
        assert_eq!(Target::from_name("rust"), None);
    }
}
