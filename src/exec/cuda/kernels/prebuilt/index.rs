//! The committed kernel images, compiled by NVRTC 13.0. Written by
//! `cargo run --release --features cuda --example prebuild_kernels`; do not edit.

use super::Prebuilt;

pub(super) static IMAGES: &[Prebuilt] = &[
    Prebuilt {
        id: "attention_e128",
        major: 8,
        minor: 0,
        digest: [0x0b5812cae81182a7, 0xe49ad32ad553c28a],
        image: include_bytes!("attention_e128-sm80.cubin"),
    },
    Prebuilt {
        id: "attention_e128",
        major: 9,
        minor: 0,
        digest: [0xd6696be9694553f8, 0x7eb4859334abf3c9],
        image: include_bytes!("attention_e128-sm90.cubin"),
    },
    Prebuilt {
        id: "attention_e16",
        major: 8,
        minor: 0,
        digest: [0x9133889a0d5cc081, 0x3af51f8be4d61522],
        image: include_bytes!("attention_e16-sm80.cubin"),
    },
    Prebuilt {
        id: "attention_e16",
        major: 9,
        minor: 0,
        digest: [0x3db7b71b747ac702, 0x3284358e0f733da1],
        image: include_bytes!("attention_e16-sm90.cubin"),
    },
    Prebuilt {
        id: "attention_e32",
        major: 8,
        minor: 0,
        digest: [0x52f7bcebc4d2fe4f, 0x13bb83262d00d568],
        image: include_bytes!("attention_e32-sm80.cubin"),
    },
    Prebuilt {
        id: "attention_e32",
        major: 9,
        minor: 0,
        digest: [0xe5e262384fa1dee0, 0xeebea0b520a69717],
        image: include_bytes!("attention_e32-sm90.cubin"),
    },
    Prebuilt {
        id: "attention_e64",
        major: 8,
        minor: 0,
        digest: [0x5b2f4af4e7831c92, 0xfca2c087966a2dcd],
        image: include_bytes!("attention_e64-sm80.cubin"),
    },
    Prebuilt {
        id: "attention_e64",
        major: 9,
        minor: 0,
        digest: [0x97ddbe7e212f0851, 0x605912e39a1d9b2e],
        image: include_bytes!("attention_e64-sm90.cubin"),
    },
    Prebuilt {
        id: "attention_e80",
        major: 8,
        minor: 0,
        digest: [0x17e82a6597d71d34, 0x5c5d044304731bd7],
        image: include_bytes!("attention_e80-sm80.cubin"),
    },
    Prebuilt {
        id: "attention_e80",
        major: 9,
        minor: 0,
        digest: [0xb678fc40c30563d3, 0xe6744d539b0a2828],
        image: include_bytes!("attention_e80-sm90.cubin"),
    },
    Prebuilt {
        id: "attention_e96",
        major: 8,
        minor: 0,
        digest: [0xd6b8e121340679f9, 0x6512e51a2b8e606a],
        image: include_bytes!("attention_e96-sm80.cubin"),
    },
    Prebuilt {
        id: "attention_e96",
        major: 9,
        minor: 0,
        digest: [0x841dfece2f2b42ba, 0xbceae1289b021429],
        image: include_bytes!("attention_e96-sm90.cubin"),
    },
    Prebuilt {
        id: "builtin",
        major: 8,
        minor: 0,
        digest: [0x808a0a7fe6a58411, 0x2578a99a0c2d96de],
        image: include_bytes!("builtin-sm80.cubin"),
    },
    Prebuilt {
        id: "builtin",
        major: 9,
        minor: 0,
        digest: [0x7a29d672de2fa152, 0x0daea5fb38ac0b7d],
        image: include_bytes!("builtin-sm90.cubin"),
    },
    Prebuilt {
        id: "extra",
        major: 8,
        minor: 0,
        digest: [0xde8f5fe102124991, 0xfd6ef70378685d06],
        image: include_bytes!("extra-sm80.cubin"),
    },
    Prebuilt {
        id: "extra",
        major: 9,
        minor: 0,
        digest: [0xd82f2bd3f99c66d2, 0x23a72511bf0a5a25],
        image: include_bytes!("extra-sm90.cubin"),
    },
];
